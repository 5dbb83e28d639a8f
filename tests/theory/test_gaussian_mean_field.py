"""The Gaussian mean-field flow (SPEC §9.1) against independent computations: quadrature of the
mean-field velocity and the closed-form covariance."""

import numpy as np
import pytest

from attndyn.theory import gaussian_mean_field


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
        np.testing.assert_allclose(gaussian_mean_field.gaussian_field(x, m, S, Q, K, V, 1.3), expected, atol=1e-10)


def test_gaussian_moments_follow_the_identity_closed_form():
    S0, m0, beta = np.diag([0.2, 0.05]), np.array([0.3, -0.1]), 1.0
    t_star = gaussian_mean_field.gaussian_blowup_time(S0, beta)
    assert t_star == pytest.approx(2.5)
    ts = np.linspace(0, 0.9 * t_star, 7)
    eye = np.eye(2)
    m, S = gaussian_mean_field.gaussian_moments(m0, S0, eye, eye, eye, beta, ts)
    for k, t in enumerate(ts):
        np.testing.assert_allclose(S[k], gaussian_mean_field.gaussian_identity_covariance(S0, beta, t), rtol=1e-9)
    # SPEC §9.1's numbers at t = 1: diag S = (0.3333, 0.0556), mean (1.053, -0.287)
    m1, S1 = gaussian_mean_field.gaussian_moments(m0, S0, eye, eye, eye, beta, [0.0, 1.0])
    np.testing.assert_allclose(np.diag(S1[-1]), [0.2 / 0.6, 0.05 / 0.9], rtol=1e-9)
    np.testing.assert_allclose(m1[-1], [1.053, -0.287], atol=5e-4)


def test_gaussian_moments_reject_bad_matrices():
    with pytest.raises(ValueError, match="Q must be a finite"):
        gaussian_mean_field.gaussian_moments([0, 0], np.eye(2), np.eye(3), np.eye(2), np.eye(2), 1.0, [0, 1])
