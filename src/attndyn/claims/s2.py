"""Particles on the sphere S^2 (d = 3) through the engine, shared by the S^2 halves of the mean-field
claims (Bruno, Pasqualotto, Agazzi, arXiv 2410.23228): Q = K = V = I, ``geometry="sphere"``, SA or USA, batched over systems of equal
size; their zonal moments (1/n) sum_j P_l(<x_j, e_3>) are compared with the zonal solver of
:mod:`attndyn.theory.meanfield_sphere`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import qmc

import attndyn as ad
from attndyn.claims.common import ExperimentConfig, simulate_batch
from attndyn.theory import meanfield_sphere as ms

GOLDEN = (1 + math.sqrt(5)) / 2


def model(beta: float, *, usa: bool = False) -> ad.Model:
    """SA through the fused kernel, USA through dense (the fused kernel is softmax only)."""
    W = ad.Weights(np.eye(3), np.eye(3), np.eye(3))
    if usa:
        return ad.Model(W, beta=beta, geometry="sphere", normalization="unnormalized")
    return ad.Model(W, beta=beta, geometry="sphere", attention="fused")


def run(
    x0: np.ndarray, beta: float, t1: float, *, dt: float, saves: int, usa: bool = False, engine: ExperimentConfig | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """RK4 with step ``dt`` from points ``x0`` ``(S, n, 3)``; returns ``(ts, xs)`` with xs ``(T, S, n, 3)``."""
    return simulate_batch(model(beta, usa=usa), x0, t1, dt=dt, saves=saves, engine=engine)


def zonal_pair(n: int, degrees: np.ndarray, delta: float) -> np.ndarray:
    """Two systems ``(2, n, 3)``: the spherical Fibonacci lattice with every height moved by
    +delta g(u) and by -delta g(u), g = -sum_l int_{-1}^{u} P_l, a zonal displacement that adds
    delta sum_l P_l (degrees ``degrees``) to the density at first order. Half the difference of the
    two systems' zonal moments cancels the lattice's own (even in delta) discrepancy."""
    j = np.arange(n)
    u = 1 - (2 * j + 1) / n
    phi = 2 * math.pi * np.mod(j / GOLDEN, 1.0)
    P, _ = ms.legendre_table(int(np.max(degrees)) + 1, u)
    g = -sum((P[:, deg + 1] - P[:, deg - 1]) / (2 * deg + 1) for deg in degrees)
    out = []
    for sign in (1.0, -1.0):
        h = np.clip(u + sign * delta * g, -1.0, 1.0)
        s = np.sqrt(1 - h * h)
        out.append(np.stack([s * np.cos(phi), s * np.sin(phi), h], -1))
    return np.stack(out)


def qmc_start(a0: np.ndarray, systems: int, n: int, seed: int) -> np.ndarray:
    """``systems`` independent randomised quasi-Monte Carlo samples ``(systems, n, 3)`` of the zonal density
    ``a0``: scrambled Sobol points in [0, 1)^2 mapped to the height by inverse transform and to the azimuth."""
    q = np.stack([qmc.Sobol(2, scramble=True, seed=seed * 1000 + s).random(n) for s in range(systems)])
    return ms.sample(a0, q)
