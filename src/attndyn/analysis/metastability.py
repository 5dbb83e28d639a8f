"""Metastability tools (Geshkovski, Koubbi, Polyanskiy, Rigollet, arXiv 2410.06833): the normalised energy, plateaus on log-time, cluster masses, the
pairing-phase clock. NumPy only (analysis layer).

Contract
--------
* ``normalized_energy(xs, beta)``: E(t) = (1/n^2) sum_ij e^{beta(<x_i, x_j> - 1)} in (0, 1] for unit
  tokens ``(..., n, d)``; with k tight clusters far apart it sits at sum_a m_a^2.
* ``plateaus(ts, values, *, tol, min_decades)``: maximal runs of save times (t > 0) over which
  ``values`` stay within ``tol`` of the run's first value and that span at least ``min_decades``
  decades of t; each a :class:`Plateau` (start, end, level = the median over the run).
* ``cluster_masses(x, tol)``: the mass fractions of the clusters of ``x`` ``(n, d)`` at distance
  ``tol`` (single linkage), largest first; ``sum(m^2)`` is the plateau level they predict.
* ``pairing_clock(ts, c, beta)``: the rescaled time s(t) = int_0^t e^{-beta (1 - c)} dt' of a pair
  with cosine c(t) (trapezoid rule), in which the pair follows c(s) = tanh(2 s + artanh c_0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndyn.analysis.clusters import cluster_labels


@dataclass(frozen=True)
class Plateau:
    start: float
    end: float
    level: float

    @property
    def decades(self) -> float:
        return float(np.log10(self.end / self.start))


def normalized_energy(xs: np.ndarray, beta: float) -> np.ndarray:
    """(1/n^2) sum_ij e^{beta (<x_i, x_j> - 1)} over the last two axes ``(..., n, d)``."""
    x = np.asarray(xs, dtype=np.float64)
    if x.ndim < 2:
        raise ValueError(f"xs must have shape (..., n, d); got {x.shape}.")
    G = x @ np.swapaxes(x, -1, -2)
    return np.exp(beta * (G - 1.0)).mean((-1, -2))


def plateaus(ts: np.ndarray, values: np.ndarray, *, tol: float, min_decades: float) -> list[Plateau]:
    """Runs of near-constant ``values`` on log-time (see the module docstring)."""
    ts = np.asarray(ts, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if ts.shape != v.shape or ts.ndim != 1:
        raise ValueError(f"ts and values must be 1-D of the same length; got {ts.shape} and {v.shape}.")
    if not (tol > 0 and min_decades > 0):
        raise ValueError(f"tol = {tol} and min_decades = {min_decades} must be > 0.")
    keep = ts > 0
    ts, v = ts[keep], v[keep]
    out, i = [], 0
    while i < len(ts):
        j = i
        while j + 1 < len(ts) and abs(v[j + 1] - v[i]) <= tol:
            j += 1
        if j > i and np.log10(ts[j] / ts[i]) >= min_decades:
            out.append(Plateau(float(ts[i]), float(ts[j]), float(np.median(v[i : j + 1]))))
        i = j + 1
    return out


def cluster_masses(x: np.ndarray, tol: float) -> np.ndarray:
    """Mass fractions of the clusters of ``x`` at distance ``tol``, largest first."""
    labels = cluster_labels(np.asarray(x, dtype=np.float64), tol=tol)
    counts = np.bincount(labels)
    counts = counts[counts > 0]
    return np.sort(counts / counts.sum())[::-1]


def pairing_clock(ts: np.ndarray, c: np.ndarray, beta: float) -> np.ndarray:
    """s(t) = int_0^t e^{-beta (1 - c)} dt' (trapezoid rule on the save times)."""
    ts = np.asarray(ts, dtype=np.float64)
    rate = np.exp(-beta * (1.0 - np.asarray(c, dtype=np.float64)))
    return np.concatenate([[0.0], np.cumsum(0.5 * (rate[1:] + rate[:-1]) * np.diff(ts))])
