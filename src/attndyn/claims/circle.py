"""Particles on the circle S^1 through the engine, shared by the mean-field claims.

A token at angle theta is the unit vector (cos theta, sin theta) in R^2; the engine runs SA
(``normalization="softmax"``) or USA (``"unnormalized"``) with Q = K = V = I and
``geometry="sphere"``, batched over systems of equal size.
"""

from __future__ import annotations

import math

import numpy as np

import attndyn as ad
from attndyn.claims.common import ExperimentConfig, simulate_batch


def to_plane(theta: np.ndarray) -> np.ndarray:
    """Angles ``(..., n)`` to unit vectors ``(..., n, 2)``."""
    return np.stack([np.cos(theta), np.sin(theta)], -1)


def angles(x: np.ndarray) -> np.ndarray:
    """Unit vectors ``(..., n, 2)`` to angles in [0, 2 pi)."""
    return np.mod(np.arctan2(x[..., 1], x[..., 0]), 2 * math.pi)


def model(beta: float, *, usa: bool = False, coupling: float = 1.0) -> ad.Model:
    """SA through the fused kernel (faster than dense at n = 1024), USA through dense.

    ``coupling`` scales V = coupling I (1 in every claim; the sensitivity tests change it).
    """
    W = ad.Weights(np.eye(2), np.eye(2), coupling * np.eye(2))
    if usa:
        return ad.Model(W, beta=beta, geometry="sphere", normalization="unnormalized")
    return ad.Model(W, beta=beta, geometry="sphere", attention="fused")


def run(
    theta0: np.ndarray,
    beta: float,
    t1: float,
    *,
    dt: float,
    saves: int,
    usa: bool = False,
    engine: ExperimentConfig | None = None,
    coupling: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """RK4 with step ``dt`` from angles ``theta0`` ``(S, n)``; returns ``(ts, theta)`` with theta ``(T, S, n)``."""
    ts, xs = simulate_batch(
        model(beta, usa=usa, coupling=coupling), to_plane(np.asarray(theta0, dtype=np.float64)), t1, dt=dt, saves=saves, engine=engine
    )
    return ts, angles(xs)


def amplitudes(theta: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """|(1/n) sum_j e^{i k theta_j}| for each k: ``(..., n)`` to ``(..., K)``.

    For integer k (every use here) the powers of z = e^{i theta} replace a complex exponential per k
    (far cheaper for several modes; z**k is computed by multiplications, within k ulps)."""
    ks = np.asarray(ks)
    if ks.size and np.array_equal(ks, np.round(ks)) and np.abs(ks).max() <= 64:
        z = np.exp(1j * np.asarray(theta))
        return np.stack([np.abs((z ** int(k)).mean(-1)) for k in ks.ravel()], -1).reshape(*np.shape(theta)[:-1], *ks.shape)
    return np.abs(np.exp(1j * ks * theta[..., None]).mean(-2))


def slopes(ts: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slopes of ``y`` ``(T, ...)`` against ``ts`` ``(T,)``, one per trailing index."""
    t = np.asarray(ts) - np.mean(ts)
    return np.tensordot(t, y - y.mean(0), axes=(0, 0)) / (t @ t)


def seeds_for(ns: list[int], budget: int) -> list[int]:
    """Systems per size so that every size costs about the same (S n^2 ~ budget n_min), at least 16."""
    n0 = min(ns)
    return [max(16, budget * n0 // n) for n in ns]


def loglog_slope(ns: np.ndarray | list, errors: np.ndarray | list) -> float:
    """The fitted exponent p of errors ~ C n^p."""
    return float(np.polyfit(np.log(np.asarray(ns, dtype=float)), np.log(np.asarray(errors, dtype=float)), 1)[0])
