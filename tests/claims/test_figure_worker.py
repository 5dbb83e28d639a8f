"""The figure worker (claims.runner.FigureWorker): a second process finishes computed claims exactly as
finish_claim does in-process, reports a failure as that claim's error, and reproduce keeps its order."""

import dataclasses
import json

from attndyn.claims import load
from attndyn.claims.runner import FigureWorker, compute_claim, config_for, finish_claim
from attndyn.workflow import ownership


def computed(tmp_path, name, cid="leaders"):
    module = load(cid)
    config = config_for(module, seed=0, quick=True).model_copy(update={"seeds": 6})
    return compute_claim(cid, module, tmp_path / name / cid, seed=0, quick=True, config=config)


def test_the_worker_finishes_a_claim_as_finish_claim_does(tmp_path):
    here = computed(tmp_path, "here")
    there = computed(tmp_path, "there")
    record = finish_claim(here)
    worker = FigureWorker()
    try:
        worker.submit(there)
        cid, theirs = worker.collect()
        assert worker.collect() is None  # nothing left in flight
    finally:
        worker.close()
    assert cid == "leaders"
    assert isinstance(theirs, dict), theirs
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731  (two runs of the claim)
    assert strip(theirs) == strip(record)
    for folder in (here.owner.folder, there.owner.folder):
        assert json.loads((folder / "summary.json").read_text())["verdict"] == record["verdict"]
        assert all((folder / name).is_file() for name in record["figures"])
        assert set(ownership.read_marker(folder)["files"]) >= {"summary.json", "result.json", *record["figures"]}


def test_a_failing_figure_is_that_claim_s_error_and_the_worker_goes_on(tmp_path):
    bad = dataclasses.replace(computed(tmp_path, "bad"), module="tests.claims.failing_figures")
    good = computed(tmp_path, "good")
    worker = FigureWorker()
    try:
        worker.submit(bad)
        cid, outcome = worker.collect()
        assert cid == "leaders"
        assert outcome == "ValueError: no figure for this result (a deliberate failure)"
        assert not (bad.owner.folder / "summary.json").exists()  # not complete
        worker.submit(good)
        _, outcome = worker.collect()
        assert isinstance(outcome, dict)
    finally:
        worker.close()


def test_reproduce_writes_the_same_report_with_and_without_the_worker(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from attndyn.app.cli import app

    listing = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("ATTNDYN_FIGURE_WORKER", flag)
        out = tmp_path / f"report{flag}"
        result = CliRunner().invoke(app, ["reproduce", "leaders", "multihead", "--quick", "--out", str(out)])
        assert result.exit_code == 0, result.output
        data = json.loads((out / "results.json").read_text())
        listing[flag] = (
            sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.suffix in (".png", ".gif", ".json")),
            {c["id"]: c["verdict"] for c in data["claims"]},
        )
    assert listing["0"] == listing["1"]
    assert listing["1"][1] == {"leaders": "report", "multihead": "report"}
