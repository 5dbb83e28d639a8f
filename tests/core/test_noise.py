"""The noisy sphere SDE (SPEC §8.7): reproducible, on the sphere, strong order 1/2, and its drift-free statistics."""

import math

import numpy as np
import pytest

import attndyn as ad
from attndyn.core import noise


def usa(d, beta=1.0):
    return ad.Model(ad.Weights.identity(d), beta=beta, geometry="sphere", normalization="unnormalized")


def start(n, d, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_a_seed_reproduces_its_path_and_tokens_stay_on_the_sphere():
    x0 = start(6, 3)
    ts = np.linspace(0, 1, 11)
    a = noise.simulate_sde(usa(3), x0, ts, kappa=2.0, dt=0.01, seed=5)[1]
    b = noise.simulate_sde(usa(3), x0, ts, kappa=2.0, dt=0.01, seed=5)[1]
    c = noise.simulate_sde(usa(3), x0, ts, kappa=2.0, dt=0.01, seed=6)[1]
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3
    np.testing.assert_allclose(np.linalg.norm(a, axis=-1), 1.0, atol=1e-14)


def test_strong_order_one_half_against_a_finer_run_on_the_same_path():
    """E|X_dt(T) - X_ref(T)| over 64 paths falls like dt^{1/2} (fitted order in [0.35, 0.75])."""
    n, d, T, fine_dt, paths = 4, 3, 0.5, 2.0**-12, 64
    x0 = np.broadcast_to(start(n, d), (paths, n, d)).copy()
    steps = round(T / fine_dt)
    dW = noise.brownian_increments(0, steps, (paths, n, d), fine_dt)
    ref = noise.simulate_sde(usa(d, 2.0), x0, [0, T], kappa=1.0, dt=fine_dt, increments=dW)[1][-1]
    dts, errors = [], []
    for factor in (256, 128, 64, 32):
        dt = fine_dt * factor
        x = noise.simulate_sde(usa(d, 2.0), x0, [0, T], kappa=1.0, dt=dt, increments=noise.coarsen(dW, factor))[1][-1]
        dts.append(dt)
        errors.append(np.linalg.norm(x - ref, axis=-1).mean())
    order = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    assert 0.35 <= order <= 0.75, (order, errors)


def test_without_drift_the_noise_is_brownian_motion_on_the_circle():
    """beta = 0 with no interaction is impossible in the model, so use one token: the drift P_x(x) = 0 and
    the angle diffuses with variance (2 / kappa) t: E cos(theta_t - theta_0) = e^{-t / kappa}."""
    paths, kappa, T = 4000, 2.0, 1.0
    x0 = np.tile(np.array([[1.0, 0.0]]), (paths, 1, 1))
    xs = noise.simulate_sde(usa(2, 0.0), x0, [0, T], kappa=kappa, dt=1e-3, seed=1)[1][-1]
    assert xs[:, 0, 0].mean() == pytest.approx(math.exp(-T / kappa), abs=3 * 0.7 / math.sqrt(paths))


def test_bad_inputs_are_refused():
    x0 = start(3, 2)
    with pytest.raises(ValueError, match="geometry='sphere'"):
        noise.simulate_sde(ad.Model(ad.Weights.identity(2)), x0, [0, 1], kappa=1.0, dt=0.1, seed=0)
    with pytest.raises(ValueError, match="kappa"):
        noise.simulate_sde(usa(2), x0, [0, 1], kappa=0.0, dt=0.1, seed=0)
    with pytest.raises(ValueError, match="exactly one"):
        noise.simulate_sde(usa(2), x0, [0, 1], kappa=1.0, dt=0.1)
    with pytest.raises(ValueError, match="multiples of dt"):
        noise.simulate_sde(usa(2), x0, [0, 0.15], kappa=1.0, dt=0.1, seed=0)


def test_stationary_order_parameter_solves_the_self_consistency():
    from scipy.special import i0, i1

    from attndyn.claims.noisy import stationary_order, threshold

    assert stationary_order(1.5) == 0.0
    for kappa in (2.5, 4.0, 8.0):
        r = 0.9
        for _ in range(2000):  # fixed-point iteration, independent of the root finder
            r = i1(kappa * r) / i0(kappa * r)
        assert stationary_order(kappa) == pytest.approx(r, abs=1e-8)
    assert threshold(0.0) == 2.0
    assert threshold(1e-6) == pytest.approx(2.0, rel=1e-6)  # continuous at beta = 0: beta / I_1(beta) -> 2


def test_the_scheme_s_angular_diffusion_on_the_circle_is_the_effective_one():
    # one token at beta = 0 feels no drift (P_x x = 0): each step turns it by exactly atan(s Z), s^2 = 2 dt / kappa,
    # so the angle's variance after k steps is k E[atan(s Z)^2] (what noisy.effective_kappa uses), not k s^2
    from attndyn.claims import circle
    from attndyn.claims.noisy import effective_kappa

    kappa, dt, steps, seeds = 1.0, 0.1, 10, 40_000
    ts = np.arange(steps + 1) * dt
    _, xs = noise.simulate_sde(circle.model(0.0, usa=True), np.tile([[[1.0, 0.0]]], (seeds, 1, 1)), ts, kappa=kappa, dt=dt, seed=3)
    theta = np.unwrap(np.arctan2(xs[..., 0, 1], xs[..., 0, 0]), axis=0)  # (T, seeds)
    measured = theta[-1].var()
    s2 = 2 * dt / kappa
    z, w = np.polynomial.hermite_e.hermegauss(120)
    predicted = steps * float((w / w.sum() * np.arctan(np.sqrt(s2) * z) ** 2).sum())
    se = predicted * np.sqrt(2 / seeds)
    assert abs(measured - predicted) < 4 * se
    assert abs(measured - steps * s2) > 10 * se  # the naive variance is far off: the effect is real at this dt
    # with no drift the effective kappa's diffusion part is this variance per unit time
    assert effective_kappa(kappa, dt) > kappa
