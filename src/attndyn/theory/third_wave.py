"""Closed forms of the third wave's successors: Gaussian mean field, causal position bias, random
attention spectra (arXiv 2501.18322, 2502.01951, 2405.18781, 2410.07799).

* :func:`gaussian_moments` - the mean-field flow of softmax self-attention in R^d maps N(m, S) to a
  Gaussian (Castin, Ablin, Carrillo, Peyre, arXiv 2501.18322): for mu = N(m, S) the field is affine,
  v(x) = V (m + beta S K^T Q x), so m' = V (I + beta S K^T Q) m and
  S' = beta V S K^T Q S + beta S Q^T K S V^T. Integrated here with SciPy's DOP853, independent of the
  particle engine. :func:`gaussian_identity_covariance` is the closed form for Q = K = V = I,
  S(t) = S0 (I - 2 beta t S0)^{-1}, and :func:`gaussian_blowup_time` its t* = 1/(2 beta lambda_max(S0)).
  :func:`gaussian_field` is the affine field itself, which the tests compare with quadrature.
* :func:`cesaro` - the causal softmax at beta = 0 (C_ij = 1/i for j <= i, 1-based);
  :func:`rollout_weights` row n of (a I + (1 - a) C)^H, the exact depth-H influence on the last token,
  and :func:`primacy_tail` the logarithmic-tail approximation (arXiv 2502.01951; accurate for j >~ 10).
* :func:`quarter_circle_moments` - singular values of sqrt(n) A for row-softmax A of i.i.d.
  N(0, sigma^2) logits (the top one excluded) follow the quarter-circle law on [0, 2s] with
  s^2 = e^{sigma^2} - 1: E[s_k^2] = s^2, E[s_k^4] = 2 s^4.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import solve_ivp
from scipy.linalg import expm

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


def cesaro(n: int) -> np.ndarray:
    """The causal softmax at beta = 0: C_ij = 1/i for j <= i (rows 1-based)."""
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def causal_flow(x0: np.ndarray, t: float) -> np.ndarray:
    """The exact beta = 0 causal flow with V = I: ``e^{tC} x0`` (matrix exponential, SciPy)."""
    return expm(t * cesaro(x0.shape[-2])) @ x0


def rollout_weights(n: int, H: int, a: float) -> np.ndarray:
    """Row n of ``(a I + (1 - a) C)^H``: the weight of token j on the last token after H layers."""
    M = a * np.eye(n) + (1.0 - a) * cesaro(n)
    row = np.zeros(n)
    row[-1] = 1.0
    for _ in range(H):
        row = row @ M
    return row


def primacy_tail(j: np.ndarray, n: int, H: int, a: float) -> np.ndarray:
    """(1/n) sum_{k=1}^H binom(H, k) a^{H-k} (1-a)^k (ln(n/j))^{k-1} / (k-1)!, for tokens j < n (arXiv 2502.01951, 2603.10123)."""
    L = np.log(n / np.asarray(j, dtype=np.float64))
    return sum(math.comb(H, k) * a ** (H - k) * (1 - a) ** k * L ** (k - 1) / math.factorial(k - 1) for k in range(1, H + 1)) / n


def quarter_circle_moments(sigma: float) -> tuple[float, float]:
    """``(E[s^2], E[s^4])`` of the quarter-circle law with s^2 = e^{sigma^2} - 1."""
    s2 = math.expm1(sigma * sigma)
    return s2, 2.0 * s2 * s2
