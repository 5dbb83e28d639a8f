"""Files in attndyn's own caches (``$ATTNDYN_CACHE``): written beside their target under a name that
carries the writer's pid, fsync'ed, then renamed; what a killed writer left is removed by the next one.

A model cache file is large (a joined GGUF file of 0.5-1.1 GB, a converted float32 copy of a model):
a writer stopped by SIGKILL or a power cut cannot remove its temporary file, and nothing ever read it
again, so each interrupted run used to leave its full-size ``.NAME.PID.tmp`` behind for good. Now
:func:`temporary` removes, before it hands out this process's name, every ``.NAME.PID.tmp`` beside the
target whose process is gone (a regular file, the user's own, never a link); a temporary file of a
live process (another attndyn filling the same cache at the same moment) is left alone. A process
whose pid was reused keeps its dead predecessor's file until that process ends too: harmless, the
next writer removes it.

These files are never under a folder a user names (those go through
:mod:`attndyn.workflow.ownership`); ``tests/app/test_write_gate.py`` lists this module's functions.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path


def temporary(target: str | Path) -> Path:
    """This process's temporary name beside ``target`` (``.NAME.PID.tmp``), after the stale ones of
    dead processes are removed (:func:`remove_stale`)."""
    target = Path(target)
    remove_stale(target)
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")


def remove_stale(target: str | Path) -> list[Path]:
    """Remove the temporary files ``.NAME.PID.tmp`` beside ``target`` left by processes that no longer
    run; only regular files owned by this user (links, folders and other users' files stay). Returns
    what was removed."""
    target = Path(target)
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(\d+)\.tmp")
    removed = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed  # no folder yet: nothing was left
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        pid = int(match[1])
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or pid == os.getpid() or alive(pid):
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            continue  # another writer removed it first
        removed.append(Path(entry.path))
    return removed


def alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (one of another user counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def finish(tmp: str | Path, target: str | Path) -> Path:
    """``tmp`` (complete) flushed to disk, renamed over ``target``, and the rename itself flushed: after a
    crash the cache holds the whole file under its name or no file of that name."""
    tmp, target = Path(tmp), Path(target)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    try:
        dfd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return target
    try:
        os.fsync(dfd)
    except OSError:
        pass  # a filesystem that cannot sync a folder; the file itself is on disk
    finally:
        os.close(dfd)
    return target
