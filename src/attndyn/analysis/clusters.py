"""Cluster labels and counts that say how robust they are, and merge events over time.

Contract
--------
Pure functions on host arrays (NumPy in, NumPy out; convert tensors with ``attndyn.core.weights.to_numpy``); no I/O.

* ``cluster_labels(points, tol=...)``: single linkage at distance ``tol``; labels are integers
  numbered in order of first appearance.
* ``cluster_count_profile(points, tols)``: the count at each tolerance (one linkage for all).
* ``stable_cluster_count(points, scale=...)``: the number of clusters by a significant gap in the
  single-linkage merge distances, as a :class:`StableCount` with its verdict (``"clusters"``,
  ``"one cluster"``, ``"no structure"``) and evidence (the tolerance window, nearest-pair, within- and
  between-cluster distances, the gap's ratio and spread, the silhouette). ``scale`` is the reference
  length of the system (a trajectory's initial diameter, 2 for unit vectors; by default the points'
  own): a system that shrank far below it counts one cluster; k clusters separated by a gap count k
  (measured down to a planted silhouette of 0.5 in d >= 64, 0.85 in the plane, and at any silhouette
  when the gap is clean, the nearest pair between clusters >= 1.2 times the widest pair inside one,
  measured in d = 64, 576, 4096; a tight cluster beside a loose one counts 2; coordinates of any
  finite size); a cloud without a gap has no structure and counts every point the resolution tells
  apart. Long or curved clusters (silhouette < 0.5, no clean gap) read "no structure" even when a gap
  separates them. ``analyze``, the sweeps' ``cluster_count`` and the trained-decoder
  geometry use it; the rule and its limits are in docs/guide/analysis.md.
* ``StableCount.reading()``, ``reading_of(count)``, ``tally(readings)``: the count with its verdict
  ("k clusters", "one cluster", "no structure"), and the share of each verdict over prompts or draws
  (tables report these shares; they never average a count with the "no structure" number of points).
* ``silhouette(distances, labels)``, ``clean_ratio(distances, labels)``, ``distance_matrix(points)``: the evidence's building blocks.
* ``merge_events(ts, xs, tol=...)``: the save times at which clusters merge, with the tokens of
  each merging cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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


# The merge-gap rule's constants (docs/guide/analysis.md, "Counting clusters"; tests/analysis/test_cluster_count.py).
GAP_RATIO_MIN = 1.25  # a gap: the first merge between clusters at least 25 % above the last merge inside one
GAP_SPREAD_MIN = 1.25  # ... and (log) at least 1.25 times as wide as the spread of the merges on either side of it
GAP_FALSE_ALARM = 3.5  # ... or wider than 1 + 3.5 / ln(n / 2) (uniform 1-D clouds pass a gap test 2-6 % of draws, n = 20-300)
SPREAD_CLUSTER_MIN = 5  # ... judged cluster by cluster when every cluster has at least 5 points
SILHOUETTE_MIN = 0.5  # ... and a partition of "reasonable structure" (Kaufman & Rousseeuw 1990: > 0.5)
CLEAN_GAP_MIN = 1.2  # ... or a clean gap: every cluster >= 2 points, the nearest pair between clusters 1.2 x the widest pair inside one
ONE_FRACTION = 0.5  # one cluster: no significant gap and a diameter at most half the reference scale


@dataclass(frozen=True)
class StableCount:
    """A cluster count with its evidence (see :func:`stable_cluster_count`).

    ``count`` clusters for every tolerance in ``[tol_low, tol_high)``, a window of ``decades`` (log10).
    ``verdict``: ``"clusters"`` (a significant gap separates ``count >= 2`` groups), ``"one cluster"``
    (no gap inside, small against the reference; or one point at the resolution) or ``"no structure"``
    (no significant gap and not small: ``count`` is then the number of points the resolution tells apart,
    ``n`` for a cloud without coincident points). ``scale``: twice the points' largest distance to their
    centroid (between their diameter and twice it); ``reference``: the
    length the window is relative to. ``nearest``: the nearest-pair distance. ``within`` / ``between``:
    the largest merge distance inside the counted clusters and the smallest distance between them (the
    window's edges for ``"clusters"``). ``gap_ratio`` = between / within; ``gap_spread``: the gap's log
    width over the log spread of the merges on either side; ``silhouette``: the mean silhouette of the
    counted partition (Rousseeuw 1987; NaN unless ``"clusters"``); ``clean_ratio``: the smallest distance
    between the counted clusters over the largest distance inside one (a clean gap when > 1; NaN unless
    ``"clusters"`` with every cluster of at least two points).
    """

    count: int
    tol_low: float
    tol_high: float
    decades: float
    scale: float
    verdict: str = "clusters"
    reference: float = float("nan")
    nearest: float = float("nan")
    within: float = float("nan")
    between: float = float("nan")
    gap_ratio: float = float("nan")
    gap_spread: float = float("nan")
    silhouette: float = float("nan")
    clean_ratio: float = float("nan")

    def reading(self) -> str:
        """The count with its verdict: ``"3 clusters"``, ``"one cluster"`` or ``"no structure"`` (whose
        ``count``, the points the resolution tells apart, is no number of clusters: never average it with one)."""
        return reading_of(self.count if self.verdict != "no structure" else None)


def reading_of(count: float | None) -> str:
    """``"k clusters"``, ``"one cluster"``, or ``"no structure"`` for ``None`` or NaN (how a table stores that verdict)."""
    if count is None or not np.isfinite(count):
        return "no structure"
    return "one cluster" if int(count) == 1 else f"{int(count)} clusters"


def tally(readings: list[str]) -> str:
    """How often each reading occurs among ``readings`` (prompts, draws), most common first, e.g.
    ``"no structure in 3 of 4, 2 clusters in 1 of 4"``: counts over draws are summarised by the share of
    each verdict, never averaged (an average would mix a count of clusters with the points of a cloud)."""
    if not readings:
        return "-"
    kinds, counts = np.unique(np.asarray(readings, dtype=str), return_counts=True)
    order = sorted(range(len(kinds)), key=lambda i: (-counts[i], str(kinds[i])))
    return ", ".join(f"{kinds[i]} in {counts[i]} of {len(readings)}" for i in order)


def clean_ratio(distances: np.ndarray, labels: np.ndarray) -> float:
    """The smallest distance between clusters over the largest distance inside one (NaN with fewer than two
    clusters or a cluster of one point): the partition has a *clean gap* when this exceeds 1."""
    labels = np.asarray(labels)
    sizes = np.bincount(labels)
    if len(sizes) < 2 or sizes.min() < 2:
        return float("nan")
    same = labels[:, None] == labels[None, :]
    between, inside = distances[~same].min(), distances[same].max()
    if inside == 0:  # every cluster collapsed to a point: the gap is clean when the points are apart
        return float("inf") if between > 0 else float("nan")
    return float(between / inside)


def diameter_of(points: np.ndarray) -> float:
    """Twice the largest distance to the centroid (0 for one point): the scale the window uses.

    Between the true diameter (largest pairwise distance) and twice it."""
    a = as_points(points)
    return float(np.max(np.linalg.norm(a - a.mean(0), axis=1))) * 2 if len(a) > 1 else 0.0


def distance_matrix(points: np.ndarray) -> np.ndarray:
    """All pairwise Euclidean distances ``(n, n)`` from the Gram matrix of the centred points (BLAS).

    Accurate to about 1e-8 of the points' radius (the Gram matrix's rounding), which is far below
    any resolution the cluster count uses; six times faster than ``pdist`` at n = 2000, d = 2048.
    """
    a = as_points(points)
    a = a - a.mean(0)
    sq = np.einsum("ij,ij->i", a, a)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (a @ a.T)
    np.fill_diagonal(d2, 0.0)
    d = np.sqrt(np.maximum(d2, 0.0))
    return np.maximum(d, d.T)  # exactly symmetric


def silhouette(distances: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette (Rousseeuw 1987) of ``labels`` on a distance matrix; a point alone in its cluster scores 0."""
    labels = np.asarray(labels)
    k = int(labels.max()) + 1
    if k < 2:
        return float("nan")
    n = len(labels)
    onehot = np.zeros((n, k))
    onehot[np.arange(n), labels] = 1.0
    sizes = onehot.sum(0)
    sums = distances @ onehot
    a = sums[np.arange(n), labels] / np.maximum(sizes[labels] - 1, 1)
    mean = sums / sizes
    mean[np.arange(n), labels] = np.inf
    b = mean.min(1)
    s = np.where(sizes[labels] > 1, (b - a) / np.maximum(np.maximum(a, b), np.finfo(float).tiny), 0.0)
    return float(s.mean())


def _single_linkage(distances: np.ndarray) -> np.ndarray:
    n = len(distances)
    return linkage(distances[np.triu_indices(n, 1)], method="single")


def _gap_spread(h: np.ndarray, j: int, tree: np.ndarray) -> float:
    """Log width of the gap between ``h[j - 1]`` and ``h[j]`` over the larger log spread of the merges on either side.

    Above the gap: the median merge between clusters against the first. Below it: the top merge inside
    against the median one, over all clusters together, or (when that is smaller) cluster by cluster
    when every cluster has at least ``SPREAD_CLUSTER_MIN`` points, so that a tight cluster beside a
    loose one does not count as spread (issue 34, B1) while few-point clusters, whose scatter a handful
    of merges cannot show, are judged together.
    """
    gap = np.log(h[j] / h[j - 1])
    above = np.log(np.median(h[j:]) / h[j])
    below = np.log(h[j - 1] / np.median(h[:j]))
    n = len(h) + 1
    leaf = np.arange(2 * n - 1)
    for i in range(j):  # tree rows below j are the merges inside the clusters: a leaf of each, then its cluster
        leaf[n + i] = leaf[int(tree[i, 0])]
    rows = fcluster(tree, t=n - j, criterion="maxclust")[leaf[n : n + j]]
    clusters_, sizes = np.unique(rows, return_counts=True)
    if len(clusters_) == n - j and sizes.min() + 1 >= SPREAD_CLUSTER_MIN:  # no singletons, each big enough
        inside = np.maximum(tree[:j, 2], h[0])  # raised to the resolution as ``h`` is
        below = min(below, max(float(np.log(inside[rows == c].max() / np.median(inside[rows == c]))) for c in clusters_))
    spread = max(below, above)
    return float(gap / spread) if spread > 0 else float("inf")


def _loose_singletons(tree: np.ndarray, k: int) -> bool:
    """Whether the k-cluster cut of ``tree`` splits a loose cluster into singletons.

    The merges above the cut join the k clusters. A node above the cut whose every leaf is a singleton
    of the cut is a group of lone points; when that group is itself separated (its parent merge at least
    ``GAP_RATIO_MIN`` times its own top merge) it is one loose cluster, and its points are no more
    separated from each other than the group's own internal scale says (issue 34, B1). Lone points that
    are as far from each other as from the rest (the group's parent merge within that factor) stay clusters.
    """
    n = len(tree) + 1
    first = n - k  # rows first .. n - 2 are the merges above the cut (single linkage: heights nondecreasing)
    lone = {}
    parent = {}
    for i in range(first, n - 1):
        for c in tree[i, :2].astype(int):
            parent[c] = i
            if c < n:
                lone[c] = True
            elif c - n < first:
                lone[c] = False
        c1, c2 = tree[i, :2].astype(int)
        lone[n + i] = lone[c1] and lone[c2]
    for i in range(first, n - 1):
        node = n + i
        if lone[node] and node in parent and tree[parent[node], 2] >= GAP_RATIO_MIN * tree[i, 2]:
            return True
    return False


def stable_cluster_count(points: np.ndarray, *, scale: float | None = None, rel_min: float = 1e-6, rel_max: float = 1.0) -> StableCount:
    """The number of clusters, by a significant gap in the single-linkage merge distances, with its evidence.

    Rule (docs/guide/analysis.md, "Counting clusters"). Let the diameter be twice the largest distance
    to the centroid, ``reference`` the larger of ``scale`` and the diameter, ``lo = rel_min x reference``
    the resolution and ``hi = rel_max x reference``.

    1. Diameter <= ``lo``: one cluster (one point at the resolution).
    2. Sort the single-linkage merge distances h_1 <= ... <= h_{n-1} (those below ``lo`` raised to
       ``lo``); k clusters hold for tolerances in [h_{n-k}, h_{n-k+1}). A count 2 <= k <= ceil(n/2)
       (or k = the number of points the resolution tells apart, when some coincide: coincident points
       are a cluster) is *significant* when its gap ratio R = h_{n-k+1} / h_{n-k} is >= ``GAP_RATIO_MIN``
       and either (a) the log gap is >= ``GAP_SPREAD_MIN`` times the log spread of the merges on either
       side (:func:`_gap_spread`: below the gap cluster by cluster when each has at least
       ``SPREAD_CLUSTER_MIN`` points; issue 34, B1), or (b) R >= 1 + ``GAP_FALSE_ALARM`` / ln(n/2) with
       every cluster of at least two points; and the cut does not break a separated loose group into
       lone points (:func:`_loose_singletons`; issue 34, B1); and the partition's mean silhouette is
       >= ``SILHOUETTE_MIN`` (a single far point split from a loose cloud is a gap, not a structure).
    3. One cluster is a candidate when the diameter is <= ``ONE_FRACTION x reference``; its window is
       [diameter, ``hi``).
    4. The count is the candidate with the widest window (log); with no candidate the verdict is
       ``"no structure"`` and the count is the number of points the resolution tells apart (n for a
       cloud without coincident points).

    The points are centred and divided by their largest coordinate first (the evidence is scaled
    back), so coordinates of any finite size work (issue 34, B3). ``scale``: the system's reference
    length (a trajectory's initial diameter; 2 for unit vectors). Without it the reference is the
    points' own diameter, so one cluster is never a candidate: seen from itself a collapsed system is a
    cloud. O(n^2) memory (n = 2000: 32 MB).
    """
    a = as_points(points)
    if not 0 < rel_min < rel_max:
        raise ValueError(f"need 0 < rel_min < rel_max; got rel_min={rel_min}, rel_max={rel_max}.")
    if scale is not None and not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale={scale!r} must be a finite number >= 0.")
    a = a - a.mean(0)
    unit = float(np.max(np.abs(a)))
    if unit == 0.0:  # all points equal
        return StableCount(1, 0.0, np.inf, np.inf, 0.0, "one cluster", float(scale or 0.0), 0.0, 0.0)
    a = a / unit
    ref_scale = float(scale or 0.0) / unit
    if not np.isfinite(ref_scale):
        raise ValueError(f"scale={scale!r} is more than 1e308 times the points' extent ({unit:g}); pass a scale of their order.")
    st = _count(a, ref_scale, rel_min, rel_max)
    lengths = ("tol_low", "tol_high", "scale", "nearest", "within", "between")
    out = {f: getattr(st, f) * unit for f in lengths}
    return replace(st, **out, reference=max(out["scale"], float(scale or 0.0)))


def _count(a: np.ndarray, ref_scale: float, rel_min: float, rel_max: float) -> StableCount:
    """:func:`stable_cluster_count` on centred points of extent about 1 (the lengths in those units)."""
    n = len(a)
    diameter = diameter_of(a)
    reference = max(diameter, ref_scale)
    if diameter <= rel_min * reference:  # one point at the resolution (all of them equal included)
        return StableCount(1, diameter, np.inf, np.inf, diameter, "one cluster", reference, diameter, diameter)
    lo, hi = rel_min * reference, rel_max * reference
    dist = distance_matrix(a)
    tree = _single_linkage(dist)
    raw = np.sort(tree[:, 2])
    h = np.maximum(raw, lo)
    nearest = float(raw[0])
    resolved = n - int(np.searchsorted(raw, lo, side="right"))  # points the resolution tells apart
    best, best_width = None, -np.inf
    # at most ceil(n/2) clusters (two points a cluster on average), or every resolved point when some coincide
    ks = [*range(2, min((n + 1) // 2, resolved - 1) + 1), *([resolved] if 2 <= resolved < n else [])]
    for k in dict.fromkeys(ks):
        j = n - k  # h[j - 1] is the last merge inside the k clusters, h[j] the first between them
        left, right = h[j - 1], min(h[j], hi)
        if right <= left:
            continue
        ratio = h[j] / h[j - 1]
        if ratio < min(GAP_RATIO_MIN, CLEAN_GAP_MIN):  # below GAP_RATIO_MIN only a clean gap can count (it is <= ratio)
            continue
        spread = _gap_spread(h, j, tree)
        significant = spread >= GAP_SPREAD_MIN
        if not significant and ratio >= 1 + GAP_FALSE_ALARM / np.log(n / 2):
            sizes = np.bincount(fcluster(tree, t=k, criterion="maxclust"))
            significant = sizes[1:].min() >= 2
        width = np.log10(right / left)
        if significant and width > best_width and not _loose_singletons(tree, k):
            labels = _first_appearance(fcluster(tree, t=k, criterion="maxclust"))
            sil, clean = silhouette(dist, labels), clean_ratio(dist, labels)
            if (ratio >= GAP_RATIO_MIN and sil >= SILHOUETTE_MIN) or clean >= CLEAN_GAP_MIN:
                best, best_width = (k, float(left), float(right), float(ratio), spread, sil, clean), width
    clean_best = best is not None and best[-1] >= CLEAN_GAP_MIN  # a clean gap inside: never one cluster
    if not clean_best and diameter <= ONE_FRACTION * reference and diameter < hi and np.log10(hi / diameter) > best_width:
        width = float(np.log10(hi / diameter))
        return StableCount(1, diameter, float(hi), width, diameter, "one cluster", reference, nearest, float(raw[-1]))
    if best is None and resolved == 1:  # chained below the resolution
        return StableCount(1, lo, float(hi), float(np.log10(hi / lo)), diameter, "one cluster", reference, nearest, float(raw[-1]))
    if best is None:
        # every resolved point its own cluster: the window from the resolution to the first merge above it
        right = float(raw[n - resolved])
        width = float(np.log10(right / lo))
        return StableCount(resolved, lo, right, width, diameter, "no structure", reference, nearest)
    k, left, right, ratio, spread, sil, clean = best
    return StableCount(
        k, left, right, float(np.log10(right / left)), diameter, "clusters", reference, nearest, left, right, ratio, spread, sil, clean
    )


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
