"""The sliding-window mask (SPEC §9.3): token i attends to i - w < j <= i.

The oracle is a NumPy field written from the definition (masked logits, row-max softmax); the
dense, fused, batched and multi-head paths must equal it, and w >= n must be the causal mask.
"""

import numpy as np
import pytest
import torch

import attndyn as ad
from attndyn.core.dynamics import attention_logits
from attndyn.workflow.schema import ConfigError, parse_config
from attndyn.workflow.setup import build
from tests.helpers import random_weights
from tests.tolerances import FUSED_VS_DENSE


def numpy_field(x: np.ndarray, W: ad.Weights, beta: float, w: int) -> np.ndarray:
    n = x.shape[-2]
    i, j = np.indices((n, n))
    allowed = (j <= i) & (j > i - w)
    out = np.zeros_like(x)
    for h in range(W.heads):
        Q, K, V = (M[h].numpy() for M in (W.Q, W.K, W.V))
        L = beta * (x @ Q.T) @ (x @ K.T).swapaxes(-1, -2)
        L = np.where(allowed, L, -np.inf)
        P = np.exp(L - L.max(-1, keepdims=True))
        P /= P.sum(-1, keepdims=True)
        out += P @ (x @ V.T)
    return out


@pytest.mark.parametrize("attention", ["dense", "fused"])
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("w", [1, 2, 5])
def test_window_field_equals_the_definition(rng, attention, heads, w):
    W = random_weights(rng, 3, heads=heads, scale=0.8)
    x = rng.normal(size=(4, 11, 3))
    got = ad.velocity(0.0, x, ad.Model(W, beta=0.9, mask="window", window=w, attention=attention))
    np.testing.assert_allclose(got, numpy_field(x, W, 0.9, w), atol=FUSED_VS_DENSE, rtol=0)


def test_a_window_as_wide_as_the_sequence_is_the_causal_mask(rng):
    W = random_weights(rng, 3)
    x = rng.normal(size=(7, 3))
    wide = ad.velocity(0.0, x, ad.Model(W, mask="window", window=7))
    np.testing.assert_array_equal(wide, ad.velocity(0.0, x, ad.Model(W, mask="causal")))
    narrow = ad.velocity(0.0, x, ad.Model(W, mask="window", window=6))
    assert np.abs(narrow - wide)[-1].max() > 1e-3  # the last token loses the first: the mask acts


def test_window_attention_matrix_is_banded(rng):
    W = random_weights(rng, 2)
    P = ad.attention_matrix(ad.Model(W, mask="window", window=3), rng.normal(size=(8, 2))).numpy()[0]
    i, j = np.indices(P.shape)
    assert np.all(P[(j > i) | (j <= i - 3)] == 0)
    np.testing.assert_allclose(P.sum(-1), 1, atol=1e-14)
    L = attention_logits(ad.Model(W, mask="window", window=3), rng.normal(size=(8, 2))).numpy()[0]
    assert np.isinf(L[(j > i) | (j <= i - 3)]).all()


def test_window_rides_the_solvers_and_the_sphere(rng):
    """A simulated window run equals RK4 written on the NumPy field (batched, sphere projection)."""
    W = ad.Weights.identity(3)
    x0 = rng.normal(size=(2, 6, 3))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    model = ad.Model(W, beta=2.0, mask="window", window=2, geometry="sphere")
    traj = ad.simulate(model, x0, [0.0, 0.5], solver=ad.RK4(), step=ad.FixedStep(0.05))

    def f(x):
        v = numpy_field(x, W, 2.0, 2)
        return v - (v * x).sum(-1, keepdims=True) * x / (x * x).sum(-1, keepdims=True)  # the tangent projection at x/|x|

    x = x0.copy()
    for _ in range(10):
        k1 = f(x)
        k2 = f(x + 0.025 * k1)
        k3 = f(x + 0.025 * k2)
        k4 = f(x + 0.05 * k3)
        x = x + 0.05 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    np.testing.assert_allclose(traj.xs[-1].numpy(), x, atol=1e-13)


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"mask": "window"}, "window = an integer >= 1"),
        ({"mask": "window", "window": 0}, "window=0"),
        ({"mask": "window", "window": 2.5}, "window=2.5"),
        ({"mask": "window", "window": True}, "window=True"),
        ({"mask": "causal", "window": 3}, "applies to mask='window' only"),
    ],
)
def test_window_options_are_validated(kw, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
        ad.Model(ad.Weights.identity(2), **kw)


def test_window_config_key():
    base = {"d": 2, "n": 6, "seed": 1, "solver": {"method": "rk4", "dt": 0.1, "t1": 0.2}}
    setup = build(parse_config(base | {"model": {"mask": "window", "window": 3}}))
    assert setup.model.mask == "window"
    assert setup.model.window == 3
    cases = [
        ({"mask": "window"}, "needs the key 'window'"),
        ({"mask": "causal", "window": 2}, "applies to mask = 'window' only"),
        ({"mask": "window", "window": 0}, "window"),
    ]
    for bad, words in cases:
        with pytest.raises(ConfigError, match=words):
            parse_config(base | {"model": bad})


def test_window_runs_in_float32(rng):
    W = random_weights(rng, 3)
    x = torch.as_tensor(rng.normal(size=(3, 9, 3)), dtype=torch.float32)
    got = ad.velocity(0.0, x, ad.Model(W, mask="window", window=4, attention="fused"))
    np.testing.assert_allclose(got.numpy(), numpy_field(x.double().numpy(), W, 1.0, 4), atol=1e-5)
