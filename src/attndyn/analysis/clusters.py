"""Cluster labels and counts that say how robust they are, and merge events over time.

Contract
--------
Pure functions on host arrays (NumPy in, NumPy out; convert tensors with ``attndyn.core.weights.to_numpy``); no I/O.

* ``cluster_labels(points, tol=...)``: single linkage at distance ``tol``; labels are integers
  numbered in order of first appearance.
* ``cluster_count_profile(points, tols)``: the count at each tolerance (one linkage for all).
* ``stable_cluster_count(points, scale=...)``: the count that holds over the widest range of
  log-tolerance inside a window ``[rel_min, rel_max] x scale``, with that range. ``scale`` is the
  reference length of the system (a trajectory's initial diameter; by default the points' own): a
  system that shrank far below it counts one cluster, k tight clusters count k at any common
  scale, a cloud without gaps counts every point. A count without its range is not to be trusted
  (logits grow like e^{2 lambda t}). ``analyze`` and the sweeps' ``cluster_count`` both use it.
* ``merge_events(ts, xs, tol=...)``: the save times at which clusters merge, with the tokens of
  each merging cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage


def as_points(points: np.ndarray, name: str = "points") -> np.ndarray:
    """``(n, d)`` float64 array (a 1-D input is n points in d = 1); rejects empty or non-finite."""
    a = np.asarray(points, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"{name} must have shape (n, d) with n, d >= 1; got shape {a.shape}.")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} (shape {a.shape}) contains non-finite values.")
    return a


def _positive(tol, name="tol") -> float:
    tol = float(tol)
    if not np.isfinite(tol) or tol <= 0:
        raise ValueError(f"{name}={tol!r} must be a finite number > 0.")
    return tol


def _first_appearance(raw: np.ndarray) -> np.ndarray:
    _, first = np.unique(raw, return_index=True)
    order = {label: k for k, label in enumerate(raw[np.sort(first)])}
    return np.array([order[r] for r in raw], dtype=np.int64)


def merge_heights(points: np.ndarray) -> np.ndarray:
    """Sorted single-linkage merge distances (n - 1 of them)."""
    a = as_points(points)
    if len(a) == 1:
        return np.zeros(0)
    return np.sort(linkage(a, method="single")[:, 2])


def cluster_labels(points: np.ndarray, *, tol: float) -> np.ndarray:
    """Single-linkage clusters at distance ``tol``: points closer than ``tol`` (chained) share a label."""
    a = as_points(points)
    tol = _positive(tol)
    if len(a) == 1:
        return np.zeros(1, dtype=np.int64)
    return _first_appearance(fcluster(linkage(a, method="single"), t=tol, criterion="distance"))


def cluster_count_profile(points: np.ndarray, tols: np.ndarray | None) -> np.ndarray:
    """Number of single-linkage clusters at each tolerance in ``tols``."""
    h = merge_heights(points)
    tols = np.asarray(tols, dtype=np.float64)
    if tols.ndim != 1 or not (np.isfinite(tols).all() and (tols > 0).all()):
        raise ValueError(f"tols must be a 1-D array of positive finite numbers; got {tols!r}.")
    return (len(h) + 1) - np.searchsorted(h, tols, side="right")


@dataclass(frozen=True)
class StableCount:
    """``count`` clusters for every tolerance in ``[tol_low, tol_high)``, a range of ``decades`` (log10)."""

    count: int
    tol_low: float
    tol_high: float
    decades: float
    scale: float


def diameter_of(points: np.ndarray) -> float:
    """Twice the largest distance to the centroid (0 for one point): the scale the window uses."""
    a = as_points(points)
    return float(np.max(np.linalg.norm(a - a.mean(0), axis=1))) * 2 if len(a) > 1 else 0.0


def stable_cluster_count(points: np.ndarray, *, scale: float | None = None, rel_min: float = 1e-6, rel_max: float = 1.0) -> StableCount:
    """The count that holds over the widest log-range of tolerances in ``[rel_min, rel_max] x scale``.

    ``scale``: the system's reference length, the larger of it and the points' own diameter (by
    default the diameter alone). Relative to its own diameter a collapsed system is a cloud (30
    points within 2e-5 of each other look like 30 clusters); relative to the diameter it started
    from it is one point. The window keeps the two unbounded ranges (every point its own cluster
    below the smallest merge distance, one cluster above the largest) finite; ``rel_min`` is the
    resolution below which points count as one (1e-3 of the data scale is suggested for
    converged limits).
    """
    a = as_points(points)
    if not 0 < rel_min < rel_max:
        raise ValueError(f"need 0 < rel_min < rel_max; got rel_min={rel_min}, rel_max={rel_max}.")
    h = merge_heights(a)
    diameter = diameter_of(a)
    if scale is not None and not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale={scale!r} must be a finite number >= 0.")
    reference = max(diameter, float(scale or 0.0))
    if diameter <= rel_min * reference:  # one point at the resolution (all of them equal included)
        return StableCount(1, diameter, np.inf, np.inf, diameter)
    lo, hi = rel_min * reference, rel_max * reference
    # Count k holds on [h_(n-k), h_(n-k+1)) with h_0 = 0 and h_n = inf; clip to the window.
    edges = np.concatenate([[0.0], h, [np.inf]])
    best = None
    n = len(a)
    for k in range(1, n + 1):
        left, right = max(edges[n - k], lo), min(edges[n - k + 1], hi)
        if right <= left:
            continue
        width = np.log10(right / left)
        if best is None or width > best.decades:
            best = StableCount(k, float(left), float(right), float(width), diameter)
    assert best is not None  # the window is non-empty, so some count covers part of it
    return best


@dataclass(frozen=True)
class MergeEvent:
    """Between ``t_before`` and ``t``, the clusters with tokens ``groups`` became one."""

    t: float
    t_before: float
    groups: tuple[tuple[int, ...], ...]


def merge_events(ts: np.ndarray, xs: np.ndarray, *, tol: float) -> list[MergeEvent]:
    """Merge events of single-linkage clusters (at ``tol``) along a trajectory ``xs`` ``(T, n, d)``."""
    ts = np.asarray(ts, dtype=np.float64)
    xs = np.asarray(xs.detach().cpu() if hasattr(xs, "detach") else xs, dtype=np.float64)
    if xs.ndim == 2:
        xs = xs[..., None]
    if xs.ndim != 3 or xs.shape[0] != ts.shape[0]:
        raise ValueError(f"xs must have shape (T, n, d) with T = len(ts) = {len(ts)}; got {xs.shape}.")
    events = []
    prev = cluster_labels(xs[0], tol=tol)
    for k in range(1, len(ts)):
        cur = cluster_labels(xs[k], tol=tol)
        for label in np.unique(cur):
            members = np.flatnonzero(cur == label)
            old = np.unique(prev[members])
            if len(old) > 1:
                groups = tuple(tuple(int(i) for i in members[prev[members] == o]) for o in old)
                events.append(MergeEvent(float(ts[k]), float(ts[k - 1]), groups))
        prev = cur
    return events
