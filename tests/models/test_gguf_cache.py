"""The GGUF reader's cache, streamed tensor by tensor (issue 37 item 5): a first read holds one dequantized
tensor at a time, writes a safetensors file that ``safetensors`` reads as it read the eager writer's, and
never leaves a cache that looks complete when it is interrupted or a tensor is refused.

The files are tiny random LLaMA models written here with ``gguf``'s writer from NumPy arrays (no
``transformers``): float32, whose cache must hold the written values themselves (the query/key rows put back
from llama.cpp's order by :func:`rope_interleave`'s inverse), and Q8_0, whose cache must hold
``gguf.quants.dequantize`` of the written bytes. Both are also compared with what the eager writer of before
(``safetensors.numpy.save_file`` of every array) gives, read back by ``safetensors``.
"""

from __future__ import annotations

import json
import weakref

import numpy as np
import pytest

from attndyn.models import decoder_files
from attndyn.models.bert import CheckpointError
from attndyn.models.decoder_files import CACHE_FORMAT, read_gguf, rope_interleave

gguf = pytest.importorskip("gguf")
safetensors = pytest.importorskip("safetensors")
T = gguf.GGMLQuantizationType
H, KV, D, F, L, V = 4, 2, 32, 64, 2, 37
LAYER = {"attn_norm": (D,), "attn_q": (D, D), "attn_k": (KV * D // H, D), "attn_v": (KV * D // H, D), "attn_output": (D, D)}
LAYER |= {"ffn_norm": (D,), "ffn_gate": (F, D), "ffn_up": (F, D), "ffn_down": (D, F)}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights in the Hugging Face row order, under their GGUF names."""
    rng = np.random.default_rng(seed)
    shapes = {"token_embd.weight": (V, D), "output_norm.weight": (D,), "output.weight": (V, D)}
    shapes |= {f"blk.{k}.{name}.weight": s for k in range(L) for name, s in LAYER.items()}
    return {name: rng.standard_normal(s).astype(np.float32) for name, s in shapes.items()}


def write(path, w: dict[str, np.ndarray], qtype=T.F32) -> dict[str, np.ndarray]:
    """``w`` as llama.cpp writes a llama file (query/key rows interleaved), matrices of type ``qtype``; the
    float32 values the cache must hold for each tensor (Q8_0: gguf's dequantization of the bytes written)."""
    out = gguf.GGUFWriter(str(path), "llama")
    for add, value in (("block_count", L), ("embedding_length", D), ("feed_forward_length", F), ("head_count", H)):
        getattr(out, f"add_{add}")(value)
    out.add_head_count_kv(KV)
    out.add_rope_freq_base(1000.0)
    out.add_layer_norm_rms_eps(2.0**-17)
    out.add_context_length(64)
    want = {}
    for name, a in w.items():
        stored = rope_interleave(a, H) if name.endswith("attn_q.weight") else rope_interleave(a, KV) if name.endswith("attn_k.weight") else a
        stored = np.ascontiguousarray(stored)
        if qtype == T.F32 or a.ndim == 1:
            out.add_tensor(name, stored)
            want[name] = a
        else:
            q = gguf.quants.quantize(stored, qtype)
            out.add_tensor(name, q, raw_dtype=qtype)
            deq = gguf.quants.dequantize(q, qtype).reshape(a.shape)
            heads = H if "attn_q" in name else KV if "attn_k" in name else None
            want[name] = deq if heads is None else decoder_files.undo_rope_interleave(deq, heads)
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    return want


def cache_files(tmp_path) -> list[str]:
    folder = tmp_path / "cache" / "decoders"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def read_with_safetensors(path) -> tuple[dict[str, np.ndarray], dict]:
    from safetensors import safe_open

    with safe_open(str(path), "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()  # noqa: SIM118


@pytest.mark.parametrize("qtype", [T.F32, T.Q8_0], ids=["F32", "Q8_0"])
def test_the_streamed_cache_equals_the_eager_writer_s_bit_for_bit(tmp_path, qtype):
    from safetensors.numpy import save_file

    path = tmp_path / "tiny.gguf"
    w = weights()
    want = write(path, w, qtype)
    if qtype == T.F32:  # the values written themselves, the query/key rows back in the Hugging Face order
        assert all(np.array_equal(want[n], w[n]) for n in w)
    dec = read_gguf(path)
    (cache,) = [p for p in (tmp_path / "cache" / "decoders").iterdir() if p.suffix == ".safetensors"]
    got, metadata = read_with_safetensors(cache)  # safetensors' own parser and range checks
    assert set(got) == set(want)
    for name, a in want.items():
        assert got[name].dtype == np.float32
        np.testing.assert_array_equal(got[name], a, err_msg=name)  # assert_array_equal: bit for bit on finite floats
        assert got[name].tobytes() == np.asarray(a, np.float32).tobytes(), name
    # the eager writer of before on the same arrays and metadata, read back by safetensors
    save_file({n: np.ascontiguousarray(a, np.float32) for n, a in want.items()}, str(tmp_path / "eager.safetensors"), metadata=metadata)
    eager, eager_meta = read_with_safetensors(tmp_path / "eager.safetensors")
    assert eager_meta == metadata
    assert metadata["format"] == CACHE_FORMAT
    assert json.loads(metadata["meta"])["layers"] == L
    assert all(eager[n].tobytes() == got[n].tobytes() and eager[n].shape == got[n].shape for n in eager)
    # the decoder of the first read is built on the cache's map: its maps are the cache's values
    np.testing.assert_array_equal(dec.layers.at(1, None).W_k.numpy(), want["blk.1.attn_k.weight"])
    # a second read (the cache) gives the same layers, lazily and eagerly
    for lazy in (True, False):
        again = read_gguf(path, lazy=lazy)
        np.testing.assert_array_equal(again.layers[1].W_q.numpy(), dec.layers[1].W_q.numpy())
        np.testing.assert_array_equal(again.head.numpy(), want["output.weight"])


def test_the_first_read_holds_one_dequantized_tensor_at_a_time(tmp_path, monkeypatch):
    path = tmp_path / "tiny.gguf"
    write(path, weights(), T.Q8_0)
    made: list[weakref.ref] = []
    alive_at_call: list[int] = []
    original = decoder_files._dequantize_one

    def witness(*args):  # NumPy arrays hold no cycles: a dropped one is freed at once
        alive_at_call.append(sum(r() is not None for r in made))
        a = original(*args)
        made.append(weakref.ref(a))
        return a

    monkeypatch.setattr(decoder_files, "_dequantize_one", witness)
    read_gguf(path)
    assert len(alive_at_call) == 3 + 9 * L  # every tensor dequantized once
    assert max(alive_at_call) == 0  # the previous one freed before the next is made


def test_an_interrupted_write_leaves_no_cache_and_the_next_read_rebuilds_it(tmp_path, monkeypatch):
    path = tmp_path / "tiny.gguf"
    want = write(path, weights())
    original = decoder_files._dequantize_one
    calls = []
    seen_mid_stream = {}

    def third_fails(*args):
        calls.append(args[1].name)
        if len(calls) == 3:  # what a process killed now would leave: a temporary file, no cache
            seen_mid_stream["files"] = cache_files(tmp_path)
            seen_mid_stream["read"] = decoder_files._read_cache(decoder_files._sha256(path), lazy=True)
            raise KeyboardInterrupt
        return original(*args)

    monkeypatch.setattr(decoder_files, "_dequantize_one", third_fails)
    with pytest.raises(KeyboardInterrupt):
        read_gguf(path)
    (tmp,) = seen_mid_stream["files"]
    assert tmp.startswith(".")
    assert tmp.endswith(".tmp")  # the stream was writing, under a temporary name
    assert seen_mid_stream["read"] is None  # the cache, as a reader sees it: absent
    assert cache_files(tmp_path) == []  # and the temporary file is removed
    monkeypatch.setattr(decoder_files, "_dequantize_one", original)
    dec = read_gguf(path)
    files = cache_files(tmp_path)
    assert [n for n in files if n.endswith(".safetensors")]
    assert not any(n.endswith(".tmp") for n in files)
    np.testing.assert_array_equal(dec.layers.at(0, None).W_q.numpy(), want["blk.0.attn_q.weight"])


def test_a_tensor_with_a_nan_is_refused_with_its_name_and_nothing_is_cached(tmp_path, monkeypatch):
    path = tmp_path / "nan.gguf"
    w = weights()
    w["blk.1.ffn_up.weight"][5, 7] = np.nan
    write(path, w)
    original = decoder_files._dequantize_one
    calls = []
    monkeypatch.setattr(decoder_files, "_dequantize_one", lambda *args: calls.append(args[1].name) or original(*args))
    with pytest.raises(CheckpointError, match=r"tensor 'blk\.1\.ffn_up\.weight' holds non-finite values"):
        read_gguf(path)
    assert calls[-1] == "blk.1.ffn_up.weight"  # refused as it is dequantized: no later tensor is read
    assert len(calls) < len(w)  # (and later ones there were)
    assert cache_files(tmp_path) == []
