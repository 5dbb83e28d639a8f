"""attndyn.theory against independent computations: quadrature, scipy ODEs, particles, the engine."""

import math

import numpy as np
import pytest
from scipy.integrate import quad, solve_ivp
from scipy.special import eval_legendre

import attndyn as ad
from attndyn.theory import closed_forms as theory


@pytest.mark.parametrize("beta", [0.5, 3.0, 12.0])
@pytest.mark.parametrize("degree", [0, 1, 2, 5])
def test_kernel_coefficient_against_quadrature(beta, degree):
    # circle: (1/2pi) int e^{beta cos t} cos(l t) dt
    circle = quad(lambda t: math.exp(beta * math.cos(t)) * math.cos(degree * t), 0, 2 * math.pi, epsabs=1e-13, epsrel=1e-13)[0] / (2 * math.pi)
    assert theory.kernel_coefficient(degree, beta, 2) == pytest.approx(circle, rel=1e-10)
    # S^2 (Funk-Hecke with Legendre polynomials): (1/2) int_{-1}^{1} e^{beta t} P_l(t) dt
    sphere = quad(lambda t: math.exp(beta * t) * eval_legendre(degree, t), -1, 1, epsabs=1e-13, epsrel=1e-13)[0] / 2
    assert theory.kernel_coefficient(degree, beta, 3) == pytest.approx(sphere, rel=1e-8, abs=1e-14)


def test_growth_rates_and_the_fastest_mode():
    ls = np.arange(1, 13)
    usa, sa = theory.growth_rates(5.0, 2, ls, usa=True), theory.growth_rates(5.0, 2, ls)
    # SA divides by K_0 = I_0(beta)
    np.testing.assert_allclose(usa / sa, theory.kernel_coefficient(0, 5.0, 2), rtol=1e-12)
    # beta = 5 on the circle: 3 clusters emerge (their Figure 4), and k_max ~ sqrt(2 beta) at large beta
    assert theory.fastest_mode(5.0, 2) == int(ls[np.argmax(sa)]) == 3
    assert abs(theory.fastest_mode(200.0, 2) - math.sqrt(400)) <= 2
    with pytest.raises(ValueError, match="beta"):
        theory.growth_rates(0.0, 2, ls)


def test_kuramoto_closed_form_solves_its_ode_and_matches_particles():
    R0 = 0.3
    ts = np.linspace(0, 4, 9)
    sol = solve_ivp(lambda t, r: [0.5 * r[0] * (1 - r[0] ** 2)], (0, 4), [R0], t_eval=ts, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(theory.kuramoto_order(ts, R0), sol.y[0], rtol=1e-9)
    # particles: beta = 0 on the circle from a wrapped-Cauchy sample (quantiles, so the sample is near exact)
    n = 2000
    u = (np.arange(n) + 0.5) / n
    gamma = -math.log(R0)
    theta = 2 * np.arctan(np.tanh(gamma / 2) * np.tan(math.pi * (u - 0.5)))
    x0 = np.stack([np.cos(theta), np.sin(theta)], -1)
    model = ad.Model(ad.Weights.identity(2), beta=0.0, geometry="sphere")
    traj = ad.simulate(model, x0, [0, 1, 2], solver=ad.RK4(), step=ad.FixedStep(0.02))
    R = np.linalg.norm(traj.numpy()[1].mean(1), axis=-1)
    np.testing.assert_allclose(R, theory.kuramoto_order(np.array([0, 1, 2]), R0), atol=3 / math.sqrt(n))


def test_equiangular_closed_form_at_beta_zero():
    ts = np.linspace(0, 3, 7)
    for usa in (False, True):
        np.testing.assert_allclose(theory.equiangular(0.0, 6, ts, usa=usa), theory.equiangular_beta0(6, ts), atol=1e-10)


def test_pairing_cosine_and_staircase_levels():
    s = np.linspace(0, 1, 5)
    sol = solve_ivp(lambda t, c: [2 * (1 - c[0] ** 2)], (0, 1), [-0.3], t_eval=s, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(theory.pairing_cosine(s, -0.3), sol.y[0], rtol=1e-9)
    # SPEC §8.4: for n = 5 the plateaus are 0.20, 0.28, 0.36 or 0.44, 0.52 or 0.68, then 1
    assert theory.staircase_levels(5) == pytest.approx([0.2, 0.28, 0.36, 0.44, 0.52, 0.68, 1.0])


@pytest.mark.parametrize("n", [2, 7, 64])
@pytest.mark.parametrize("kernel", ["dense", "fused"])
def test_one_layer_cosine_matches_the_engine(n, kernel):
    rho, gamma = 0.4, 1.3
    beta = gamma * math.log(n)
    u = np.zeros(n + 1)
    u[0] = 1.0
    x = math.sqrt(rho) * u[None] + math.sqrt(1 - rho) * np.eye(n + 1)[1:]  # d = n + 1, <x_i, x_j> = rho
    model = ad.Model(ad.Weights.identity(n + 1), beta=beta, attention=kernel)
    # one attention layer without residual: y = P x (V = I), the engine's velocity at x
    y = ad.velocity(0.0, x, model)
    G = y @ y.T
    cos = G[0, 1] / math.sqrt(G[0, 0] * G[1, 1])
    assert cos == pytest.approx(theory.one_layer_cosine(n, rho, beta), abs=1e-12)


def test_one_layer_cosine_approaches_its_three_limits():
    rho = 0.4
    critical = 1 / (1 - rho)
    for gamma in (0.5 * critical, critical, 2 * critical):
        far = theory.one_layer_cosine(10**12, rho, gamma * math.log(10**12))
        near = theory.one_layer_cosine(10**3, rho, gamma * math.log(10**3))
        limit = theory.one_layer_cosine_limit(rho, gamma)
        assert abs(far - limit) < abs(near - limit) or abs(far - limit) < 1e-12
        assert far == pytest.approx(limit, abs=0.05)
    assert theory.one_layer_cosine_limit(rho, critical) == pytest.approx(4 * rho / (1 + 3 * rho))


def test_wendel_against_its_closed_cases_and_a_monte_carlo_count():
    # n <= d: always in a hemisphere; n = d + 1: all but 2 of the 2^{n-1} sign patterns; the circle: n / 2^{n-1}
    assert theory.wendel(3, 5) == 1.0
    assert theory.wendel(6, 5) == pytest.approx(1 - 2.0**-5)
    assert theory.wendel(7, 2) == pytest.approx(7 / 2**6)
    # Monte Carlo on the circle: points lie in a half-circle iff the largest angular gap exceeds pi
    rng = np.random.default_rng(0)
    theta = np.sort(rng.uniform(0, 2 * np.pi, (200_000, 5)), axis=1)
    gaps = np.diff(np.concatenate([theta, theta[:, :1] + 2 * np.pi], 1), axis=1)
    assert (gaps.max(1) > np.pi).mean() == pytest.approx(theory.wendel(5, 2), abs=4e-3)


def _engine_merge_log_time(beta: float, c0: float, ma: int, mb: int, u_end: float, usa: bool = False) -> float:
    """ln of the time at which two groups of tokens (ma at one point, mb at another, cosine c0) reach
    1 - <x_a, x_b> = u_end under the engine's sphere field, read off dense saves by interpolation in ln u."""
    half = math.acos(c0) / 2
    a, b = [math.cos(half), math.sin(half), 0.0], [math.cos(half), -math.sin(half), 0.0]
    x0 = np.array([a] * ma + [b] * mb)
    model = ad.Model(ad.Weights.identity(3), beta=beta, geometry="sphere", normalization="unnormalized" if usa else "softmax")
    ts = np.linspace(0.0, 60.0, 6001)
    xs = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-12, atol=1e-14)).xs.numpy()
    u = 1.0 - (xs[:, 0] * xs[:, -1]).sum(-1)
    k = int(np.argmax(u <= u_end))
    assert 0 < k, "the pair did not reach u_end within the horizon"
    lu0, lu1 = math.log(u[k - 1]), math.log(u[k])
    return math.log(ts[k - 1] + (math.log(u_end) - lu0) / (lu1 - lu0) * (ts[k] - ts[k - 1]))


@pytest.mark.parametrize(("masses", "usa"), [((1, 1), False), ((2, 1), False), ((1, 3), False), ((2, 1), True)])
def test_pair_log_time_against_the_engine(masses, usa):
    # two point clusters under the engine's own field, timed to 1 - c = 1e-6: the quadrature's law to 1e-6 in ln t
    beta, c0, u_end = 4.0, 0.2, 1e-6
    ours = theory.pair_log_time(beta, c0, *masses, u_end=u_end, n=sum(masses), usa=usa)
    assert abs(ours - _engine_merge_log_time(beta, c0, *masses, u_end, usa=usa)) < 1e-6


def test_pair_cosine_exact_against_the_engine_clock_and_the_tanh_law():
    # the pair law in the pairing clock s: the engine's two tokens with s = int e^{-beta (1 - c)} dt integrated beside them
    beta, c0 = 3.0, 0.1
    half = math.acos(c0) / 2
    x0 = np.array([[math.cos(half), math.sin(half), 0.0], [math.cos(half), -math.sin(half), 0.0]])
    model = ad.Model(ad.Weights.identity(3), beta=beta, geometry="sphere")
    ts = np.linspace(0.0, 3.0, 301)
    xs = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-12, atol=1e-14)).xs.numpy()
    c = (xs[:, 0] * xs[:, 1]).sum(-1)
    s = np.concatenate([[0.0], np.cumsum(np.diff(ts) * 0.5 * (np.exp(-beta * (1 - c[1:])) + np.exp(-beta * (1 - c[:-1]))))])
    # the trapezoid clock is second order: compare where its error (~dt^2 / 12 of the rate's curvature) is below 1e-6
    assert np.abs(theory.pair_cosine_exact(s, c0, beta) - c).max() < 1e-5
    # at beta = 1e4 the finite-beta factor is 1 + e^{-beta (1 - c)}: below 1e-40 while c < 0.99, so the tanh law holds to rounding
    s = np.linspace(0.0, 1.0, 11)
    exact = theory.pair_cosine_exact(s, 0.2, 1e4)
    law = theory.pairing_cosine(s, 0.2)
    keep = law < 0.99
    assert np.abs(exact - law)[keep].max() < 1e-11


def test_common_noise_antipodal_boundary():
    """beta_c(d) = ln(2 d - 1) / 2 is the zero of the antipodal exponent at kappa = 2 d, negative above it."""
    from attndyn.theory import antipodal_beta, antipodal_exponent

    for d in (2, 3, 4.5, 8):
        b = antipodal_beta(d)
        assert abs(antipodal_exponent(b, 2 * d)) < 1e-14
        assert antipodal_exponent(b + 0.1, 2 * d) < 0 < antipodal_exponent(b - 0.1, 2 * d)
    with pytest.raises(ValueError, match="d = 1"):
        antipodal_beta(1)
    with pytest.raises(ValueError, match="kappa = 0"):
        antipodal_exponent(1.0, 0)
