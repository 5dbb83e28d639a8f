"""Lazy weights (issue 37, item 5): a decoder read from a file holds no layer; the forward pass reads each
layer from the memory map when it runs and drops it before the next one is read; the numbers are the
eager reader's, bit for bit.

Oracles: the eager reader of the same file (``lazy=False``, every layer held in float64, the code path
the transformers oracles of test_decoders / test_families / test_gemma3 check); weak references to every
tensor of every layer the lazy reader builds (alive or not, counted when the next one is built).
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from attndyn.models import decoder as decoder_mod
from attndyn.models.decoder import LazyLayers, forward
from attndyn.models.decoder_files import load_decoder, read_gguf

transformers = pytest.importorskip("transformers")

IDS = [3, 17, 5, 60, 2, 9, 41, 8, 8, 30, 1, 57]  # within every tiny vocabulary (64 tokens at least)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _young_heap():
    """The objects alive before the test frozen (``gc.freeze``): each ``gc.collect`` the witness runs then scans
    what the test made, the layers it counts among them, not the whole test process' heap (0.4 s a collection
    after torch and transformers are loaded). A frozen object's references keep a young object alive, as they
    would anyway; a cycle among the test's own objects is collected as before."""
    gc.freeze()
    yield
    gc.unfreeze()


class Witness:
    """Weak references to the tensors of every layer LazyLayers builds, and how many earlier layers were still
    alive each time a new one was built."""

    def __init__(self, monkeypatch):
        self.refs: list[list[weakref.ref]] = []
        self.alive_at_build: list[int] = []
        original = LazyLayers.at

        def at(layers, k, dtype):
            gc.collect()
            self.alive_at_build.append(self.alive())
            layer = original(layers, k, dtype)
            self.refs.append([weakref.ref(t) for t in vars(layer).values() if isinstance(t, torch.Tensor)])
            return layer

        monkeypatch.setattr(LazyLayers, "at", at)

    def alive(self) -> int:
        return sum(any(r() is not None for r in refs) for refs in self.refs)


def _folder(family: str, tmp_path):
    if family == "llama":
        from tests.models.test_decoders import tiny_llama

        return tiny_llama(tmp_path)[1]
    if family == "gpt2":
        from tests.models.test_decoders import tiny_gpt2

        return tiny_gpt2(tmp_path)[1]
    if family == "gemma3":
        from tests.models.test_gemma3 import tiny_gemma3

        return tiny_gemma3(tmp_path)[1]
    from tests.models.test_families import tiny

    return tiny(family, tmp_path)[1]


def assert_identical(a, b):
    for name in ("hidden", "attentions", "logits"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert torch.equal(x, y), f"{name}: largest difference {float((x - y).abs().max()):.3g}"


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2", "qwen2", "phi3", "gpt_neox", "gemma2"])
def test_lazy_folder_holds_no_layer_reads_one_at_a_time_and_equals_the_eager_reader(tmp_path, monkeypatch, family):
    folder = _folder(family, tmp_path)
    eager = load_decoder(folder, lazy=False)
    assert isinstance(eager.layers, tuple)
    w = Witness(monkeypatch)
    lazy = load_decoder(folder)
    assert isinstance(lazy.layers, LazyLayers)
    L = len(lazy.layers)
    gc.collect()
    assert len(w.refs) == L  # the load checks every layer once, one at a time,
    assert w.alive() == 0  # and keeps none
    for dtype in (torch.float32, torch.float64):
        before = len(w.refs)
        fw = forward(lazy, IDS, dtype=dtype)
        assert len(w.refs) - before == L  # each layer read once
        assert max(w.alive_at_build[before:]) == 0  # the previous layer was freed before the next was read
        gc.collect()
        assert w.alive() == 0
        assert_identical(fw, forward(eager, IDS, dtype=dtype))
    # indexing gives the eager reader's float64 layer
    for k in (0, L - 1):
        a, b = lazy.layers[k], eager.layers[k]
        for name, t in vars(b).items():
            u = getattr(a, name)
            assert (t is None and u is None) or (u.dtype == t.dtype == torch.float64 and torch.equal(u, t)), name


def test_lazy_gguf_reads_its_cache_one_layer_at_a_time(tmp_path, monkeypatch):
    from tests.models.test_decoders import tiny_llama, write_gguf_like_llama_cpp

    model, folder = tiny_llama(tmp_path)
    path = tmp_path / "tiny.gguf"
    write_gguf_like_llama_cpp(folder, model, path)
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache-eager"))
    eager = read_gguf(path, lazy=False)
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache-lazy"))
    w = Witness(monkeypatch)
    for lazy in (read_gguf(path), read_gguf(path)):  # the first read (which writes the cache) and a cached one
        assert isinstance(lazy.layers, LazyLayers)
        before = len(w.refs)
        fw = forward(lazy, IDS, dtype=torch.float32)
        assert len(w.refs) - before == len(lazy.layers)
        assert max(w.alive_at_build[before:]) == 0
        assert_identical(fw, forward(eager, IDS, dtype=torch.float32))


def test_a_layer_kept_by_the_forward_pass_is_seen(tmp_path, monkeypatch):
    """The witness can fail: a forward pass that keeps every layer it read is caught."""
    lazy = load_decoder(_folder("llama", tmp_path))
    w = Witness(monkeypatch)
    kept = []
    original = decoder_mod.layer_at
    monkeypatch.setattr(decoder_mod, "layer_at", lambda d, k, dtype: kept.append(original(d, k, dtype)) or kept[-1])
    forward(lazy, IDS, dtype=torch.float32)
    assert w.alive_at_build == list(range(len(lazy.layers)))
