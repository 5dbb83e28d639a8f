"""Normalization schemes (SPEC §8.5) against a NumPy reference of the radius/direction split."""

import math

import numpy as np
import pytest
import torch

import attndyn as ad


def reference(t, x, Q, K, V, beta, scheme, tau=1.0, alpha=1.0, causal=False):
    """x' of SPEC §8.5's table, written from scratch: A_j = sum_h sum_k softmax_k(beta <Q_h theta_j, K_h theta_k>) V_h theta_k."""
    r = np.linalg.norm(x, axis=-1, keepdims=True)
    th = x / r
    A = np.zeros_like(x)
    n = x.shape[-2]
    for h in range(Q.shape[0]):
        L = beta * (th @ Q[h].T) @ (th @ K[h].T).swapaxes(-1, -2)
        if causal:
            L = np.where(np.tril(np.ones((n, n), dtype=bool)), L, -np.inf)
        P = np.exp(L - L.max(-1, keepdims=True))
        P /= P.sum(-1, keepdims=True)
        A += P @ (th @ V[h].T)
    if scheme == "mix":
        scheme = "post" if t < tau else "pre"
    a = (A * th).sum(-1, keepdims=True)
    perp = A - a * th
    norm_A = np.linalg.norm(A, axis=-1, keepdims=True)
    s, dr = {
        "post": (1.0, 0.0),
        "pre": (r, a),
        "peri": (r * norm_A, a / norm_A),
        "ngpt": (norm_A / alpha, 0.0),
        "sqrt": (math.sqrt(t + 1), 0.0),
    }[scheme]
    return dr * th + r * perp / s


@pytest.mark.parametrize("scheme", ["pre", "mix", "peri", "ngpt", "sqrt"])
@pytest.mark.parametrize("kernel", ["dense", "fused"])
@pytest.mark.parametrize("causal", [False, True])
def test_scheme_velocity_matches_the_reference_with_heads_masks_and_batches(scheme, kernel, causal):
    rng = np.random.default_rng(1)
    H, n, d = 2, 7, 5
    Q, K, V = (rng.standard_normal((H, d, d)) / math.sqrt(d) for _ in range(3))
    x = rng.standard_normal((3, n, d)) * rng.uniform(0.5, 2.0, (3, n, 1))  # a batch, radii far from 1
    model = ad.Model(
        ad.Weights(Q, K, V),
        beta=1.7,
        geometry="sphere",
        scheme=scheme,
        scheme_tau=0.8,
        scheme_alpha=0.6,
        attention=kernel,
        mask="causal" if causal else "full",
    )
    for t in (0.3, 1.2):
        got = ad.velocity(t, x, model)
        want = np.stack([reference(t, xb, Q, K, V, 1.7, scheme, 0.8, 0.6, causal) for xb in x])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_post_scheme_is_the_sphere_model_and_keeps_unit_radii():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 3))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    W = ad.Weights(*(rng.standard_normal((3, 3)) for _ in range(3)))
    a = ad.velocity(0.0, x, ad.Model(W, beta=2.0, geometry="sphere"))
    b = reference(0.0, x, W.Q.numpy(), W.K.numpy(), W.V.numpy(), 2.0, "post")
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    traj = ad.simulate(
        ad.Model(W, beta=2.0, geometry="sphere", scheme="mix", scheme_tau=5.0), x, np.linspace(0, 4, 5), solver=ad.RK4(), step=ad.FixedStep(0.01)
    )
    np.testing.assert_allclose(np.linalg.norm(traj.numpy()[1], axis=-1), 1.0, atol=1e-6)  # Post-LN before the switch


def _tight(model, x, ts):
    return ad.simulate(model, x, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-11, atol=1e-13)).numpy()[1]


@pytest.mark.parametrize("scheme", ["sqrt", "mix"])
def test_radius_keeping_schemes_integrate_to_the_split_field_s_solution(scheme):
    """simulate integrates c(t) times the Post-LN field for these schemes (unit_sphere_field); the split
    field of SPEC §8.5 itself (vector_field, checked against the reference above), integrated directly,
    has the same solution: two heads, a causal mask and a feed-forward layer included, and across Mix-LN's switch."""
    from attndyn.core.dynamics import prepare, vector_field
    from attndyn.core.solvers import integrate

    rng = np.random.default_rng(3)
    H, n, d = 2, 6, 4
    Q, K, V = (rng.standard_normal((H, d, d)) / math.sqrt(d) for _ in range(3))
    ff = ad.FeedForward(rng.standard_normal((d, d)) / math.sqrt(d), sigma="tanh", bias=rng.standard_normal(d) * 0.1)
    model = ad.Model(ad.Weights(Q, K, V, ff=ff), beta=1.3, geometry="sphere", scheme=scheme, scheme_tau=0.7, scheme_alpha=0.6, mask="causal")
    x = rng.standard_normal((2, n, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    ts = np.linspace(0.0, 2.0, 6)  # mix: post-like to 0.7, Pre-LN after
    got = _tight(model, x, ts)
    xt = torch.as_tensor(x)
    direct = integrate(vector_field, xt, ts, prepare(model, xt), solver=ad.Dopri5(), controller=ad.AdaptiveStep(rtol=1e-11, atol=1e-13), batch_dims=1)
    # Mix-LN's field jumps at tau, inside a step of each run: there the error control is looser
    np.testing.assert_allclose(got, direct.xs.numpy(), rtol=0, atol=1e-8 if scheme == "mix" else 1e-10)
    if scheme == "mix":
        assert np.linalg.norm(got[-1], axis=-1).max() > 1.01  # Pre-LN grew the radii after the switch


def test_radius_keeping_schemes_are_post_ln_in_changed_time():
    """theta_j' = s^{-1} P A with r' = 0: sqrt-scaling at t is Post-LN at 2 (sqrt(t + 1) - 1), Mix-LN
    before its switch is Post-LN (SPEC §8.5)."""
    rng = np.random.default_rng(4)
    W = ad.Weights(*(rng.standard_normal((3, 3)) / math.sqrt(3) for _ in range(3)))
    x = rng.standard_normal((5, 3))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    ts = np.array([0.0, 0.5, 1.5, 3.0])

    def model(scheme):
        return ad.Model(W, beta=2.0, geometry="sphere", scheme=scheme, scheme_alpha=0.6, scheme_tau=10.0)

    post = lambda times: _tight(model("post"), x, times)  # noqa: E731
    np.testing.assert_allclose(_tight(model("sqrt"), x, ts), post(2 * (np.sqrt(ts + 1) - 1)), atol=1e-9)
    np.testing.assert_allclose(_tight(model("mix"), x, ts), post(ts), atol=1e-9)


def test_pre_ln_radius_grows_by_the_projection_of_A():
    x = np.eye(3) * np.array([[0.5], [1.0], [2.0]])
    model = ad.Model(ad.Weights.identity(3), beta=1.0, geometry="sphere", scheme="pre")
    v = ad.velocity(0.0, x, model)
    # r_j' = <theta_j, A_j> = own weight e / (e + 2) for an orthogonal start
    np.testing.assert_allclose((v * np.eye(3)).sum(-1), math.e / (math.e + 2), rtol=1e-14)


def test_scheme_options_are_validated():
    W = ad.Weights.identity(2)
    with pytest.raises(ValueError, match="needs geometry='sphere'"):
        ad.Model(W, scheme="pre")
    with pytest.raises(ValueError, match="scheme='layer'"):
        ad.Model(W, geometry="sphere", scheme="layer")
    with pytest.raises(ValueError, match="scheme_tau"):
        ad.Model(W, geometry="sphere", scheme="mix", scheme_tau=-1.0)
    with pytest.raises(ValueError, match="scheme_alpha"):
        ad.Model(W, geometry="sphere", scheme="ngpt", scheme_alpha=math.inf)


def test_config_accepts_the_scheme_keys():
    from attndyn.workflow.schema import ConfigError, parse_config
    from attndyn.workflow.setup import build

    base = {"seed": 0, "n": 4, "d": 3, "init": {"kind": "sphere"}, "solver": {"dt": 0.1, "t1": 0.2}}
    setup = build(parse_config({**base, "model": {"geometry": "sphere", "scheme": "peri"}}))
    assert setup.model.scheme == "peri"
    with pytest.raises(ConfigError, match="scheme"):
        build(parse_config({**base, "model": {"scheme": "pre"}}))
    with pytest.raises(ConfigError, match="scheme"):
        parse_config({**base, "model": {"geometry": "sphere", "scheme": "rms"}})
    assert torch.is_tensor(setup.x0)
