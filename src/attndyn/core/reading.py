"""Reading files a user hands over, within bounds: regular files only, sizes before reads, depth.

Contract
--------
The one place where attndyn reads a file it did not just write (a config, a run folder's JSON and
arrays, a prompt file): the exception to core's "no I/O", shared by every layer above.

* :func:`regular_file` refuses what is not a regular file (a FIFO, a character device such as
  ``/dev/zero``, a socket, a folder) by name, without opening it: opening a FIFO blocks until a
  writer comes, and a device never ends. Files are opened with ``O_NONBLOCK`` and checked again on
  the open descriptor, so a path swapped for a FIFO between the two is refused too.
* :func:`read_text` reads at most ``limit`` bytes (64 MiB by default): a larger file is refused
  before it is read.
* :func:`loads_json` and :func:`loads_toml` bound the nesting depth to :data:`MAX_DEPTH`: a
  deeper document is refused in one line (Python's parsers recurse and raised ``RecursionError``).
* :func:`npz_declared` reads only the headers of a ``.npz`` archive (the zip directory and each
  ``.npy`` header) and :func:`load_npz` compares the declared sizes with the archive's own sizes and
  with the memory available before any array is read: a zip bomb (a few KiB that declare 15 GiB)
  is refused with the member and the size named.

Every refusal is a :class:`~attndyn.core.errors.UserError` (exit 2 on the command line) whose
message names the file.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tomllib
import zipfile
from pathlib import Path

import numpy as np

from attndyn.core.errors import UserError

MAX_DEPTH = 64  # tables and lists inside one another; attndyn's own files nest at most 6 deep
MAX_TEXT_BYTES = 64 * 2**20  # a config or a run folder's JSON; attndyn writes at most a few MiB

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class FileRefused(UserError):
    """A file that is not read: not a regular file, too large, too deep or damaged."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_file(path: str | Path, what: str = "file") -> Path:
    """``path`` when it names a regular file (links followed); :class:`FileRefused` otherwise."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileRefused(f"{what} {str(path)!r} does not exist") from None
    except OSError as err:
        raise FileRefused(f"{what} {str(path)!r} cannot be read ({err.strerror or type(err).__name__})") from None
    if not stat.S_ISREG(mode):
        raise FileRefused(f"{what} {str(path)!r} is {_kind(mode)}, not a regular file; attndyn reads only regular files")
    return path


def read_bytes(path: str | Path, what: str = "file", limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, refused before reading otherwise."""
    path = regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise FileRefused(f"{what} {str(path)!r} cannot be read ({err.strerror or type(err).__name__})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):  # swapped since the check above
            raise FileRefused(f"{what} {str(path)!r} is {_kind(info.st_mode)}, not a regular file; attndyn reads only regular files")
        if info.st_size > limit:
            raise FileRefused(f"{what} {str(path)!r} holds {info.st_size / 2**20:.3g} MiB, more than the {limit / 2**20:.3g} MiB a {what} may hold")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileRefused(f"{what} {str(path)!r} grew past {limit / 2**20:.3g} MiB while it was read")
    return data


def read_text(path: str | Path, what: str = "file", limit: int = MAX_TEXT_BYTES) -> str:
    """:func:`read_bytes` decoded as UTF-8; undecodable bytes are refused with the file named."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FileRefused(f"{what} {str(path)!r} is not UTF-8 text (byte {err.start})") from None


def depth(obj: object) -> int:
    """The nesting depth of lists and dicts in ``obj`` (a scalar: 0), without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        stack.extend((child, level + 1) for child in children)
    return deepest


def _bounded(parse, text: str, where: str, language: str):
    try:
        value = parse(text)
    except RecursionError:
        raise FileRefused(f"{where}: the {language} nests tables or lists more than {MAX_DEPTH} deep") from None
    if depth(value) > MAX_DEPTH:
        raise FileRefused(f"{where}: the {language} nests tables or lists more than {MAX_DEPTH} deep")
    return value


def loads_json(text: str, where: str) -> object:
    """``json.loads`` with the nesting depth bounded; :class:`FileRefused` names ``where``."""
    try:
        return _bounded(json.loads, text, where, "JSON")
    except json.JSONDecodeError as err:
        raise FileRefused(f"{where} is not valid JSON ({err.msg} at line {err.lineno})") from None


def loads_toml(text: str, where: str) -> dict:
    """``tomllib.loads`` with the nesting depth bounded; :class:`FileRefused` names ``where``."""
    try:
        return _bounded(tomllib.loads, text, where, "TOML")
    except tomllib.TOMLDecodeError as err:
        raise FileRefused(f"{where}: not valid TOML ({err})") from None


def read_json(path: str | Path, what: str = "JSON file", *, table: bool = True) -> object:
    """A JSON file read within bounds; with ``table`` its top level must be an object (a dict)."""
    value = loads_json(read_text(path, what), str(path))
    if table and not isinstance(value, dict):
        raise FileRefused(f"{path} holds a JSON {type(value).__name__}, not the object (a table of keys) it should hold")
    return value


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation on this machine (None when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def npz_declared(path: str | Path, what: str = "arrays file") -> dict[str, tuple[tuple[int, ...], np.dtype, int]]:
    """``{name: (shape, dtype, bytes)}`` of the arrays a ``.npz`` declares, read from headers only.

    Refuses (naming the file and the member) a file that is not a zip archive, a member that is not
    a ``.npy`` array, an object dtype, and a member whose declared shape needs more bytes than the
    archive says the member holds."""
    path = regular_file(path, what)
    out = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename.removesuffix(".npy")
                with archive.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                    elif version == (2, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
                    else:
                        raise ValueError(f"unknown .npy version {version}")
                    header = fh.tell()
                if dtype.hasobject:
                    raise FileRefused(f"{what} {str(path)!r}: the array {name!r} holds Python objects (a pickle), which attndyn never loads")
                need = math.prod(int(s) for s in shape) * dtype.itemsize
                if header + need != info.file_size:
                    raise FileRefused(
                        f"{what} {str(path)!r}: the array {name!r} declares shape {tuple(shape)} ({need} bytes) "
                        f"but the archive holds {info.file_size - header} bytes for it; the file is damaged"
                    )
                out[name] = (tuple(shape), dtype, need)
    except FileRefused:
        raise
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, KeyError, RuntimeError, NotImplementedError) as err:
        raise FileRefused(f"{what} {str(path)!r} is not a readable .npz archive ({type(err).__name__}: {' '.join(str(err).split())[:120]})") from None
    return out


def load_npz(path: str | Path, what: str = "arrays file") -> dict[str, np.ndarray]:
    """Every array of a ``.npz`` file, after :func:`npz_declared`'s checks: the declared sizes
    together must fit in the memory available, or nothing is read."""
    declared = npz_declared(path, what)
    total = sum(need for _, _, need in declared.values())
    have = available_memory()
    if have is not None and total > have:
        biggest = max(declared, key=lambda k: declared[k][2])
        raise FileRefused(
            f"{what} {str(path)!r} declares {total / 2**30:.3g} GiB of arrays (the largest, {biggest!r}, shape "
            f"{declared[biggest][0]}), more than the {have / 2**30:.3g} GiB of memory available"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, KeyError, RuntimeError) as err:
        raise FileRefused(f"{what} {str(path)!r} is not a readable .npz archive ({type(err).__name__}: {' '.join(str(err).split())[:120]})") from None
