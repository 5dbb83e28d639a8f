"""``intervene --geometry``: the per-block geometry after an edit. The plain prompts' values equal the
findings' (``layer_values`` over :func:`forward`, a separate path); an edited branch's cosine and attention
on the first token equal those computed here with NumPy from ``transformers`` run with the same edit made by
a hook (float64); the first key removed and uniform attention give the values their definitions fix (1/n,
H_n/n)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from attndyn.models.decoder import forward
from attndyn.models.decoder_files import load_decoder
from attndyn.models.decoder_geometry import layer_values
from attndyn.models.interventions import geometry_after

transformers = pytest.importorskip("transformers")
from tests.models.test_executor import PROMPTS, _folder_with_prompts  # noqa: E402
from tests.models.test_families import exact_reference, reference, tiny  # noqa: E402


def _cos(h: np.ndarray) -> float:
    u = h / np.linalg.norm(h, axis=1, keepdims=True)
    n = len(u)
    return float(((u @ u.T).sum() - n) / (n * (n - 1)))


def test_the_plain_geometry_is_the_findings_and_an_edited_one_transformers_with_a_hook(tmp_path):
    model, folder = tiny("llama", tmp_path)
    model = exact_reference(model)
    dec = load_decoder(folder)
    L, H = len(dec.layers), dec.heads
    spec = "skip:block=0,head=2"
    got = geometry_after(dec, PROMPTS, [spec])
    assert got["after_block"] == list(range(-1, L))

    values = layer_values([forward(dec, p) for p in PROMPTS], clusters=False)
    for key in ("mean_cosine", "massive_activation_ratio", "norm_ratio", "attention_on_first"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # layer 0 has no attention: its column is all NaN
            want = np.nanmean(values[key], 0)
        for s in range(L + 1):
            if np.isfinite(want[s]):
                assert abs(got["plain"][key][s] - want[s]) < 1e-12, (key, s)
            else:
                assert got["plain"][key][s] is None
    assert all(v is None for v in got["plain"]["sink_rate"])  # prompts of 11 and 9 tokens: Gu et al.'s T = 64 is undefined

    # the head removed by a pre-hook on transformers' output map of block 0 (the executor is not involved)
    hd = model.config.hidden_size // model.config.num_attention_heads

    def pre(mod, args):
        z = args[0].clone()
        z[..., 2 * hd : 3 * hd] = 0
        return (z,)

    handle = model.model.layers[0].self_attn.o_proj.register_forward_pre_hook(pre)
    try:
        refs = [reference(model, p) for p in PROMPTS]
    finally:
        handle.remove()
    edited = got["edits"][0]
    assert edited["edit"] == spec
    for s in range(L):  # transformers' hidden_states[s] is the input of block s; its last is after the final norm
        want = np.mean([_cos(r.hidden_states[s][0].double().numpy()) for r in refs])
        assert abs(edited["mean_cosine"][s] - want) < 1e-10, s
    kept = [h for h in range(H) if h != 2]
    want0 = np.mean([r.attentions[0][0, kept, :, 0].double().mean().item() for r in refs])  # the removed head left out
    want1 = np.mean([r.attentions[1][0, :, :, 0].double().mean().item() for r in refs])
    assert abs(edited["attention_on_first"][1] - want0) < 1e-10
    assert abs(edited["attention_on_first"][2] - want1) < 1e-10
    assert abs(edited["mean_cosine"][L] - got["plain"]["mean_cosine"][L]) > 1e-6  # the edit is seen: the checks above can fail


def test_the_first_key_removed_and_uniform_attention_give_their_defined_values(tmp_path):
    _, folder = tiny("llama", tmp_path)
    dec = load_decoder(folder)
    got = geometry_after(dec, PROMPTS, ["attention:block=1,with=no-first-key", "attention:block=0,with=uniform", "skip:block=1"])
    no_first, uniform, skipped = got["edits"]
    assert abs(no_first["attention_on_first"][2] - np.mean([1 / len(p) for p in PROMPTS])) < 1e-14  # only query 0 keeps key 0
    assert no_first["attention_on_first"][1] == got["plain"]["attention_on_first"][1]  # block 0 untouched
    harmonic = [sum(1 / (i + 1) for i in range(len(p))) / len(p) for p in PROMPTS]
    assert abs(uniform["attention_on_first"][1] - np.mean(harmonic)) < 1e-14
    assert skipped["attention_on_first"][2] is None  # a skipped block used no attention
    assert skipped["mean_cosine"][2] == pytest.approx(skipped["mean_cosine"][1], abs=0)  # and passed its input on


def test_intervene_geometry_writes_the_measures_and_the_figure(tmp_path, capsys):
    from attndyn.app.cli import entry

    folder, prompts = _folder_with_prompts(tmp_path)
    out = tmp_path / "iv"
    assert (
        entry(["intervene", str(folder), "--prompts", str(prompts), "--out", str(out), "--edit", "skip:block=0", "--draws", "1", "--geometry"]) == 0
    )
    record = json.loads((out / "interventions.json").read_text())
    geometry = record["geometry"]
    assert [e["edit"] for e in geometry["edits"]] == ["skip:block=0"]
    assert geometry["edits"][0]["mean_cosine"][1] == geometry["plain"]["mean_cosine"][0]  # block 0 skipped: its input passes on
    assert (out / "geometry.png").stat().st_size > 0
    assert "geometry after the edits" in (out / "index.html").read_text()
    assert entry(["intervene", str(folder), "--prompts", str(prompts), "--out", str(tmp_path / "no"), "--study", "depth", "--geometry"]) == 2
    assert "give at least one --edit" in capsys.readouterr().err
    assert not (tmp_path / "no" / "interventions.json").exists()
