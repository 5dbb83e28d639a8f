"""Every claim at a reduced size passes its own checks; the reproduce/report pipeline (issue 4)."""

import json
import re

import pytest
from typer.testing import CliRunner

from attndyn.cli import app
from attndyn.experiments import EXPERIMENTS, load

# Reduced sizes (seconds each). Pass/fail claims must pass here; report claims must produce their values and
# pass the exact checks they embed (e.g. W = I, sigma = id equals e:Rres).
TINY = {
    "model-equivalence": {},
    "boolean-1d": {"pairs": [(1.0, 1.0), (2.0, 0.3)], "ns": [6], "seeds": 20},
    "leaders": {"seeds": 6},
    "polytope": {"dims": [2], "ns": [10], "forms": ["identity", "spd"], "scales": [5.0], "seeds": 20},
    "polytope-relaxed": {"seeds": 3, "T": 6.0},
    "collapse": {"dims": [2], "ns": [5], "seeds": 4, "T": 160.0},
    "hyperplanes": {"cases": ["V2", "perron2", "V2-indefinite-QK"], "seeds": 4, "n": 12},
    "hyperplanes-negative-control": {"seeds": 2, "T": 5.0},
    "codimension": {"seeds": 2, "T": 10.0, "identity_seeds": 5},
    "polytope-subspace": {"cases": ["diag(1,1,-0.5)"], "seeds": 4},
    "feedforward": {"seeds": 2, "n": 12, "T": 5.0},
    "multihead": {"heads": [2], "seeds": 2, "layers": 30},
    "high-dimensional": {"d": 16, "n": 16, "T": 5.0},
    "sphere": {"betas": [1.0], "seeds": 20, "T": 100.0, "T_long": 0.0, "n": 16, "hemisphere_T": 30.0},
    "sphere-metastability": {"betas": [25.0], "T": 100.0, "n": 16},
    "causal": {"seeds": 20, "T": 100.0, "T_random": 20.0, "n": 10},
    "hardmax": {"seeds": 6},
    "trained-spectra": {},
}
SLOW = {"boolean-1d", "polytope", "hyperplanes", "sphere", "collapse", "codimension", "polytope-subspace", "causal"}


def test_tiny_configs_cover_every_claim():
    assert set(TINY) == set(EXPERIMENTS)


@pytest.mark.parametrize("claim_id", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in EXPERIMENTS])
def test_claim_at_reduced_size(claim_id):
    module = load(claim_id)
    if hasattr(module, "available") and not module.available()[0]:
        pytest.skip(module.available()[1])
    assert module.CLAIM.id == claim_id
    result = module.run(module.Config(seed=0, **TINY[claim_id]))
    assert result.checks
    failed = {name: c for name, c in result.checks.items() if c.passed is False}
    assert not failed, f"{claim_id}: {failed}"
    if module.CLAIM.kind == "pass/fail":
        assert result.verdict == "pass"
    else:
        assert result.verdict == "report"
    for c in result.checks.values():
        assert c.value == c.value  # not NaN


def test_config_rejects_unknown_keys_and_needs_a_seed():
    module = load("polytope")
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        module.Config(seed=0, dimz=[2])
    with pytest.raises(ValueError, match="seed"):
        module.Config()


runner = CliRunner()


def test_reproduce_two_claims_writes_a_consistent_report(tmp_path):
    out = tmp_path / "rep"
    result = runner.invoke(app, ["reproduce", "model-equivalence", "hardmax", "--quick", "--out", str(out), "--seed", "3"])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"#]+)"', page)
    assert refs, "the page shows figures"
    for ref in refs:
        assert (out / ref).is_file(), ref
    data = json.loads((out / "results.json").read_text())
    assert set(data) == {"version", "quick", "seed", "claims"}
    assert data["quick"] is True
    assert data["seed"] == 3
    assert [c["id"] for c in data["claims"]] == ["model-equivalence", "hardmax"]
    for claim in data["claims"]:
        assert set(claim) == {"id", "paper_ref", "verdict", "checks", "params", "seconds"}
        assert claim["verdict"] in ("pass", "fail", "report")
        for check in claim["checks"]:
            assert set(check) == {"name", "value", "threshold", "passed"}
    # rebuild without recomputing gives the same JSON
    before = (out / "results.json").read_text()
    assert runner.invoke(app, ["report", str(out)]).exit_code == 0
    assert (out / "results.json").read_text() == before


def test_report_refuses_half_written_run_folders(tmp_path):
    out = tmp_path / "rep"
    assert runner.invoke(app, ["reproduce", "hardmax", "--quick", "--out", str(out)]).exit_code == 0
    (out / "index.html").unlink()
    (out / "runs" / "hardmax" / "summary.json").unlink()  # as if the run was interrupted
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 2
    assert "incomplete" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (out / "index.html").exists()


def test_report_refuses_corrupted_json(tmp_path):
    out = tmp_path / "rep"
    assert runner.invoke(app, ["reproduce", "hardmax", "--quick", "--out", str(out)]).exit_code == 0
    (out / "index.html").unlink()
    (out / "runs" / "hardmax" / "result.json").write_text('{"id": "hard')
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 2
    assert "corrupted" in result.output
    assert not (out / "index.html").exists()


def test_unavailable_claim_is_listed_as_skipped(tmp_path, monkeypatch):
    module = load("trained-spectra")
    monkeypatch.setattr(module, "available", lambda: (False, "the package is not installed"))
    out = tmp_path / "rep"
    result = runner.invoke(app, ["reproduce", "trained-spectra", "hardmax", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert [c["verdict"] for c in data["claims"]] == ["pass", "skipped"]
    assert "the package is not installed" in (out / "index.html").read_text()


def test_unknown_claim_exits_2_with_the_valid_ids(tmp_path):
    result = runner.invoke(app, ["reproduce", "polytop", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "polytop" in result.output
    assert "polytope-subspace" in result.output


def test_list_shows_every_claim():
    result = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    for cid in EXPERIMENTS:
        assert cid in result.output
