"""The mean-field flow of softmax self-attention on Gaussians (Castin, Ablin, Carrillo, Peyre, arXiv 2501.18322).

* :func:`gaussian_moments` - the flow maps N(m, S) to a Gaussian: for mu = N(m, S) the field is
  affine, v(x) = V (m + beta S K^T Q x), so m' = V (I + beta S K^T Q) m and
  S' = beta V S K^T Q S + beta S Q^T K S V^T. Integrated here with SciPy's DOP853, independent of the
  particle engine.
* :func:`gaussian_identity_covariance` - the closed form for Q = K = V = I,
  S(t) = S0 (I - 2 beta t S0)^{-1}, and :func:`gaussian_blowup_time` its t* = 1/(2 beta lambda_max(S0)).
* :func:`gaussian_field` - the affine field itself, which the tests compare with quadrature.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import solve_ivp

GAUSS_TOL = {"rtol": 1e-12, "atol": 1e-14}


def _square(name: str, A: np.ndarray, d: int) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    if A.shape != (d, d) or not np.isfinite(A).all():
        raise ValueError(f"{name} must be a finite ({d}, {d}) matrix; got shape {A.shape}.")
    return A


def gaussian_field(x: np.ndarray, m: np.ndarray, S: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray, beta: float) -> np.ndarray:
    """The mean-field velocity ``V (m + beta S K^T Q x)`` of N(m, S) at points ``x`` ``(..., d)``."""
    d = len(m)
    Q, K, V = (_square(k, A, d) for k, A in (("Q", Q), ("K", K), ("V", V)))
    return (m + beta * np.asarray(x) @ (S @ K.T @ Q).T) @ V.T


def gaussian_moments(
    m0: np.ndarray, S0: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray, beta: float, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(T, d)`` and covariance ``(T, d, d)`` of the Gaussian mean-field flow at times ``ts``."""
    m0 = np.asarray(m0, dtype=np.float64)
    d = m0.shape[0]
    S0 = _square("S0", S0, d)
    Q, K, V = (_square(k, A, d) for k, A in (("Q", Q), ("K", K), ("V", V)))
    ts = np.asarray(ts, dtype=np.float64)
    KQ, QK = K.T @ Q, Q.T @ K

    def rhs(_t, y):
        m, S = y[:d], y[d:].reshape(d, d)
        dm = V @ (m + beta * S @ KQ @ m)
        dS = beta * (V @ S @ KQ @ S + S @ QK @ S @ V.T)
        return np.concatenate([dm, dS.ravel()])

    sol = solve_ivp(rhs, (0.0, float(ts[-1])), np.concatenate([m0, S0.ravel()]), t_eval=ts, method="DOP853", **GAUSS_TOL)
    if not sol.success:
        raise FloatingPointError(f"the Gaussian moment ODE failed before t = {ts[-1]:g} (past its blow-up time?): {sol.message}")
    y = sol.y.T
    return y[:, :d], y[:, d:].reshape(-1, d, d)


def gaussian_identity_covariance(S0: np.ndarray, beta: float, t: float) -> np.ndarray:
    """``S0 (I - 2 beta t S0)^{-1}`` (Q = K = V = I), finite for t below :func:`gaussian_blowup_time`."""
    S0 = np.asarray(S0, dtype=np.float64)
    return S0 @ np.linalg.inv(np.eye(len(S0)) - 2.0 * beta * t * S0)


def gaussian_blowup_time(S0: np.ndarray, beta: float) -> float:
    """t* = 1 / (2 beta lambda_max(S0)) for Q = K = V = I (inf at beta = 0)."""
    lam = float(np.linalg.eigvalsh(np.asarray(S0, dtype=np.float64)).max())
    return math.inf if beta == 0 else 1.0 / (2.0 * beta * lam)
