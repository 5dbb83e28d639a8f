"""Every claim at a reduced size passes its own checks; the reproduce/report pipeline (issue 4)."""

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from attndyn.app.cli import app
from attndyn.claims import EXPERIMENTS, load
from tests.helpers import copy_of
from tests.tiny_claims import SLOW, TINY, tiny_result


def test_tiny_configs_cover_every_claim():
    assert set(TINY) == set(EXPERIMENTS)


@pytest.mark.parametrize("claim_id", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in EXPERIMENTS])
def test_claim_at_reduced_size(claim_id):
    module = load(claim_id)
    if hasattr(module, "available") and not module.available()[0]:
        pytest.skip(module.available()[1])
    assert module.CLAIM.id == claim_id
    result = tiny_result(claim_id)
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
    assert set(data) == {"version", "quick", "seed", "claims", "unfinished"}
    assert data["unfinished"] == {}
    assert data["quick"] is True
    assert data["seed"] == 3
    assert [c["id"] for c in data["claims"]] == ["model-equivalence", "hardmax"]
    for claim in data["claims"]:
        assert set(claim) == {"id", "paper_ref", "verdict", "checks", "params", "seconds", "provenance"}
        assert claim["verdict"] in ("pass", "fail", "report")
        for check in claim["checks"]:
            assert set(check) == {"name", "value", "threshold", "passed", "n_judged", "margin", "worst_case", "detects"}
            if check["passed"] is not None:
                assert check["n_judged"] >= 1
    # rebuild without recomputing gives the same JSON
    before = (out / "results.json").read_text()
    assert runner.invoke(app, ["report", str(out)]).exit_code == 0
    assert (out / "results.json").read_text() == before


@pytest.fixture(scope="module")
def hardmax_report(tmp_path_factory):
    """``attndyn reproduce hardmax --quick`` run once for the module; each test works on a copy (:func:`tests.helpers.copy_of`)."""
    out = tmp_path_factory.mktemp("hardmax") / "rep"
    assert runner.invoke(app, ["reproduce", "hardmax", "--quick", "--out", str(out)]).exit_code == 0
    return out


def test_svg_figures_only_with_the_svg_option(tmp_path, hardmax_report):
    """An SVG costs about three PNGs: reproduce writes them (and the page links them) only with --svg."""
    plain, vector = hardmax_report, tmp_path / "vector"
    assert not list(plain.rglob("*.svg"))
    assert list(plain.rglob("*.png"))
    assert ">SVG</a>" not in (plain / "index.html").read_text()
    assert runner.invoke(app, ["reproduce", "hardmax", "--quick", "--svg", "--out", str(vector)]).exit_code == 0
    svgs = sorted(p.relative_to(vector).as_posix() for p in vector.rglob("*.svg"))
    assert svgs
    assert len(svgs) == len([p for p in (vector / "runs" / "hardmax" / "figures").glob("*.png")])
    page = (vector / "index.html").read_text()
    for svg in svgs:
        assert f'href="{svg}"' in page


def test_report_refuses_half_written_run_folders(tmp_path, hardmax_report):
    out = copy_of(hardmax_report, tmp_path, "rep")
    (out / "index.html").unlink()
    (out / "runs" / "hardmax" / "summary.json").unlink()  # as if the run was interrupted
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 2
    assert "incomplete" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (out / "index.html").exists()


def test_report_refuses_corrupted_json(tmp_path, hardmax_report):
    out = copy_of(hardmax_report, tmp_path, "rep")
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


ALMOST_EVERY = [
    "boolean-1d",
    "polytope",
    "collapse",
    "hyperplanes",
    "hyperplanes-negative-control",
    "polytope-subspace",
    "sphere",
    "causal",
    "hardmax",
]


@pytest.mark.parametrize("claim_id", ALMOST_EVERY)
def test_quick_sizes_of_almost_every_claims_run_twenty_seeds(claim_id):
    # "for almost every initial datum" is judged over N >= 20 seeds, at the quick sizes too
    module = load(claim_id)
    assert module.Config(seed=0, **module.QUICK).seeds >= 20


def test_mode_amplitudes_against_the_direct_sum():
    """circle.amplitudes (powers of e^{i theta}) against |mean_j e^{i k theta_j}| written out with cos and sin."""
    from attndyn.claims import circle

    theta = np.random.default_rng(4).uniform(0, 2 * np.pi, (3, 5, 40))
    for ks in (np.arange(1, 41), np.array([2, 7]), np.array([0.5, 1.5])):
        direct = np.hypot(np.cos(ks * theta[..., None]).mean(-2), np.sin(ks * theta[..., None]).mean(-2))
        got = circle.amplitudes(theta, ks)
        assert got.shape == (3, 5, len(ks))
        np.testing.assert_allclose(got, direct, rtol=0, atol=1e-13)
    # a two-cluster configuration: |mean e^{i k theta}| is 1 for even k and 0 for odd k
    two = np.concatenate([np.zeros(10), np.full(10, np.pi)])
    np.testing.assert_allclose(circle.amplitudes(two, np.arange(1, 5)), [0, 1, 0, 1], atol=1e-14)


def test_a_report_records_where_its_results_came_from(tmp_path, monkeypatch):
    """Issue 52 item 5: each claim's record carries the command as typed, the commit of the source tree (read
    here by git itself), a UTC date, the machine; the page shows them with BibTeX for the paper and attndyn."""
    import datetime
    import os
    import subprocess
    import sys
    from pathlib import Path

    from attndyn.workflow import provenance

    out = tmp_path / "rep"
    argv = ["/somewhere/.venv/bin/attndyn", "reproduce", "hardmax", "--quick", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    assert runner.invoke(app, argv[1:]).exit_code == 0
    record = json.loads((out / "results.json").read_text())["claims"][0]["provenance"]
    assert record["command"] == f"attndyn reproduce hardmax --quick --out {out}"
    assert before <= datetime.datetime.strptime(record["date"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert record["machine"]["cores"] == os.cpu_count()
    assert record["machine"]["python"] == ".".join(map(str, sys.version_info[:3]))
    src = Path(provenance.__file__).parents[1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True, check=False)
    if head.returncode == 0:  # a checkout (CI's clone): the commit, marked where tracked files differ
        assert record["commit"].split("+")[0] == head.stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "."], cwd=src, check=False).returncode != 0
        assert record["commit"].endswith("+modified") == dirty
    page = (out / "index.html").read_text()
    assert f"attndyn reproduce hardmax --quick --out {out}" in page
    assert "@inproceedings{geshkovski2023emergence" in page
    assert "@software{attndyn" in page
    assert str(record["commit"]) in page
