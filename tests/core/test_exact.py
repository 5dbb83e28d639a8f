"""Exact solutions (DESIGN §5.1) for every solver, fixed and adaptive, dense and fused."""

import numpy as np
import pytest
import scipy.linalg as sla
import torch

import attndyn as ad
from tests.helpers import random_weights
from tests.tolerances import ADAPTIVE, FIXED

T = 1.0
SOLVERS = {"euler": ad.Euler, "heun": ad.Heun, "rk4": ad.RK4, "dopri5": ad.Dopri5}
CASES = [(name, "fixed") for name in SOLVERS] + [("dopri5", "adaptive")]


def run(model, x0, name, mode, ts=(0.0, T)):
    if mode == "fixed":
        step = ad.FixedStep(FIXED[name]["dt"])
        tol = FIXED[name]["tol"]
    else:
        step = ad.AdaptiveStep(rtol=ADAPTIVE["rtol"], atol=ADAPTIVE["atol"])
        tol = ADAPTIVE["tol"]
    traj = ad.simulate(model, x0, list(ts), solver=SOLVERS[name](), step=step)
    return traj.xs[-1].numpy(), tol


@pytest.mark.parametrize("attention", ["dense", "fused"])
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_single_token_follows_exp_tV(rng, name, mode, attention):
    w = random_weights(rng, 3)
    x0 = rng.normal(size=(1, 3))
    model = ad.Model(w, beta=1.7, attention=attention)
    xT, tol = run(model, x0, name, mode)
    expected = x0 @ sla.expm(T * w.V[0].numpy()).T
    np.testing.assert_allclose(xT, expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("attention", ["dense", "fused"])
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_zero_query_gives_uniform_attention_solution(rng, name, mode, attention):
    w0 = random_weights(rng, 2)
    w = ad.Weights(np.zeros((1, 2, 2)), w0.K, w0.V)
    x0 = rng.normal(size=(6, 2))
    xT, tol = run(ad.Model(w, attention=attention), x0, name, mode)
    E = sla.expm(T * w.V[0].numpy())
    expected = x0 + (E - np.eye(2)) @ x0.mean(0)
    np.testing.assert_allclose(xT, expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("attention", ["dense", "fused"])
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_causal_first_token_follows_exp_tV(rng, name, mode, attention):
    w = random_weights(rng, 3)
    x0 = rng.normal(size=(5, 3))
    xT, tol = run(ad.Model(w, mask="causal", attention=attention), x0, name, mode)
    expected = sla.expm(T * w.V[0].numpy()) @ x0[0]
    np.testing.assert_allclose(xT[0], expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("attention", ["dense", "fused"])
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_sphere_single_token(rng, name, mode, attention):
    w = random_weights(rng, 3)
    x0 = rng.normal(size=(1, 3))
    x0 /= np.linalg.norm(x0)
    xT, tol = run(ad.Model(w, geometry="sphere", attention=attention), x0, name, mode)
    y = sla.expm(T * w.V[0].numpy()) @ x0[0]
    np.testing.assert_allclose(xT[0], y / np.linalg.norm(y), atol=tol, rtol=tol)


@pytest.mark.parametrize("attention", ["dense", "fused"])
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_rescaled_single_token_is_stationary(rng, name, mode, attention):
    w = random_weights(rng, 3)
    x0 = rng.normal(size=(1, 3))
    xT, _ = run(ad.Model(w, rescaled=True, attention=attention), x0, name, mode)
    np.testing.assert_allclose(xT, x0, atol=1e-13, rtol=0)


def test_trajectory_saves_every_time_and_numpy(rng):
    w = random_weights(rng, 2)
    x0 = rng.normal(size=(4, 2))
    traj = ad.simulate(ad.Model(w), x0, [0.0, 0.5, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.1))
    ts, xs = traj.numpy()
    assert ts.tolist() == [0.0, 0.5, 1.0]
    assert xs.shape == (3, 4, 2)
    assert xs.dtype == np.float64
    assert traj.stats == {"nfev": 40, "steps": 10, "rejected": 0}
    np.testing.assert_array_equal(xs[0], x0)


def test_adaptive_lands_exactly_on_save_times(rng):
    w = random_weights(rng, 2)
    x0 = rng.normal(size=(4, 2))
    ts = [0.0, 0.123, 0.5, 0.77]
    traj = ad.simulate(ad.Model(w), x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-9, atol=1e-11))
    assert traj.ts.tolist() == ts
    # each saved state equals a separate run that ends at that time
    for k, t in enumerate(ts[1:], start=1):
        single = ad.simulate(ad.Model(w), x0, [0.0, t], solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-11, atol=1e-13))
        np.testing.assert_allclose(traj.xs[k].numpy(), single.xs[-1].numpy(), atol=1e-7)


def test_batched_states_match_individual_runs(rng):
    w = random_weights(rng, 2)
    x0 = rng.normal(size=(3, 5, 2))
    model = ad.Model(w)
    traj = ad.simulate(model, x0, [0.0, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.05))
    assert traj.xs.shape == (2, 3, 5, 2)
    for b in range(3):
        one = ad.simulate(model, x0[b], [0.0, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.05))
        np.testing.assert_allclose(traj.xs[-1, b].numpy(), one.xs[-1].numpy(), atol=1e-14)


def test_float32_state_stays_float32(rng):
    w = random_weights(rng, 2)
    x0 = torch.tensor(rng.normal(size=(4, 2)), dtype=torch.float32)
    traj = ad.simulate(ad.Model(w), x0, [0.0, 0.1], solver=ad.RK4(), step=ad.FixedStep(0.05))
    assert traj.xs.dtype == torch.float32
