"""The massive-activation study (Sun et al.): the step-up block is where massive entries appear and stay,
and the mean edit sets each massive entry to the mean of the massive entries of its (token role, dimension)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndyn.models import interventions_massive as im


def _hidden(L: int = 8, n: int = 7, d: int = 16, prompts: int = 3, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(L + 1, n, d, generator=g, dtype=torch.float64) for _ in range(prompts)]


def test_the_step_up_block_is_where_massive_entries_appear_and_stay():
    """L = 8 blocks: the window runs to block 8 - 1 - 2 = 5. Planted: a transient entry (token 0, dim 3) after
    blocks 1-2 only; one after blocks 2-7 but for a gap after block 4; the staying one (token 0, dim 5) after
    blocks 3-5 (gone in the last quarter, as Sun et al. see them fade) in prompts 0 and 1, and a later token's
    staying entry at dim 9 at a position that differs between prompts. Ordinary entries are N(0, 1), far below
    100 x their median magnitude."""
    hidden = _hidden()
    later = {0: 2, 1: 4, 2: 1}
    for i, h in enumerate(hidden):
        h[1 + 1 : 2 + 2, 0, 3] = 800.0  # rows l + 1: after blocks 1-2
        h[2 + 1 :, 0, 11] = 900.0
        h[4 + 1, 0, 11] = 0.5  # the gap after block 4
        if i < 2:
            h[3 + 1 : 5 + 2, 0, 5] = 1000.0
        h[3 + 1 : 5 + 2, later[i], 9] = -600.0
    assert im.first_massive(hidden) == 1
    block, entries = im.step_up(hidden)
    assert block == 3
    assert entries == [[(0, 5), (later[0], 9)], [(0, 5), (later[1], 9)], [(later[2], 9)]]
    # the threshold is 100 x the median magnitude: an entry of 50 x is not massive
    quiet = _hidden()
    for h in quiet:
        h[:, 0, 5] = 50 * h[1:].abs().median()
    assert im.step_up(quiet) == (None, [[], [], []])


def test_the_mean_edit_uses_the_mean_of_the_massive_entries_of_each_role_and_dimension():
    """The state after the step-up block: token 0's entry at dim 5 is massive in every prompt (900, 1000,
    1130); a later token's entry at dim 9 is massive at positions 2, 4, 1 (300, 500, 760). The mean edit sets
    token 0's to their mean and each later one to the mean of the later massive values, computed here apart
    from the study; the mean over prompts at a fixed position would mix massive and ordinary values."""
    g = torch.Generator().manual_seed(3)
    states = [torch.randn(6, 16, generator=g, dtype=torch.float64) for _ in range(3)]
    first, later, where = [900.0, 1000.0, 1130.0], [300.0, 500.0, 760.0], [2, 4, 1]
    entries = []
    for x, a, b, t in zip(states, first, later, where, strict=True):
        x[0, 5], x[t, 9] = a, b
        entries.append([(0, 5), (t, 9)])
    zero, mean = im.massive_plans(states, entries, 7, draws=3, seed=0)
    for i, t in enumerate(where):
        assert {(e.kind, e.token, e.dim) for e in zero["branches"][i]} == {("zero", 0, 5), ("zero", t, 9)}
        values = {(e.token, e.dim): e.value for e in mean["branches"][i]}
        assert all(e.kind == "set" and e.blocks == (7, 7) for e in mean["branches"][i])
        assert values[(0, 5)] == pytest.approx(sum(first) / 3, rel=1e-15)
        assert values[(t, 9)] == pytest.approx(sum(later) / 3, rel=1e-15)
    positionwise = np.mean([float(x[where[0], 9]) for x in states])
    assert abs(positionwise - sum(later) / 3) > 100  # the rule the study does not use
    # the nulls: the same places on a random dimension with no massive entry, set to that dimension's mean there
    for draw in mean["null"]:
        for i, t in enumerate(where):
            by_token = {e.token: e for e in draw[i]}
            assert by_token[0].dim not in (5, 9)
            assert by_token[t].dim not in (5, 9)
            j = by_token[t].dim
            assert by_token[t].value == pytest.approx(np.mean([float(x[w, j]) for x, w in zip(states, where, strict=True)]), rel=1e-12)
    assert len(mean["null"]) == len(mean["null_l2"]) == len(mean["labels"]) == 3


def test_the_study_s_edits_equal_the_user_s_specs_on_a_tiny_model(tmp_path, monkeypatch):
    """With the step-up fixed at block 1, token 0, dim 3 in every prompt, the study's zero and mean edits
    run the same forward as `intervene` with `zero:block=1,token=0,dim=3` and `mean:...` (token 0's mean over
    prompts is its role's mean): the same pooled loss."""
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from attndyn.models import interventions as iv
    from attndyn.models.decoder_files import load_decoder
    from attndyn.models.executor import run
    from tests.models.test_families import tiny

    _, folder = tiny("llama", tmp_path)
    dec = load_decoder(folder)
    prompts = [[5, 17, 3, 60, 42, 42, 1, 33, 23, 9, 51], [7, 8, 9, 10, 11, 12, 13, 14, 2], [3, 9, 27, 61, 4, 16, 44]]
    monkeypatch.setattr(im, "step_up", lambda hidden: (1, [[(0, 3)] for _ in hidden]))
    study = iv.run_study(dec, prompts, "massive", draws=2)
    assert study["block"] == 1
    assert study["entries"] == [[0, 3]]
    user = iv.intervene(dec, prompts, ["zero:block=1,token=0,dim=3", "mean:block=1,token=0,dim=3"], draws=1)
    for mine, theirs in zip(study["edits"], user["edits"], strict=True):
        assert mine["nll"] == pytest.approx(theirs["nll"], rel=1e-12)
        assert mine["nll"] != pytest.approx(user["nll"], rel=1e-9)  # the edit moved the loss
    assert study["seconds"] > 0
    assert study["cpu_seconds"] > 0
    # a later token's entry past the end of the shortest prompt is edited in its own prompt (Gemma-3: token 82 of 93)
    monkeypatch.setattr(im, "step_up", lambda hidden: (1, [[(0, 3), (9, 5)], [(0, 3)], [(0, 3)]]))
    study = iv.run_study(dec, prompts, "massive", draws=1)
    assert study["entries_per_prompt"][0] == [[0, 3], [9, 5]]
    with pytest.raises(ValueError, match="past the end of its prompt"):
        run(dec, prompts, [(2, (iv.parse("zero:block=1,token=9,dim=5"),))])


def test_the_docs_massive_sentences_are_what_the_generator_writes_from_the_data():
    """docs/guide/trained-models.md's marked sections equal massive_text of docs/data/interventions-*.json;
    the sentence's verdicts are Sun et al.'s rule recomputed here from the intervals; one number changed in
    the data changes the section."""
    import json
    import re
    from pathlib import Path

    from attndyn.app.interventions_page import docs_section, massive_text

    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "guide" / "trained-models.md").read_text(encoding="utf-8")
    data = sorted((root / "docs" / "data").glob("interventions-*.json"))
    marked = set(re.findall(r"<!-- interventions:([\w.-]+) \(generated", docs))
    assert "smollm2" in marked
    assert {p.stem.removeprefix("interventions-") for p in data} == marked
    for path in data:
        record = json.loads(path.read_text(encoding="utf-8"))
        name = path.stem.removeprefix("interventions-")
        assert docs_section(docs, name, record) == docs, f"the {name} massive study in the docs is not the generator's"
        s = record["studies"]["massive"]
        zero, mean = s["edits"]
        zero_matters = zero["ppl_ratio_interval"][0] > max(10.0, zero["null"]["ppl_ratio_interval"][1])
        mean_harmless = 0.99 <= mean["ppl_ratio_interval"][0] and mean["ppl_ratio_interval"][1] <= 1.01
        text = massive_text(record)
        assert f"\"zero matters\" (the ratio's interval above the null's and above 10x) {'holds' if zero_matters else 'does not hold'}" in text
        assert f'"mean is harmless" (its interval within 1 %) {"holds" if mean_harmless else "does not hold"}' in text
        assert f"the step-up block is {s['block']}," in text
        assert record["dtype"] == "float64"
        assert record["draws"] == 5
    record = json.loads(data[0].read_text(encoding="utf-8"))
    record["studies"]["massive"]["edits"][0]["ppl_ratio"] *= 1.01
    assert docs_section(docs, data[0].stem.removeprefix("interventions-"), record) != docs
