"""GGUF tensor types read by attndyn (issue 37): each dequantized bit for bit.

A tiny Qwen3 model (feed-forward width 256, so that the rows of ``ffn_down`` hold whole 256-value
super-blocks of the K-quants) is written as a GGUF file whose ``ffn_down`` tensors have the type under
test, the rest float32; attndyn's reader (``load_decoder``) reads the file and its decoder's ``down``
maps are compared with

* an independent NumPy dequantizer written here from llama.cpp's block layouts (ggml-common.h) for F16,
  BF16, Q8_0, Q4_0 and Q4_1: bit for bit, since each value is one float32 product (and sum) of the same
  float16 scale and integer, computed in float32 as ggml does;
* ``gguf.quants.dequantize`` on the same bytes for every supported type: bit for bit. attndyn uses that
  dequantizer itself, so for the K- and IQ-quants this checks the read path (block order, row layout,
  shapes, offsets, the cache) and not the arithmetic; the arithmetic of those is gguf's.

Blocks come from ``gguf.quants.quantize`` of a random array where gguf quantizes the type (F16, BF16,
Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, TQ1_0, TQ2_0, MXFP4), otherwise random bytes of the type's block size,
redrawn block by block until gguf's dequantized values are finite and below 100 (random float16 scale
fields are sometimes infinite or NaN, which a trained file does not hold). A type attndyn does not read
exits 2 naming the type and the supported list.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndyn.models.decoder_files import GGUF_TYPES, load_decoder
from tests.models.test_families import tiny

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

T = gguf.GGMLQuantizationType
F = 256  # the feed-forward width: one K-quant super-block per row of ffn_down


def random_blocks(qtype, rows: int, cols: int, seed: int) -> np.ndarray:
    """Bytes of a (rows, cols) tensor of type ``qtype`` (module docstring), shape (rows, bytes per row)."""
    rng = np.random.default_rng(seed)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    try:
        q = gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), qtype)
        return np.ascontiguousarray(q).view(np.uint8).reshape(rows, -1)
    except NotImplementedError:
        pass
    raw = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
    for i in range(raw.shape[0]):
        while True:
            with np.errstate(all="ignore"):  # the block being tried may hold an infinite or NaN scale
                v = gguf.quants.dequantize(raw[i : i + 1], qtype)
            if np.all(np.isfinite(v)) and np.abs(v).max() < 100:
                break
            raw[i] = rng.integers(0, 256, size, dtype=np.uint8)
    return raw.reshape(rows, cols // block * size)


def reference(raw: np.ndarray, qtype, cols: int) -> np.ndarray:
    """llama.cpp's block layouts (ggml-common.h, dequantize_row_* in ggml-quants.c), in NumPy."""
    rows = raw.shape[0]
    b = raw.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])
    if qtype == T.F16:
        return raw.view(np.float16).astype(np.float32).reshape(rows, cols)
    if qtype == T.BF16:  # the upper 16 bits of a float32
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(rows, cols)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)  # every block starts with its float16 scale
    if qtype == T.Q8_0:  # d, 32 int8
        return (d * b[:, 2:].view(np.int8).astype(np.float32)).reshape(rows, cols)
    if qtype == T.Q4_0:  # d, 16 bytes: low nibbles are values 0..15, high nibbles 16..31, each minus 8
        qs = b[:, 2:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int8) - 8
        return (d * q.astype(np.float32)).reshape(rows, cols)
    if qtype == T.Q4_1:  # d, m, 16 bytes: x = d q + m
        m = b[:, 2:4].copy().view(np.float16).astype(np.float32)
        qs = b[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
        return (d * q + m).reshape(rows, cols)
    raise ValueError(qtype)


def write_quantized(tmp_path, qtype, *, seed: int = 0):
    """The tiny model as a GGUF file with ffn_down of type ``qtype``; the bytes written, per layer."""
    from tests.models.test_family_gguf import write_like_llama_cpp

    model, _ = tiny("qwen3", tmp_path, intermediate_size=F)
    raws = {}
    for k in range(model.config.num_hidden_layers):
        raws[f"blk.{k}.ffn_down.weight"] = random_blocks(qtype, model.config.hidden_size, F, seed + k)
    path = tmp_path / f"tiny-{qtype.name}.gguf"
    write_like_llama_cpp(model, path, "qwen3", raw={name: (r, qtype) for name, r in raws.items()})
    return path, raws


@pytest.mark.parametrize("name", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1"])
def test_dequantization_equals_a_reference_written_from_the_block_layout(tmp_path, monkeypatch, name):
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    path, raws = write_quantized(tmp_path, T[name])
    dec = load_decoder(path)
    for k, raw in enumerate(raws.values()):
        want = reference(raw, T[name], F)
        assert np.isfinite(want).all()
        assert np.abs(want).max() > 0
        np.testing.assert_array_equal(dec.layers[k].down.numpy(), want)


@pytest.mark.parametrize("name", [t for t in GGUF_TYPES if t != "F32"])
def test_dequantization_equals_gguf_s_dequantizer(tmp_path, monkeypatch, name):
    """Q4_K, Q5_K, Q6_K and the others of GGUF_TYPES: the decoder's maps are gguf's values of the written bytes."""
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    path, raws = write_quantized(tmp_path, T[name])
    for _ in range(2):  # the first read parses the file, the second reads the cache
        dec = load_decoder(path)
        for k, raw in enumerate(raws.values()):
            want = gguf.quants.dequantize(raw, T[name]).astype(np.float32).reshape(-1, F)
            assert np.abs(want).max() > 0
            np.testing.assert_array_equal(dec.layers[k].down.numpy(), want)
            built = dec.layers.at(k, None) if hasattr(dec.layers, "at") else dec.layers[k]  # lazy: the layer as read
            assert built.down.dtype == torch.float32


def test_an_unsupported_tensor_type_exits_2_naming_it_and_the_supported_ones(tmp_path, monkeypatch, capsys):
    """Q8_1 (llama.cpp's activation type, which gguf cannot dequantize) as a weight: refused before any dequantization."""
    from attndyn.app.cli import entry

    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    model, _ = tiny("qwen3", tmp_path, intermediate_size=F)
    from tests.models.test_family_gguf import write_like_llama_cpp

    block, size = gguf.GGML_QUANT_SIZES[T.Q8_1]
    raw = np.zeros((model.config.hidden_size, F // block * size), dtype=np.uint8)
    path = tmp_path / "q8_1.gguf"
    write_like_llama_cpp(model, path, "qwen3", raw={"blk.1.ffn_down.weight": (raw, T.Q8_1)})
    assert entry(["checkpoint", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "'blk.1.ffn_down.weight' has type Q8_1" in " ".join(err.split())
    assert "supported: F32, F16, BF16, Q4_0, Q4_1" in " ".join(err.split())
