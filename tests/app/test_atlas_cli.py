"""``attndyn atlas`` (issue 49 item 5): the command on SmolLM2 with two shipped prompts, its numbers against
separate runs of the forward pass, and its refusals (exit 2, one sentence naming the value)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attndyn.models.decoder_files import smollm2_available
from attndyn.models.prompts import PROMPTS

needs_smollm2 = pytest.mark.skipif(not smollm2_available()[0], reason="SmolLM2-135M is not installed")


@pytest.fixture
def two_prompts(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text(PROMPTS[0] + "\n\n" + PROMPTS[1] + "\n", encoding="utf-8")
    return path


@pytest.mark.checkpoint
@needs_smollm2
def test_atlas_on_smollm2(tmp_path, two_prompts, capsys):
    """The page, the record and the progress lines; the after-block ratios and sink rates equal the forward
    pass's on the same prompts, the after-attention ratio the one of the state rebuilt from the block's own sublayer."""
    from attndyn.app.cli import entry
    from attndyn.models import decoder_geometry as geo
    from attndyn.models.decoder import attention_sublayer, forward, layer_masks, rope_tables
    from attndyn.models.decoder_files import load_decoder

    out = tmp_path / "atlas"
    assert entry(["atlas", "smollm2", "--prompts", str(two_prompts), "--shuffles", "2", "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert "wrote" in said.out
    assert (out / "index.html").is_file()
    assert (out / "atlas-0.png").stat().st_size > 10_000
    record = json.loads((out / "atlas.json").read_text())
    (rec,) = record["models"]
    assert record["dtype"] == "float32"
    assert record["placement"] in (out / "index.html").read_text()
    assert rec["norm_placement"] == "pre-norm"
    assert rec["massive"]["step_up"] is not None
    dec = load_decoder("smollm2")
    ids = [dec.encode(p) for p in PROMPTS[:2]]
    fws = [forward(dec, i, dtype=torch.float32, logits=False) for i in ids]
    L = len(dec.layers)
    for k in (0, L // 2, L - 1):
        block = rec["sublayers"][2 * k + 1]
        assert block["ratio"] == pytest.approx(np.mean([geo.massive_activation(fw.hidden[k + 1].double().numpy())[0] for fw in fws]), rel=1e-9)
        want = np.mean([geo.attention_measures(fw.attentions[k].double().numpy())["sink_rate"] for fw in fws])
        assert rec["blocks"][k]["sink_rate"] == pytest.approx(want, abs=1e-12)
    # the after-attention state of block k: forward's input of the block plus that block's own attention output
    k, cast = L // 2, (lambda t: None if t is None else t.to(torch.float32))
    ratios = []
    for i, fw in zip(ids, fws, strict=True):
        n = len(i)
        out_k, _ = attention_sublayer(
            dec, k, fw.hidden[k], rope_tables(n, dec.head_dim, dec.rope_base, dtype=torch.float32, device="cpu"), layer_masks(dec, n)[k], cast
        )
        ratios.append(geo.massive_activation((fw.hidden[k] + out_k).double().numpy())[0])
    assert rec["sublayers"][2 * k]["ratio"] == pytest.approx(np.mean(ratios), rel=1e-5)
    assert "0 by construction" in (out / "index.html").read_text()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["no-such-model"], "'no-such-model' is neither a named decoder"),
        (["smollm2", "--dtype", "float16"], "--dtype 'float16'"),
        (["smollm2", "--shuffles", "0"], "--shuffles 0"),
        (["smollm2", "--no-such-option"], "--no-such-option"),
    ],
)
def test_bad_atlas_input_exits_2_naming_it(tmp_path, capsys, args, said):
    from attndyn.app.cli import entry

    out = tmp_path / "atlas"
    assert entry(["atlas", *args, "--out", str(out)]) == 2
    assert said in capsys.readouterr().err
    assert not (out / "atlas.json").exists()


def test_the_docs_rows_are_the_generators():
    """docs/guide/atlas.md's marked section is docs_text of docs/data/atlas.json, the sentences written again from
    the numbers; a changed number changes it."""
    from attndyn.app.atlas_page import docs_section
    from tests.helpers import ROOT

    docs = (ROOT / "docs" / "guide" / "atlas.md").read_text(encoding="utf-8")
    record = json.loads((ROOT / "docs" / "data" / "atlas.json").read_text(encoding="utf-8"))
    assert docs_section(docs, record) == docs, "the atlas rows in the docs are not the generator's"
    record["models"][0]["coupling"]["rate"] = 0.123
    assert docs_section(docs, record) != docs
    for m in record["models"]:
        assert m["dtype"] == "float32"
        assert m["prompts"] == len(PROMPTS)
