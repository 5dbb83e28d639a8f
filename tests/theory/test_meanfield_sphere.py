"""The zonal mean-field solver on S^2 against independent oracles: a rings ODE (the exact mean-field
dynamics of a zonal measure made of latitude circles, with the ring-averaged kernel written with I_0,
I_1 and solved by SciPy), the linear rates of SPEC §8.2 with d = 3, and particles in d = 3 through the
engine; plus its clear errors."""

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.special import ive

import attndyn as ad
from attndyn.claims import s2
from attndyn.theory import closed_forms as theory
from attndyn.theory import meanfield_sphere as ms
from attndyn.theory.meanfield import ResolutionError


def rings_rhs(beta, usa, mass):
    """Heights u_k of latitude circles of fixed masses: u_k' = (1 - u_k^2) w(u_k), where the ring average of
    e^{beta <x, y>} over y on the circle of height u' is e^{beta u u'} I_0(beta s s') (s = sqrt(1 - u^2))."""

    def rhs(t, u):
        s = np.sqrt(np.clip(1 - u * u, 0, None))
        z = beta * np.outer(s, s)
        # e^{beta (u u' + s s')} I_0(z) e^{-z}: the exponent never exceeds beta (no overflow)
        e = np.exp(beta * (np.outer(u, u) + np.outer(s, s)))
        i0, i1 = ive(0, z) * e, ive(1, z) * e
        F = i0 @ mass
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(s[:, None] > 0, np.outer(u / np.where(s > 0, s, 1), s), 0.0)
        slope = (i0 * u[None, :] - i1 * ratio) @ mass  # F' / beta (finite at beta = 0)
        w = slope if usa else slope / F
        return (1 - u * u) * w

    return rhs


def rings_moments(a0, beta, usa, T, ls, rings=96):
    u, wq = np.polynomial.legendre.leggauss(rings)
    mass = wq * ms.density(a0, u) / 2
    sol = solve_ivp(rings_rhs(beta, usa, mass), (0, T), u, method="DOP853", rtol=1e-12, atol=1e-13)
    P, _ = ms.legendre_table(max(ls), sol.y[:, -1])
    return P[:, ls].T @ mass


CAPS = {"kappas": [3.0, 1.5], "poles": [1, -1], "weights": [0.6, 0.4]}


@pytest.mark.parametrize(
    ("beta", "usa", "T"), [(0.0, False, 1.0), (1.0, False, 1.0), (4.0, False, 1.0), (0.0, True, 1.0), (1.0, True, 1.0), (4.0, True, 0.05)]
)
def test_solver_matches_the_rings_ode(beta, usa, T):
    """From two caps, the solver's zonal moments at T equal the rings ODE's to 1e-9 (USA at beta = 4 is
    e^4 faster: T = 0.05 keeps the caps resolved at degree 48)."""
    ls = [1, 2, 3, 4, 6]
    a0 = ms.zonal_density("caps", 48, **CAPS)
    sol = ms.solve_sphere(a0, [0.0, T], beta=beta, usa=usa, rtol=1e-12, atol=1e-14)
    got = ms.moments(sol.coeffs[-1], ls)
    want = rings_moments(a0, beta, usa, T, ls)
    assert np.abs(got - want).max() < 1e-9, (got, want)
    assert abs(sol.coeffs[-1, 0] - 1) < 1e-14  # mass
    assert np.abs(got - ms.moments(a0, ls)).max() > 1e-2  # the test sees real motion


@pytest.mark.parametrize("usa", [False, True])
@pytest.mark.parametrize("beta", [1.0, 6.0])
def test_linear_rates_match_spec(beta, usa):
    """A 1e-8 perturbation of degree l grows at l (l + 1) K_l / (beta K_0) (SA) or l (l + 1) K_l / beta (USA), to 1e-4."""
    modes = [1, 2, 3, 4]
    lam = theory.growth_rates(beta, 3, modes, usa=usa)
    ts = np.linspace(0, 1 / lam.max(), 9)
    for deg, rate in zip(modes, lam, strict=True):
        sol = ms.solve_sphere(ms.zonal_density("uniform", 48, modes=[deg], amplitude=1e-8), ts, beta=beta, usa=usa, rtol=1e-12, atol=1e-20)
        fitted = np.polyfit(ts, np.log(sol.coeffs[:, deg]), 1)[0]
        assert fitted == pytest.approx(rate, rel=1e-4), (deg, fitted, rate)


def test_particles_in_d3_follow_the_solver():
    """SA particles in d = 3 from the caps density (engine, RK4; randomised QMC starts): zonal moments at T
    within 5 standard errors of the solver."""
    beta, T, ls = 2.0, 1.0, [1, 2, 3]
    a0 = ms.zonal_density("caps", 48, **CAPS)
    x0 = s2.qmc_start(a0, 16, 256, seed=3)
    model = ad.Model(ad.Weights(np.eye(3), np.eye(3), np.eye(3)), beta=beta, geometry="sphere")
    traj = ad.simulate(model, x0, [0.0, T], solver=ad.RK4(), step=ad.FixedStep(0.02))
    got = ms.particle_moments(traj.numpy()[1][-1], ls)  # (32, 3)
    want = ms.moments(ms.solve_sphere(a0, [0.0, T], beta=beta).coeffs[-1], ls)
    z = np.abs(got.mean(0) - want) / (got.std(0, ddof=1) / math.sqrt(len(got)))
    assert z.max() < 5, z
    # and the solver at 0.8 beta is far outside the band: the comparison has power
    wrong = ms.moments(ms.solve_sphere(a0, [0.0, T], beta=0.8 * beta).coeffs[-1], ls)
    assert (np.abs(got.mean(0) - wrong) / (got.std(0, ddof=1) / math.sqrt(len(got)))).max() > 10


def test_sampling_and_cdf_are_consistent():
    a0 = ms.zonal_density("caps", 48, **CAPS)
    u = np.linspace(-1, 1, 2001)
    np.testing.assert_allclose(ms.cdf(a0, [-1.0, 1.0]), [0.0, 1.0], atol=1e-13)
    # the CDF's derivative is half the density
    np.testing.assert_allclose(np.gradient(ms.cdf(a0, u), u)[1:-1], ms.density(a0, u)[1:-1] / 2, rtol=1e-4)
    q = np.random.default_rng(0).random((5000, 2))
    x = ms.sample(a0, q)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1, atol=1e-14)
    np.testing.assert_allclose(ms.cdf(a0, x[:, 2]), q[:, 0], atol=1e-10)


def test_resolution_error_when_the_density_sharpens():
    """Strong SA at beta = 9 from two caps concentrates below degree 24: the solver stops with a ResolutionError."""
    a0 = ms.zonal_density("caps", 24, **CAPS)
    with pytest.raises(ResolutionError, match="raise L|no longer resolves"):
        ms.solve_sphere(a0, np.linspace(0, 20, 21), beta=2.0)


def test_bad_inputs_are_refused_with_one_sentence():
    a0 = ms.zonal_density("uniform", 16)
    with pytest.raises(ValueError, match="a0\\[0\\]"):
        ms.solve_sphere(2 * a0, [0, 1], beta=1.0)
    with pytest.raises(ValueError, match="non-finite"):
        ms.solve_sphere(np.r_[1.0, np.nan, 0.0], [0, 1], beta=1.0)
    with pytest.raises(ValueError, match="beta"):
        ms.solve_sphere(a0, [0, 1], beta=-1.0)
    with pytest.raises(ValueError, match="too low"):
        ms.solve_sphere(a0, [0, 1], beta=200.0)
    with pytest.raises(ValueError, match="increasing"):
        ms.solve_sphere(a0, [1, 0], beta=1.0)
    with pytest.raises(ValueError, match="negative"):
        ms.zonal_density("uniform", 16, modes=[2], amplitude=3.0)
    with pytest.raises(ValueError, match="no parameter 'kappa'"):
        ms.zonal_density("caps", 16, kappa=1.0)
    with pytest.raises(ValueError, match="poles"):
        ms.zonal_density("caps", 16, kappas=[1.0], poles=[0], weights=[1.0])
    with pytest.raises(ValueError, match="not one of"):
        ms.zonal_density("gaussian", 16)
    with pytest.raises(ValueError, match="uniforms"):
        ms.sample(a0, np.ones((4, 3)))
