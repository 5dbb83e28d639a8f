"""The page's forwards layer-major, with no copy of a model (issue 49 item 4): ``executor.forwards`` runs many
prompts through each layer once; ``in_dtype`` reads a decoder's layers in a dtype without holding them; the
random-weight null's layers are drawn one at a time from their generator; the nulls and the network's forwards
are the same numbers as before, bit for bit.

Oracles: :func:`attndyn.models.decoder.forward`, one prompt at a time (itself checked against ``transformers``
in test_decoders / test_families / test_gemma3); ``with_dtype``, the whole model cast at once; the eager
random-weight layers (:func:`random_decoder`'s, one generator drawn in order); the nulls recomputed here with
``forward`` on eagerly drawn models.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attndyn.models import decoder_geometry as geo
from attndyn.models import decoder_nulls as nulls
from attndyn.models import executor
from attndyn.models.decoder import LazyLayers, forward, in_dtype, with_dtype
from attndyn.models.decoder_files import load_decoder

pytest.importorskip("transformers")

IDS = [[3, 17, 5, 60, 2, 9, 41, 8], [1, 57, 30, 8, 8, 2, 9, 11, 40, 6, 12], [4, 4, 33]]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _lazy(family: str, tmp_path):
    from tests.models.test_lazy import _folder

    return load_decoder(str(_folder(family, tmp_path)))


def _same_layer(a, b) -> bool:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if (x is None) != (y is None) or x is not None and (x.dtype != y.dtype or not torch.equal(x, y)):
            return False
    return True


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2", "gpt_neox"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_forwards_are_forward_bit_for_bit_and_build_each_layer_once(tmp_path, family, dtype):
    dec = _lazy(family, tmp_path)
    assert isinstance(dec.layers, LazyLayers)
    jobs = [(IDS[0], "softmax"), (IDS[1], "uniform"), (IDS[2], "softmax"), (IDS[1], "softmax")]
    before = dec.layers.built
    got = executor.forwards(dec, jobs, dtype=dtype)
    assert dec.layers.built - before == len(dec.layers)  # one build a layer for the four prompts
    for (ids, how), fw in zip(jobs, got, strict=True):
        want = forward(dec, ids, dtype=dtype, attention=how, logits=False)
        assert fw.ids == want.ids
        assert fw.hidden.dtype == want.hidden.dtype == dtype
        assert torch.equal(fw.hidden, want.hidden), float((fw.hidden - want.hidden).abs().max())
        assert torch.equal(fw.attentions, want.attentions)
    assert executor.forwards(dec, [], dtype=dtype) == []
    with pytest.raises(ValueError, match="attention 'hard'"):
        executor.forwards(dec, [(IDS[0], "hard")])
    with pytest.raises(Exception, match=r"token ids must lie in \[0, "):
        executor.forwards(dec, [(IDS[0], "softmax"), ([10**6], "softmax")])


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_in_dtype_reads_the_layers_with_dtype_gives_and_holds_none(tmp_path, family):
    dec = _lazy(family, tmp_path)
    for dtype in (torch.float32, torch.float64):
        built = dec.layers.built
        view = in_dtype(dec, dtype)
        assert dec.layers.built == built  # making the view builds nothing (no check pass, no copy)
        copy = with_dtype(dec, dtype)
        for k in (1, 0, len(dec.layers) - 1):
            assert _same_layer(view.layers[k], copy.layers[k]), (dtype, k)
        assert view.norm.dtype == dtype
        assert torch.equal(view.norm, copy.norm)
        assert isinstance(view.layers, LazyLayers)
    held = with_dtype(dec, torch.float64)  # an eagerly held decoder: the view casts the held layer
    view = in_dtype(held, torch.float32)
    assert _same_layer(view.layers[2], with_dtype(held, torch.float32).layers[2])
    with pytest.raises(ValueError, match="int32 is not a floating-point"):
        in_dtype(dec, torch.int32)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_the_random_layers_drawn_one_at_a_time_are_the_eager_draw_in_any_order(tmp_path, family):
    dec = _lazy(family, tmp_path)
    tokens = sorted({t for i in IDS for t in i})
    model, _ = nulls.random_decoder_on(dec, 7, tokens, 0.03)
    eager = nulls.random_decoder(dec, 7, 0.03)  # one generator: the layers in order, then the other tensors
    assert isinstance(model.layers, LazyLayers)
    L = len(dec.layers)
    for k in (L - 1, 0, 2, 1, L - 1):  # a later layer first (drawn through the earlier ones), then back
        assert _same_layer(model.layers[k], eager.layers[k]), k
        assert model.layers[k].W_q.dtype == torch.float32
    if family == "gpt2":  # learned positions: drawn from the generator as it stands after every layer
        g = torch.Generator().manual_seed(7)
        nulls._random_layers(dec, g, 0.03)
        assert torch.equal(model.pos_embed, nulls._normal(dec.pos_embed, g, 0.03))


def test_the_nulls_are_those_of_forward_on_eagerly_drawn_models(tmp_path):
    from attndyn.models.decoder_null_runs import null_values

    dec = _lazy("llama", tmp_path)
    ids = [list(range(2, 14)), list(range(5, 20)), [9, 3, 3, 7]]
    v, draws = null_values(dec, ids, torch.float64, random_draws=2, shuffle_draws=2, stds=(0.02, 0.05))
    assert draws == {"uniform": 1, "random": 2, "shuffled": 2, "random_2": 2}
    run = with_dtype(dec, torch.float64)
    tokens = sorted({t for i in ids for t in i})

    def values(model, prompts, how="softmax"):
        fws = [forward(model, p, dtype=torch.float64, attention=how, logits=False) for p in prompts]
        return {key: np.stack([geo.layer_values([f], clusters=False, keys=geo.NULL_KEYS)[key][0] for f in fws]) for key in geo.NULL_KEYS}

    want = {"uniform": [values(run, ids, "uniform")]}
    for name, std in (("random", 0.02), ("random_2", 0.05)):
        want[name] = []
        for k in range(2):
            model, rows = nulls.random_decoder_on(dec, k, tokens, std)
            g = torch.Generator().manual_seed(k)
            eager = dataclasses.replace(model, layers=nulls._random_layers(dec, g, std))  # drawn in order, held
            want[name].append(values(with_dtype(eager, torch.float64), [rows(i) for i in ids]))
    rng = np.random.default_rng(0)
    want["shuffled"] = [values(run, [nulls.shuffled(i, rng, 0) for i in ids]) for _ in range(2)]
    for name, per_draw in want.items():
        for key in geo.NULL_KEYS:
            expected = np.stack([w[key] for w in per_draw], axis=1)
            np.testing.assert_array_equal(v[name][key], expected, err_msg=f"{name} {key}")


def test_pooled_forwards_split_each_decoder_s_jobs_over_the_workers_and_keep_their_order(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDYN_THREADS", "2")
    a = _lazy("llama", tmp_path / "a")
    b = with_dtype(_lazy("gemma3", tmp_path / "b"), torch.float64)  # an eagerly held decoder among them
    jobs = [(a, IDS[0], "softmax"), (a, IDS[1], "uniform"), (a, IDS[2], "softmax"), (b, IDS[1], "softmax"), (a, IDS[1], "softmax")]
    seen: list[tuple[int, int]] = []
    got = executor.pooled_forwards(jobs, dtype=torch.float32, progress=lambda i, n: seen.append((i, n)))
    assert seen[-1] == (5, 5)
    for (dec, ids, how), fw in zip(jobs, got, strict=True):
        want = forward(dec, ids, dtype=torch.float32, attention=how, logits=False)
        assert torch.equal(fw.hidden, want.hidden)
        assert torch.equal(fw.attentions, want.attentions)


@pytest.mark.parametrize("tie", [False, True])
def test_parameters_are_transformers_count_and_the_size_chooses_the_page_s_dtype(tmp_path, monkeypatch, tie):
    from attndyn.models.decoder import parameters
    from tests.models.test_decoders import tiny_llama

    model, folder = tiny_llama(tmp_path, tie=tie)
    dec = load_decoder(str(folder))
    assert parameters(dec) == model.num_parameters()  # transformers' own count (a tied head counted once)
    dtype, rule = nulls.auto_dtype(dec)
    assert dtype == torch.float64
    assert "at most 1 B" in rule
    monkeypatch.setattr(nulls, "AUTO_FLOAT64_PARAMS", parameters(dec) - 1)
    dtype, rule = nulls.auto_dtype(dec)
    assert dtype == torch.float32
    assert "more than" in rule
