"""The mean-field solver on the circle against theory: linear growth rates, the Kuramoto closed form,
mass conservation, and its clear errors."""

import math

import numpy as np
import pytest

from attndyn.theory import closed_forms as theory
from attndyn.theory import meanfield


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


# --- the finite-volume scheme ---------------------------------------------------------------------


def test_finite_volume_converges_to_the_spectral_solution():
    """On a smooth run the upwind/minmod scheme approaches the spectral solution as M grows (order > 1)."""
    ts = np.array([0.0, 1.5])
    errors = []
    Ms = [128, 256, 512]
    for M in Ms:
        rho0 = meanfield.initial_density("von-mises", M, means=[0.0, 2.5], kappas=[2.0, 1.0], weights=[0.6, 0.4])
        ref = meanfield.solve_circle(rho0, ts, beta=4.0)
        fv = meanfield.solve_circle(rho0, ts, beta=4.0, method="finite-volume")
        assert fv.method == "finite-volume"
        assert fv.steps > 0
        errors.append(np.abs(fv.rho[-1] - ref.rho[-1]).max() / ref.rho[-1].max())
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert (orders > 1.2).all(), (errors, orders)
    assert errors[-1] < 5e-3


def test_finite_volume_stays_positive_and_conservative_where_the_spectral_method_stops():
    M = 128
    rho0 = meanfield.initial_density("uniform", M, modes=[2], amplitude=0.05)
    ts = np.linspace(0, 20, 41)
    with pytest.raises(meanfield.ResolutionError):
        meanfield.solve_circle(rho0, ts, beta=8.0)
    fv = meanfield.solve_circle(rho0, ts, beta=8.0, method="finite-volume")
    assert fv.rho.min() >= 0.0
    np.testing.assert_allclose(fv.rho.sum(1) * 2 * math.pi / M, 1.0, atol=1e-12)
    # two clusters formed (mode 2 dominated), each holding half of the mass
    final = fv.rho[-1]
    assert final.max() > 20 * final.mean()
    half = final[: M // 2].sum() * 2 * math.pi / M
    assert half == pytest.approx(0.5, abs=0.05)


def test_finite_volume_and_spectral_agree_on_the_kuramoto_closed_form():
    R0, M = 0.3, 1024
    rho0 = meanfield.initial_density("wrapped-cauchy", M, R0=R0)
    ts = np.linspace(0, 2, 5)
    fv = meanfield.solve_circle(rho0, ts, beta=0.0, method="finite-volume")
    np.testing.assert_allclose(meanfield.order_parameter(fv.rho), theory.kuramoto_order(ts, R0), atol=2e-4)


def test_bad_method_and_cfl_are_refused():
    ok = np.full(64, 1 / (2 * math.pi))
    with pytest.raises(ValueError, match="method"):
        meanfield.solve_circle(ok, [0, 1], beta=1.0, method="upwind")
    with pytest.raises(ValueError, match="cfl"):
        meanfield.solve_circle(ok, [0, 1], beta=1.0, method="finite-volume", cfl=0.9)
    with pytest.raises(ValueError, match="ts"):
        meanfield.solve_circle(ok, [1, 0], beta=1.0)


# --- W1 on the circle, CDFs, initial densities ------------------------------------------------------


def test_cdf_matches_the_direct_fourier_series():
    M = 512
    rho = meanfield.initial_density("von-mises", M, means=[0.0, 2.5], kappas=[2.0, 1.0], weights=[0.6, 0.4])
    p = np.random.default_rng(0).uniform(0, 2 * math.pi, 200)
    c = np.fft.rfft(rho) / M
    c[-1] /= 2
    m = np.arange(1, c.size)
    direct = c[0].real * p + 2 * (c[1:, None] * (np.exp(1j * m[:, None] * p) - 1) / (1j * m[:, None])).sum(0).real
    np.testing.assert_allclose(meanfield.cdf_circle(rho, p), direct, atol=1e-7)
    assert meanfield.cdf_circle(rho, [2 * math.pi])[0] == pytest.approx(1.0, abs=1e-12)


def _w1_brute(angles, density_fn, N=400_000):
    """min_c int |F_n - G - c| on a uniform midpoint grid, G by cumulative sums of the density function."""
    theta = (np.arange(N) + 0.5) * 2 * math.pi / N
    G = np.cumsum(density_fn(theta)) * 2 * math.pi / N
    F = np.searchsorted(np.sort(np.mod(angles, 2 * math.pi)), theta, side="right") / len(angles)
    D = F - G
    return float(np.abs(D - np.median(D)).mean() * 2 * math.pi)


def test_w1_matches_a_brute_force_computation_and_known_values():
    M = 512
    means, kappas, weights = [0.0, 2.5], [2.0, 1.0], [0.6, 0.4]
    rho = meanfield.initial_density("von-mises", M, means=means, kappas=kappas, weights=weights)
    from scipy.special import i0

    def density(t):
        return sum(w * np.exp(k * np.cos(t - m)) / (2 * math.pi * i0(k)) for m, k, w in zip(means, kappas, weights, strict=True))

    angles = np.random.default_rng(1).uniform(0, 2 * math.pi, (3, 50))
    got = meanfield.w1_circle(angles, rho)
    for s in range(3):
        assert got[s] == pytest.approx(_w1_brute(angles[s], density), rel=1e-4)
    uniform = np.full(M, 1 / (2 * math.pi))
    # a point mass against the uniform law: the mean arc distance, pi / 2, wherever the point is
    for a in (0.0, 1.0, 4.0):
        assert meanfield.w1_circle([a], uniform) == pytest.approx(math.pi / 2, rel=1e-6)
    # n equispaced points against the uniform law: pi / (2 n)
    n = 40
    grid_pts = 2 * math.pi * np.arange(n) / n
    assert meanfield.w1_circle(grid_pts, uniform) == pytest.approx(math.pi / (2 * n), rel=1e-4)


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("uniform", {"modes": [1, 3], "amplitude": 0.2}),
        ("wrapped-cauchy", {"R0": 0.5}),
        ("von-mises", {"means": [0.0, 3.0], "kappas": [4.0, 0.5], "weights": [0.5, 0.5]}),
        ("samples", {"angles": [0.1, 2.0, 4.0], "kappa": 20.0}),
    ],
)
def test_initial_densities_have_mass_one_and_the_expected_order_parameter(kind, params):
    M = 512
    rho = meanfield.initial_density(kind, M, **params)
    assert rho.min() >= 0
    assert rho.sum() * 2 * math.pi / M == pytest.approx(1.0, abs=1e-12)
    if kind == "wrapped-cauchy":
        assert meanfield.order_parameter(rho) == pytest.approx(params["R0"], abs=1e-12)
    if kind == "uniform":
        assert meanfield.mode_amplitude(rho, 3) == pytest.approx(params["amplitude"] / 2, abs=1e-12)


def test_initial_density_errors_name_the_value():
    with pytest.raises(ValueError, match="kind 'gauss'"):
        meanfield.initial_density("gauss", 64)
    with pytest.raises(ValueError, match="R0"):
        meanfield.initial_density("wrapped-cauchy", 64, R0=1.5)
    with pytest.raises(ValueError, match="no parameter 'sigma'"):
        meanfield.initial_density("wrapped-cauchy", 64, R0=0.5, sigma=1)
    with pytest.raises(ValueError, match="negative"):
        meanfield.initial_density("uniform", 64, modes=[1], amplitude=2.0)
    with pytest.raises(ValueError, match="weights"):
        meanfield.initial_density("von-mises", 64, means=[0.0], kappas=[1.0], weights=[0.5])


def test_fixed_step_rk4_converges_at_fourth_order_to_the_adaptive_solution():
    M = 256
    rho0 = meanfield.initial_density("von-mises", M, means=[0.0, 2.5], kappas=[2.0, 1.0], weights=[0.6, 0.4])
    ts = np.array([0.0, 1.0])
    ref = meanfield.solve_circle(rho0, ts, beta=2.0, rtol=1e-13, atol=1e-15).rho[-1]
    errs = [np.abs(meanfield.solve_circle(rho0, ts, beta=2.0, dt=dt).rho[-1] - ref).max() for dt in (0.1, 0.05)]
    assert 2**3.5 < errs[0] / errs[1] < 2**4.5, errs


@pytest.mark.parametrize("usa", [False, True])
def test_the_scipy_fft_path_gives_the_torch_field(usa, monkeypatch):
    """Above SCIPY_FFT_FROM grid points the spectral field uses scipy.fft on the CPU: the same field."""
    import torch

    M = 4096
    assert M >= meanfield.SCIPY_FFT_FROM
    rho = torch.as_tensor(meanfield.initial_density("von-mises", M, means=[0.0, 2.5], kappas=[2.0, 1.0], weights=[0.6, 0.4]))
    z, v = meanfield._coefficients(M, 3.0, usa)
    m = np.arange(M // 2 + 1)
    args = meanfield._Args(torch.as_tensor(np.stack([v, z])), torch.as_tensor(-1j * m * (m <= M // 3)), usa, M)
    fast = meanfield._field(0.0, rho.clone(), args)
    monkeypatch.setattr(meanfield, "SCIPY_FFT_FROM", 10**9)  # torch.fft everywhere
    ref = meanfield._field(0.0, rho.clone(), args)
    np.testing.assert_allclose(fast.numpy(), ref.numpy(), rtol=0, atol=1e-12 * float(ref.abs().max()))
