"""The key bias on the first token (``sink_bias``, SPEC §9.4) against a NumPy field written from
the definition: logits beta <Q x_i, K x_j> + b [j = 0], then the mask, then the weighting."""

import math

import numpy as np
import pytest

import attndyn as ad
from attndyn.core.dynamics import attention_logits
from attndyn.workflow.schema import ConfigError, parse_config
from attndyn.workflow.setup import build
from tests.helpers import random_weights
from tests.tolerances import FUSED_VS_DENSE


def numpy_field(x, W, beta, b, *, causal=False, usa=False):
    n = x.shape[-2]
    out = np.zeros_like(x)
    for h in range(W.heads):
        Q, K, V = (M[h].numpy() for M in (W.Q, W.K, W.V))
        L = beta * (x @ Q.T) @ (x @ K.T).swapaxes(-1, -2)
        L[..., 0] += b
        if causal:
            L = np.where(np.tri(n, dtype=bool), L, -np.inf)
        P = np.exp(L) / n if usa else np.exp(L - L.max(-1, keepdims=True))
        if not usa:
            P /= P.sum(-1, keepdims=True)
        out += P @ (x @ V.T)
    return out


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"attention": "fused"},
        {"mask": "causal"},
        {"mask": "causal", "attention": "fused"},
        {"normalization": "unnormalized"},
        {"heads": 2},
    ],
    ids=["dense", "fused", "causal", "causal-fused", "usa", "two-heads"],
)
def test_sink_bias_field_equals_the_definition(rng, kw):
    kw = dict(kw)
    W = random_weights(rng, 3, heads=kw.pop("heads", 1), scale=0.6)
    x = rng.normal(size=(2, 9, 3))
    model = ad.Model(W, beta=1.3, sink_bias=2.5, **kw)
    expected = numpy_field(x, W, 1.3, 2.5, causal=kw.get("mask") == "causal", usa=kw.get("normalization") == "unnormalized")
    np.testing.assert_allclose(ad.velocity(0.0, x, model), expected, atol=FUSED_VS_DENSE, rtol=1e-13)


def test_sink_bias_moves_attention_to_the_first_token(rng):
    W = ad.Weights.identity(3)
    x = rng.normal(size=(12, 3))
    plain = ad.attention_matrix(ad.Model(W), x).numpy()[0]
    sink = ad.attention_matrix(ad.Model(W, sink_bias=5.0), x).numpy()[0]
    assert (sink[:, 0] > plain[:, 0]).all()
    np.testing.assert_allclose(sink.sum(-1), 1, atol=1e-14)
    # odds against every other key grow by exactly e^b
    np.testing.assert_allclose((sink[:, 0] / sink[:, 1]) / (plain[:, 0] / plain[:, 1]), math.exp(5.0), rtol=1e-12)
    L = attention_logits(ad.Model(W, sink_bias=5.0), x).numpy()[0] - attention_logits(ad.Model(W), x).numpy()[0]
    np.testing.assert_allclose(L[:, 0], 5.0, atol=1e-13)
    np.testing.assert_allclose(L[:, 1:], 0.0, atol=1e-13)


def test_sink_bias_zero_is_the_plain_model(rng):
    W = random_weights(rng, 3)
    x = rng.normal(size=(7, 3))
    np.testing.assert_array_equal(ad.velocity(0.0, x, ad.Model(W, sink_bias=0.0)), ad.velocity(0.0, x, ad.Model(W)))


@pytest.mark.parametrize(("kw", "words"), [({"sink_bias": math.nan}, "sink_bias=nan"), ({"sink_bias": 1.0, "beta": math.inf}, "beta=inf")])
def test_sink_bias_is_validated(kw, words):
    with pytest.raises(ValueError, match=words):
        ad.Model(ad.Weights.identity(2), **kw)


def test_sink_bias_config_key():
    base = {"d": 2, "n": 6, "seed": 1, "solver": {"method": "rk4", "dt": 0.1, "t1": 0.2}}
    assert build(parse_config(base | {"model": {"sink_bias": 3.0}})).model.sink_bias == 3.0
    with pytest.raises(ConfigError, match="sink_bias"):
        parse_config(base | {"model": {"sink_bias": "big"}})
