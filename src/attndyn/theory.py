"""Closed forms and reduced ODEs that the claims compare particle runs with (SPEC §5.1, §8). No torch.

Contract
--------
* ``equiangular_rhs(rho, beta, n, usa=False)`` and ``equiangular(beta, n, ts, usa=False)``: the
  pairwise cosine rho(t) of n pairwise orthogonal tokens on the sphere with Q = K = V = I
  (eq: ybeta of GLPR, arXiv 2312.10794; SPEC §8.1): rho' = 2 (1 - rho)((n - 1) rho + 1) e^{beta rho} / Z,
  Z = e^beta + (n - 1) e^{beta rho} for SA and Z = n for USA, rho(0) = 0.
* ``equiangular_beta0(n, ts)``: the closed form at beta = 0 (SA and USA agree there),
  rho(t) = 1 - n / (n - 1 + e^{2t}) (derivation in the function's docstring).
* ``k_point_rhs(y, masses, beta, usa=False)`` and ``k_point(y0, masses, beta, ts, usa=False)``: k
  clusters as point masses on the sphere (SPEC §5.1 (ii), §8.4): centre a moves by
  y_a' = P_{y_a}(sum_b m_b e^{beta <y_a, y_b>} y_b / Z_a), Z_a = sum_b m_b e^{beta <y_a, y_b>} (SA)
  or Z_a = 1 (USA), masses m_a = cluster size / n. Exact for clusters of zero diameter.

All integrations use ``scipy.integrate.solve_ivp(DOP853)`` at tight tolerances.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

ODE_TOL = {"rtol": 1e-12, "atol": 1e-13}


def equiangular_rhs(rho: float, beta: float, n: int, *, usa: bool = False) -> float:
    """d rho / dt of the equiangular model (eq: ybeta), written with e^{-beta(1 - rho)} so it never overflows."""
    growth = 2.0 * (1.0 - rho) * ((n - 1) * rho + 1.0)
    if usa:
        return growth * np.exp(beta * rho) / n
    return growth / (np.exp(beta * (1.0 - rho)) + n - 1)


def equiangular(beta: float, n: int, ts: np.ndarray, *, usa: bool = False) -> np.ndarray:
    """rho(t) at the times ``ts`` (ts[0] = 0, rho(0) = 0)."""
    ts = np.asarray(ts, dtype=np.float64)
    sol = solve_ivp(lambda t, r: [equiangular_rhs(r[0], beta, n, usa=usa)], (0.0, float(ts[-1])), [0.0], t_eval=ts, method="DOP853", **ODE_TOL)
    return sol.y[0]


def equiangular_beta0(n: int, ts: np.ndarray) -> np.ndarray:
    """Closed form at beta = 0: rho' = 2 (1 - rho)((n - 1) rho + 1) / n.

    With u = 1 - rho the equation is u' = -(2/n) u (n - (n - 1) u), a logistic equation, so
    u(t) = n / ((n - 1) + e^{2 t}) (u(0) = 1), i.e. rho(t) = 1 - n / (n - 1 + e^{2t}).
    """
    ts = np.asarray(ts, dtype=np.float64)
    return 1.0 - n / (n - 1.0 + np.exp(2.0 * ts))


def k_point_rhs(y: np.ndarray, masses: np.ndarray, beta: float, *, usa: bool = False) -> np.ndarray:
    """Velocities ``(k, d)`` of k point clusters at unit positions ``y`` ``(k, d)`` with masses ``m`` (sum 1)."""
    G = y @ y.T
    # weights m_b e^{beta <y_a, y_b>}; shifted by the row maximum for SA (it cancels in the ratio)
    logits = beta * G
    if usa:
        W = masses[None, :] * np.exp(logits)
    else:
        W = masses[None, :] * np.exp(logits - logits.max(1, keepdims=True))
        W = W / W.sum(1, keepdims=True)
    v = W @ y
    return v - (v * y).sum(1, keepdims=True) * y


def k_point(y0: np.ndarray, masses: np.ndarray, beta: float, ts: np.ndarray, *, usa: bool = False) -> np.ndarray:
    """Positions ``(T, k, d)`` of k point clusters at the times ``ts`` (``ts[0]`` is the start)."""
    y0 = np.asarray(y0, dtype=np.float64)
    masses = np.asarray(masses, dtype=np.float64)
    if y0.ndim != 2 or masses.shape != (len(y0),):
        raise ValueError(f"y0 must be (k, d) and masses (k,); got {y0.shape} and {masses.shape}.")
    if abs(masses.sum() - 1.0) > 1e-12 or (masses <= 0).any():
        raise ValueError(f"masses must be positive and sum to 1; got {masses.tolist()}.")
    k, d = y0.shape
    ts = np.asarray(ts, dtype=np.float64)

    def f(t, flat):
        return k_point_rhs(flat.reshape(k, d), masses, beta, usa=usa).ravel()

    sol = solve_ivp(f, (float(ts[0]), float(ts[-1])), y0.ravel(), t_eval=ts, method="DOP853", **ODE_TOL)
    if not sol.success:
        raise RuntimeError(f"the k-point ODE failed: {sol.message}")
    return sol.y.T.reshape(len(ts), k, d)
