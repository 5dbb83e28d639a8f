"""The mean-field solver on the circle against theory: linear growth rates, the Kuramoto closed form,
mass conservation, and its clear errors."""

import math

import numpy as np
import pytest

from attndyn import meanfield, theory


def grid(M):
    return 2 * math.pi * np.arange(M) / M


def perturbed(M, modes, eps):
    theta = grid(M)
    return (1 + eps * sum(np.cos(k * theta) for k in modes)) / (2 * math.pi)


@pytest.mark.parametrize("usa", [False, True])
@pytest.mark.parametrize("beta", [1.0, 5.0])
def test_linear_growth_rates_match_theory(beta, usa):
    """Each mode of a tiny perturbation of the uniform density grows at lambda_l (SPEC §8.2) to 1e-4 relative."""
    modes = [1, 2, 3, 4]
    ts = np.linspace(0, 0.3, 7)
    rates = theory.growth_rates(beta, 2, modes, usa=usa)
    for k, lam in zip(modes, rates, strict=True):
        # one mode per run, small enough to stay linear over the window (the error it makes is ~ amplitude^2),
        # and tolerances well below the perturbation itself
        sol = meanfield.solve_circle(perturbed(128, [k], 1e-6), ts, beta=beta, usa=usa, rtol=1e-12, atol=1e-16)
        amp = meanfield.mode_amplitude(sol.rho, k)
        fitted = np.polyfit(ts, np.log(amp), 1)[0]
        assert fitted == pytest.approx(lam, rel=1e-4), (k, fitted, lam)


def test_kuramoto_closed_form_and_mass():
    """beta = 0 from a wrapped-Cauchy density: the order parameter follows Ott-Antonsen (SPEC §8.3)."""
    R0, M = 0.4, 512
    theta = grid(M)
    rho0 = (1 - R0**2) / (1 + R0**2 - 2 * R0 * np.cos(theta)) / (2 * math.pi)  # wrapped Cauchy
    ts = np.linspace(0, 2, 9)  # R(2) = 0.81: its Fourier coefficients R^k stay resolved on 512 points
    sol = meanfield.solve_circle(rho0, ts, beta=0.0)
    np.testing.assert_allclose(meanfield.order_parameter(sol.rho), theory.kuramoto_order(ts, R0), atol=1e-9)
    np.testing.assert_allclose(sol.rho.sum(1) * 2 * math.pi / M, 1.0, atol=1e-12)
    assert sol.rho.min() > 0


def test_bad_inputs_are_refused_with_one_sentence():
    ok = np.full(64, 1 / (2 * math.pi))
    with pytest.raises(ValueError, match="mass"):
        meanfield.solve_circle(2 * ok, [0, 1], beta=1.0)
    bad = ok.copy()
    bad[3] = -0.01
    with pytest.raises(ValueError, match="negative"):
        meanfield.solve_circle(bad, [0, 1], beta=1.0)
    with pytest.raises(ValueError, match="beta"):
        meanfield.solve_circle(ok, [0, 1], beta=-1.0)
    with pytest.raises(ValueError, match="too few"):
        meanfield.solve_circle(ok, [0, 1], beta=400.0)


def test_sharpening_clusters_exhaust_the_resolution_with_a_clear_error():
    """At beta = 8 the uniform state breaks into sharp clusters; a coarse grid must stop, not return noise."""
    rho0 = perturbed(128, [2], 0.05)
    with pytest.raises(meanfield.ResolutionError, match="refine M|no longer resolves"):
        meanfield.solve_circle(rho0, np.linspace(0, 20, 41), beta=8.0)


def test_a_grid_too_coarse_for_the_kuramoto_run_stops():
    """The same run to t = 4 (R = 0.955) needs more than 256 points: it must stop, naming the time."""
    R0, M = 0.4, 256
    theta = grid(M)
    rho0 = (1 - R0**2) / (1 + R0**2 - 2 * R0 * np.cos(theta)) / (2 * math.pi)
    with pytest.raises(meanfield.ResolutionError, match=r"at t = "):
        meanfield.solve_circle(rho0, np.linspace(0, 4, 9), beta=0.0)
