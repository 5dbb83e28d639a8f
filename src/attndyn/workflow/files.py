"""Files: atomic writes, run folders, trajectories on disk.

Contract
--------
* Every write goes to a temporary file in the destination folder, is flushed and fsync'ed, then
  renamed over the target (``os.replace``): a crash never leaves a half-written file under the
  final name. It goes through :func:`attndyn.workflow.ownership.write_bytes`, which replaces only
  a file attndyn wrote, unchanged, and records the hash of what it wrote.
* A run folder holds ``config.json`` (the resolved config), ``trajectory.npz`` (``ts``, ``xs``,
  ``Q``, ``K``, ``V``, optional ``W``/``bias``) and ``summary.json``, written last, so that its presence marks a
  complete run. ``load_run`` refuses folders without it or with unreadable files (RunFolderError,
  one line). Arrays are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from attndyn.analysis.numerics import finite_json
from attndyn.core.errors import UserError

RUN_FILES = ("config.json", "trajectory.npz", "summary.json")
# Written instead of summary.json by an interrupted run: the saves so far, never taken for a complete run.
PARTIAL = "partial.json"


class RunFolderError(UserError):
    """A run folder that is missing, incomplete or unreadable; the message is one line."""


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write then rename, through :func:`attndyn.workflow.ownership.write_bytes` (the gate that refuses
    to replace a file attndyn did not write, or one changed since)."""
    from attndyn.workflow import ownership

    return ownership.write_bytes(path, data)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def write_json(path: str | Path, obj: object) -> Path:
    return atomic_write_text(path, json.dumps(finite_json(obj), indent=2, sort_keys=False, default=_jsonable, allow_nan=False) + "\n")


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def write_npz(path: str | Path, **arrays) -> Path:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return atomic_write_bytes(path, buf.getvalue())


def read_json(path: Path) -> dict:
    """A run folder's JSON table, read within bounds (:func:`attndyn.core.reading.read_json`)."""
    from attndyn.core.reading import FileRefused
    from attndyn.core.reading import read_json as bounded

    try:
        return bounded(path, "run folder file")
    except FileRefused as err:
        raise RunFolderError(str(err)) from None


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """A run folder's arrays; declared sizes are checked before any array is read."""
    from attndyn.core.reading import FileRefused, load_npz

    try:
        return load_npz(path, "run folder file")
    except FileRefused as err:
        raise RunFolderError(str(err)) from None


def load_run(folder: str | Path) -> dict:
    """Read a run folder written by ``attndyn simulate``: config, arrays and summary."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RunFolderError(f"run folder {str(folder)!r} does not exist")
    if (folder / PARTIAL).is_file():
        why = read_json(folder / PARTIAL)
        raise RunFolderError(
            f"run folder {str(folder)!r} is partial ({why.get('reason', 'interrupted')} at t = {why.get('t_reached', float('nan')):.6g}); "
            "its trajectory.npz holds the saves up to then: rerun `attndyn simulate` to complete it"
        )
    missing = [name for name in RUN_FILES if not (folder / name).exists()]  # a FIFO is refused by name when read
    if missing:
        raise RunFolderError(f"run folder {str(folder)!r} is incomplete: missing {', '.join(missing)}")
    run = {
        "config": read_json(folder / "config.json"),
        "arrays": read_npz(folder / "trajectory.npz"),
        "summary": read_json(folder / "summary.json"),
    }
    for key in ("ts", "xs", "Q", "K", "V"):
        if key not in run["arrays"]:
            raise RunFolderError(f"{folder / 'trajectory.npz'} lacks the array {key!r}")
    ts, xs = run["arrays"]["ts"], run["arrays"]["xs"]
    if xs.ndim < 3 or xs.shape[0] != ts.shape[0]:
        raise RunFolderError(f"{folder / 'trajectory.npz'}: xs has shape {xs.shape} but ts has {ts.shape}")
    return run
