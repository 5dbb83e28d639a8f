"""The thread policy (issue 25): the count chosen for small and large states, overrides, restoring."""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import attndyn as ad
from attndyn.core import threads


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)


def _threads_seen(model, x0, **options):
    """The intra-op thread count torch had inside the integration, read at every save."""
    traj = ad.simulate(
        model,
        x0,
        [0.0, 0.1, 0.2],
        solver=ad.RK4(),
        step=ad.FixedStep(0.05),
        observe=lambda t, x: torch.tensor(float(torch.get_num_threads())),
        **options,
    )
    return set(traj.observed.tolist())


def test_small_states_run_on_one_thread(no_env):
    torch.set_num_threads(2)
    model = ad.Model(ad.Weights.from_value(np.eye(2)))
    x0 = np.random.default_rng(0).standard_normal((20, 2))
    assert _threads_seen(model, x0) == {1.0}
    assert torch.get_num_threads() == 2  # restored on exit


def test_large_states_use_the_free_cores(no_env, monkeypatch):
    assert threads.state_work((64, 128, 8)) == 64 * 128 * 128 * 8 > threads.CROSSOVER
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(threads, "others_busy", lambda: 0.0)
    assert threads.choose(threads.state_work((64, 128, 8))) == 2
    monkeypatch.setattr(threads, "others_busy", lambda: 1.0)  # a competitor keeps one core busy
    assert threads.choose(threads.state_work((64, 128, 8))) == 1
    monkeypatch.setattr(threads, "others_busy", lambda: None)  # unknown load: every core
    assert threads.choose(1e9) == 2
    assert threads.choose(threads.state_work((1, 20, 2))) == 1
    # a batch of small systems crosses over sooner than one system of the same work
    work = threads.state_work((8, 32, 3))
    assert threads.choose(work, batch=8) == 2
    assert threads.choose(work, batch=1) == 1


def test_simulate_takes_the_cores_for_a_large_state(no_env, monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(threads, "others_busy", lambda: 0.0)
    torch.set_num_threads(1)
    model = ad.Model(ad.Weights.from_value(np.eye(8)))
    x0 = np.random.default_rng(1).standard_normal((4, 128, 8)) / 3
    assert _threads_seen(model, x0) == {2.0}
    assert torch.get_num_threads() == 1


def test_overrides_win_in_order(no_env, monkeypatch):
    model = ad.Model(ad.Weights.from_value(np.eye(2)))
    x0 = np.random.default_rng(0).standard_normal((20, 2))
    monkeypatch.setenv(threads.ENV, "2")
    assert _threads_seen(model, x0) == {2.0}
    assert _threads_seen(model, x0, threads=1) == {1.0}  # the argument beats the environment


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_environment_value_is_named(no_env, monkeypatch, value):
    monkeypatch.setenv(threads.ENV, value)
    with pytest.raises(ValueError, match=threads.ENV):
        threads.choose(0.0)


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="no /proc/stat on this system")
def test_others_busy_sees_a_competing_process():
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        threads.others_busy()  # opens a fresh window
        time.sleep(0.3)
        busy = threads.others_busy()
    finally:
        competitor.kill()
        competitor.wait()
    assert busy is not None
    assert busy >= 0.5  # one core of the competitor (the test itself sleeps and is not counted)


def test_the_config_key_reaches_the_integration(no_env, tmp_path):
    from attndyn.workflow import runs
    from attndyn.workflow.schema import ConfigError, parse_config
    from attndyn.workflow.setup import build

    data = {"seed": 1, "n": 6, "d": 2, "solver": {"method": "rk4", "dt": 0.1, "t1": 0.2}, "threads": 2}
    assert build(parse_config(data)).threads == 2
    with pytest.raises(ConfigError, match="threads"):
        parse_config({**data, "threads": 0})
    ts, xs, _ = runs.integrate(build(parse_config(data)))
    assert xs.shape == (len(ts), 6, 2)


def test_cli_threads_option(no_env, monkeypatch):
    from attndyn.app.cli import app

    result = CliRunner().invoke(app, ["--threads", "0", "list"])
    assert result.exit_code == 2
    assert "--threads" in result.output
    assert "Traceback" not in result.output


def test_the_process_default_holds_the_blas_pools_too(no_env):
    """NumPy's and SciPy's BLAS pools start with every core; the CLI's and the suite's default holds them."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import scipy.linalg  # noqa: F401  (loads SciPy's own BLAS)

    previous = torch.get_num_threads()
    with threadpoolctl.threadpool_limits(limits=None):  # restores the pools on exit
        try:
            assert threads.set_process_default(2) == 2
            blas = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
            assert blas, "no BLAS pool found"
            assert {p["num_threads"] for p in blas} == {2}
            assert threads.set_process_default() == 1  # no override: one thread
            assert {p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"} == {1}
            assert torch.get_num_threads() == 1
        finally:
            torch.set_num_threads(previous)


def test_the_cli_starts_with_one_blas_thread(no_env, tmp_path):
    code = (
        "import threadpoolctl, numpy, sys\n"
        "from attndyn.app.cli import app\n"
        "try:\n    app(['list'])\nexcept SystemExit:\n    pass\n"
        "print(sorted({p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas'}), file=sys.stderr)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", threads.ENV)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "[1]", done.stderr


def test_calls_in_quick_succession_reuse_the_last_reading(monkeypatch):
    """A reading under 50 ms old is reused: a loop of short runs must not sleep 50 ms a call (it did)."""
    first = threads.others_busy()  # may sleep once, for a fresh window
    if first is None:
        pytest.skip("no /proc/stat here")
    slept = []
    monkeypatch.setattr(threads.time, "sleep", slept.append)
    monkeypatch.setattr(threads.time, "monotonic", lambda: threads._last[0] + 0.01)  # 10 ms after that reading
    again = [threads.others_busy() for _ in range(20)]
    assert not slept
    assert set(again) == {first}
