"""The noisy USA transition (attndyn.theory.noisy_transition) against independent computations."""

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import iv

from attndyn import theory
from attndyn.theory import meanfield, meanfield_sphere
from attndyn.theory import noisy_transition as nt


def test_critical_beta_solves_its_equation_and_matches_the_issue_s_values():
    for d in (2, 3, 4, 5.5, 8):
        b = theory.noisy_critical_beta(d)
        # the defining equation with unscaled Bessel functions (scipy's iv, not the ive the root finder uses)
        assert abs(iv(d / 2 + 1, b) / iv(d / 2, b) - 1 / d) < 1e-14
        # the root to 1e-10: the ratio's slope is O(1), so the bracket [b - 1e-10, b + 1e-10] changes its sign
        assert (iv(d / 2 + 1, b - 1e-10) / iv(d / 2, b - 1e-10) - 1 / d) * (iv(d / 2 + 1, b + 1e-10) / iv(d / 2, b + 1e-10) - 1 / d) < 0
    assert abs(theory.noisy_critical_beta(2) - 2.446918) < 1e-6
    assert abs(theory.noisy_critical_beta(3) - 1.816155) < 1e-6


@pytest.mark.parametrize("bad", [1.9, 0, -3, math.nan, math.inf])
def test_critical_beta_refuses_d_below_2_with_the_reason(bad):
    with pytest.raises(ValueError, match=r">= 2"):
        theory.noisy_critical_beta(bad)


@pytest.mark.parametrize("bad", ["3", None, True, [3]])
def test_critical_beta_refuses_a_non_number(bad):
    with pytest.raises(TypeError, match="must be a number"):
        theory.noisy_critical_beta(bad)


def test_kappa_lin_against_funk_hecke_quadrature():
    """kappa_lin = beta / K_1 with K_1 = |S^{d-2}| / |S^{d-1}| int e^{beta t} t (1 - t^2)^{(d-3)/2} dt (normalised measure)."""
    for d, beta in ((2, 0.5), (3, 1.5), (5, 3.0)):
        a = (d - 3) / 2  # the weight (1 - t)^a (1 + t)^a, integrated by QUADPACK's algebraic-weight rule
        num = quad(lambda t, b=beta: math.exp(b * t) * t, -1, 1, weight="alg", wvar=(a, a), epsabs=1e-14, epsrel=1e-13)[0]
        den = quad(lambda t: 1.0, -1, 1, weight="alg", wvar=(a, a), epsabs=1e-14, epsrel=1e-13)[0]
        assert abs(nt.kappa_lin(beta, d) - beta * den / num) < 1e-9 * nt.kappa_lin(beta, d)
    assert abs(nt.kappa_lin(1.5, 3) - 2.4118599747) < 1e-9
    assert abs(nt.kappa_lin(1e-8, 4) - 4) < 1e-6
    assert nt.kappa_lin(0.0, 2) == 2


def test_landau_coefficient_from_the_branch_matches_the_closed_form_and_changes_sign_at_beta_star():
    for d in (2, 3):
        bs = nt.noisy_critical_beta(d)
        for beta in (0.8 * bs, 1.2 * bs):
            c = nt.landau_from_branch(beta, d)
            assert abs(c - nt.landau_coefficient(beta, d)) < 1e-7
            assert (c < 0) == (beta > bs)


def test_the_branch_starts_at_kappa_lin_and_sees_a_normalised_kernel():
    """c is a ratio (scaling every K_l leaves it alone), but the branch's start is kappa_lin, and SA's K_l / K_0 moves it."""
    k, m1 = nt.zonal_branch(3.0, 2, np.array([1e-6]))
    assert abs(k[0] - nt.kappa_lin(3.0, 2)) < 1e-9
    assert abs(m1[0] - 0.5e-6) < 1e-12  # m_1 = h_1 / d at small h
    k, _ = nt.zonal_branch(3.0, 2, np.array([1e-6]), kernel_normalised=True)
    assert abs(k[0] - nt.kappa_lin(3.0, 2)) > 1.0


def test_kappa_sn_is_below_kappa_lin_only_above_beta_star():
    k, m1, err = nt.kappa_sn(4.0, 2)
    assert k < nt.kappa_lin(4.0, 2) * 0.96
    assert 0 < m1 < 1
    assert err < 1e-9
    k, _, _ = nt.kappa_sn(2.0, 2)
    assert abs(k - nt.kappa_lin(2.0, 2)) < 1e-6


def test_diffusion_in_the_circle_solver_gives_the_first_harmonic_s_rate():
    beta = 3.0
    for kappa in (0.7, 0.8):
        rho = meanfield.initial_density("uniform", 64, modes=[1], amplitude=1e-4)
        sol = meanfield.solve_circle(rho, [0.0, 1.0], beta=beta, usa=True, kappa=kappa, dt=0.001)
        A = meanfield.mode_amplitude(sol.rho, 1)
        assert abs(math.log(A[1] / A[0]) - (iv(1, beta) / beta - 1 / kappa)) < 1e-7


def test_diffusion_in_the_sphere_solver_gives_the_first_harmonic_s_rate():
    beta = 1.5
    for kappa in (1.5, 2.5):
        a = meanfield_sphere.zonal_density("uniform", 24, modes=[1], amplitude=1e-4)
        sol = meanfield_sphere.solve_sphere(a, [0.0, 1.0], beta=beta, usa=True, kappa=kappa, dt=0.005)
        rate = math.log(sol.coeffs[1, 1] / sol.coeffs[0, 1])
        assert abs(rate - 2 * (1 / nt.kappa_lin(beta, 3) - 1 / kappa)) < 1e-7


def test_diffusion_refuses_a_bad_kappa():
    rho = meanfield.initial_density("uniform", 16)
    with pytest.raises(ValueError, match="kappa"):
        meanfield.solve_circle(rho, [0.0, 1.0], beta=0.0, kappa=-1.0)
    with pytest.raises(ValueError, match="kappa"):
        meanfield_sphere.solve_sphere(np.array([1.0, 0.0]), [0.0, 1.0], beta=1.0, kappa=0.0)


def test_the_particles_drift_is_the_pairwise_sum():
    """The Fourier series of the interaction against the direct O(n^2) sum of e^{beta cos} sin, for a step with no noise."""
    rng = np.random.default_rng(5)
    for beta in (0.7, 6.0):
        theta = rng.uniform(-np.pi, np.pi, (2, 40))
        diff = theta[:, None, :] - theta[:, :, None]  # theta_j - theta_i
        direct = (np.exp(beta * np.cos(diff)) * np.sin(diff)).mean(-1)
        dt = 1e-3
        after, _ = nt.particles_circle(theta, beta, 1e300, dt, dt, rng)  # kappa -> infinity: no noise
        np.testing.assert_allclose((after - theta) / dt, direct, rtol=1e-10, atol=1e-10 * np.abs(direct).max())


def test_two_particles_sample_the_gibbs_law():
    """The SDE is overdamped Langevin for E = (1 / (2 n beta)) sum_ij e^{beta cos(theta_i - theta_j)} at temperature 1 / kappa:
    two particles' relative angle has density proportional to exp(kappa e^{beta cos phi} / (2 beta)). E[cos phi] over 4000
    independent pairs after 10 relaxation times, against the quadrature of that law (4 standard errors)."""
    beta, kappa, systems = 2.0, 1.0, 4000
    rng = np.random.default_rng(11)
    theta = rng.uniform(-np.pi, np.pi, (systems, 2))
    after, _ = nt.particles_circle(theta, beta, kappa, 8.0, 1e-2, rng)
    c = np.cos(after[:, 0] - after[:, 1])
    phi = np.linspace(-np.pi, np.pi, 20001)
    w = np.exp(kappa * np.exp(beta * np.cos(phi)) / (2 * beta))
    exact = float((np.cos(phi) * w).sum() / w.sum())
    se = c.std(ddof=1) / np.sqrt(systems)
    assert abs(c.mean() - exact) < 4 * se, (c.mean(), exact, se)


def test_the_stable_branch_is_nan_below_the_fold_and_on_the_upper_part_above():
    beta = 6.0
    kl = nt.kappa_lin(beta, 2)
    k_sn, m_sn, _ = nt.kappa_sn(beta, 2)
    assert np.isnan(nt.stable_m1(beta, 0.98 * k_sn))
    assert nt.stable_m1(beta, 1.02 * k_sn) > m_sn  # the stable part lies above the fold
    assert nt.stable_m1(beta, 1.1 * kl) > nt.stable_m1(beta, 0.95 * kl)
