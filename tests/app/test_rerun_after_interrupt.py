"""Runs that can be rerun after a kill or a full disk, and one run at a time per folder (issue 51
finding 4). A run is stopped at every save of its marker in turn (the disk full, or SIGTERM, at that
moment: a file may have landed that the marker does not record yet); the same command run again
must adopt what its own interrupted run left and finish, keeping the researcher's file beside it.
Before this change the rerun exited 2 with "... was not written by attndyn". Two runs on one
folder: the second exits 2 naming the first's pid; once that one is dead its lock is taken over."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attndyn.app.cli import entry
from attndyn.workflow import ownership
from tests.app.test_bad_input import CONFIG, MEANFIELD

SAVES = {"simulate": 10, "meanfield": 11}  # the marker saves of one run into a new folder (counted below)
# every save of simulate's, four of meanfield's (its figures and GIF, its summary); the two ways to stop
# alternate so that each meets both a new folder (even k) and a rerun over a finished run (odd k)
STEPS = {"simulate": range(2, 11), "meanfield": (3, 6, 8, 11)}
STOPS = [(cmd, k, ("full-disk", "sigterm")[(k // 2) % 2]) for cmd, ks in STEPS.items() for k in ks]


def command(root: Path, cmd: str) -> list[str]:
    config = root / f"{cmd}.toml"
    config.write_text(CONFIG if cmd == "simulate" else MEANFIELD)
    return [cmd, str(config), "--out", str(root / "o")]


def stop_at(monkeypatch, k: int, how: str) -> list[int]:
    """Make the ``k``-th marker save fail as a full disk does (OSError) or as SIGTERM does (KeyboardInterrupt)."""
    real, calls = ownership._write_marker, [0]

    def save(folder, text):
        calls[0] += 1
        if calls[0] == k:
            if how == "full-disk":
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / ownership.MARKER))
            raise KeyboardInterrupt
        real(folder, text)

    monkeypatch.setattr(ownership, "_write_marker", save)
    return calls


@pytest.mark.parametrize(("cmd", "k", "how"), STOPS, ids=[f"{c}-save-{k}-{h}" for c, k, h in STOPS])
def test_the_same_command_finishes_what_its_interrupted_run_left(cmd, k, how, tmp_path, monkeypatch, capsys):
    argv = command(tmp_path, cmd)
    notes = tmp_path / "o" / "notes.txt"
    if k % 2:  # half the cases stop a rerun over a finished run that holds the researcher's file too
        assert entry(argv) == 0
        notes.write_text("the researcher's notes\n")
    stop_at(monkeypatch, k, how)
    assert entry(argv) == (2 if how == "full-disk" else 130)
    monkeypatch.undo()
    ownership._WRITTEN.clear()  # the rerun is another process: only the marker speaks
    capsys.readouterr()
    assert entry(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "o" / "summary.json").is_file()
    assert not k % 2 or notes.read_text() == "the researcher's notes\n"
    marker = ownership.read_marker(tmp_path / "o")
    assert marker["writing"] == {}
    assert "summary.json" in marker["files"]


def test_the_table_stops_a_run_at_every_save(tmp_path, monkeypatch):
    for cmd, n in SAVES.items():
        calls = stop_at(monkeypatch, 10**6, "full-disk")
        assert entry(command(tmp_path / cmd, cmd) if (tmp_path / cmd).mkdir() is None else []) == 0
        assert calls[0] == n, cmd
        monkeypatch.undo()


def test_a_file_announced_but_never_written_is_not_overwritten_when_someone_else_puts_it_there(tmp_path):
    """The announcement proves attndyn meant to write a file, not that what lies there is its own: a
    folder (not a file) or a link under the announced name is still refused."""
    owner = ownership.claim(tmp_path / "o", "run", "test")
    owner.writing["trajectory.png"] = ownership.WRITING
    owner._save()
    ownership.unlock()
    (tmp_path / "o" / "trajectory.png").mkdir()
    (tmp_path / "o" / "trajectory.png" / "mine.txt").write_text("mine")
    with pytest.raises(ownership.OwnershipError):
        ownership.write_bytes(tmp_path / "o" / "trajectory.png", b"png")
    assert (tmp_path / "o" / "trajectory.png" / "mine.txt").read_text() == "mine"


HOLD = """
import sys, time
from attndyn.workflow import ownership
ownership.claim(sys.argv[1], "run", "a racing run")
print("held", flush=True)
time.sleep(120)
"""


def holder(folder: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(ownership.__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_two_runs_on_one_new_folder_one_wins_the_other_names_it(tmp_path, capsys):
    out = tmp_path / "o"
    proc = holder(out)
    try:
        argv = command(tmp_path, "simulate")
        assert entry(argv) == 2
        err = capsys.readouterr().err
        assert f"another attndyn run (pid {proc.pid}) holds" in err
        assert not (out / "config.json").exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert (out / ownership.LOCK).read_text().strip() == str(proc.pid)  # the dead run's lock is left behind
    assert entry(argv) == 0  # and taken over
    assert (out / "summary.json").is_file()


def test_a_second_run_that_finds_the_first_half_way_names_it(tmp_path, capsys):
    """The loser of a race sees the winner's files before they are recorded: it names the run, not the files."""
    out = tmp_path / "o"
    proc = holder(out)
    try:
        (out / "config.json").write_text("{}")  # what the winner is writing, not in its marker yet
        assert entry(command(tmp_path, "simulate")) == 2
        assert f"another attndyn run (pid {proc.pid}) holds" in capsys.readouterr().err
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()


def test_a_lock_file_that_is_not_attndyn_s_is_refused(tmp_path, capsys):
    out = tmp_path / "o"
    ownership.claim(out, "run", "test")
    ownership.unlock()
    (out / ownership.LOCK).write_text("my notes\n")
    before = hashlib.sha256((out / ownership.LOCK).read_bytes()).hexdigest()
    assert entry(command(tmp_path, "simulate")) == 2
    assert "not written by attndyn" in capsys.readouterr().err
    assert hashlib.sha256((out / ownership.LOCK).read_bytes()).hexdigest() == before


def test_one_process_claims_its_own_folder_again(tmp_path):
    ownership.claim(tmp_path / "o", "run", "test")
    ownership.claim(tmp_path / "o", "run", "test")  # the same run (a command that claims twice): no self-deadlock
    ownership.unlock()
    time.sleep(0)


CHECKPOINT_STOPS = [(how, over) for how in ("sigterm", "full-disk") for over in ("new-folder", "finished-page")]


@pytest.mark.parametrize(("how", "over"), CHECKPOINT_STOPS, ids=[f"{h}-{o}" for h, o in CHECKPOINT_STOPS])
def test_a_checkpoint_stopped_after_its_first_figure_is_finished_by_the_same_command(how, over, tmp_path, monkeypatch, capsys):
    """Issue 51 finding 4's checkpoint: stopped by SIGTERM (or a full disk) once its first figure has landed,
    the same ``attndyn checkpoint`` adopts what it left and writes the page (it said the figure "was not
    written by attndyn"); a researcher's file beside a finished page is kept."""
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from attndyn.workflow import plots
    from tests.models.test_hostile_files import Ctx

    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    folder = Ctx("bert", tmp_path).build()
    out = tmp_path / "o"
    argv = ["checkpoint", str(folder), "--text", "the cat sat on a mat", "--out", str(out)]
    notes = out / "notes.txt"
    if over == "finished-page":
        assert entry(argv) == 0
        notes.write_text("the researcher's notes\n")
    real, saved = plots.save, []

    def save_then_stop(fig, path, **kw):
        saved.append(real(fig, path, **kw))
        if how == "full-disk":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "save", save_then_stop)
    assert entry(argv) == (2 if how == "full-disk" else 130)
    assert len(saved) == 1  # the first figure landed, then the run stopped
    assert saved[0].is_file()
    monkeypatch.setattr(plots, "save", real)
    ownership._WRITTEN.clear()  # the rerun is another process: only the marker speaks
    capsys.readouterr()
    assert entry(argv) == 0, capsys.readouterr().err
    assert (out / "index.html").is_file()
    assert over == "new-folder" or notes.read_text() == "the researcher's notes\n"
    marker = ownership.read_marker(out)
    assert marker["writing"] == {}
    assert saved[0].relative_to(out).as_posix() in marker["files"]
