"""Shared test helpers (imported explicitly; conftest.py holds fixtures only)."""

import contextlib
from pathlib import Path

import numpy as np
import torch

import attndyn as ad

# The repository's root folder (configs/, examples/, src/).
ROOT = Path(__file__).resolve().parent.parent


def random_weights(rng, d, *, heads=1, m=None, scale=0.5):
    """Random non-symmetric Q, K, V (Gaussian entries) as NumPy float64."""
    m = d if m is None else m
    Q = rng.normal(0, scale, (heads, m, d))
    K = rng.normal(0, scale, (heads, m, d))
    V = rng.normal(0, scale, (heads, d, d))
    return ad.Weights(Q, K, V)


def tensor(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


@contextlib.contextmanager
def one_gguf_parse():
    """Within the block, ``gguf.GGUFReader(path)`` parses each file once and hands the same reader back.

    transformers' GGUF loader builds a new ``GGUFReader`` for the tokenizer, for the config and for the
    weights: three parses of the same file (about 15 s each for Gemma-3-270M's 262k-token vocabulary). A
    reader is a read-only memory map of the file, so the second and third loads see the same fields and
    tensors. Only the oracle's loading runs in the block; attndyn's own reader is called outside it."""
    import gguf

    parse, readers = gguf.GGUFReader, {}

    def reader(path, *args, **kwargs):
        key = (str(Path(path).resolve()), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = parse(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = parse


def copy_of(report: Path, tmp_path: Path, name: str = "report") -> Path:
    """A folder attndyn wrote, copied into the test's own folder (files, modes, times). Its markers record content
    hashes and relative paths only, so the copy is attndyn's as a later process finds it: a module-scoped run
    shared by tests that each change their copy."""
    import shutil

    out = tmp_path / name
    shutil.copytree(report, out, symlinks=True)
    return out


def refused_in_one_line(case: str, code: int, stdout: str, err: str, expected: str, out: Path) -> str:
    """Assert that a command exited 2 with one ``error:`` line holding ``expected``, no traceback and no page in ``out``; the line."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"{case}: exit {code}\n{stdout}\n{err}"
    assert len(lines) == 1, f"{case}: {err!r}"
    assert lines[0].startswith("error: "), f"{case}: {err!r}"
    assert expected in lines[0], f"{case}: {lines[0]!r} does not name {expected!r}"
    assert "Traceback" not in stdout + err
    assert not (out / "index.html").exists()
    return lines[0]
