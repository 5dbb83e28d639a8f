"""Linear attention (``normalization="linear"``, SPEC §9.1) against a NumPy field written from the
definition, and the exact covariance identity C' = 2 beta C^2 it obeys at every n."""

import math

import numpy as np
import pytest

import attndyn as ad
from tests.helpers import random_weights


def numpy_field(x, W, beta, causal=False):
    n = x.shape[-2]
    out = np.zeros_like(x)
    for h in range(W.heads):
        Q, K, V = (M[h].numpy() for M in (W.Q, W.K, W.V))
        L = beta * (x @ Q.T) @ (x @ K.T).swapaxes(-1, -2)
        if causal:
            L = np.where(np.tri(n, dtype=bool), L, 0.0) / np.arange(1, n + 1)[:, None]
        else:
            L = L / n
        out += L @ (x @ V.T)
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [1, 2])
def test_linear_field_equals_the_definition(rng, causal, heads):
    W = random_weights(rng, 3, heads=heads, scale=0.6)
    x = rng.normal(size=(2, 8, 3))
    model = ad.Model(W, beta=0.8, normalization="linear", mask="causal" if causal else "full")
    np.testing.assert_allclose(ad.velocity(0.0, x, model), numpy_field(x, W, 0.8, causal), rtol=1e-13, atol=1e-14)


def test_linear_attention_moves_the_covariance_by_2_beta_c_squared(rng):
    x = rng.normal(size=(50, 3))
    v = ad.velocity(0.0, x, ad.Model(ad.Weights.identity(3), beta=1.7, normalization="linear"))
    C = x.T @ x / 50
    np.testing.assert_allclose((v.T @ x + x.T @ v) / 50, 2 * 1.7 * C @ C, rtol=1e-13)


@pytest.mark.parametrize(("kw", "words"), [({"beta": math.inf}, "beta=inf"), ({"attention": "fused"}, "fused")])
def test_linear_attention_options_are_validated(kw, words):
    with pytest.raises(ValueError, match=words):
        ad.Model(ad.Weights.identity(2), normalization="linear", **kw)
