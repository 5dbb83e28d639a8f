"""Fused (SDPA) vs dense attention, and the hardmax limit."""

import math

import numpy as np
import pytest
import torch

import attndyn as ad
from tests.helpers import random_weights
from tests.tolerances import FUSED_VS_DENSE, HARDMAX_MATCH


@pytest.mark.parametrize("n", [1, 7, 37, 129, 300])
@pytest.mark.parametrize("mask", ["full", "causal"])
@pytest.mark.parametrize("heads", [1, 3])
def test_fused_matches_dense(rng, n, mask, heads):
    W = random_weights(rng, 4, heads=heads, m=5, scale=0.7)
    x = torch.as_tensor(rng.normal(size=(2, n, 4)))
    for kw in [{}, {"rescaled": True}] if heads == 1 else [{}]:
        dense = ad.velocity(0.8, x, ad.Model(W, mask=mask, beta=1.5, **kw))
        fused = ad.velocity(0.8, x, ad.Model(W, mask=mask, beta=1.5, attention="fused", **kw))
        scale = dense.abs().max().item()
        np.testing.assert_allclose(fused.numpy(), dense.numpy(), atol=FUSED_VS_DENSE * max(1, scale), rtol=0)


def test_fused_beta_zero_is_uniform(rng):
    W = random_weights(rng, 2)
    x = torch.as_tensor(rng.normal(size=(5, 2)))
    a = ad.velocity(0.0, x, ad.Model(W, beta=0.0, attention="fused"))
    expected = np.tile(x.numpy().mean(0) @ W.V[0].numpy().T, (5, 1))
    np.testing.assert_allclose(a.numpy(), expected, atol=1e-14)


def test_hardmax_matches_large_beta_on_separated_scores(rng):
    W = ad.Weights.identity(2)
    x = torch.as_tensor(rng.normal(size=(10, 2)) * 2)
    big = ad.velocity(0.0, x, ad.Model(W, beta=1e3))
    hard = ad.velocity(0.0, x, ad.Model(W, beta=math.inf))
    np.testing.assert_allclose(big.numpy(), hard.numpy(), atol=HARDMAX_MATCH)
    P = ad.attention_matrix(ad.Model(W, beta=math.inf), x).numpy()[0]
    assert set(np.unique(P)) <= {0.0, 1.0}


def test_hardmax_averages_ties():
    W = ad.Weights.identity(2)
    # token 0 at the origin ties all scores; token 1 ties tokens 2 and 3 (same projection).
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 1.0], [2.0, -1.0]], dtype=torch.float64)
    P = ad.attention_matrix(ad.Model(W, beta=math.inf), x).numpy()[0]
    np.testing.assert_allclose(P[0], [0.25] * 4)
    np.testing.assert_allclose(P[1], [0, 0, 0.5, 0.5])
    np.testing.assert_allclose(P[2], [0, 0, 1, 0])


def test_hardmax_causal_restricts_argmax():
    W = ad.Weights.identity(1)
    x = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    P = ad.attention_matrix(ad.Model(W, beta=math.inf, mask="causal"), x).numpy()[0]
    np.testing.assert_allclose(P, np.eye(3))


@pytest.mark.parametrize("shape", [(32, 32, 32), (16, 8, 8), (4, 32, 32), (1, 20, 20), (32, 64, 64)])
def test_row_softmax_equals_torch_softmax_on_every_path(shape):
    """The fast term's softmax (plain in-place passes for many short rows, torch.softmax otherwise)."""
    from attndyn.core.dynamics import _softmax_rows

    L = 30 * torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    L[..., 0, 1] = -math.inf  # a masked entry
    torch.testing.assert_close(_softmax_rows(L.clone()), torch.softmax(L, dim=-1), rtol=1e-14, atol=1e-300)
    L[..., 0, 0] = math.inf  # an overflowed logit: NaN, caught by the solvers at save times
    assert torch.isnan(_softmax_rows(L.clone())[..., 0, :]).all()
