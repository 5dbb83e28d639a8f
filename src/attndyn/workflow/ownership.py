"""Folder ownership: attndyn writes only into folders it owns, and deletes only files it wrote.

Contract
--------
Every folder attndyn writes carries a marker, ``.attndyn.json``: its kind (``run``, ``report``,
``claim-run``, ``checkpoint``, ``meanfield``, ``sweep``), the version and command that wrote it, and
the list of files attndyn wrote there. ``claim(folder, kind, writer)`` lets a command write into
``folder`` only when it does not exist, is empty, or carries a marker of the same kind (or is a
folder of that kind written before markers existed: every entry one of the kind's own names);
otherwise it raises :class:`OwnershipError` naming the folder and what is in it. The filesystem
root, the home folder and an empty path are always refused.

``clear(owner)`` moves the files a previous writer recorded (its results and the files derived
from them, such as ``analysis.json`` and figures) aside into ``.previous/``, which keeps the run
replaced last; nothing else is touched: a file attndyn did not write is never deleted, moved or
overwritten. ``owner.add(*paths)`` records new files, the marker being
rewritten atomically after each batch.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from attndyn.core.errors import UserError
from attndyn.workflow.files import atomic_write_text

MARKER = ".attndyn.json"
# What each kind of folder held before markers existed (0.1), as names or glob patterns: such a
# folder, and only such, is adopted.
LEGACY = {
    "run": {"config.json", "trajectory.npz", "summary.json", "trajectory.png", "trajectory.svg", "analysis.json", "partial.json"},
    "report": {"runs", "index.html", "results.json", "preview.png"},
    "claim-run": {"config.json", "result.json", "summary.json", "arrays.npz", "figures", "*.gif"},
    "checkpoint": {"checkpoint.json", "index.html", "figures", "per_head.csv"},
    "meanfield": {
        *("config.json", "density.npz", "summary.json", "density.gif"),
        *("density.png", "density.svg", "order_parameter.png", "order_parameter.svg"),
    },
    "sweep": {"ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "results.nc", "results.csv", "results.zarr"},
}


COMPLETE = ("summary.json", "index.html", "results.json", "checkpoint.json")


class OwnershipError(UserError):
    """A folder attndyn may not write into; the message is one line naming it and what it holds."""


@dataclass
class Owner:
    """A folder claimed by one command: its kind, who wrote it, the files attndyn wrote there."""

    folder: Path
    kind: str
    writer: str
    files: list[str] = field(default_factory=list)

    def add(self, *paths: str | Path) -> None:
        for p in paths:
            rel = Path(p).resolve().relative_to(self.folder.resolve()).as_posix() if Path(p).is_absolute() else Path(p).as_posix()
            if rel not in self.files:
                self.files.append(rel)
        self._save()

    def refuse_foreign(self, *names: str) -> None:
        """OwnershipError when one of ``names`` exists in the folder and attndyn did not write it
        (call before writing: attndyn never overwrites a file it does not own)."""
        for name in names:
            if (self.folder / name).exists() and Path(name).as_posix() not in self.files:
                raise OwnershipError(f"{self.folder / name} exists and was not written by attndyn; move it away or name another folder")

    def _save(self) -> None:
        from attndyn import __version__

        record = {"kind": self.kind, "version": __version__, "writer": self.writer, "files": sorted(self.files)}
        atomic_write_text(self.folder / MARKER, json.dumps(record, indent=1) + "\n")


def unsafe_reason(folder: Path) -> str | None:
    """Why a path may never be a folder attndyn writes into, or None."""
    if str(folder).strip() == "":
        return "an empty path"
    resolved = folder.expanduser().resolve()
    if resolved == Path(resolved.anchor):
        return "the filesystem root"
    if resolved == Path.home().resolve():
        return "the home folder"
    return None


def read_marker(folder: Path) -> dict | None:
    """The marker of ``folder`` (None without one); OwnershipError for an unreadable one."""
    path = folder / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise OwnershipError(f"{folder}: its marker {MARKER} is unreadable; move the folder aside or remove the marker") from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or not isinstance(data.get("files", []), list):
        raise OwnershipError(f"{folder}: its marker {MARKER} is not an attndyn marker")
    return data


def check(folder: str | Path, kind: str, *, option: str = "--out") -> Path:
    """Raise OwnershipError unless attndyn may write a ``kind`` folder at ``folder``; touches nothing."""
    if kind not in LEGACY:
        raise ValueError(f"unknown folder kind {kind!r}")
    raw = str(folder)
    folder = Path(folder)
    why = unsafe_reason(Path(raw)) if raw.strip() else "an empty path"
    if why:
        raise OwnershipError(f"{option} {raw!r} is {why}; name a new or empty folder")
    if folder.exists() and not folder.is_dir():
        raise OwnershipError(f"{option} {raw!r} exists and is not a folder")
    if not folder.is_dir():
        return folder
    marker = read_marker(folder)
    if marker is not None:
        if marker["kind"] != kind:
            raise OwnershipError(f"{option} {raw!r} is an attndyn {marker['kind']} folder, not a {kind} folder; name another folder")
        return folder
    entries = sorted(p.name for p in folder.iterdir())
    foreign = [e for e in entries if e != PREVIOUS and not any(fnmatch.fnmatchcase(e, pattern) for pattern in LEGACY[kind])]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise OwnershipError(f"{option} {raw!r} is not empty and was not written by attndyn (it holds {shown}); name a new or empty folder")
    return folder


def claim(folder: str | Path, kind: str, writer: str, *, option: str = "--out") -> Owner:
    """Check (see :func:`check`), create the folder if needed, and write its marker."""
    folder = check(folder, kind, option=option)
    existed = folder.is_dir()
    folder.mkdir(parents=True, exist_ok=True)
    marker = read_marker(folder) if existed else None
    if marker is not None:
        files = [f for f in marker.get("files", []) if isinstance(f, str)]
    else:  # a new folder, or one written before markers (all its entries are the kind's own)
        files = sorted(p.name for p in folder.iterdir()) if existed else []
    owner = Owner(folder, kind, writer, files)
    owner._save()
    return owner


PREVIOUS = ".previous"  # where a rerun moves the files of the run it replaces (one generation)


def clear(owner: Owner, *, keep: tuple[str, ...] = ()) -> None:
    """Move the files attndyn recorded in ``owner``'s folder (not those in ``keep``) aside, into
    ``.previous/`` (which holds the run replaced last; an older one there is dropped: it was
    attndyn's too), and remove the folders they leave empty. Foreign files stay where they are."""
    import shutil

    root = owner.folder.resolve()
    aside = owner.folder / PREVIOUS
    remaining = []
    moving = [rel for rel in owner.files if not (rel in keep or any(rel.startswith(k.rstrip("/") + "/") for k in keep))]
    if moving and aside.is_dir():
        shutil.rmtree(aside)
    # the files whose presence marks a complete folder go first: an interrupted clear never leaves
    # a folder that looks complete
    for rel in sorted(owner.files, key=lambda r: r not in COMPLETE):
        if rel not in moving:
            remaining.append(rel)
            continue
        path = (owner.folder / rel).resolve()
        if root not in path.parents or path == aside.resolve():  # a marker naming a path outside its folder is never followed
            continue
        if path.is_dir() and not path.is_symlink():
            if rel in LEGACY[owner.kind] and _only_own(path):
                _move(path, aside / rel)
            else:
                _remove_empty(path)
        elif path.exists() or path.is_symlink():
            _move(path, aside / rel)
        parent = path.parent
        while parent != root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    owner.files = remaining
    owner._save()


def _move(path: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)


def _only_own(path: Path) -> bool:
    """A legacy sub-folder (figures/, runs/) holds only attndyn's files: no markers of others, no foreign kinds."""
    return all(p.suffix in {".png", ".svg", ".gif", ".json", ".npz", ".html", ".csv"} or p.is_dir() for p in path.rglob("*"))


def _remove_empty(path: Path) -> None:
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(sub.iterdir()):
            sub.rmdir()
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
