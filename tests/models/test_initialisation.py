"""Random decoders at initialisation (issue 53 item 2, the trainability diagram): the scales act where the module
says, against oracles that do not use its measurements (the embeddings' own cosines, uniform attention's exact
entropy, the spread qk_scale^2 that the logits of independent tokens have by construction)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attndyn.models import initialisation as init

SHAPE = init.Shape(d=64, heads=4, kv_heads=2, layers=3, n=48)


def test_rescaling_one_draw_equals_drawing_at_the_scales():
    base = init.random_state(SHAPE, 1.0, 1.0, seed=3)
    direct = init.random_state(SHAPE, 0.7, 2.5, seed=3)
    scaled = init.rescaled(base, 0.7, 2.5)
    assert scaled.keys() == direct.keys()
    for key in direct:
        assert torch.equal(scaled[key], direct[key]), key
    # the scales land on the maps the module names, and nowhere else
    moved = {k.split(".")[-2] for k in base if not torch.equal(base[k], scaled[k])}
    assert moved == {"q_proj", "k_proj", "o_proj", "down_proj"}


def test_no_residual_branch_leaves_the_embeddings_and_no_scores_give_uniform_attention():
    state = init.random_state(SHAPE, 0.0, 0.0, seed=1)
    out = init.collapse(state, SHAPE, min_keys=4)
    x = state["model.embed_tokens.weight"].numpy()  # every layer adds 0: the last state is the embeddings
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    G = u @ u.T
    assert out["cosine"] == pytest.approx((G.sum() - np.trace(G)) / (len(G) * (len(G) - 1)), abs=1e-14)
    assert out["entropy"] == pytest.approx(1.0, abs=1e-12)  # zero scores: uniform over the visible keys, H = ln(keys)
    assert out["spread"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("qk", [0.5, 2.0])
def test_the_first_layer_s_logits_spread_by_qk_scale_squared(qk):
    spreads = [init.collapse(init.random_state(SHAPE, qk, 1.0, seed=s), SHAPE)["spread0"] / qk**2 for s in range(3)]
    assert 0.85 < float(np.mean(spreads)) < 1.1, spreads


def test_entropy_collapses_above_the_freezing_scale_and_not_below():
    star = init.freezing_qk_scale(SHAPE.n)
    assert star == pytest.approx((2 * math.log(48)) ** 0.25)
    low = init.collapse(init.random_state(SHAPE, 0.5, 1.0, seed=0), SHAPE)["entropy"]
    high = init.collapse(init.random_state(SHAPE, 2.5 * star, 1.0, seed=0), SHAPE)["entropy"]
    assert low > 0.95
    assert high < 0.2


def test_bad_shapes_and_scales_are_refused_naming_them():
    with pytest.raises(ValueError, match="heads of even size"):
        init.Shape(d=30, heads=4)
    with pytest.raises(ValueError, match="two tokens"):
        init.Shape(n=1)
    with pytest.raises(ValueError, match="qk_scale nan"):
        init.random_state(SHAPE, float("nan"), 1.0, 0)
    with pytest.raises(ValueError, match="min_keys 99"):
        init.collapse(init.random_state(SHAPE, 1.0, 1.0, 0), SHAPE, min_keys=99)
    with pytest.raises(ValueError, match="n 1"):
        init.freezing_qk_scale(1)
