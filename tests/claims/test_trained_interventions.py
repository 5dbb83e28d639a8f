"""Issue 50, item 7: the claim trained-interventions. Its hook oracle catches a real executor bug (not only the
claim's own sensitivity knobs), says so when transformers is missing, and its SmolLM2 study is reported with
intervals that hold their values and the stated rule."""

from __future__ import annotations

import numpy as np
import pytest

from attndyn.claims import load

CID = "trained-interventions"
pytest.importorskip("transformers")


def _oracle(checks: dict):
    (check,) = [c for name, c in checks.items() if name.startswith("the hook oracle")]
    return check


def test_the_hook_oracle_catches_a_head_off_by_one_in_the_executor(monkeypatch):
    """A bug in the executor itself (the skipped head's neighbour removed) fails the oracle at the head edits, and
    nothing else: the oracle is independent of the code it judges."""
    module = load(CID)
    from attndyn.models import edits  # the module the executor reads the edit language from

    heads = edits.heads_skipped
    monkeypatch.setattr(edits, "heads_skipped", lambda edits, k: {(h + 1) % 4 for h in heads(edits, k)})
    result = module.run(module.Config(seed=0, massive_prompts=0))
    oracle = _oracle(result.checks)
    assert oracle.passed is False
    failed = [spec for spec, err in zip(module.ORACLE, result.arrays["hook_err"], strict=True) if err > module.HOOK_TOL]
    assert failed == ["skip:block=1,head=2", "zero:block=0,token=0,dim=4;skip:block=1,head=1"]
    assert [name for name, c in result.checks.items() if c.passed is False] == [name for name in result.checks if name.startswith("the hook oracle")]


def test_without_transformers_the_claim_is_skipped_and_its_oracle_cannot_pass(monkeypatch):
    module = load(CID)
    monkeypatch.setattr(module, "available", lambda: (False, module.NO_TRANSFORMERS))
    result = module.run(module.Config(seed=0, massive_prompts=0))
    oracle = _oracle(result.checks)
    assert oracle.passed is False
    assert oracle.n_judged == 0
    assert "transformers is not importable" in oracle.note
    assert result.verdict == "fail"
    # the identities need no transformers and still pass
    assert all(c.passed for name, c in result.checks.items() if c.passed is not None and not name.startswith("the hook oracle"))


def test_the_numpy_block_is_the_executor_s_uniform_block_at_other_seeds():
    """The NumPy uniform block against the executor at two more tiny models (seeds 1, 2): the agreement is not a
    property of one draw."""
    import torch

    from attndyn.models.executor import run
    from attndyn.models.interventions import parse

    module = load(CID)
    for seed in (1, 2):
        sd = module.tiny_state(seed)
        dec = module.tiny_decoder(sd)
        plain, edited, _ = run(dec, module.PROMPTS, [(0, (parse("attention:block=2,with=uniform"),))], record=True, dtype=torch.float64)
        want = module.numpy_uniform_block(sd, 2, plain[0].hidden[2].numpy())
        assert np.abs(edited[0].hidden[3].numpy() - want).max() / np.abs(want).max() < 1e-12
        assert np.abs(plain[0].hidden[3].numpy() - want).max() / np.abs(want).max() > 1e-3  # softmax is not uniform here


@pytest.mark.slow
def test_smollm2_s_massive_study_is_reported_with_its_intervals_and_rule():
    from attndyn.models.decoder_files import smollm2_available

    ok, why = smollm2_available()
    if not ok:
        pytest.skip(why)
    module = load(CID)
    result = module.run(module.Config(seed=0, massive_prompts=2, massive_draws=1))
    a = result.arrays
    assert result.verdict == "pass"
    assert a["massive_ran"][0] == 1.0
    for key in ("zero_ratio", "mean_ratio", "zero_null_ratio", "mean_null_ratio", "zero_null_l2_ratio", "mean_null_l2_ratio"):
        value, lo, hi = a[key]
        assert lo <= value <= hi, key
    zero_matters = a["zero_ratio"][1] > 10 and a["zero_ratio"][1] > a["zero_null_ratio"][2]
    mean_harmless = 0.99 <= a["mean_ratio"][1] and a["mean_ratio"][2] <= 1.01
    assert list(a["massive_rule"]) == [float(zero_matters), float(mean_harmless)]
    reported = [name for name, c in result.checks.items() if c.passed is None]
    assert any(name.startswith("SmolLM2: perplexity ratio, the massive entries") for name in reported)
    assert set(module.figures(result)) == {"hook_oracle", "massive"}
