"""Sweeps (issue 10): validation, batching, Dask equal to in-process, resume after a killed driver,
a killed worker, a changed sweep file refused, a failing task recorded, results as labelled arrays."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import tomllib

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from attndyn import sweep
from attndyn.app.cli import app
from attndyn.app.sweep_results import dim_name
from attndyn.workflow import runs
from attndyn.workflow.schema import parse_config

xr = pytest.importorskip("xarray")

BASE = """
seed = 0
n = 8
d = 3
[init]
kind = "sphere"
[model]
beta = 1.0
geometry = "sphere"
[solver]
method = "rk4"
dt = 0.05
t1 = 2.0
save_every = 0.5
"""


# the eager engine: its tasks last long enough for a signal to land mid-run (the compiled path finishes
# this sweep's ten tasks before the first poll)
SLOW_TASKS = os.environ | {"ATTNDYN_COMPILED": "0"}


def write_sweep(folder, grid: str, extra: str = "", base: str = BASE) -> str:
    (folder / "base.toml").write_text(base)
    path = folder / "sweep.toml"
    path.write_text(f'base = "base.toml"\n{extra}\n[grid]\n{grid}\n')
    return str(path)


GRID = '"model.beta" = [1.0, 2.0, 4.0]\nseed = [0, 1, 2]'


# --- the sweep file ----------------------------------------------------------------------------------


def test_grid_expands_into_tasks_batched_over_seeds(tmp_path):
    s = sweep.load_spec(write_sweep(tmp_path, GRID, 'measures = ["pair_fraction", "cluster_count"]'))
    assert len(s.points) == 9
    assert [len(t) for t in s.tasks] == [3, 3, 3]  # one task per beta, its seeds batched
    assert {json.dumps(s.points[p].coords["model.beta"]) for p in s.tasks[1]} == {"2.0"}
    assert s.ts == [0.0, 0.5, 1.0, 1.5, 2.0]


@pytest.mark.parametrize(
    ("grid", "extra", "needle"),
    [
        (GRID, "colour = 1", "unknown key 'colour'"),
        ("", "", "non-empty [grid]"),
        ('"model.beta" = []', "", "non-empty list"),
        ('"model.bta" = [1.0]', "", "bta"),
        ('"model.rescaled" = [true]', "", "rescaled"),  # impossible with geometry = sphere
        ('"model.beta" = [-1.0]', "", "beta"),
        ("seed = [0, 0]", "", "repeats"),
        (GRID, 'measures = ["entropy"]', "unknown measure 'entropy'"),
        ('"solver.t1" = [1.0, 2.0]', "", "save times"),
    ],
)
def test_bad_sweep_files_are_refused_naming_the_key(tmp_path, grid, extra, needle):
    path = write_sweep(tmp_path, grid, extra)
    with pytest.raises(sweep.SweepError, match=__import__("re").escape(needle)):
        sweep.load_spec(path)
    result = CliRunner().invoke(app, ["sweep", path, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) <= 3  # one sentence (wrapped at most)


def test_measures_against_direct_computation(tmp_path):
    measures = 'measures = ["pair_fraction", "energy", "time_to_one_cluster", "cluster_count"]'
    long = BASE.replace("t1 = 2.0", "t1 = 30.0").replace("dt = 0.05", "dt = 0.1").replace("save_every = 0.5", "save_every = 2.0")
    path = write_sweep(tmp_path, '"model.beta" = [1.0, 9.0]\nseed = [3]', measures, long)
    summary = sweep.run(path, tmp_path / "out", workers=0)
    assert summary.done == summary.total == 2
    ds = sweep.load(tmp_path / "out")
    # the same point simulated alone, measures recomputed by hand
    cfg = json.loads(json.dumps(sweep.load_spec(path).points[1].config))
    run = runs.execute(parse_config(cfg))
    x = run.xs / np.linalg.norm(run.xs, axis=-1, keepdims=True)
    G = np.einsum("tid,tjd->tij", x, x)
    iu = np.triu_indices(8, 1)
    # the dotted grid key is a dimension named as an attribute, with the key kept in its attributes
    assert ds.model_beta.attrs["key"] == "model.beta"
    assert list(ds["pair_fraction"].dims) == ["model_beta", "seed", "t"]
    np.testing.assert_allclose(ds["pair_fraction"].sel(model_beta=9.0, seed=3).values, (G[:, iu[0], iu[1]] >= 0.999).mean(-1))
    np.testing.assert_allclose(ds["energy"].sel(model_beta=9.0, seed=3).values, np.exp(9.0 * (G - 1)).mean((1, 2)), rtol=1e-12)
    # beta = 1 collapses to one point by t = 30 (one cluster, a finite time); beta = 9 is still metastable
    assert ds["cluster_count"].sel(model_beta=1.0).item() == 1.0
    assert np.isfinite(ds["time_to_one_cluster"].sel(model_beta=1.0).item())
    assert ds["cluster_count"].sel(model_beta=9.0).item() > 1


def alone(point) -> tuple:
    """A grid point's config run on its own (runs.execute), and its tokens' cosines (T, n, n)."""
    run = runs.execute(parse_config(json.loads(json.dumps(point.config))))
    x = run.xs / np.linalg.norm(run.xs, axis=-1, keepdims=True)
    return run, np.einsum("tid,tjd->tij", x, x)


def test_results_land_at_their_grid_points_when_tasks_interleave(tmp_path):
    """Seed first in the file: the points of one task (one beta) are not contiguous in point order,
    and each task's stacked results must still land at their own (seed, beta) cells."""
    path = write_sweep(tmp_path, 'seed = [4, 0, 2]\n"model.beta" = [2.0, 0.5]', 'measures = ["energy"]')
    sweep.run(path, tmp_path / "out", workers=0)
    ds = sweep.load(tmp_path / "out")
    assert ds["energy"].dims == ("seed", "model_beta", "t")
    spec = sweep.load_spec(path)
    assert sorted(spec.tasks[0]) != list(range(spec.tasks[0][0], spec.tasks[0][0] + len(spec.tasks[0])))  # interleaved
    for point in spec.points:
        _, G = alone(point)
        beta = point.coords["model.beta"]
        np.testing.assert_allclose(
            ds["energy"].sel({dim_name(k): v for k, v in point.coords.items()}).values, np.exp(beta * (G - 1)).mean((1, 2)), rtol=1e-10
        )


def test_each_task_row_names_its_grid_point(tmp_path):
    """The ledger keeps each task's grid point (its coordinates but the seed) as JSON, and a task's points are
    that grid point at every seed, in grid order."""
    grid = 'seed = [5, 0]\n"model.beta" = [1.0, 2]\n"init.kind" = ["sphere", "gaussian"]'
    path = write_sweep(tmp_path, grid, "", BASE.replace('geometry = "sphere"', 'geometry = "euclidean"'))
    sweep.run(path, tmp_path / "out", workers=0)
    spec = sweep.load_spec(path)
    db = sqlite3.connect(tmp_path / "out" / sweep.LEDGER)
    rows = dict(db.execute("SELECT task_id, coords FROM tasks"))
    db.close()
    assert len(rows) == len(spec.tasks) == 4
    for t, task in enumerate(spec.tasks):
        assert [spec.points[p].coords for p in task] == [{**json.loads(rows[t]), "seed": s} for s in (5, 0)]


def test_a_measure_whose_shape_depends_on_the_point_fails_its_task_naming_it(tmp_path, faults):
    path = write_sweep(tmp_path, '"model.beta" = [1.0]\nseed = [0, 1]', 'measures = ["sweep_faults:seed_shaped"]')
    summary = sweep.run(path, tmp_path / "out", workers=0, allow_import=True)
    assert summary.failed == 1
    assert "sweep_faults:seed_shaped" in summary.errors[0][1]
    assert "different shapes" in summary.errors[0][1]


def test_a_ledger_of_an_earlier_schema_is_refused(tmp_path):
    path = write_sweep(tmp_path, '"model.beta" = [1.0]\nseed = [0]')
    sweep.run(path, tmp_path / "out", workers=0)
    db = sqlite3.connect(tmp_path / "out" / sweep.LEDGER)
    with db:
        db.execute("DELETE FROM meta WHERE key = 'schema'")  # what a ledger of one row per point had
    db.close()
    with pytest.raises(sweep.SweepError, match="earlier attndyn"):
        sweep.run(path, tmp_path / "out", workers=0)
    with pytest.raises(sweep.SweepError, match="earlier attndyn"):
        sweep.load(tmp_path / "out")


@pytest.mark.parametrize(
    ("d", "measures"),
    [(3, ["pair_fraction", "energy", "time_to_one_cluster"]), (16, ["pair_fraction", "energy"]), (16, ["energy", "cluster_count"])],
    ids=["batch", "span, inner products", "span, positions"],
)
def test_task_measures_equal_those_of_each_point_run_alone(tmp_path, d, measures):
    """Seeds integrated as one batch, their over-time measures computed in one call; with d = 16 > n = 8
    the batch runs in the span of x0 (measures of inner products read the coordinates, the others
    the rebuilt tokens). Each point equals its config run alone, in full dimension."""
    path = write_sweep(tmp_path, '"model.beta" = [3.0]\nseed = [0, 1, 2]', f"measures = {json.dumps(measures)}", BASE.replace("d = 3", f"d = {d}"))
    sweep.run(path, tmp_path / "out", workers=0)
    ds = sweep.load(tmp_path / "out")
    iu = np.triu_indices(8, 1)
    for point in sweep.load_spec(path).points:
        run, G = alone(point)
        where = {"model_beta": 3.0, "seed": point.coords["seed"]}
        np.testing.assert_allclose(ds["energy"].sel(where).values, np.exp(3.0 * (G - 1)).mean((1, 2)), rtol=1e-10)
        if "pair_fraction" in measures:
            np.testing.assert_array_equal(ds["pair_fraction"].sel(where).values, (G[:, iu[0], iu[1]] >= 0.999).mean(-1))
        if "cluster_count" in measures:
            np.testing.assert_equal(ds["cluster_count"].sel(where).item(), sweep.cluster_count(run.ts, run.xs, None, {"cluster_tol": 1e-3}))


def test_normalization_schemes_sweep_like_any_model_option(tmp_path):
    """A grid over model.scheme (SPEC §8.5): each point equals the same config run alone."""
    path = write_sweep(tmp_path, '"model.scheme" = ["post", "pre", "peri"]\nseed = [1]', 'measures = ["pair_fraction", "energy"]')
    summary = sweep.run(path, tmp_path / "out", workers=0)
    assert summary.done == summary.total == 3
    ds = sweep.load(tmp_path / "out")
    energies = []
    for point in sweep.load_spec(path).points:
        run, G = alone(point)
        got = ds["energy"].sel({"model_scheme": point.coords["model.scheme"], "seed": 1}).values
        np.testing.assert_allclose(got, np.exp(G - 1).mean((1, 2)), rtol=1e-12)
        energies.append(got[-1])
    assert len(set(np.round(energies, 12))) == 3  # the schemes move the tokens differently


def test_noise_strength_sweeps_point_by_point_like_single_runs(tmp_path):
    """A grid over solver.kappa: each point is integrated alone (its noise is its seed's) and equals runs.execute."""
    base = BASE.replace('method = "rk4"', 'method = "euler"').replace("dt = 0.05", "dt = 0.01")
    path = write_sweep(tmp_path, '"solver.kappa" = [2.0, 50.0]\nseed = [0, 1]', 'measures = ["energy"]', base)
    summary = sweep.run(path, tmp_path / "out", workers=0)
    assert summary.done == summary.total == 2  # tasks: one per kappa, its seeds together
    ds = sweep.load(tmp_path / "out")
    for point in sweep.load_spec(path).points:
        run = runs.execute(parse_config(json.loads(json.dumps(point.config))))
        G = np.einsum("tid,tjd->tij", run.xs, run.xs)
        got = ds["energy"].sel({"solver_kappa": point.coords["solver.kappa"], "seed": point.coords["seed"]}).values
        np.testing.assert_allclose(got, np.exp(G - 1).mean((1, 2)), rtol=1e-12)


def test_a_scheme_off_the_sphere_is_refused_naming_it(tmp_path):
    path = write_sweep(tmp_path, '"model.scheme" = ["pre"]', base=BASE.replace('geometry = "sphere"', 'geometry = "euclidean"'))
    with pytest.raises(sweep.SweepError, match="scheme"):
        sweep.load_spec(path)


def test_gram_scale_restarts_the_same_draws_nearer_orthogonal(tmp_path):
    """init.gram_scale (the phase-diagram's paired starts): the seed's draws with Gram matrix I + lam (G0 - I), in
    their span, lam = 1 the draws themselves; refused where the scaled Gram matrix cannot be realised (d < n)."""
    from attndyn.workflow.setup import build

    base = BASE.replace("d = 3", "d = 12")
    path = write_sweep(tmp_path, '"init.gram_scale" = [1.0, 0.5, 0.0]\nseed = [4]', base=base)
    starts = {p.coords["init.gram_scale"]: build(parse_config(json.loads(json.dumps(p.config)))).x0.numpy() for p in sweep.load_spec(path).points}
    x = starts[1.0]
    drawn = build(parse_config(tomllib.loads(base) | {"seed": 4})).x0.numpy()
    np.testing.assert_array_equal(x, drawn)
    span = x.T @ np.linalg.pinv(x.T)  # the projector onto the rows' span
    for lam in (0.5, 0.0):
        y = starts[lam]
        np.testing.assert_allclose(y @ y.T, np.eye(8) + lam * (x @ x.T - np.eye(8)), rtol=0, atol=1e-14)
        np.testing.assert_allclose(y @ span, y, rtol=0, atol=1e-14)
    path = write_sweep(tmp_path, '"init.gram_scale" = [0.5]', base=BASE)  # d = 3 < n = 8
    with pytest.raises(sweep.SweepError, match="gram_scale = 0.5 needs d >= n"):
        sweep.load_spec(path)


# --- execution -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_worker_local_cluster_equals_in_process(tmp_path):
    path = write_sweep(tmp_path, GRID, 'measures = ["pair_fraction", "cluster_count", "boolean_distance"]')
    a = sweep.run(path, tmp_path / "dask", workers=2)
    b = sweep.run(path, tmp_path / "local", workers=0)
    assert a.done == b.done == 3
    da, db = sweep.load(tmp_path / "dask"), sweep.load(tmp_path / "local")
    for name in da.data_vars:
        np.testing.assert_array_equal(da[name].values, db[name].values)


@pytest.mark.slow
def test_a_two_worker_sweep_folder_is_signed_by_the_driver_alone(tmp_path, monkeypatch):
    """Issue 51 item 1: on Dask the driver is the only writer of the folder and its marker (the workers return
    results; they never sign), so a 2-worker sweep leaves a marker that verifies under this user's key, and
    status, export and a resumed run accept the folder; under another key they refuse it."""
    from attndyn.app.cli import entry
    from attndyn.workflow import ownership

    path = write_sweep(tmp_path, GRID, 'measures = ["pair_fraction"]')
    out = tmp_path / "dask"
    assert sweep.run(path, out, workers=2).done == 3
    marker = ownership._load(out)
    assert marker is not None
    assert marker["kind"] == "sweep"
    assert set(marker["files"]) >= {"ledger.sqlite", "driver.lock"}
    assert entry(["sweep", "status", str(out)]) == 0
    assert entry(["sweep", "export", str(out), "--format", "csv"]) == 0
    assert ownership._load(out) is not None
    assert sweep.run(path, out, workers=2).done == 3
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "another"))  # another machine, HOME or container
    assert ownership._load(out) is None
    assert entry(["sweep", str(path), "--out", str(out), "--workers", "0"]) == 2  # a writer refuses it; status only reads


def ledger_rows(folder):
    """The tasks' (status, attempts), and the stored results as (task id, position in the task), one entry per stored point."""
    db = sqlite3.connect(folder / sweep.LEDGER, isolation_level=None)
    try:
        db.execute("BEGIN")  # one snapshot: the driver may commit between two reads
        tasks = {t: (status, attempts) for t, status, attempts in db.execute("SELECT task_id, status, attempts FROM tasks")}
        points = []
        for t, data in db.execute("SELECT task_id, data FROM results"):
            stored = {len(v) for v in sweep.decode_results(data).values()}
            assert len(stored) == 1, (t, stored)
            points += [(t, k) for k in range(stored.pop())]
        db.execute("COMMIT")
    finally:
        db.close()
    return tasks, points


def wait_until_done(out, tasks_done: int, seconds: float = 120) -> None:
    """Poll a running sweep's ledger until at least ``tasks_done`` tasks are done (or time runs out)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if (out / sweep.LEDGER).exists():
            try:
                tasks, _ = ledger_rows(out)
            except sqlite3.OperationalError:
                tasks = {}
            if sum(s == "done" for s, _ in tasks.values()) >= tasks_done:
                return
        time.sleep(0.02)


@pytest.mark.slow
def test_killing_the_driver_loses_nothing_and_duplicates_nothing(tmp_path):
    grid = '"model.beta" = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]\nseed = [0, 1]'
    path = write_sweep(tmp_path, grid, "", BASE.replace("t1 = 2.0", "t1 = 6.0"))
    out = tmp_path / "out"
    kill_after = int(np.random.default_rng(int(time.time())).integers(1, 8))  # a random point of the run
    proc = subprocess.Popen(
        [sys.executable, "-m", "attndyn", "sweep", path, "--out", str(out), "--workers", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=SLOW_TASKS,
    )
    try:
        wait_until_done(out, kill_after)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    before, _ = ledger_rows(out)
    finished = {t for t, (s, _) in before.items() if s == "done"}
    assert 1 <= len(finished) < 10, before
    result = CliRunner().invoke(app, ["sweep", path, "--out", str(out), "--workers", "0"])
    assert result.exit_code == 0, result.output
    after, points = ledger_rows(out)
    assert all(s == "done" for s, _ in after.values())
    spec = sweep.load_spec(path)
    assert sorted(spec.tasks[t][k] for t, k in points) == list(range(20))  # every grid point exactly once
    assert all(after[t][1] == 1 for t in finished)  # what was done was not recomputed
    reference = tmp_path / "reference"
    sweep.run(path, reference, workers=0)
    for name in ("pair_fraction",):
        np.testing.assert_array_equal(sweep.load(out)[name].values, sweep.load(reference)[name].values)


def test_ctrl_c_says_how_many_tasks_are_done_and_how_to_resume(tmp_path):
    grid = '"model.beta" = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]\nseed = [0, 1]'
    path = write_sweep(tmp_path, grid, "", BASE.replace("t1 = 2.0", "t1 = 6.0"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "attndyn", "sweep", path, "--out", str(out), "--workers", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=SLOW_TASKS,
    )
    try:
        wait_until_done(out, 1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    said = " ".join(err.split())
    done = sum(s == "done" for s, _ in ledger_rows(out)[0].values())
    assert f"interrupted: {done} of 10 tasks done" in said, said
    assert "rerun the same command to resume" in said


def test_the_example_sweep_file_is_valid():
    from tests.helpers import ROOT

    spec = sweep.load_spec(ROOT / "configs" / "sweep-examples" / "one-cluster.toml")
    assert spec.measures == ["one_cluster", "pair_fraction", "cluster_count"]
    assert len(spec.tasks) == 3


FAULTS = textwrap.dedent(
    """
    import os
    import signal
    from pathlib import Path

    import numpy as np

    from attndyn.sweep import pair_fraction


    def die_once(ts, xs, model, options):
        mark = Path(os.environ["ATTNDYN_TEST_MARK"])
        if model.beta == 2.0 and not mark.exists():
            mark.write_text("killed")
            os.kill(os.getpid(), signal.SIGKILL)  # the worker process dies mid-task
        return pair_fraction(ts, xs, model, options)


    def seed_shaped(ts, xs, model, options):
        return np.zeros(1 + int(xs[0, 0, 0] > 0))  # a shape that depends on the start


    def fail_at_beta_2(ts, xs, model, options):
        if model.beta == 2.0:
            raise ValueError("deliberate failure at beta = 2")
        return pair_fraction(ts, xs, model, options)
    """
)


@pytest.fixture
def faults(tmp_path, monkeypatch):
    (tmp_path / "sweep_faults.py").write_text(FAULTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("ATTNDYN_TEST_MARK", str(tmp_path / "killed.mark"))
    yield tmp_path
    sys.modules.pop("sweep_faults", None)


@pytest.mark.slow
def test_a_killed_worker_is_retried(tmp_path, faults):
    path = write_sweep(tmp_path, GRID, 'measures = ["sweep_faults:die_once"]')
    summary = sweep.run(path, tmp_path / "out", workers=2, allow_import=True)
    assert (tmp_path / "killed.mark").read_text() == "killed"  # a worker did die
    assert summary.done == 3
    assert summary.failed == 0
    assert np.isfinite(sweep.load(tmp_path / "out")["sweep_faults:die_once"].values).all()


def test_a_failing_task_is_recorded_and_the_sweep_goes_on(tmp_path, faults):
    path = write_sweep(tmp_path, GRID, 'measures = ["sweep_faults:fail_at_beta_2"]')
    refused = CliRunner().invoke(app, ["sweep", path, "--out", str(tmp_path / "refused"), "--workers", "0"])
    assert refused.exit_code == 2
    assert "--allow-import" in refused.output
    assert not (tmp_path / "refused").exists()
    result = CliRunner().invoke(app, ["sweep", path, "--out", str(tmp_path / "out"), "--workers", "0", "--allow-import"])
    assert result.exit_code == 1
    assert "deliberate failure at beta = 2" in result.output
    tasks, points = ledger_rows(tmp_path / "out")
    assert sorted(s for s, _ in tasks.values()) == ["done", "done", "failed"]
    assert len(points) == 6
    ds = sweep.load(tmp_path / "out")
    values = ds["sweep_faults:fail_at_beta_2"]
    assert np.isnan(values.sel({"model_beta": 2.0}).values).all()
    assert np.isfinite(values.sel({"model_beta": 4.0}).values).all()
    # the status command reads the ledger, names the failed task and its error, and writes nothing
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "out").iterdir())
    st = CliRunner().invoke(app, ["sweep", "status", str(tmp_path / "out")])
    assert st.exit_code == 0, st.output
    assert "2 of 3 tasks done, 0 pending, 0 running, 1 failed" in st.output
    assert "deliberate failure at beta = 2" in st.output
    assert "'model.beta': 2.0" in st.output
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "out").iterdir()) == before


def test_sweep_status_of_a_folder_that_is_not_a_sweep(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "status", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not a sweep folder" in result.output
    assert list(tmp_path.iterdir()) == []  # no ledger was created


def test_one_cluster_is_the_probability_of_one_cluster_at_each_save(tmp_path):
    long = BASE.replace("t1 = 2.0", "t1 = 30.0").replace("dt = 0.05", "dt = 0.1").replace("save_every = 0.5", "save_every = 2.0")
    path = write_sweep(tmp_path, '"model.beta" = [1.0, 9.0]\nseed = [0, 1, 2, 3]', 'measures = ["one_cluster", "pair_fraction"]', long)
    sweep.run(path, tmp_path / "out", workers=0)
    ds = sweep.load(tmp_path / "out")
    flags = ds["one_cluster"].values
    assert set(np.unique(flags)) <= {0.0, 1.0}
    np.testing.assert_array_equal(flags, (ds["pair_fraction"].values >= 1.0).astype(float))
    p = ds["one_cluster"].sel({"model_beta": 1.0}).mean("seed").values
    assert p[0] == 0.0
    assert p[-1] == 1.0  # beta = 1 is one cluster by t = 30 for every seed
    assert ds["one_cluster"].sel({"model_beta": 9.0}).mean("seed").values[-1] < 1.0  # beta = 9: still metastable


def test_a_changed_sweep_file_is_refused_naming_what_changed(tmp_path):
    path = write_sweep(tmp_path, '"model.beta" = [1.0]\nseed = [0]')
    assert CliRunner().invoke(app, ["sweep", path, "--out", str(tmp_path / "out")]).exit_code == 0
    write_sweep(tmp_path, '"model.beta" = [1.0, 2.0]\nseed = [0]')
    result = CliRunner().invoke(app, ["sweep", path, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "model.beta" in result.output
    # the same file again: nothing to do, nothing recomputed
    write_sweep(tmp_path, '"model.beta" = [1.0]\nseed = [0]')
    again = CliRunner().invoke(app, ["sweep", path, "--out", str(tmp_path / "out")])
    assert again.exit_code == 0
    assert "0 run now" in again.output


def test_reordered_grid_keys_are_a_changed_sweep(tmp_path):
    """The keys' order numbers the points and tasks, so a reordered file on an existing folder is refused
    (resuming it would pair the ledger's task ids with other grid points)."""
    path = write_sweep(tmp_path, '"model.beta" = [1.0, 2.0]\nseed = [0, 1]')
    sweep.run(path, tmp_path / "out", workers=0)
    write_sweep(tmp_path, 'seed = [0, 1]\n"model.beta" = [1.0, 2.0]')
    with pytest.raises(sweep.SweepError, match="axes"):
        sweep.run(path, tmp_path / "out", workers=0)


# --- results -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["netcdf", "zarr", "csv"])
def test_export_round_trips(tmp_path, fmt):
    path = write_sweep(tmp_path, '"model.beta" = [1.0, 4.0]\nseed = [0, 1]', 'measures = ["pair_fraction", "cluster_count"]')
    sweep.run(path, tmp_path / "out", workers=0)
    ds = sweep.load(tmp_path / "out")
    result = CliRunner().invoke(app, ["sweep", "export", str(tmp_path / "out"), "--format", fmt])
    assert result.exit_code == 0, result.output
    target = tmp_path / "out" / {"netcdf": "results.nc", "zarr": "results.zarr", "csv": "results.csv"}[fmt]
    if fmt == "netcdf":
        back = xr.open_dataset(target, engine="scipy")
        np.testing.assert_array_equal(back["pair_fraction"].values, ds["pair_fraction"].values)
        back.close()
    elif fmt == "zarr":
        back = xr.open_zarr(target)
        np.testing.assert_array_equal(back["cluster_count"].values, ds["cluster_count"].values)
    else:
        lines = target.read_text().splitlines()
        assert lines[0].split(",")[:3] == ["model_beta", "seed", "t"]
        assert len(lines) == 1 + 2 * 2 * 5


def test_heatmap_command(tmp_path):
    path = write_sweep(tmp_path, '"model.beta" = [1.0, 2.0, 4.0]\nseed = [0, 1]')
    sweep.run(path, tmp_path / "out", workers=0)
    result = CliRunner().invoke(app, ["sweep", "plot", str(tmp_path / "out"), "--measure", "pair_fraction", "--x", "model.beta", "--y", "t"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "pair_fraction_model.beta_t.png").is_file()
    assert ":" not in "".join(p.name for p in (tmp_path / "out").glob("*.png"))
    bad = CliRunner().invoke(app, ["sweep", "plot", str(tmp_path / "out"), "--measure", "pair_fraction", "--x", "model.bta", "--y", "t"])
    assert bad.exit_code == 2
    assert "model.bta" in bad.output
    from attndyn.app.sweep_results import heatmap

    fig = heatmap(tmp_path / "out", "pair_fraction", "model.beta", "t", title="merged pairs", xlabel="β", logx=True)
    ax = fig.axes[0]
    assert ax.get_title() == "merged pairs"
    assert ax.get_xlabel() == "β"
    assert ax.get_xscale() == "log"
    assert ax.get_yscale() == "linear"
    labelled = CliRunner().invoke(
        app, ["sweep", "plot", str(tmp_path / "out"), "--measure", "pair_fraction", "--x", "model.beta", "--y", "t", "--logx", "--title", "T"]
    )
    assert labelled.exit_code == 0, labelled.output
    log_t = CliRunner().invoke(app, ["sweep", "plot", str(tmp_path / "out"), "--measure", "pair_fraction", "--x", "model.beta", "--y", "t", "--logy"])
    assert log_t.exit_code == 2  # t starts at 0: no log axis
    assert "positive numbers" in log_t.output


# --- one run as a library unit, seed streams -------------------------------------------------------------


def test_seed_streams_keep_the_weights_when_n_changes():
    def cfg(n):
        return parse_config(
            {
                "seed": 7,
                "n": n,
                "d": 3,
                "weights": {
                    "Q": {"kind": "random", "dist": "gaussian"},
                    "K": {"kind": "random", "dist": "gaussian"},
                    "V": {"kind": "random", "dist": "goe"},
                },
                "solver": {"dt": 0.1, "t1": 0.1},
            }
        )

    from attndyn.workflow.setup import build

    a, b = build(cfg(5)), build(cfg(9))
    for name in ("Q", "K", "V"):
        np.testing.assert_array_equal(getattr(a.model.weights, name).numpy(), getattr(b.model.weights, name).numpy())
    assert a.x0.shape == (5, 3)
    assert b.x0.shape == (9, 3)  # only the initial state follows n
    c = build(parse_config({**cfg(5).model_dump(mode="json"), "seed": 8}))
    assert not np.allclose(a.model.weights.Q.numpy(), c.model.weights.Q.numpy())


def test_run_record_round_trips_through_its_folder(tmp_path):
    cfg = parse_config(json.loads(json.dumps({"seed": 1, "n": 5, "d": 2, "solver": {"dt": 0.1, "t1": 0.5, "save_every": 0.1}})))
    run = runs.execute(cfg)
    runs.write(run, tmp_path / "r")
    back = runs.read(tmp_path / "r")
    np.testing.assert_array_equal(back.xs, run.xs)
    np.testing.assert_array_equal(back.ts, run.ts)
    assert back.config == run.config
    assert back.stats == run.stats
    (tmp_path / "r" / "summary.json").unlink()
    with pytest.raises(Exception, match="incomplete"):
        runs.read(tmp_path / "r")


@pytest.mark.parametrize(
    "extra",
    ["", '[weights]\nQ = { kind = "random", dist = "gaussian", scale = 0.5 }\n'],
    ids=["identity weights", "random weights"],
)
def test_building_a_task_s_seeds_together_equals_building_each(extra):
    from attndyn.workflow.setup import build, build_many

    configs = [parse_config({**tomllib.loads(BASE + extra), "seed": seed}) for seed in (0, 1, 2)]
    noisy = parse_config({**tomllib.loads(BASE.replace('method = "rk4"', 'method = "euler"') + "kappa = 2.0\n"), "seed": 5})
    together = build_many([*configs, noisy, configs[1]])
    for config, got in zip([*configs, noisy, configs[1]], together, strict=True):
        want = build(config)
        assert torch.equal(got.x0, want.x0)
        for name in ("Q", "K", "V"):
            assert torch.equal(getattr(got.model.weights, name), getattr(want.model.weights, name))
        assert (got.kind, got.noise_seed, got.solver, got.step) == (want.kind, want.noise_seed, want.solver, want.step)
    assert not torch.equal(together[0].x0, together[1].x0)


def test_a_measure_module_beside_the_sweep_file_is_importable(tmp_path, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_measures_beside.py").write_text("import numpy as np\n\ndef spread(ts, xs, model, options):\n    return float(np.ptp(xs[-1]))\n")
    path = write_sweep(folder, '"model.beta" = [1.0]\nseed = [0]', 'measures = ["my_measures_beside:spread"]')
    monkeypatch.chdir(tmp_path)  # run from elsewhere: the sweep file's folder is what counts
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    summary = sweep.run(path, tmp_path / "out", workers=0, allow_import=True)
    assert summary.done == summary.total == 1
    assert np.isfinite(sweep.load(tmp_path / "out")["my_measures_beside:spread"].values).all()


def test_a_log_written_off_a_terminal_holds_plain_lines_and_no_drawn_bar(tmp_path):
    """Issue 52 finding 9: off a terminal a sweep (and reproduce) prints its counts as plain lines; a Rich bar
    stopped off a terminal used to leave its last frame (a line of box characters) at the end of the log."""
    path = write_sweep(tmp_path, GRID, 'measures = ["pair_fraction"]')
    result = CliRunner().invoke(app, ["sweep", path, "--out", str(tmp_path / "out"), "--workers", "0"])
    assert result.exit_code == 0, result.output
    assert "sweep: 3 of 3 tasks done" in result.output
    assert not set("━╸╺") & set(result.output), result.output
    result = CliRunner().invoke(app, ["reproduce", "hardmax", "--quick", "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    assert "reproduce: hardmax (1 of 1)" in result.output
    assert not set("━╸╺") & set(result.output), result.output


def test_a_plot_draws_the_grid_it_measured(tmp_path):
    """Issue 52 item 6: beta = [0.5, 1, 4] (uneven) is drawn as one equal cell per value, ticked at the measured
    values only (a linear axis of cells suggested values at 2, 3 and 5); a geometric grid gets a log axis; the
    title names the reduction over the seeds; a dot marks each measured point."""
    from attndyn.app.sweep_results import grid_scale, heatmap

    assert grid_scale([0.5, 1.0, 4.0]) == "uneven"
    assert grid_scale([1.0, 2.0, 4.0, 8.0]) == "log"
    assert grid_scale([0.0, 0.5, 1.0]) == "linear"
    assert grid_scale(["a", "b"]) == "category"
    path = write_sweep(tmp_path, '"model.beta" = [0.5, 1.0, 4.0]\nseed = [0, 1]')
    sweep.run(path, tmp_path / "out", workers=0)
    ax = heatmap(tmp_path / "out", "pair_fraction", "model.beta", "seed").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "1", "4"]
    np.testing.assert_array_equal(ax.get_xticks(), [0.0, 1.0, 2.0])  # equal cells, not positions 0.5, 1, 4
    assert "uneven grid" in ax.get_xlabel()
    saves = sweep.load(tmp_path / "out").sizes["t"]
    assert ax.get_title() == f"mean of pair_fraction over t ({saves} values)"
    dots = [line for line in ax.get_lines() if line.get_label() == "_grid"]
    assert len(dots) == 1
    assert len(dots[0].get_xdata()) == 3 * 2
    ax = heatmap(tmp_path / "out", "pair_fraction", "model.beta", "t").axes[0]
    assert ax.get_title() == "mean of pair_fraction over seed (2 values)"
    assert ax.get_xscale() == "linear"
    (tmp_path / "geo").mkdir()
    path = write_sweep(tmp_path / "geo", '"model.beta" = [1.0, 2.0, 4.0]\nseed = [0]')
    sweep.run(path, tmp_path / "geo-out", workers=0)
    ax = heatmap(tmp_path / "geo-out", "pair_fraction", "model.beta", "t").axes[0]
    assert ax.get_xscale() == "log"
    np.testing.assert_allclose(ax.get_xticks(), [1.0, 2.0, 4.0])


@pytest.mark.slow
def test_a_local_cluster_is_announced_in_one_line(tmp_path):
    """Issue 52 item 6: 3 tasks with no --workers start a local Dask cluster; the run says so once, with the
    number of worker processes and tasks, and `--workers 0` says nothing (no cluster)."""
    path = write_sweep(tmp_path, GRID, 'measures = ["pair_fraction"]')
    lines: list[str] = []
    assert sweep.run(path, tmp_path / "dask", workers=2, notice=lines.append).done == 3
    assert lines == ["starting a local Dask cluster of 2 worker processes for 3 tasks (--workers)"]
    lines.clear()
    assert sweep.run(path, tmp_path / "here", workers=0, notice=lines.append).done == 3
    assert lines == []
