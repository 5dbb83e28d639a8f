"""Ctrl-C at any moment of a command gives one line and exit status 130; the light commands do not
import torch. Each runs ``python -m attndyn`` in a child process, like a user's shell."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.app.test_bad_input import CONFIG

# a command that imports torch and then runs far longer than the test waits
LONG = 'save_every = 100.0\nmax_steps = 100000000\n[model]\ngeometry = "sphere"\n'


def _long_config(tmp_path):
    cfg = tmp_path / "c.toml"
    text = CONFIG.replace("n = 6", "n = 64").replace('kind = "uniform"', 'kind = "sphere"').replace("t1 = 0.5", "t1 = 200000.0")
    cfg.write_text(text.replace("dt = 0.05", "dt = 0.01") + LONG)
    return cfg


def _wait_for_handlers(proc: subprocess.Popen, limit: float = 120.0) -> None:
    """Wait until the child catches SIGTERM, which the interpreter alone never does: attndyn's ``main`` has
    set its handlers. Before that the interpreter itself is starting (site, the environment's path hooks),
    where no program's code runs yet; a fixed delay from the start fell there on a busy machine."""
    status = Path(f"/proc/{proc.pid}/status")
    if not status.exists():
        proc.kill()
        pytest.skip("needs /proc to see when the child's handlers are set")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        caught = next((line.split()[1] for line in status.read_text().splitlines() if line.startswith("SigCgt:")), "0")
        if int(caught, 16) >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.005)
    raise AssertionError("the child never set its SIGTERM handler")


def _interrupt_after(args: list[str], delay: float) -> tuple[int, str]:
    # SIGINT's default action in the child even where the suite runs with SIGINT ignored (nohup, a background job)
    proc = subprocess.Popen(
        [sys.executable, "-m", "attndyn", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _wait_for_handlers(proc)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:  # the run must not outlive a failed test
        proc.kill()
        proc.communicate()
    return proc.returncode, err


# moments after attndyn's handlers are set: the first falls in the command line's imports, the next in
# torch's import (2 s of CPU alone), the last in the integration; each must end the same way
@pytest.mark.parametrize("delay", [0.0, 0.3, 1.2, 4.0])
def test_ctrl_c_at_any_moment_prints_one_line_and_exits_130(tmp_path, delay):
    code, err = _interrupt_after(["simulate", str(_long_config(tmp_path)), "--out", str(tmp_path / "run")], delay)
    assert "Traceback" not in err, err
    assert code == 130, err
    lines = [line for line in err.splitlines() if line.strip()]
    # the interruption's line, and (once the integration has started) the line naming the partial run kept
    assert lines, err
    assert lines[-1].startswith("interrupted:"), err
    # a progress line (off a terminal: "simulate: 0 % (t = ...)") may stand before them
    progress = re.compile(r"^\w+: \d+ % ")
    assert all(line.startswith("interrupted:") or "partial" in line or progress.match(line) for line in lines), err


def _imports_torch(*args: str) -> tuple[int, bool]:
    probe = (
        "import sys\n"
        "from attndyn.__main__ import main\n"
        f"sys.argv = ['attndyn', *{list(args)!r}]\n"
        "code = main()\n"
        "print('torch' in sys.modules)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout.strip().endswith("True")


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["sweep", "--help"]])
def test_light_commands_do_not_import_torch(args):
    code, torch_loaded = _imports_torch(*args)
    assert code == 0
    assert not torch_loaded


SWEEP_BASE = """seed = 0
n = 6
d = 2
[init]
kind = "sphere"
[model]
geometry = "sphere"
[solver]
method = "rk4"
dt = 0.125
t1 = 0.5
save_every = 0.25
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished claim run (hardmax, --quick: about a second) and a finished two-task sweep, made once."""
    from attndyn.app.cli import entry

    root = tmp_path_factory.mktemp("light")
    (root / "base.toml").write_text(SWEEP_BASE)
    (root / "sweep.toml").write_text('base = "base.toml"\nmeasures = ["pair_fraction"]\n[grid]\n"model.beta" = [1.0, 2.0]\n')
    assert entry(["reproduce", "hardmax", "--quick", "--out", str(root / "report")]) == 0
    assert entry(["sweep", str(root / "sweep.toml"), "--out", str(root / "sweep"), "--workers", "0"]) == 0
    return root


# issue 52 item 7: the commands that only read what a run wrote, run for real on finished folders
@pytest.mark.parametrize(
    "args",
    [["sweep", "status", "{root}/sweep"], ["judge", "{root}/report/runs/hardmax"], ["report", "{root}/report"]],
    ids=["sweep-status", "judge", "report"],
)
def test_reading_commands_do_not_import_torch(finished, args):
    code, torch_loaded = _imports_torch(*(a.format(root=finished) for a in args))
    assert code == 0
    assert not torch_loaded


def test_the_probe_sees_torch_when_a_command_loads_it(tmp_path):
    # the probe's own check: a command that integrates does import torch
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    code, torch_loaded = _imports_torch("simulate", str(cfg), "--out", str(tmp_path / "run"))
    assert code == 0
    assert torch_loaded


def test_every_public_name_resolves_and_dir_lists_it():
    import attndyn

    listed = dir(attndyn)
    for name in attndyn.__all__:
        assert name in listed  # dir() names analyze and the engine's names before they are loaded
        assert getattr(attndyn, name) is not None
    assert attndyn.analyze.__module__ == "attndyn.analysis.prediction"
    with pytest.raises(AttributeError, match="no_such_name"):
        attndyn.no_such_name  # noqa: B018


def test_a_ctrl_c_during_torch_s_import_is_held_until_the_import_has_finished(tmp_path):
    # a stand-in torch whose import is interrupted half-way: the signal must not land inside it (in the real
    # torch it can land in C++ that pybind11 calls back through, and the process aborts with -6)
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.2)\nFINISHED = True\n")
    probe = (
        "import sys\n"
        "from attndyn.app.cli import _import_torch_deferring_signals\n"
        "try:\n"
        "    _import_torch_deferring_signals()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after', getattr(sys.modules.get('torch'), 'FINISHED', False))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.strip() == "interrupted after True", done.stdout + done.stderr
