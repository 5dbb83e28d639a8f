"""Untrusted model files: the one layer that checks what the readers read (DESIGN §8).

Contract
--------
* ``typed(values, spec, where)``: metadata (a Hugging Face ``config.json``, GGUF key/value pairs) against a
  small typed spec, :class:`Int`, :class:`Real`, :class:`Flag`, :class:`Text`: integers that are integers
  (``2.7``, ``true`` and ``"4"`` are refused, never truncated), numbers within their range (heads,
  layers and widths at least 1 and at most the ``MAX_*`` bounds, epsilons and rotary bases finite and
  positive), each refusal a :class:`ModelFileError` naming the file and the key.
* ``model_file(folder, name)``: a file of a model folder, a regular file (not a FIFO or device), and not a
  symlink that leads out of the folder.
* ``read_safetensors(path)``: a safetensors file parsed by hand, every check before any allocation: the
  header length against the file size, the header's JSON, each tensor's dtype (weights ``F16``, ``BF16``,
  ``F32``, ``F64``; integer and bool buffers are read as they are, and refused by :func:`check_tensor`
  where a reader uses one as a weight; any other dtype is refused), shape and byte range (inside the
  file, the size its shape and dtype need, no two overlapping). Weights are returned as float32
  (``F16``/``BF16`` widened exactly) or float64 NumPy arrays; what they take is at most twice the file's size.
* ``read_safetensors_shards(paths)``: several shards, each tensor defined once (a second definition
  is refused with both files named).
* ``gguf_counts(path)``: the GGUF header's tensor and key/value counts against the file size, before the
  ``gguf`` package reads (and allocates for) them.
* ``read_json(path)``: a JSON object from a regular file of at most ``MAX_JSON_BYTES``.

:class:`ModelFileError` is the readers' :class:`~attndyn.models.bert.CheckpointError` (a
:class:`~attndyn.core.errors.UserError`): the command line prints its one line and exits 2.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attndyn.models.errors import CheckpointError, ModelFileError  # noqa: F401 (importers use file_checks.ModelFileError)

if TYPE_CHECKING:
    import gguf

MAX_LAYERS = 1024
MAX_HEADS = 4096
MAX_WIDTH = 1 << 17  # d_model, head dimension and feed-forward width
MAX_VOCAB = 1 << 23
MAX_CONTEXT = 1 << 24
MAX_JSON_BYTES = 64 << 20  # config.json, tokenizer_config.json (a tokenizer.json may be larger)
MAX_TOKENIZER_BYTES = 1 << 30
MAX_SAFETENSORS_HEADER = 100 << 20  # the safetensors library's own limit
SAFETENSORS_DTYPES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}  # weights, widened to float32 (float64 stays)
# buffers (MiniLM's position_ids): read as they are; a reader that uses one as a weight refuses it (check_tensor)
SAFETENSORS_OTHER = {"I8": "<i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "U8": "<u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}


# --- typed metadata ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Int:
    lo: int = 1
    hi: int = MAX_WIDTH
    required: bool = True
    default: int | None = None


@dataclass(frozen=True)
class Real:
    """A finite number; ``positive`` also refuses 0 and negatives, ``above`` is a strict lower bound."""

    above: float = 0.0
    hi: float = math.inf
    required: bool = True
    default: float | None = None


@dataclass(frozen=True)
class Flag:
    required: bool = False
    default: bool = False


@dataclass(frozen=True)
class Text:
    required: bool = False
    default: str | None = None
    max_len: int = 200


def is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def as_int(value: object, where: str, key: str, lo: int = 1, hi: int = MAX_WIDTH) -> int:
    """``value`` as an int in ``[lo, hi]``; ModelFileError naming ``where`` and ``key`` otherwise."""
    if not is_int(value):
        raise ModelFileError(f"{where}: {key} = {value!r} is not an integer")
    if not lo <= int(value) <= hi:
        raise ModelFileError(f"{where}: {key} = {value} is outside {lo}..{hi}")
    return int(value)


def as_real(value: object, where: str, key: str, above: float = 0.0, hi: float = math.inf) -> float:
    """``value`` as a finite float in ``(above, hi]``; ModelFileError naming ``where`` and ``key`` otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ModelFileError(f"{where}: {key} = {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise ModelFileError(f"{where}: {key} = {x} is not finite")
    if not above < x <= hi:
        raise ModelFileError(f"{where}: {key} = {x:g} is outside ({above:g}, {hi:g}]")
    return x


def typed(values: Mapping, spec: Mapping[str, Int | Real | Flag | Text], where: str) -> dict:
    """The keys of ``spec`` read from ``values`` and checked (module docstring); absent optional keys
    (or JSON nulls) take their default."""
    out = {}
    for key, kind in spec.items():
        value = values.get(key)
        if value is None:
            if kind.required:
                raise ModelFileError(f"{where}: the key {key!r} is missing")
            out[key] = kind.default
            continue
        if isinstance(kind, Int):
            out[key] = as_int(value, where, key, kind.lo, kind.hi)
        elif isinstance(kind, Real):
            out[key] = as_real(value, where, key, kind.above, kind.hi)
        elif isinstance(kind, Flag):
            if not isinstance(value, (bool, np.bool_)):
                raise ModelFileError(f"{where}: {key} = {value!r} is not true or false")
            out[key] = bool(value)
        else:
            if not isinstance(value, str):
                raise ModelFileError(f"{where}: {key} = {value!r} is not a string")
            out[key] = value[: kind.max_len]
    return out


def display_name(name: str) -> str:
    """A model's name as a label: control and bidirectional-override characters dropped, at most 200 characters."""
    import unicodedata

    text = "".join(ch for ch in str(name) if unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"))
    return " ".join(text.split())[:200] or "model"


def visible(text: str) -> str:
    """A token string from a file as shown in a page or a label: control, format (bidirectional overrides,
    zero-width characters) and line-separator characters written as ``\\uXXXX`` escapes, so that a token
    cannot reorder or break the text around it (pages still HTML-escape it)."""
    import unicodedata

    return "".join(f"\\u{ord(ch):04x}" if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in str(text))


# --- files -----------------------------------------------------------------------------------------


def regular_file(path: Path, what: str = "") -> int:
    """The size of ``path``, which must be a regular file (a FIFO or device is refused by name)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelFileError(f"{path} does not exist") from None
    except OSError as err:
        raise ModelFileError(f"{path} cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{path} is not a regular file{what}")
    return st.st_size


def model_file(folder: Path, name: str | Path) -> Path:
    """``folder / name``, refused when it is a symlink that leads out of the model folder or not a regular file."""
    path = Path(folder) / name
    if path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(Path(folder).resolve()):
            raise ModelFileError(f"{path} is a symlink to {target}, outside the model folder; copy the file into the folder")
    regular_file(path)
    return path


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> dict:
    """A JSON object from a regular file of at most ``limit`` bytes."""
    size = regular_file(path)
    if size > limit:
        raise ModelFileError(f"{path} has {size} bytes, more than the {limit >> 20} MiB a JSON file of a model may have")
    try:
        value = json.loads(Path(path).read_bytes())
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ModelFileError(f"{path} is not valid JSON ({type(err).__name__})") from None
    if not isinstance(value, dict):
        raise ModelFileError(f"{path} is not a JSON object")
    return value


# --- safetensors -----------------------------------------------------------------------------------


def _widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Little-endian bytes of one tensor as float32 (F16, BF16, F32) or float64 (F64)."""
    if dtype == "BF16":  # the upper half of a float32
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return raw.view("<f2").astype(np.float32)
    if dtype == "F32":
        return raw.view("<f4").astype(np.float32)
    if dtype == "F64":
        return raw.view("<f8").astype(np.float64)
    return raw.view(SAFETENSORS_OTHER[dtype]).copy()


def _safetensors_entries(path: Path) -> tuple[list, int, int]:
    """The checked entries ``(begin, end, name, dtype, shape)`` of one safetensors file (sorted by offset), its
    header length and its data size; every range checked against the file before anything is read."""
    size = regular_file(path)
    with open(path, "rb") as f:
        first = f.read(8)
        if len(first) < 8:
            raise ModelFileError(f"{path}: the file has {size} bytes, too few for a safetensors header")
        n = int.from_bytes(first, "little")
        if n > size - 8 or n > MAX_SAFETENSORS_HEADER:
            raise ModelFileError(f"{path}: the header length {n} exceeds the file ({size} bytes) or the {MAX_SAFETENSORS_HEADER >> 20} MiB limit")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, ValueError, RecursionError) as err:
            raise ModelFileError(f"{path}: the header is not valid JSON ({type(err).__name__})") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path}: the header is not a JSON object")
    data_size = size - 8 - n
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {name!r}"
        if not isinstance(info, dict) or set(info) - {"dtype", "shape", "data_offsets"}:
            raise ModelFileError(f"{where} is not a {{dtype, shape, data_offsets}} entry")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPES and dtype not in SAFETENSORS_OTHER:
            raise ModelFileError(f"{where} has dtype {dtype!r}, which is not read (weights: {', '.join(SAFETENSORS_DTYPES)})")
        if not isinstance(shape, list) or not all(is_int(s) and 0 <= s for s in shape):
            raise ModelFileError(f"{where} has shape {shape!r}, not a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise ModelFileError(f"{where} has data_offsets {offsets!r}, not [begin, end] with 0 <= begin <= end")
        need = math.prod(shape) * (SAFETENSORS_DTYPES.get(dtype) or np.dtype(SAFETENSORS_OTHER[dtype]).itemsize)
        if offsets[1] - offsets[0] != need:
            raise ModelFileError(f"{where}: shape {shape} in {dtype} needs {need} bytes, but data_offsets {offsets} hold {offsets[1] - offsets[0]}")
        if offsets[1] > data_size:
            raise ModelFileError(f"{where}: data_offsets {offsets} run past the end of the data ({data_size} bytes)")
        entries.append((offsets[0], offsets[1], name, dtype, shape))
    entries.sort()
    for (_, end, a, _, _), (begin, _, b, _, _) in zip(entries, entries[1:], strict=False):
        if begin < end:
            raise ModelFileError(f"{path}: tensors {a!r} and {b!r} overlap in the file (data_offsets)")
    return entries, n, data_size


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """The tensors of one safetensors file, every range checked against the file before it is read (module docstring)."""
    path = Path(path)
    entries, n, data_size = _safetensors_entries(path)
    arrays = {}
    if not entries:
        return arrays
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n, shape=(data_size,)) if data_size else np.zeros(0, np.uint8)
    for begin, end, name, dtype, shape in entries:
        arrays[name] = _widen(np.asarray(mm[begin:end]), dtype).reshape(shape)
    del mm
    return arrays


class MappedTensor:
    """One tensor of a memory-mapped safetensors file, read only when ``np.asarray`` asks for it: F32 and F64
    as a zero-copy view of the (copy-on-write) map, F16 and BF16 widened to float32 (exactly) into a new
    array each time. ``shape``, ``ndim`` and ``dtype`` (the array's, after widening) need no read."""

    def __init__(self, mm: np.ndarray, begin: int, end: int, dtype: str, shape: list[int]):
        self._mm, self._begin, self._end, self._kind, self.shape = mm, begin, end, dtype, tuple(shape)
        self.ndim = len(self.shape)
        self.dtype = np.dtype(np.float64 if dtype == "F64" else np.float32 if dtype in SAFETENSORS_DTYPES else SAFETENSORS_OTHER[dtype])
        self.nbytes_file = end - begin

    def __array__(self, dtype=None, copy=None):
        raw = np.asarray(self._mm[self._begin : self._end])
        if self._kind in ("F32", "F64") and raw.ctypes.data % self.dtype.itemsize == 0:
            a = raw.view("<f4" if self._kind == "F32" else "<f8").reshape(self.shape)  # no copy: the map's own pages
        else:
            a = _widen(raw, self._kind).reshape(self.shape)
        return a if dtype is None else a.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"MappedTensor({self._kind}, shape={self.shape})"


def map_safetensors(path: str | Path) -> tuple[dict[str, MappedTensor], dict]:
    """The tensors of one safetensors file as :class:`MappedTensor` (nothing read yet but the header, every
    range checked as :func:`read_safetensors` does), and the header's ``__metadata__`` (strings) or {}."""
    path = Path(path)
    entries, n, data_size = _safetensors_entries(path)
    with open(path, "rb") as f:
        f.seek(8)
        meta = json.loads(f.read(n)).get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise ModelFileError(f"{path}: the header's __metadata__ is not an object")
    # copy-on-write: the arrays are writable for torch.from_numpy, and nothing is ever written back to the file
    mm = np.memmap(path, dtype=np.uint8, mode="c", offset=8 + n, shape=(data_size,)) if data_size else np.zeros(0, np.uint8)
    return {name: MappedTensor(mm, begin, end, dtype, shape) for begin, end, name, dtype, shape in entries}, meta


def map_safetensors_shards(paths: list[Path]) -> dict[str, MappedTensor]:
    """:func:`map_safetensors` of every shard; a tensor defined in two shards is refused with both named."""
    arrays: dict[str, MappedTensor] = {}
    origin: dict[str, Path] = {}
    for p in paths:
        for name, a in map_safetensors(p)[0].items():
            if name in arrays:
                raise ModelFileError(f"{p}: tensor {name!r} is defined again (first in {origin[name].name}); each tensor must be defined once")
            arrays[name], origin[name] = a, p
    return arrays


def read_safetensors_shards(paths: list[Path]) -> dict[str, np.ndarray]:
    """The tensors of every shard; a tensor defined in two shards is refused with both named."""
    arrays: dict[str, np.ndarray] = {}
    origin: dict[str, Path] = {}
    for p in paths:
        for name, a in read_safetensors(p).items():
            if name in arrays:
                raise ModelFileError(f"{p}: tensor {name!r} is defined again (first in {origin[name].name}); each tensor must be defined once")
            arrays[name], origin[name] = a, p
    return arrays


def check_tensor(a: np.ndarray, where: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``a`` must be a floating-point array of ``shape`` (when given) with finite entries."""
    if not np.issubdtype(a.dtype, np.floating):
        raise ModelFileError(f"{where} has dtype {a.dtype}; weights must be floating point")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise ModelFileError(f"{where} has shape {tuple(a.shape)}, expected {tuple(shape)}")
    if not np.isfinite(a).all():
        raise ModelFileError(f"{where} holds non-finite values (NaN or inf)")
    return a


# --- GGUF ------------------------------------------------------------------------------------------


def gguf_counts(path: Path) -> tuple[int, int]:
    """The GGUF header's (tensor count, key/value count), refused when the file cannot hold that many entries."""
    size = regular_file(path)
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:4] != b"GGUF":
        raise ModelFileError(f"{path} is not a readable GGUF file (no GGUF header)")
    n_tensors, n_kv = int.from_bytes(head[8:16], "little"), int.from_bytes(head[16:24], "little")
    # a tensor entry takes at least 24 bytes (name length, dimension count, one dimension, type, offset), a key/value 13
    if 24 + 24 * n_tensors + 13 * n_kv > size:
        raise ModelFileError(
            f"{path} is not a readable GGUF file: its header declares {n_tensors} tensors and {n_kv} metadata keys, more than its {size} bytes hold"
        )
    return n_tensors, n_kv


# --- GGUF metadata: the values of a gguf.GGUFReader's fields (the caller types them) -----------------------


def gguf_values(reader: gguf.GGUFReader, path: Path, keys: Iterable[str]) -> dict:
    """The metadata values of ``keys`` present in the file (``ReaderField.contents()``)."""
    values = {}
    for key in keys:
        f = reader.fields.get(key)
        if f is not None:
            try:
                values[key] = f.contents()
            except Exception as err:  # a field whose parts do not decode
                raise ModelFileError(f"{path}: the metadata key {key!r} cannot be decoded ({type(err).__name__})") from None
    return values


def gguf_field(reader: gguf.GGUFReader, path: Path, key: str, default: object = None) -> object:
    """One metadata value (untyped: the caller checks it); ModelFileError naming the key when absent without a default."""
    value = gguf_values(reader, path, [key]).get(key)
    if value is None:
        if default is not None:
            return default
        raise ModelFileError(f"{path}: the metadata key {key!r} is missing")
    return value
