"""Nothing lost (issue 20): ownership of folders, derived files, one driver per sweep, interrupted
work kept, and a property test over mutated configs."""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attndyn.app.cli import entry
from attndyn.workflow import ownership
from tests.app.test_bad_input import CONFIG, SWEEP, tree_hash
from tests.helpers import copy_of


def attndyn(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "attndyn", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


@pytest.fixture(scope="module")
def two_claims(tmp_path_factory) -> Path:
    """``attndyn reproduce model-equivalence hardmax --quick`` run once for the module (about 6 s); each test works on
    a copy (:func:`tests.helpers.copy_of`)."""
    out = tmp_path_factory.mktemp("two-claims") / "report"
    assert entry(["reproduce", "model-equivalence", "hardmax", "--quick", "--out", str(out)]) == 0
    return out


def test_reproduce_of_a_subset_keeps_the_other_claims(tmp_path, two_claims):
    out = copy_of(two_claims, tmp_path)
    kept = tree_hash(out / "runs" / "hardmax")
    (out / "runs" / "notes.txt").write_text("mine")  # a foreign file inside the report
    assert entry(["reproduce", "model-equivalence", "--quick", "--out", str(out)]) == 0
    assert tree_hash(out / "runs" / "hardmax") == kept
    assert (out / "runs" / "notes.txt").read_text() == "mine"
    ids = [c["id"] for c in json.loads((out / "results.json").read_text())["claims"]]
    assert ids == ["model-equivalence", "hardmax"]  # the page is rebuilt from every run present


def test_a_new_run_removes_the_derived_files_of_the_old_one(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    assert entry(["simulate", str(cfg), "--out", str(out)]) == 0
    assert entry(["analyze", str(out)]) == 0
    assert (out / "analysis.json").exists()
    (out / "mine.txt").write_text("keep me")
    cfg.write_text(CONFIG.replace("n = 6", "n = 5"))
    assert entry(["simulate", str(cfg), "--out", str(out)]) == 0
    assert not (out / "analysis.json").exists()  # it described the previous run: moved aside with it
    assert json.loads((out / ".previous" / "summary.json").read_text())["n"] == 6
    assert (out / ".previous" / "analysis.json").exists()
    assert (out / "mine.txt").read_text() == "keep me"
    assert json.loads((out / "summary.json").read_text())["n"] == 5
    marker = ownership.read_marker(out)
    assert marker["kind"] == "run"
    assert "mine.txt" not in marker["files"]


def test_a_folder_that_only_looks_like_attndyns_is_refused_and_adopted_only_on_request(tmp_path):
    legacy = tmp_path / "old-run"
    legacy.mkdir()
    for name in ("config.json", "trajectory.npz", "summary.json", "trajectory.png"):
        (legacy / name).write_text("old")
    before = tree_hash(legacy)
    with pytest.raises(ownership.OwnershipError, match="--force-adopt"):
        ownership.claim(legacy, "run", "test")
    assert tree_hash(legacy) == before
    owner = ownership.claim(legacy, "run", "test", force_adopt=True)
    assert owner.files == {}
    (adopted,) = legacy.glob("adopted-*")
    assert tree_hash(adopted) == before  # moved, nothing deleted
    assert sorted(p.name for p in legacy.iterdir()) == sorted([ownership.MARKER, ownership.LOCK, adopted.name])  # the lock: this run's


def test_a_marker_naming_paths_outside_its_folder_is_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "run"
    ownership.claim(folder, "run", "test")
    marker = json.loads((folder / ownership.MARKER).read_text())
    marker["files"] = {"../victim.txt": ownership.digest(victim), "/etc/hostname": "0" * 64}
    (folder / ownership.MARKER).write_text(json.dumps(marker))
    with pytest.raises(ownership.OwnershipError, match="does not verify"):
        ownership.claim(folder, "run", "test")
    assert victim.read_text() == "precious"


def test_a_failed_report_rebuild_leaves_no_page(tmp_path, two_claims):
    out = copy_of(two_claims, tmp_path)
    (out / "runs" / "model-equivalence" / "summary.json").unlink()  # a run that no longer matches
    assert entry(["report", str(out)]) == 2
    assert not (out / "index.html").exists()
    assert not (out / "results.json").exists()


def test_a_failing_claim_still_gets_the_page_for_the_others(tmp_path, monkeypatch):
    from attndyn.claims import load

    module = load("hardmax")

    def broken(config):
        raise RuntimeError("deliberate failure")

    monkeypatch.setattr(module, "run", broken)
    out = tmp_path / "report"
    assert entry(["reproduce", "model-equivalence", "hardmax", "--quick", "--out", str(out)]) == 1
    data = json.loads((out / "results.json").read_text())
    assert [c["id"] for c in data["claims"]] == ["model-equivalence"]
    assert "deliberate failure" in data["unfinished"]["hardmax"]
    assert "Not finished" in (out / "index.html").read_text()


@pytest.mark.slow
def test_ctrl_c_during_simulate_keeps_a_partial_run(tmp_path):
    cfg = tmp_path / "c.toml"
    text = CONFIG.replace("n = 6", "n = 64").replace('kind = "uniform"', 'kind = "sphere"').replace("t1 = 0.5", "t1 = 200000.0")
    cfg.write_text(text.replace("dt = 0.05", "dt = 0.01") + 'save_every = 100.0\nmax_steps = 100000000\n[model]\ngeometry = "sphere"\n')
    out = tmp_path / "run"
    # Ctrl-C's default action in the child even where the suite was started with SIGINT ignored (a background job
    # of a non-interactive shell, nohup): Python raises KeyboardInterrupt only where SIGINT was not ignored at start
    proc = attndyn("simulate", str(cfg), "--out", str(out), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # the child's own first progress line (0 %, printed once it has stepped for a second): no fixed sleep, which a
        # loaded machine outlasts while the child is still importing torch
        before, deadline = [], time.monotonic() + 300
        while not any(line.startswith("simulate: ") for line in before[-1:]):
            ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
            line = proc.stderr.readline() if ready else ""
            if not line:
                raise AssertionError(f"no progress line from the child in 300 s, or it ended: {''.join(before)}")
            before.append(line)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:  # a run to t = 200000 must not outlive a failed test, nor leave its pipes open (no-ops once it has ended)
        proc.kill()
        proc.communicate()
    assert proc.returncode == 130, err
    assert "partial" in err
    assert (out / "partial.json").exists()
    assert not (out / "summary.json").exists()
    reached = json.loads((out / "partial.json").read_text())["t_reached"]
    assert 0 < reached < 200000
    analysed = attndyn("analyze", str(out))
    _, err = analysed.communicate(timeout=60)
    assert analysed.returncode == 2
    assert "partial" in err


@pytest.mark.slow
def test_sigterm_during_reproduce_writes_the_page_of_the_finished_claims(tmp_path):
    out = tmp_path / "report"
    proc = attndyn("reproduce", "model-equivalence", "sphere", "--quick", "--out", str(out))
    deadline = time.time() + 120
    while time.time() < deadline and not (out / "runs" / "model-equivalence" / "summary.json").exists():
        time.sleep(0.05)
    time.sleep(0.5)  # sphere is running now
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    data = json.loads((out / "results.json").read_text())
    assert [c["id"] for c in data["claims"]] == ["model-equivalence"]
    assert "sphere" in data["unfinished"]


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.5, 2.5, 4.5])
def test_killing_reproduce_on_an_existing_report_loses_nothing(tmp_path, two_claims, delay):
    out = copy_of(two_claims, tmp_path)
    kept = tree_hash(out / "runs" / "model-equivalence")
    proc = attndyn("reproduce", "hardmax", "--quick", "--out", str(out))
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert tree_hash(out / "runs" / "model-equivalence") == kept
    if (out / "index.html").exists():  # the run finished before the kill: its page is complete
        assert entry(["report", str(out)]) == 0
    hardmax = out / "runs" / "hardmax"
    assert (hardmax / "summary.json").exists() == (hardmax / "result.json").exists() or not (hardmax / "summary.json").exists()


@pytest.mark.slow
def test_killing_sweep_export_leaves_the_old_export_or_the_new_one(tmp_path):
    (tmp_path / "base.toml").write_text(CONFIG)
    (tmp_path / "sweep.toml").write_text(SWEEP)
    out = tmp_path / "swept"
    assert entry(["sweep", str(tmp_path / "sweep.toml"), "--out", str(out), "--workers", "0"]) == 0
    assert entry(["sweep", "export", str(out), "--format", "csv"]) == 0
    old = (out / "results.csv").read_text()
    for delay in (0.2, 1.0, 2.0):
        proc = attndyn("sweep", "export", str(out), "--format", "csv")
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert (out / "results.csv").read_text() == old  # atomically replaced, or untouched
        assert (out / "ledger.sqlite").exists()


def test_a_second_sweep_driver_is_refused_and_a_dead_ones_lock_is_taken_over(tmp_path):
    (tmp_path / "base.toml").write_text(CONFIG)
    (tmp_path / "sweep.toml").write_text(SWEEP)
    out = tmp_path / "swept"
    out.mkdir()
    ownership.claim(out, "sweep", "test")
    ownership.unlock(out)  # the folder's own lock free: this test is about the driver's
    # a live driver holds the lock (a child process, so that the lock is another process's)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import fcntl, sys, time; f = open({str(out / 'driver.lock')!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
         "f.seek(0); f.truncate(); f.write('4242'); f.flush(); print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        refused = attndyn("sweep", str(tmp_path / "sweep.toml"), "--out", str(out), "--workers", "0")
        _, err = refused.communicate(timeout=120)
        assert refused.returncode == 2, err
        assert "pid 4242" in err
        assert len([line for line in err.splitlines() if line.strip()]) == 1
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
    # the holder died without unlocking (SIGKILL): the next driver takes the lock and runs
    assert entry(["sweep", str(tmp_path / "sweep.toml"), "--out", str(out), "--workers", "0"]) == 0


# --- every config value mutated: it runs, or it exits 2 with one line ------------------------------

KEYS = ["seed", "n", "d", "dtype", "threads", "solver.dt", "solver.t1", "solver.method", "solver.save_every", "solver.max_steps",
        "model.beta", "model.mask", "model.geometry", "model.rescaled", "model.normalization", "model.attention", "init.kind",
        "init.std", "weights.heads", "weights.V.kind", "weights.Q.scale"]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2, 10**12, -(10**9), 0.5, -0.5, 1e300, -1e-300, math.nan, math.inf, -math.inf, True, False]),
    st.sampled_from(["", "x", "sphere", "causal", "float16", "rk4", "dopri5", "euler", "long", "identity", "random", "1"]),
    st.lists(st.integers(-3, 3), max_size=3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**6), 10**6),
)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return str(v)


def mutated_config(changes: dict) -> str:
    tables: dict[str, dict] = {"": {"seed": 3, "n": 5, "d": 2}, "solver": {"method": "rk4", "dt": 0.05, "t1": 0.2}}
    for key, value in changes.items():
        *path, leaf = key.split(".")
        tables.setdefault(".".join(path), {})[leaf] = value
    lines = [f"{k} = {toml_value(v)}" for k, v in tables.pop("").items()]
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=3))
def test_mutated_configs_run_or_exit_2_with_one_line(tmp_path_factory, capsys, changes):
    root = tmp_path_factory.mktemp("prop")
    cfg = root / "c.toml"
    cfg.write_text(mutated_config(changes))
    code = entry(["simulate", str(cfg), "--out", str(root / "run")])
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code in (0, 2), f"{changes}: exit {code}: {err}"
    assert "Traceback" not in err
    if code == 2:
        assert len(lines) == 1, f"{changes}: {err!r}"
        assert lines[0].startswith("error: ")
    else:
        assert (root / "run" / "summary.json").exists()


def test_messages_print_literally(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.replace("d = 2", 'd = "[bold][nan, nan]"'))
    assert entry(["simulate", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "[bold][nan, nan]" in err  # rich markup would have eaten "[bold]"


def test_unexpected_errors_exit_1_with_a_hint(monkeypatch, capsys, tmp_path):
    from attndyn.workflow import runs

    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(runs, "execute", bug)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert entry(["simulate", str(cfg), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "--debug" in err
    assert "Traceback" not in err
    with pytest.raises(ZeroDivisionError):
        entry(["simulate", str(cfg), "--out", str(tmp_path / "o"), "--debug"])
    assert not os.path.exists(tmp_path / "o" / "summary.json")


def test_read_only_target_exits_2_naming_it(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    if os.geteuid() == 0:  # root writes into read-only folders; sysfs refuses even root
        if not Path("/sys/kernel").is_dir():
            pytest.skip("no sysfs to stand for a read-only target")
        target = Path("/sys/attndyn-test-run")
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        target = folder / "run"
    try:
        assert entry(["simulate", str(cfg), "--out", str(target)]) == 2
    finally:
        if os.geteuid() != 0:
            (tmp_path / "ro").chmod(0o700)
    err = capsys.readouterr().err
    assert str(target) in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def test_disk_errors_exit_2_naming_the_path(monkeypatch, tmp_path, capsys):
    import errno

    from attndyn.workflow import files

    real = files.atomic_write_bytes

    def full(path, data):
        if Path(path).name == "trajectory.npz":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(files, "atomic_write_bytes", full)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert entry(["simulate", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err
    assert "trajectory.npz" in err
    assert not (tmp_path / "run" / "summary.json").exists()
