"""The third wave's closed forms (SPEC §9.1-9.3) against independent computations: quadrature of
the mean-field velocity, the closed-form covariance, SPEC's reference values, numerical integration
of the quarter-circle density."""

import math

import numpy as np
import pytest
from scipy.integrate import quad

from attndyn.theory import third_wave as tw


def test_gaussian_field_is_the_quadrature_of_the_softmax_velocity(rng):
    """v[N(m, S)](x) = int y e^{beta x^T Q^T K y} dN / int e^{...} dN, by 2-D Gauss-Hermite quadrature."""
    d = 2
    Q, K, V = (np.eye(d) + 0.4 * rng.normal(size=(d, d)) for _ in range(3))
    m, A = np.array([0.3, -0.2]), rng.normal(size=(d, d)) * 0.4
    S = A @ A.T + 0.05 * np.eye(d)
    z, w = np.polynomial.hermite_e.hermegauss(60)
    Z = np.stack(np.meshgrid(z, z, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel()
    Y = m + Z @ np.linalg.cholesky(S).T  # nodes of N(m, S)
    for x in rng.normal(size=(5, d)):
        logit = 1.3 * Y @ (K.T @ Q @ x)
        e = W * np.exp(logit - logit.max())
        expected = V @ (e @ Y / e.sum())
        np.testing.assert_allclose(tw.gaussian_field(x, m, S, Q, K, V, 1.3), expected, atol=1e-10)


def test_gaussian_moments_follow_the_identity_closed_form():
    S0, m0, beta = np.diag([0.2, 0.05]), np.array([0.3, -0.1]), 1.0
    t_star = tw.gaussian_blowup_time(S0, beta)
    assert t_star == pytest.approx(2.5)
    ts = np.linspace(0, 0.9 * t_star, 7)
    eye = np.eye(2)
    m, S = tw.gaussian_moments(m0, S0, eye, eye, eye, beta, ts)
    for k, t in enumerate(ts):
        np.testing.assert_allclose(S[k], tw.gaussian_identity_covariance(S0, beta, t), rtol=1e-9)
    # SPEC §9.1's numbers at t = 1: diag S = (0.3333, 0.0556), mean (1.053, -0.287)
    m1, S1 = tw.gaussian_moments(m0, S0, eye, eye, eye, beta, [0.0, 1.0])
    np.testing.assert_allclose(np.diag(S1[-1]), [0.2 / 0.6, 0.05 / 0.9], rtol=1e-9)
    np.testing.assert_allclose(m1[-1], [1.053, -0.287], atol=5e-4)


def test_gaussian_moments_reject_bad_matrices():
    with pytest.raises(ValueError, match="Q must be a finite"):
        tw.gaussian_moments([0, 0], np.eye(2), np.eye(3), np.eye(2), np.eye(2), 1.0, [0, 1])


def test_rollout_weights_and_the_primacy_tail_match_the_reference_values():
    """SPEC §9.2's scratch values at n = 2000, H = 6, a = 1/2 (4 significant digits)."""
    j = np.array([1, 2, 10, 100, 1000, 1999])
    exact = tw.rollout_weights(2000, 6, 0.5)
    np.testing.assert_allclose(exact[j - 1], [3.120e-2, 1.948e-2, 7.871e-3, 1.808e-3, 1.729e-4, 4.699e-5], rtol=6e-4)
    assert exact[-1] == pytest.approx(0.015672, abs=5e-7)
    assert exact.sum() == pytest.approx(1.0, abs=1e-12)  # a convex combination
    np.testing.assert_allclose(tw.primacy_tail(j, 2000, 6, 0.5), [2.220e-2, 1.649e-2, 7.577e-3, 1.797e-3, 1.726e-4, 4.693e-5], rtol=6e-4)


def test_rollout_is_the_matrix_power():
    n, H, a = 9, 4, 0.3
    M = np.linalg.matrix_power(a * np.eye(n) + (1 - a) * tw.cesaro(n), H)
    np.testing.assert_allclose(tw.rollout_weights(n, H, a), M[-1], atol=1e-15)


@pytest.mark.parametrize("sigma", [0.5, 1.0])
def test_quarter_circle_moments_integrate_the_density(sigma):
    s2, s4 = tw.quarter_circle_moments(sigma)
    s = math.sqrt(math.expm1(sigma**2))

    def density(x):
        return math.sqrt(max(4 * s * s - x * x, 0.0)) / (math.pi * s * s)

    assert quad(density, 0, 2 * s)[0] == pytest.approx(1.0, abs=1e-9)
    assert quad(lambda x: x * x * density(x), 0, 2 * s)[0] == pytest.approx(s2, rel=1e-9)
    assert quad(lambda x: x**4 * density(x), 0, 2 * s)[0] == pytest.approx(s4, rel=1e-9)
