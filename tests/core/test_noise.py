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


# common noise (issue 53): one matrix Brownian motion for all tokens


def sa(d, beta=1.0, V=1.0):
    return ad.Model(ad.Weights(np.eye(d), np.eye(d), V * np.eye(d)), beta=beta, geometry="sphere")


def test_common_antisymmetric_noise_without_drift_is_one_rotation():
    """V = 0 (no drift) and B on so(d): X_i(t) = U_t X_i(0) with U_t in SO(d), so the Gram matrix is constant to
    rounding while the tokens move by O(1); independent noise, or the Gaussian generator, changes it at O(1)."""
    x0 = np.stack([start(5, 4, seed=s) for s in range(8)])
    kw = {"kappa": 2.0, "dt": 0.01, "seed": 3}

    def gram_change(**extra):
        xs = noise.simulate_sde(sa(4, V=0.0), x0, [0, 1.0], **kw, **extra)[1]
        gram = lambda x: np.einsum("pid,pjd->pij", x, x)  # noqa: E731
        return np.abs(gram(xs[-1]) - gram(xs[0])).max(), np.linalg.norm(xs[-1] - xs[0], axis=-1).mean()

    change, moved = gram_change(noise="common", generator="antisymmetric")
    assert change < 1e-12, change
    assert moved > 0.5, moved
    assert gram_change(noise="common", generator="antisymmetric", scheme="ito")[0] > 1e-3  # Euler-Maruyama is no rotation
    assert gram_change(noise="common", generator="gaussian")[0] > 0.1
    assert gram_change()[0] > 0.1  # independent noise


@pytest.mark.parametrize("scheme", ["stratonovich", "ito"])
def test_one_token_under_common_noise_is_brownian_motion_on_the_sphere(scheme):
    """Each token alone has generator (1 / kappa) Laplacian: E<X_t, X_0> = e^{-(d - 1) t / kappa} (the Ito scheme
    only with its correction -((d - 1) / kappa) X dt; without it E|X|^2 grows like e^{2 (d - 1) t / kappa})."""
    paths, d, kappa, T = 3000, 3, 2.0, 0.5
    x0 = np.tile(np.eye(d)[:1], (paths, 1, 1))
    run = lambda **kw: noise.simulate_sde(sa(d, V=0.0), x0, [0, T], kappa=kappa, dt=T / 64, seed=2, noise="common", scheme=scheme, **kw)[1][-1]  # noqa: E731
    x = run()
    exact = math.exp(-(d - 1) * T / kappa)
    assert x[:, 0, 0].mean() == pytest.approx(exact, abs=4 * x[:, 0, 0].std() / math.sqrt(paths) + 0.01)
    if scheme == "ito":
        assert run(correction=0.0)[:, 0, 0].mean() > exact + 0.2


@pytest.mark.parametrize("V", [0.0, 1.0])
def test_two_tokens_cosine_follows_the_derived_one_dimensional_equation(V):
    """Two softmax tokens (Q = K = I, value V I) under Gaussian common noise: d rho = (1 - rho^2)(2 V a(rho) - s^2 rho) dt
    + sqrt 2 s (1 - rho^2) dW, a(rho) = e^{beta rho} / (e^beta + e^{beta rho}), s^2 = 2 / kappa
    (attndyn.theory.common_noise), integrated separately in NumPy; E rho_T and E rho_T^2 agree within Monte-Carlo
    error (independent noise would give the noise drift -2 (d - 1) rho / kappa instead)."""
    paths, d, kappa, T, rho0, beta = 4000, 4, 2.0, 0.5, 0.3, 1.0
    x0 = np.zeros((paths, 2, d))
    x0[:, 0, 0] = 1.0
    x0[:, 1, 0], x0[:, 1, 1] = rho0, math.sqrt(1 - rho0**2)
    xs = noise.simulate_sde(sa(d, beta, V=V), x0, [0, T], kappa=kappa, dt=T / 128, seed=4, noise="common")[1][-1]
    rho = np.einsum("pd,pd->p", xs[:, 0], xs[:, 1])
    rng, s2 = np.random.default_rng(5), 2.0 / kappa
    r, h = np.full(200_000, rho0), T / 400
    for _ in range(400):
        a = np.exp(beta * r) / (np.exp(beta) + np.exp(beta * r))
        r = r + (1 - r * r) * (2 * V * a - s2 * r) * h + math.sqrt(2 * s2 * h) * (1 - r * r) * rng.standard_normal(r.size)
    for k in (1, 2):
        se = (rho**k).std() / math.sqrt(paths)
        assert (rho**k).mean() == pytest.approx((r**k).mean(), abs=4 * se + 0.01), k


def test_the_chain_of_random_layers_is_the_written_recursion():
    """random_layer_chain against the recursion written out in NumPy (two layers, one shared matrix per layer)."""
    d, h, kappa = 3, 0.25, 2.0
    x0 = start(4, d)
    inc = noise.brownian_increments(1, 2, (d, d), h)
    out = noise.random_layer_chain(sa(d, V=0.0), x0, 2 * h, 2, kappa=kappa, increments=inc)
    x = x0.copy()
    for k in range(2):
        y = x + math.sqrt(2 / kappa) * x @ inc[k].numpy().T
        x = y / np.linalg.norm(y, axis=-1, keepdims=True)
    np.testing.assert_allclose(out, x, atol=1e-14)


def test_common_noise_bad_inputs_are_refused():
    x0 = start(3, 2)
    for kw, match in [
        ({"noise": "shared"}, "noise = 'shared'"),
        ({"noise": "common", "generator": "skew"}, "generator = 'skew'"),
        ({"noise": "common", "scheme": "milstein"}, "scheme = 'milstein'"),
    ]:
        with pytest.raises(ValueError, match=match):
            noise.simulate_sde(usa(2), x0, [0, 1], kappa=1.0, dt=0.1, seed=0, **kw)
    with pytest.raises(ValueError, match="increments must have shape"):
        noise.simulate_sde(usa(2), x0, [0, 0.2], kappa=1.0, dt=0.1, increments=noise.brownian_increments(0, 2, (3, 2), 0.1), noise="common")
    with pytest.raises(ValueError, match="increments must have shape"):
        noise.random_layer_chain(usa(2), x0, 1.0, 2, kappa=1.0, increments=noise.brownian_increments(0, 3, (2, 2), 0.1))
