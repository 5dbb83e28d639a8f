"""Invariants of SPEC §1.8 and model-level checks M1, M2 (SPEC §4.1)."""

import numpy as np
import pytest
import scipy.linalg as sla
import torch

import attndyn as ad
from attndyn.core.dynamics import prepare
from tests.helpers import random_weights
from tests.tolerances import DISCRETE_RESCALING, HULL_MONOTONE, ROW_SUM, X_Z_EQUIV


@pytest.mark.parametrize("mask", ["full", "causal"])
def test_attention_rows_are_probability_vectors(rng, mask):
    W = random_weights(rng, 3, heads=2, m=4, scale=1.5)
    x = rng.normal(size=(4, 9, 3))
    P = ad.attention_matrix(ad.Model(W, mask=mask, beta=2.0), x).numpy()
    assert P.shape == (4, 2, 9, 9)
    assert (P >= 0).all()
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=ROW_SUM, rtol=0)
    if mask == "causal":
        assert np.all(np.triu(P, 1) == 0)


def test_hull_of_z_shrinks_for_V_identity(rng):
    """p:noninc: support functions of conv{z_i} are non-increasing (V = I, any Q, K)."""
    d, n = 2, 20
    W = ad.Weights(rng.normal(size=(d, d)), rng.normal(size=(d, d)), np.eye(d))
    z0 = rng.uniform(-5, 5, (n, d))
    traj = ad.simulate(ad.Model(W, rescaled=True), z0, np.linspace(0, 4, 81), solver=ad.RK4(), step=ad.FixedStep(0.01))
    u = rng.normal(size=(200, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    h = (traj.xs.numpy() @ u.T).max(axis=1)  # (T, 200)
    assert np.diff(h, axis=0).max() <= HULL_MONOTONE * 5


def test_order_preserved_in_one_dimension(rng):
    W = ad.Weights(np.array([[1.3]]), np.array([[0.7]]), np.array([[0.9]]))
    x0 = np.sort(rng.uniform(-1, 1, (12, 1)), axis=0)
    traj = ad.simulate(ad.Model(W, rescaled=True), x0, np.linspace(0, 6, 61), solver=ad.RK4(), step=ad.FixedStep(0.01))
    assert (np.diff(traj.xs.numpy()[..., 0], axis=1) > 0).all()


def test_x_and_z_forms_agree_M1():
    rng = np.random.default_rng(11)
    W = random_weights(rng, 3, scale=0.3 * 2)
    x0 = rng.normal(size=(6, 3))
    ts = np.linspace(0, 2, 5)
    step = ad.AdaptiveStep(rtol=1e-11, atol=1e-12)
    tx = ad.simulate(ad.Model(W), x0, ts, solver=ad.Dopri5(), step=step)
    tz = ad.simulate(ad.Model(W, rescaled=True), x0, ts, solver=ad.Dopri5(), step=step)
    V = W.V[0].numpy()
    for k, t in enumerate(ts):
        E = sla.expm(t * V)
        x_from_z = tz.xs[k].numpy() @ E.T
        np.testing.assert_allclose(x_from_z, tx.xs[k].numpy(), rtol=X_Z_EQUIV, atol=X_Z_EQUIV)
        Px = ad.attention_matrix(ad.Model(W), tx.xs[k]).numpy()
        Pz = ad.attention_matrix(ad.Model(W, rescaled=True), tz.xs[k], t=t).numpy()
        np.testing.assert_allclose(Pz, Px, atol=1e-8)


@pytest.mark.parametrize("dt", [0.1, 0.5])
def test_discrete_rescaling_identity_M2(dt):
    rng = np.random.default_rng(5)
    W = random_weights(rng, 3, scale=0.4)
    x0 = rng.normal(size=(7, 3))
    layers = 50
    tx = ad.residual_layers(ad.Model(W), x0, layers, step_size=dt)
    tz = ad.residual_layers(ad.Model(W, rescaled=True), x0, layers, step_size=dt)
    R = np.eye(3) + dt * W.V[0].numpy()
    for k in range(0, layers + 1, 10):
        Rk = np.linalg.matrix_power(R, k)
        z_from_x = np.linalg.solve(Rk, tx.xs[k].numpy().T).T
        scale = np.abs(z_from_x).max()
        np.testing.assert_allclose(tz.xs[k].numpy(), z_from_x, atol=DISCRETE_RESCALING * scale, rtol=0)


def test_residual_layers_is_euler_on_x(rng):
    W = random_weights(rng, 2)
    x0 = rng.normal(size=(5, 2))
    a = ad.residual_layers(ad.Model(W), x0, 20, step_size=0.1)
    b = ad.simulate(ad.Model(W), x0, np.linspace(0, 2, 21), solver=ad.Euler(), step=ad.FixedStep(0.1))
    np.testing.assert_allclose(a.xs.numpy(), b.xs.numpy(), atol=1e-13)
    assert a.stats["steps"] == 20


def test_permutation_equivariance(rng):
    W = random_weights(rng, 3, heads=2)
    x = torch.as_tensor(rng.normal(size=(8, 3)))
    perm = torch.as_tensor(rng.permutation(8))
    model = ad.Model(W, beta=1.3)
    np.testing.assert_allclose(ad.velocity(0.0, x[perm], model).numpy(), ad.velocity(0.0, x, model)[perm].numpy(), atol=1e-14)


def test_identical_heads_equal_one_head_with_hV(rng):
    W1 = random_weights(rng, 3)
    h = 3
    Wh = ad.Weights(W1.Q.repeat(h, 1, 1), W1.K.repeat(h, 1, 1), W1.V.repeat(h, 1, 1))
    Wsum = ad.Weights(W1.Q, W1.K, h * W1.V)
    x = torch.as_tensor(rng.normal(size=(6, 3)))
    for attention in ["dense", "fused"]:
        a = ad.velocity(0.0, x, ad.Model(Wh, attention=attention))
        b = ad.velocity(0.0, x, ad.Model(Wsum, attention=attention))
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-13)


def test_multihead_is_sum_of_heads(rng):
    W = random_weights(rng, 3, heads=3, m=2)
    x = torch.as_tensor(rng.normal(size=(7, 3)))
    total = ad.velocity(0.0, x, ad.Model(W))
    parts = sum(ad.velocity(0.0, x, ad.Model(ad.Weights(W.Q[h], W.K[h], W.V[h]))) for h in range(3))
    np.testing.assert_allclose(total.numpy(), parts.numpy(), atol=1e-13)


def test_velocity_bound(rng):
    """‖x_i'‖ <= ‖V‖_op max_j ‖x_j‖ (SPEC §1.8)."""
    W = random_weights(rng, 3, scale=1.0)
    x = torch.as_tensor(rng.normal(size=(10, 3)))
    v = ad.velocity(0.0, x, ad.Model(W))
    bound = np.linalg.norm(W.V[0].numpy(), 2) * x.norm(dim=-1).max().item()
    assert v.norm(dim=-1).max().item() <= bound * (1 + 1e-12)


def test_sphere_norms_stay_one(rng):
    W = random_weights(rng, 3, scale=1.0)
    x0 = rng.normal(size=(16, 3))
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    traj = ad.simulate(
        ad.Model(W, geometry="sphere", beta=4.0),
        x0,
        np.linspace(0, 5, 6),
        solver=ad.Dopri5(),
        step=ad.AdaptiveStep(rtol=1e-9, atol=1e-11),
    )
    norms = traj.xs.norm(dim=-1).numpy()
    np.testing.assert_allclose(norms, 1.0, atol=1e-8)


@pytest.mark.parametrize("compiled", ["0", "1"])
def test_the_sphere_field_keeps_radii_where_the_sphere_repels(rng, monkeypatch, compiled):
    """Issue 33: with V = -I, <x_i, a_i> < 0 and the projection y - <x, y> x made the sphere repel
    (|x| - 1 = 5e-4 at t = 30 from a perturbed polygon; the adaptive step underflowed at t = 41.5).
    The projection at x / |x| keeps every radius: d|x_i|^2/dt = 2 <x_i, v_i> = 0 exactly."""
    monkeypatch.setenv("ATTNDYN_COMPILED", compiled)
    sphere = ad.Model(ad.Weights(np.eye(2), np.eye(2), -np.eye(2)), beta=1.0, geometry="sphere")
    th = 2 * np.pi * np.arange(8) / 8 + 1e-3 * rng.normal(size=8)
    x0 = np.stack([np.cos(th), np.sin(th)], -1)
    for solver, step in ((ad.Dopri5(), ad.AdaptiveStep(rtol=1e-10, atol=1e-12)), (ad.RK4(), ad.FixedStep(0.05))):
        xs = ad.simulate(sphere, x0, np.linspace(0, 45, 10), solver=solver, step=step).xs.numpy()
        assert np.abs(np.linalg.norm(xs, axis=-1) - 1).max() < 1e-13
    # off the sphere: the radial component of the field is zero to rounding (separate arithmetic)
    x = rng.normal(size=(8, 2)) * 1.5
    v = ad.velocity(0.0, x, sphere)
    np.testing.assert_allclose((v * x).sum(-1), 0.0, atol=1e-14)


def test_feedforward_identity_reproduces_rescaled_exactly(rng):
    W = random_weights(rng, 2)
    ff = ad.FeedForward(np.eye(2), "identity")
    Wff = ad.Weights(W.Q, W.K, W.V, ff)
    z = torch.as_tensor(rng.normal(size=(9, 2)))
    a = ad.velocity(0.7, z, ad.Model(W, rescaled=True))
    b = ad.velocity(0.7, z, ad.Model(Wff, rescaled=True))
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-12, rtol=0)


def test_feedforward_applies_W_sigma(rng):
    W = random_weights(rng, 2)
    Wm = rng.normal(size=(2, 2))
    b = rng.normal(size=2)
    z = torch.as_tensor(rng.normal(size=(5, 2)))
    base = ad.velocity(0.3, z, ad.Model(W, rescaled=True)).numpy()
    got = ad.velocity(0.3, z, ad.Model(ad.Weights(W.Q, W.K, W.V, ad.FeedForward(Wm, "relu", b)), rescaled=True)).numpy()
    np.testing.assert_allclose(got, np.maximum(base + b, 0) @ Wm.T, atol=1e-13)
    got = ad.velocity(0.3, z, ad.Model(ad.Weights(W.Q, W.K, W.V, ad.FeedForward(Wm, "tanh", b, bias_inside=False)), rescaled=True)).numpy()
    np.testing.assert_allclose(got, np.tanh(base) @ Wm.T + b, atol=1e-13)


def test_unnormalized_matches_formula(rng):
    W = ad.Weights.identity(3)
    x = rng.normal(size=(6, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    v = ad.velocity(0.0, torch.as_tensor(x), ad.Model(W, beta=2.0, normalization="unnormalized", geometry="sphere")).numpy()
    y = np.exp(2.0 * x @ x.T) @ x / 6
    expected = y - (y * x).sum(1, keepdims=True) * x
    np.testing.assert_allclose(v, expected, atol=1e-13)


def test_rescaled_scalar_V_uses_closed_form(rng):
    """V = 2I takes the closed form e^{2t}; compare with an independent NumPy evaluation."""
    d = 2
    W = ad.Weights(rng.normal(size=(d, d)), rng.normal(size=(d, d)), 2 * np.eye(d))
    z = torch.as_tensor(rng.normal(size=(5, d)))
    model = ad.Model(W, rescaled=True)
    assert prepare(model, z).lam == 2.0
    t = 0.4
    x = z.numpy() @ sla.expm(t * 2 * np.eye(d)).T
    L = (x @ W.Q[0].numpy().T) @ (x @ W.K[0].numpy().T).T
    P = np.exp(L - L.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    expected = 2 * (P @ z.numpy() - z.numpy())
    np.testing.assert_allclose(ad.velocity(t, z, model).numpy(), expected, atol=1e-12)
