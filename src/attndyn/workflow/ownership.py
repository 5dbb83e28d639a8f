"""Folder ownership: attndyn writes only into folders it can prove it wrote, and deletes, moves or
overwrites only files it wrote, with the content it wrote.

Contract
--------
Every folder attndyn writes carries a marker, ``.attndyn.json``: its kind (``run``, ``report``,
``claim-run``, ``checkpoint``, ``meanfield``, ``sweep``), the version and command that wrote it, and
``files``: every file attndyn wrote there with the SHA-256 of the bytes it wrote (``"folder"`` for a
folder it made, ``"live"`` for the sweep's ledger and lock, which SQLite and the lock change in
place), and ``previous``: what a rerun moved into ``.previous/``, with the same hashes; and ``mac``, an
HMAC-SHA256 of all of that under the user's own secret (``$XDG_CONFIG_HOME/attndyn/marker.key``, made
on first use with mode 0600, refused when anyone else can read it). A hash proves a file's content,
not who wrote the marker: a marker that does not verify (hand-written, of the unsigned marker format 2, or
signed under another key: another machine, a changed HOME, a container) proves nothing, and its
folder is a foreign one, adopted only with ``--force-adopt``. Only the process that claims a folder
signs its marker: a sweep's driver, never its Dask workers (they return results to the driver).

``check(folder, kind)`` (and ``claim``, which then creates the folder and writes its marker) lets a
command write into ``folder`` only when it does not exist, is empty, or carries a marker of the same
kind whose recorded files are, by content hash, what is on disk (a recorded file may be missing),
and no file attndyn would write there exists unrecorded. Anything else is refused with
:class:`OwnershipError` naming the entries and the two ways out: an empty folder, or
``--force-adopt`` (``claim(..., force_adopt=True)``), which moves every entry into a dated folder
``adopted-YYYYMMDD-HHMMSS/`` inside it and deletes nothing. The filesystem root, the home folder, an
empty path and a symbolic link (the folder itself, or any folder between a marked folder and a path
written below it) are always refused: links are never followed out of an output folder.

:func:`release` is the one gate before any delete, move or overwrite in attndyn: it passes only a
path that does not exist, or a regular file (no link) whose content has the SHA-256 recorded when
attndyn wrote it (in this process, or in the marker of the folder that holds it). The operations
behind it, :func:`write_bytes` (written to a temporary file beside the target, fsync'ed, then
renamed), :func:`install`, :func:`remove` and the moves of :func:`clear`, live in this module only
(``tests/workflow/test_ownership.py`` walks the source and fails on any other).

A file is recorded as ``writing`` in the marker before attndyn writes it (:func:`write_bytes`,
:func:`install` into a claimed folder), and moves to ``files`` with its hash once written: a run
stopped in between (SIGTERM, SIGKILL, a full disk) leaves a marker naming what it was writing, and
the same command run again adopts those files and overwrites them. One attndyn run at a time holds a
folder: :func:`claim` takes an exclusive lock on its ``.attndyn.lock`` (``flock``, released by the
OS when its holder dies, so a stale lock of a dead process is taken over); a second run exits
with :class:`OwnershipError` naming the holder's pid.

``clear(owner)`` moves the recorded files aside into ``.previous/``: first the generation recorded
there is deleted (only the files whose recorded hash still matches; anything else in
``.previous/`` is kept, and so is the folder then), then each recorded file is moved there.
"""

from __future__ import annotations

import atexit
import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from attndyn.core.errors import UserError

MARKER = ".attndyn.json"
LOCK = ".attndyn.lock"  # held (flock) by the one attndyn run writing the folder; holds its pid
WRITING = "writing"  # a file attndyn announced before writing it: its own, hash not known yet
PREVIOUS = ".previous"  # where a rerun moves the files of the run it replaces (one generation)
FORMAT = 3  # 3: signed with the user's key; 2: files with their SHA-256 (anyone could write it); 1: names only
KEY_NAME = "marker.key"  # the per-user secret markers are signed with, in the user's config folder
FOLDER, LIVE = "folder", "live"
# What each kind of folder holds, as names or glob patterns: a file of one of these names that the
# marker does not record makes attndyn refuse the folder (it would be overwritten).
OWN = {
    "run": {
        *("config.json", "trajectory.npz", "summary.json", "trajectory.png", "trajectory.svg", "trajectory.gif"),
        *("analysis.json", "analysis.png", "partial.json"),
    },
    "report": {"runs", "index.html", "results.json", "preview.png"},
    "claim-run": {"config.json", "result.json", "summary.json", "arrays.npz", "figures", "*.gif"},
    "checkpoint": {"checkpoint.json", "decoder.json", "index.html", "figures", "per_head.csv", "heads.csv", "layers.csv", "*.png", "*.svg"},
    "intervene": {"interventions.json", "index.html", "*.png", "*.svg"},
    "atlas": {"atlas.json", "index.html", "*.png", "*.svg"},
    "meanfield": {
        *("config.json", "density.npz", "summary.json", "density.gif"),
        *("density.png", "density.svg", "order_parameter.png", "order_parameter.svg"),
    },
    "sweep": {"ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.sqlite-journal", "driver.lock", "results.*"},
}
LEGACY = OWN  # the name of this table before 0.3
# Files changed in place by SQLite and the driver's lock: recorded without a hash, never deleted,
# moved or overwritten by attndyn, and refused as a target of anything attndyn writes.
LIVE_FILES = ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.sqlite-journal", "driver.lock")

COMPLETE = ("summary.json", "index.html", "results.json", "checkpoint.json")

# what this process wrote through write_bytes/install: absolute path -> SHA-256 of what it wrote
_WRITTEN: dict[str, str] = {}
# the folders this process claimed: absolute path -> its Owner (the one that records what is being written)
_OWNERS: dict[str, Owner] = {}
# the locks this process holds: absolute folder path -> the open lock file
_LOCKS: dict[str, IO[str]] = {}


class OwnershipError(UserError):
    """A folder or file attndyn may not write, move or delete; the message is one line naming it."""


# --- hashes and links ---------------------------------------------------------------------------


def digest(path: Path) -> str:
    """The SHA-256 of a regular file's content; of a folder, of its sorted entries' names and digests.
    OwnershipError for a link or anything else (attndyn writes neither)."""
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode):
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    if stat.S_ISDIR(st.st_mode):
        h = hashlib.sha256(b"folder\n")
        for entry in sorted(os.listdir(path)):
            h.update(f"{entry}\0{digest(Path(path) / entry)}\n".encode())
        return h.hexdigest()
    what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
    raise OwnershipError(f"{path} is {what}; attndyn does not follow or replace it")


def _owning_folder(path: Path) -> tuple[Path | None, list[Path]]:
    """The nearest folder above ``path`` (lexically, links not resolved) that holds a marker, and the
    links met below any marked folder on the way up (``path`` itself excluded)."""
    links: list[Path] = []
    seen: list[Path] = []
    nearest = None
    for parent in Path(os.path.abspath(path)).parents:
        if parent.name == PREVIOUS:  # .previous/ belongs to the folder above it
            continue
        if os.path.islink(parent):
            seen.append(parent)
        if os.path.lexists(parent / MARKER) and not os.path.islink(parent):
            nearest = nearest or parent
            links += [p for p in seen if p not in links]
    return nearest, links


def _no_links_below_owner(path: Path) -> Path | None:
    """OwnershipError when a folder between ``path`` and a marked folder above it is a link (it would
    lead out of the folder attndyn owns); the nearest marked folder (None when there is none)."""
    owner, links = _owning_folder(path)
    if links:
        raise OwnershipError(f"{links[0]} is a symbolic link inside an attndyn folder; attndyn never writes through links")
    return owner


def _recorded(path: Path) -> str | None:
    """The hash recorded for ``path`` when attndyn wrote it (this process, else its folder's marker), or None."""
    key = os.path.abspath(path)
    if key in _WRITTEN:
        return _WRITTEN[key]
    return _marked(path)


def changed_since_written(path: str | Path) -> str | None:
    """Why ``path`` is not what attndyn wrote there, by the SHA-256 its folder's signed marker records (a file that
    marker does not record as written, or a folder without a verifying marker, cannot be told: None)."""
    path = Path(path)
    try:
        recorded = _marked(path)
    except OwnershipError:
        return None
    if recorded is None or recorded in (WRITING, FOLDER, LIVE):
        return None
    if not path.is_file() or os.path.islink(path):
        return f"{path} is not the regular file attndyn wrote"
    if digest(path) != recorded:
        return f"{path} was changed since attndyn wrote it (its SHA-256 is not the one its folder's signed marker records)"
    return None


def _marked(path: Path) -> str | None:
    """The hash the folder's marker records for ``path`` (None without one)."""
    key = os.path.abspath(path)
    owner = _no_links_below_owner(path)
    if owner is None:
        return None
    marker = _load(owner)
    if marker is None:
        return None
    rel = Path(key).relative_to(owner).as_posix()
    if rel.startswith(PREVIOUS + "/"):
        return marker["previous"].get(rel[len(PREVIOUS) + 1 :])
    return marker["files"].get(rel) or (WRITING if rel in marker["writing"] else None)


def release(path: str | Path, recorded: str | None = None) -> None:
    """The one gate before attndyn deletes, moves or overwrites ``path``: passes when nothing is there,
    or when it is a regular file (or a folder attndyn wrote) whose content has the SHA-256 recorded
    when attndyn wrote it (``recorded``, else :func:`_recorded`); OwnershipError naming it otherwise."""
    path = Path(path)
    _no_links_below_owner(path)
    if not os.path.lexists(path):
        return
    if os.path.islink(path):
        raise OwnershipError(f"{path} is a symbolic link that attndyn did not write; move it away or name another folder")
    given = recorded is not None
    recorded = recorded if given else _recorded(path)
    if recorded is None:
        raise OwnershipError(f"{path} exists and was not written by attndyn; move it away or name another folder")
    if recorded == LIVE:
        raise OwnershipError(f"{path} is the sweep's own {path.name}, which attndyn never replaces; name another file")
    if recorded == WRITING and not given and path.is_file():
        return  # announced in the folder's marker by the attndyn run that was writing it when it stopped
    if recorded == FOLDER:
        if path.is_dir() and not any(path.iterdir()):
            return
        raise OwnershipError(f"{path} is a folder that holds files attndyn did not record; move it away or name another folder")
    if digest(path) != recorded and (given or digest(path) != _marked(path)):
        # without a given hash, the marker's counts too: another attndyn process may have rewritten the
        # file (and its marker) since this process wrote it
        raise OwnershipError(f"{path} was changed since attndyn wrote it; move it away or name another folder")


# --- the operations behind the gate -------------------------------------------------------------


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, flushed and fsync'ed, then
    renamed over it), after :func:`release`; the hash is recorded for :meth:`Owner.add`."""
    path = Path(path)
    _no_links_below_owner(path)
    release(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # both names in the marker before the temporary file exists: a run killed from here on leaves a marker that
    # names the file it was writing (its rerun overwrites it) and the temporary file (its rerun removes it)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    _announce(path, tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        release(path)  # again: nothing may have appeared there meanwhile
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # the temporary file made above
        raise
    _forget(Path(tmp))
    _WRITTEN[os.path.abspath(path)] = hashlib.sha256(data).hexdigest()
    return path


def install(part: str | Path, target: str | Path) -> Path:
    """Move a finished file or folder ``part`` (written in a temporary folder beside ``target``) to
    ``target``, after :func:`release` (an earlier one of attndyn's is removed first)."""
    part, target = Path(part), Path(target)
    release(target)
    _announce(target)
    recorded = digest(part)
    if os.path.lexists(target):
        remove(target)
    os.replace(part, target)
    _WRITTEN[os.path.abspath(target)] = recorded
    return target


def _announce(path: Path, *more: Path) -> None:
    """Record ``path`` (and ``more`` beside it) as being written in the marker of the folder this process claimed
    above it (before the bytes land: a run stopped after they did leaves a marker that names the file)."""
    folder, _ = _owning_folder(path)
    owner = _OWNERS.get(os.path.abspath(folder)) if folder is not None else None
    if owner is None:
        return
    new = False
    for p in (path, *more):
        rel = Path(os.path.abspath(p)).relative_to(os.path.abspath(owner.folder)).as_posix()
        if _inside(rel) and rel not in owner.writing:
            owner.writing[rel] = WRITING
            new = True
    if new:
        owner._save()


def _forget(path: Path) -> None:
    """Drop a temporary file that is gone (renamed into place) from the announced names; the marker is saved
    with the next change (a marker that still names it names nothing: its rerun finds no file)."""
    folder, _ = _owning_folder(path)
    owner = _OWNERS.get(os.path.abspath(folder)) if folder is not None else None
    if owner is not None:
        owner.writing.pop(Path(os.path.abspath(path)).relative_to(os.path.abspath(owner.folder)).as_posix(), None)


def remove(path: str | Path, recorded: str | None = None) -> None:
    """Delete ``path`` after :func:`release` (a file attndyn wrote, unchanged; a folder attndyn wrote)."""
    import shutil

    path = Path(path)
    release(path, recorded)
    if not os.path.lexists(path):
        return
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    _WRITTEN.pop(os.path.abspath(path), None)


def _move(path: Path, target: Path, recorded: str) -> None:
    release(path, recorded)
    release(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(target):
        raise OwnershipError(f"{target} exists; attndyn does not move a file over it")
    os.replace(path, target)
    _WRITTEN.pop(os.path.abspath(path), None)


def open_live(owner: Owner, name: str, mode: str = "a+") -> IO[str]:
    """Open one of the sweep folder's live files (its lock) without following a link; recorded as live."""
    if name not in LIVE_FILES:
        raise ValueError(f"{name!r} is not a live file")
    path = owner.folder / name
    _no_links_below_owner(path)
    if os.path.lexists(path) and owner.files.get(name) != LIVE:
        if os.path.islink(path) or not path.is_file():
            raise OwnershipError(f"{path} is not a regular file attndyn wrote; move it away")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    return os.fdopen(fd, mode)


# --- markers ------------------------------------------------------------------------------------


def key_path() -> Path:
    """Where the user's marker key lives: ``$XDG_CONFIG_HOME/attndyn/marker.key`` (``~/.config`` without it)."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"  # the XDG rule: a relative value is ignored
    return root / "attndyn" / KEY_NAME


def _key() -> bytes:
    """The user's secret (32 random bytes, hex), created on first use with mode 0600; OwnershipError when
    it is a link, not a regular file, not the user's, readable by group or others, or damaged."""
    path = key_path()
    if not os.path.lexists(path):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            pass  # another attndyn process made it first: read theirs
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(os.urandom(32).hex() + "\n")
                fh.flush()
                os.fsync(fh.fileno())
    fix = f"remove it (attndyn makes a new one; folders signed with the old key then need --force-adopt) or chmod 600 {path}"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise OwnershipError(f"attndyn's marker key {path} cannot be read ({err.strerror}); {fix}") from None
    with os.fdopen(fd, "r") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OwnershipError(f"attndyn's marker key {path} is not a regular file; {fix}")
        if st.st_uid != os.getuid():
            raise OwnershipError(f"attndyn's marker key {path} belongs to another user (uid {st.st_uid}); {fix}")
        if st.st_mode & 0o077:
            raise OwnershipError(f"attndyn's marker key {path} can be read by others (mode {stat.S_IMODE(st.st_mode):04o}); {fix}")
        text = fh.read(200).strip()
    if len(text) != 64 or any(ch not in "0123456789abcdef" for ch in text):
        raise OwnershipError(f"attndyn's marker key {path} is damaged (not 64 hex digits); {fix}")
    return bytes.fromhex(text)


def mac_key(purpose: str) -> bytes:
    """A key for another of attndyn's own records (a ledger's rows), derived from the user's marker key for
    ``purpose``: rows signed with it verify only for this user, and never pass for a marker."""
    return hmac.new(_key(), f"attndyn:{purpose}".encode(), hashlib.sha256).digest()


def _mac(record: dict) -> str:
    """The HMAC-SHA256 of a marker's content (canonical JSON, ``mac`` left out) under the user's key."""
    body = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(_key(), body.encode(), hashlib.sha256).hexdigest()


@dataclass
class Owner:
    """A folder claimed by one command: its kind, who wrote it, the files attndyn wrote there (their
    hashes) and those it moved into ``.previous/``."""

    folder: Path
    kind: str
    writer: str
    files: dict[str, str] = field(default_factory=dict)
    previous: dict[str, str] = field(default_factory=dict)
    writing: dict[str, str] = field(default_factory=dict)  # announced before being written (see _announce)

    def add(self, *paths: str | Path) -> None:
        """Record files attndyn just wrote (with the hash it wrote), folders it made, the live files;
        a name that does not exist is skipped. OwnershipError for a file this process did not write."""
        for p in paths:
            rel = Path(os.path.abspath(p)).relative_to(os.path.abspath(self.folder)).as_posix() if Path(p).is_absolute() else Path(p).as_posix()
            path = self.folder / rel
            _no_links_below_owner(path)
            if not os.path.lexists(path):
                continue
            key = os.path.abspath(path)
            if os.path.islink(path):
                raise OwnershipError(f"{path} is a symbolic link; attndyn records only what it wrote")
            if rel in LIVE_FILES and path.is_file():
                self.files[rel] = LIVE
            elif key in _WRITTEN:
                self.files[rel] = _WRITTEN[key]
            elif path.is_dir():
                self.files.setdefault(rel, FOLDER)
            elif rel in self.files and self.files[rel] not in (FOLDER, LIVE) and digest(path) == self.files[rel]:
                pass
            else:
                raise OwnershipError(f"{path} was not written by attndyn in this run; it is not recorded as attndyn's")
            self.writing.pop(rel, None)
            for parent in list(Path(rel).parents)[:-1]:
                self.files.setdefault(parent.as_posix(), FOLDER)
        self._save()

    def mkdir(self, rel: str) -> Path:
        """Make (or keep) the sub-folder ``rel`` and record it."""
        path = self.folder / rel
        _no_links_below_owner(path / "x")
        if os.path.islink(path):
            raise OwnershipError(f"{path} is a symbolic link; attndyn never writes through links")
        path.mkdir(parents=True, exist_ok=True)
        self.add(rel)
        return path

    def remove(self, *rels: str) -> None:
        """Delete recorded files (the gate checks their hashes) and forget them."""
        for rel in rels:
            if rel in self.files:
                remove(self.folder / rel, self.files[rel])
                del self.files[rel]
        self._save()

    def refuse_foreign(self, *names: str) -> None:
        """OwnershipError when one of ``names`` exists in the folder and attndyn did not write it (as
        it is now): call before writing; attndyn never overwrites a file it does not own."""
        for name in names:
            release(self.folder / name, self.files.get(Path(name).as_posix()) or "")

    def _save(self) -> None:
        from attndyn import __version__

        record = {
            "kind": self.kind,
            "format": FORMAT,
            "version": __version__,
            "writer": self.writer,
            "files": dict(sorted(self.files.items())),
            "previous": dict(sorted(self.previous.items())),
            "writing": dict(sorted(self.writing.items())),
        }
        record["mac"] = _mac(record)
        _write_marker(self.folder, json.dumps(record, indent=1) + "\n")


def _write_marker(folder: Path, text: str) -> None:
    """The marker is attndyn's own by construction (the folder was claimed): written then renamed,
    never through a link (a link under its name is replaced, not followed)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{MARKER}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, folder / MARKER)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # the temporary file made above
        raise


def read_marker(folder: Path) -> dict | None:
    """The marker of ``folder`` (None without one); OwnershipError for an unreadable one."""
    path = Path(folder) / MARKER
    if not os.path.lexists(path):
        return None
    if os.path.islink(path) or not path.is_file():
        raise OwnershipError(f"{folder}: its marker {MARKER} is not a regular file; move the folder aside")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise OwnershipError(f"{folder}: its marker {MARKER} is unreadable; move the folder aside or remove the marker") from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or not isinstance(data.get("files", []), list | dict):
        raise OwnershipError(f"{folder}: its marker {MARKER} is not an attndyn marker")
    return data


def _load(folder: Path) -> dict | None:
    """A marker of this format with well-formed records, or None."""
    try:
        data = read_marker(folder)
    except OwnershipError:
        return None
    if data is None or data.get("format") != FORMAT:
        return None
    mac = data.get("mac")
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac({k: v for k, v in data.items() if k != "mac"})):
        return None  # written by hand, by another user, or under another key: it proves nothing
    files, previous, writing = data.get("files"), data.get("previous", {}), data.get("writing", {})
    if not (isinstance(files, dict) and isinstance(previous, dict) and isinstance(writing, dict)):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) and _inside(k) for k, v in (*files.items(), *previous.items(), *writing.items())):
        return None
    return {**data, "files": files, "previous": previous, "writing": writing}


def _inside(rel: str) -> bool:
    """A recorded path that stays inside its folder (no absolute path, no ``..``, not the marker or .previous/)."""
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts and parts[0] not in (MARKER, PREVIOUS, LOCK)


# --- claiming a folder --------------------------------------------------------------------------


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


def _own_name(kind: str, name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in OWN[kind])


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _disproof(folder: Path, kind: str) -> str | None:
    """Why ``folder`` (an existing folder) cannot be proved a ``kind`` folder attndyn wrote, or None."""
    entries = sorted(e for e in os.listdir(folder) if e != LOCK)
    marker = read_marker(folder)
    if marker is None:
        if not entries:
            return None
        return f"is not empty and was not written by attndyn (it holds {_shown(entries)})"
    if marker["kind"] != kind:
        return f"is an attndyn {marker['kind']} folder, not a {kind} folder"
    proof = _load(folder)
    if proof is None:
        return (
            f"has a marker {MARKER} that does not verify under this user's attndyn key ({key_path()}): written by hand, by an"
            " attndyn whose markers were unsigned (format 2), or under another key (another machine, a changed HOME, a container)"
        )
    changed = []
    for rel, recorded in proof["files"].items():
        path = folder / rel
        if not os.path.lexists(path):
            continue
        if os.path.islink(path):
            changed.append(f"{rel} (a symbolic link)")
        elif recorded == LIVE:
            if not path.is_file():
                changed.append(f"{rel} (not a regular file)")
        elif recorded == FOLDER:
            if not path.is_dir():
                changed.append(f"{rel} (not a folder)")
        elif not path.is_file() or digest(path) != recorded:
            changed.append(f"{rel} (changed since attndyn wrote it)")
    if changed:
        return f"holds files that are not what attndyn wrote: {_shown(changed)}"
    aside = folder / PREVIOUS
    if os.path.lexists(aside) and (os.path.islink(aside) or not aside.is_dir()):
        return f"holds a {PREVIOUS} that is not a folder attndyn made"
    # what the folder's own run announced before it stopped is its own (the rerun overwrites it)
    announced = {w.split("/")[0] for w in proof["writing"]}
    foreign = [e for e in entries if e not in (MARKER, PREVIOUS) and e not in proof["files"] and e not in announced and _own_name(kind, e)]
    # the live files of a sweep folder (its lock, SQLite's files) appear before they are recorded, and
    # attndyn changes them in place only: a regular file of those names is not refused
    foreign = [e for e in foreign if not (e in LIVE_FILES and (folder / e).is_file() and not os.path.islink(folder / e))]
    # an empty folder of one of its names holds nothing to lose (an interrupted run leaves figures/ so)
    foreign = [e for e in foreign if os.path.islink(folder / e) or not (folder / e).is_dir() or any((folder / e).iterdir())]
    if foreign:
        return f"holds {_shown(foreign)}, which was not written by attndyn and would be overwritten"
    return None


def check(folder: str | Path, kind: str, *, option: str = "--out", force_adopt: bool = False) -> Path:
    """Raise OwnershipError unless attndyn may write a ``kind`` folder at ``folder`` (see the module
    docstring; with ``force_adopt`` a folder it cannot prove is accepted, to be adopted by
    :func:`claim`); touches nothing."""
    if kind not in OWN:
        raise ValueError(f"unknown folder kind {kind!r}")
    raw = str(folder)
    folder = Path(folder)
    why = unsafe_reason(Path(raw)) if raw.strip() else "an empty path"
    if why:
        raise OwnershipError(f"{option} {raw!r} is {why}; name a new or empty folder")
    if os.path.islink(folder):
        raise OwnershipError(f"{option} {raw!r} is a symbolic link; attndyn never writes through links: name the folder itself or a new one")
    try:
        _no_links_below_owner(folder / MARKER)
    except OwnershipError as err:
        raise OwnershipError(f"{option} {raw!r}: {err}") from None
    if os.path.lexists(folder) and not folder.is_dir():
        raise OwnershipError(f"{option} {raw!r} exists and is not a folder")
    if not folder.is_dir():
        return folder
    problem = _disproof(folder, kind)
    if problem is not None and force_adopt and option == "--out":
        _refuse_if_held(folder)  # never adopt what another run is writing
        why = adopt_refusal(folder)
        if why:
            raise OwnershipError(f"--force-adopt refuses {raw!r}: {why}; name a new or empty folder")
        return folder
    if problem is None:
        return folder
    _refuse_if_held(folder)  # a run in progress explains what was seen half-written
    if problem.startswith("is an attndyn"):
        raise OwnershipError(f"{option} {raw!r} {problem}; name another folder")
    ways = "name a new or empty folder"
    if option == "--out":
        ways += ", or pass --force-adopt to move what it holds into a dated folder inside it (nothing is deleted)"
    raise OwnershipError(f"{option} {raw!r} {problem}; {ways}")


def claim(folder: str | Path, kind: str, writer: str, *, option: str = "--out", force_adopt: bool = False) -> Owner:
    """Check (see :func:`check`), create the folder if needed (adopting it first with
    ``force_adopt`` when it cannot be proved attndyn's), and write its marker."""
    folder = check(folder, kind, option=option, force_adopt=force_adopt)
    folder.mkdir(parents=True, exist_ok=True)
    _lock(folder)
    folder = check(folder, kind, option=option, force_adopt=force_adopt)  # again, now that no other run can write it
    proof = _load(folder) if _disproof(folder, kind) is None else None
    if proof is None and any(e != LOCK for e in os.listdir(folder)):
        _adopt(folder)
    owner = Owner(folder, kind, writer, *(({**proof[k]} if proof else {}) for k in ("files", "previous", "writing")))
    if proof is not None:
        for rel in _remove_own_temporaries(folder, proof["writing"]):
            owner.writing.pop(rel, None)
    owner._save()
    _OWNERS[os.path.abspath(folder)] = owner
    return owner


TEMPORARY = re.compile(r"(?:.*/)?\.[^/]+\.[a-z0-9_]{8}\.tmp")  # the temporary names write_bytes gives (.NAME.XXXXXXXX.tmp)


def _remove_own_temporaries(folder: Path, writing: dict[str, str]) -> list[str]:
    """Remove the temporary files that an earlier run of this folder left when it was killed while writing
    (SIGKILL or a power cut skips :func:`write_bytes`'s clean-up), and only those it can prove its own: the
    names its signed marker announced before writing them (a user's file of the same form, never announced,
    stays), each a regular file of the user's, removed through the gate; and a temporary copy of the marker
    whose content verifies under the user's key. Called with the folder's lock held, so no other attndyn run
    is writing them. Returns the announced temporary names now gone (to drop from the marker)."""
    removed = []
    for rel in sorted(writing):
        path = folder / rel
        if not TEMPORARY.fullmatch(rel):
            continue
        if not os.path.lexists(path):
            removed.append(rel)  # announced, never made (or renamed into place): nothing to remove, nothing to name
            continue
        if os.path.islink(path) or not path.is_file() or path.stat().st_uid != os.geteuid():
            continue
        try:
            remove(path)
        except OwnershipError:
            continue  # the gate said no: left where it is
        removed.append(rel)
    for entry in os.scandir(folder):
        if not re.fullmatch(rf"\.{re.escape(MARKER)}\.[a-z0-9_]{{8}}\.tmp", entry.name) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            with open(entry.path, "rb") as fh:
                record = json.loads(fh.read(1_000_000))
            ours = isinstance(record, dict) and hmac.compare_digest(str(record.get("mac", "")), _mac(record))
        except (OSError, ValueError, UnicodeDecodeError):
            ours = False  # a marker cut short, or not a marker: not provably attndyn's, left in place
        if ours:
            os.unlink(entry.path)
    return removed


def _refuse_if_held(folder: Path) -> None:
    """OwnershipError naming the holder when another process holds ``folder``'s lock (read-only probe:
    nothing is created)."""
    path = folder / LOCK
    if os.path.abspath(folder) in _LOCKS or os.path.islink(path) or not path.is_file():
        return
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    with os.fdopen(fd) as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _held(folder, fh) from None


def _held(folder: Path, fh: IO[str]) -> OwnershipError:
    fh.seek(0)
    pid = fh.read(20).strip() or "unknown"
    return OwnershipError(f"another attndyn run (pid {pid}) holds {str(folder)!r}; wait for it to finish, or name another folder")


def _lock(folder: Path) -> None:
    """Hold ``folder/.attndyn.lock`` (flock, exclusive) for this process; OwnershipError naming the
    holder when another live process holds it. A lock left by a dead process is free (the OS releases
    a lock with its holder) and is taken over; a file of that name that is not a pid is refused."""
    import fcntl

    key = os.path.abspath(folder)
    if key in _LOCKS:
        return
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        raise OwnershipError(f"{path} cannot be opened as attndyn's lock ({err.strerror}); move it away") from None
    fh = os.fdopen(fd, "r+")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OwnershipError(f"{path} is not a regular file; move it away")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _held(folder, fh) from None
        text = fh.read(40)
        if text.strip() and not text.strip().isdigit():
            raise OwnershipError(f"{path} was not written by attndyn (it is not a process id); move it away")
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
    except BaseException:
        fh.close()
        raise
    _LOCKS[key] = fh


def unlock(folder: str | Path | None = None) -> None:
    """Release the lock this process holds on ``folder`` (every lock it holds when None) and forget its
    Owner; the lock file stays (a later run takes it over)."""
    keys = list(_LOCKS) if folder is None else [os.path.abspath(folder)]
    for key in keys:
        fh = _LOCKS.pop(key, None)
        if fh is not None:
            fh.close()
        _OWNERS.pop(key, None)


atexit.register(unlock)  # the OS releases them anyway; closed here so that nothing is left open at exit


def adopt_refusal(folder: Path, limit: int = 100_000) -> str | None:
    """Why ``--force-adopt`` may not move what ``folder`` holds, or None: it moves only the user's own
    entries, so it refuses the home folder and any folder above it or above the current one, a mount
    point, a folder that is sticky or world-writable (shared: others' files live there) or not the
    user's, and a folder holding anything (at any depth, links not followed) not owned by the user,
    or a socket, device or FIFO."""
    resolved = Path(os.path.realpath(folder))
    for what, place in (("the home folder", Path.home()), ("the current folder", Path.cwd())):
        place = Path(os.path.realpath(place))
        if resolved == place or resolved in place.parents:
            return f"it is {what} or holds it ({place})"
    inner = _mount_points(resolved)
    if os.path.ismount(folder) or resolved in inner:
        return "it is a mount point"
    inner = [p for p in inner if resolved in p.parents]
    if inner:  # another file system inside: moving its mount point would move what is not this folder's
        return f"it holds mount points: {_shown([str(p.relative_to(resolved)) for p in inner])}"
    me = os.getuid()
    st = os.lstat(folder)
    if st.st_uid != me:
        return f"it belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_ISVTX | stat.S_IWOTH):
        return f"it is a shared folder (mode {stat.S_IMODE(st.st_mode):04o}: sticky or world-writable), where others' files live"
    others, special, seen = [], [], 0
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            seen += 1
            if seen > limit:
                return f"it holds more than {limit} entries; move them yourself"
            path = os.path.join(root, name)
            entry = os.lstat(path)
            rel = os.path.relpath(path, folder)
            if entry.st_uid != me:
                others.append(f"{rel} (uid {entry.st_uid})")
            if stat.S_ISDIR(entry.st_mode) and (entry.st_dev != st.st_dev or os.path.ismount(path)):
                return f"it holds mount points: {rel}"
            kind = next(
                (
                    k
                    for k, test in (("socket", stat.S_ISSOCK), ("device", stat.S_ISBLK), ("device", stat.S_ISCHR), ("FIFO", stat.S_ISFIFO))
                    if test(entry.st_mode)
                ),
                None,
            )
            if kind:
                special.append(f"{rel} (a {kind})")
    if others:
        return f"it holds entries that are not the user's: {_shown(others)}"
    if special:
        return f"it holds what is not a file, folder or link: {_shown(special)}"
    return None


def _mount_points(folder: Path) -> list[Path]:
    """The mount points at or below ``folder`` (resolved) that the kernel lists (Linux's
    ``/proc/self/mountinfo``; a bind mount of the same file system shares its device number, so
    ``os.path.ismount`` alone misses it); empty where there is no such list."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        # field 5 is the mount point, with space, tab, newline and backslash written as octal escapes
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
        if point == folder or folder in point.parents:
            found.append(point)
    return found


def _adopt(folder: Path) -> Path:
    """Move every entry of ``folder`` (a marker and ``.previous/`` included) into a new dated folder
    inside it, printing each move; nothing is deleted, links are moved as links. OwnershipError
    (nothing moved) when :func:`adopt_refusal` names a reason."""
    why = adopt_refusal(folder)
    if why:
        raise OwnershipError(f"--force-adopt refuses {str(folder)!r}: {why}; name a new or empty folder")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = folder / f"adopted-{stamp}"
    k = 1
    while os.path.lexists(target):
        k += 1
        target = folder / f"adopted-{stamp}-{k}"
    entries = [e for e in os.listdir(folder) if e != LOCK]  # the lock is this run's own, held open
    target.mkdir()
    for entry in sorted(entries):
        os.rename(folder / entry, target / entry)
        print(f"adopted: moved {folder / entry} to {target / entry}")
    return target


def clear(owner: Owner, *, keep: tuple[str, ...] = ()) -> None:
    """Move the files attndyn recorded in ``owner``'s folder (not those in ``keep``) aside, into
    ``.previous/``, after deleting the generation recorded there (files whose hash still matches;
    anything else there stays, and so does the folder). Folders left empty are removed; foreign
    files stay where they are."""
    kept = lambda rel: rel in keep or any(rel.startswith(k.rstrip("/") + "/") for k in keep)  # noqa: E731
    moving = [rel for rel, h in owner.files.items() if h not in (FOLDER, LIVE) and not kept(rel)]
    if not moving:
        return
    aside = owner.folder / PREVIOUS
    if os.path.lexists(aside) and (os.path.islink(aside) or not aside.is_dir()):
        raise OwnershipError(f"{aside} is not a folder attndyn made; move it away")
    for rel, recorded in sorted(owner.previous.items()):
        try:
            remove(aside / rel, recorded)
        except OwnershipError:
            pass  # changed since attndyn moved it there: no longer attndyn's, kept
        _prune(aside / rel, aside)
    owner.previous = {}
    owner._save()
    # the files whose presence marks a complete folder go first: an interrupted clear never leaves
    # a folder that looks complete
    for rel in sorted(moving, key=lambda r: (r not in COMPLETE, r)):
        recorded = owner.files.pop(rel)
        path = owner.folder / rel
        if os.path.lexists(path):
            if os.path.lexists(aside / rel):  # a file attndyn did not put there has the name: this one goes
                remove(path, recorded)
            else:
                _move(path, aside / rel, recorded)
                owner.previous[rel] = recorded
        _prune(path, owner.folder)
    for rel in [r for r, h in owner.files.items() if h == FOLDER and not os.path.isdir(owner.folder / r)]:
        del owner.files[rel]
    owner._save()


def _prune(path: Path, root: Path) -> None:
    """Remove the folders ``path`` leaves empty, up to ``root`` (an empty folder holds nothing to lose)."""
    parent = path.parent
    while parent != root and root in parent.parents and parent.is_dir() and not os.path.islink(parent) and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    if root.name == PREVIOUS and root.is_dir() and not any(root.iterdir()):
        root.rmdir()
