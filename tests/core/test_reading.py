"""The bounded readers (issue 35): regular files only, depth bounded, declared sizes before reads."""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

from attndyn.core import reading
from attndyn.core.reading import MAX_DEPTH, FileRefused


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_depth_counts_lists_and_tables():
    assert reading.depth(3) == 0
    assert reading.depth([]) == 1
    assert reading.depth({"a": [1, {"b": [2]}]}) == 4
    assert reading.depth([[], [[[]]], {}]) == 4


@pytest.mark.parametrize("language", ["json", "toml"])
def test_nesting_is_bounded_at_max_depth(language):
    """MAX_DEPTH levels are read; one more is refused (the boundary itself, not only a huge nesting)."""
    if language == "json":
        assert reading.depth(reading.loads_json(nested(MAX_DEPTH), "x.json")) == MAX_DEPTH
        with pytest.raises(FileRefused, match="more than 64 deep"):
            reading.loads_json(nested(MAX_DEPTH + 1), "x.json")
        with pytest.raises(FileRefused, match="more than 64 deep"):
            reading.loads_json(nested(100_000), "x.json")  # Python's parser alone raised RecursionError
    else:
        assert reading.depth(reading.loads_toml("a = " + nested(MAX_DEPTH - 1), "x.toml")) == MAX_DEPTH
        with pytest.raises(FileRefused, match="more than 64 deep"):
            reading.loads_toml("a = " + nested(MAX_DEPTH), "x.toml")
        with pytest.raises(FileRefused, match="more than 64 deep"):
            reading.loads_toml("a = " + nested(5000), "x.toml")


def test_only_regular_files_are_read(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it for reading would block: it must be refused without being opened
    with pytest.raises(FileRefused, match="FIFO"):
        reading.read_text(fifo, "config file")
    with pytest.raises(FileRefused, match="character device"):
        reading.read_text("/dev/zero", "config file")
    with pytest.raises(FileRefused, match="folder"):
        reading.read_text(tmp_path, "config file")
    with pytest.raises(FileRefused, match="does not exist"):
        reading.read_text(tmp_path / "none", "config file")
    (tmp_path / "ok.txt").write_text("fine")
    assert reading.read_text(tmp_path / "ok.txt") == "fine"
    (tmp_path / "big.txt").write_bytes(b"x" * 2000)
    with pytest.raises(FileRefused, match="MiB"):
        reading.read_text(tmp_path / "big.txt", limit=1000)


def test_read_json_wants_a_table(tmp_path):
    (tmp_path / "l.json").write_text("[1, 2]")
    with pytest.raises(FileRefused, match="JSON list"):
        reading.read_json(tmp_path / "l.json")
    assert reading.read_json(tmp_path / "l.json", table=False) == [1, 2]


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_declared_sizes_are_the_arrays_own(tmp_path, save):
    """Headers only: the shapes, dtypes and byte counts declared equal numpy's for the arrays saved."""
    arrays = {"a": np.arange(12.0).reshape(3, 4), "b": np.zeros((2, 0, 5), np.float32), "c": np.array(7, np.int64)}
    save(tmp_path / "x.npz", **arrays)
    declared = reading.npz_declared(tmp_path / "x.npz")
    assert declared == {k: (v.shape, v.dtype, v.nbytes) for k, v in arrays.items()}
    loaded = reading.load_npz(tmp_path / "x.npz")
    for k, v in arrays.items():
        np.testing.assert_array_equal(loaded[k], v)


def test_an_archive_that_declares_more_than_it_holds_is_refused(tmp_path):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)})
    with zipfile.ZipFile(tmp_path / "lie.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", buf.getvalue() + bytes(24))
    with pytest.raises(FileRefused, match=r"declares shape \(1099511627776,\).*damaged"):
        reading.load_npz(tmp_path / "lie.npz")


def test_arrays_larger_than_the_memory_available_are_not_read(tmp_path, monkeypatch):
    np.savez_compressed(tmp_path / "z.npz", x=np.zeros(2**18))  # 2 MiB of zeros, a few KiB on disk
    assert (tmp_path / "z.npz").stat().st_size < 2**16
    monkeypatch.setattr(reading, "available_memory", lambda: 2**21 + 1)
    assert reading.load_npz(tmp_path / "z.npz")["x"].shape == (2**18,)
    monkeypatch.setattr(reading, "available_memory", lambda: 2**21 - 1)
    with pytest.raises(FileRefused, match="0.00195 GiB of arrays"):
        reading.load_npz(tmp_path / "z.npz")


def test_object_arrays_and_empty_files_are_refused(tmp_path):
    np.savez(tmp_path / "o.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(FileRefused, match="Python objects"):
        reading.load_npz(tmp_path / "o.npz")
    (tmp_path / "e.npz").write_bytes(b"")
    with pytest.raises(FileRefused, match="not a readable .npz"):
        reading.load_npz(tmp_path / "e.npz")
