"""``analyze(traj, model)``: the paper's prediction for a run against what the run shows.

Contract
--------
Takes a :class:`~attndyn.Trajectory` of one system (continuous or discrete) and its model;
returns an :class:`Analysis` (no I/O, no plotting). Steps:

1. the regime (``spectra.regime``) and the variable its prediction concerns (z or x);
2. the tokens mapped into that variable (z = e^{-tV} x for ODE runs, z^k = R^{-k} x^k for
   ``residual_layers``) and into the space where convergence is predicted: z itself
   (polytope), pi_F z (polytope x subspace), phi_1*(z) (hyperplanes, Thm 2.1), the unstable
   projection (codimension conjecture), x (collapse);
3. the observed limit points at the final time: single-linkage clusters with their stability range;
4. each token's distance to the predicted object at the final time;
5. P at the final time: Boolean distance, numerical rank, leaders, exceptional rows, per head;
6. fitted convergence rates (exponential, or the algebraic exponent for V = -I);
7. the monotone quantities of the paper and whether they stayed monotone.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.linalg as sla
import torch

from attndyn.analysis import clusters, geometry, lowrank, numerics, spectra
from attndyn.analysis.numerics import finite_json
from attndyn.core.dynamics import Model, attention_matrix
from attndyn.core.simulation import Trajectory
from attndyn.core.weights import to_numpy

# Tolerances of the analysis, explicit and documented.
RANK_TOL = 1e-8  # singular values of P above this count
LEADER_TOL = 1e-4  # a row within this of a Boolean vector points to a leader
EXCEPTIONAL_TOL = 1e-8  # a row farther than this from a Boolean vector is exceptional
MONOTONE_RTOL = 1e-9  # allowed increase of a non-increasing quantity, relative to the data scale
RATE_FLOOR_RTOL = 1e-9  # distances below this (relative) are rounding, left out of rate fits
N_DIRECTIONS = 64  # random directions for the support-function check


@dataclass(frozen=True)
class Analysis:
    regime: spectra.Regime
    t_final: float
    space: str  # where limits are measured: "z", "x", "phi1*(z)", "pi_F z", "unstable(z)"
    cluster_count: int
    cluster_tol_range: tuple[float, float]
    cluster_decades: float
    labels: list[int]
    limit_points: list[list[float]]
    distance_to_prediction: list[float] | None
    max_distance_to_prediction: float | None
    predicted: dict = field(default_factory=dict)
    boolean_distance: list[float] = field(default_factory=list)
    rank: list[int] = field(default_factory=list)
    rank_tol: float = RANK_TOL
    leaders: list[list[int]] = field(default_factory=list)
    exceptional_rows: list[list[int]] = field(default_factory=list)
    rates: dict = field(default_factory=dict)
    monotone: dict = field(default_factory=dict)
    # numerical-validity notes, e.g. a rescaled run that went past its float64 precision horizon
    warnings: list[str] = field(default_factory=list)
    # the count's verdict ("clusters", "one cluster", "no structure": then cluster_count is the points told apart)
    cluster_verdict: str = "clusters"

    def clusters_reading(self) -> str:
        """The count with its verdict: "k clusters", "one cluster" or "no structure"."""
        return clusters.reading_of(self.cluster_count if self.cluster_verdict != "no structure" else None)

    def __repr__(self) -> str:
        far = "" if self.max_distance_to_prediction is None else f", farthest token {self.max_distance_to_prediction:.3g} from the prediction"
        warn = f", {len(self.warnings)} warning{'s' if len(self.warnings) != 1 else ''}" if self.warnings else ""
        return (
            f"Analysis({self.regime.name}: {self.regime.reference or 'no theorem applies'}; {self.clusters_reading()}"
            f" in {self.space} at t = {self.t_final:g}{far}{warn})"
        )

    __str__ = __repr__

    def to_dict(self) -> dict:
        out = asdict(self)
        out["regime"] = asdict(self.regime)
        return finite_json(out)


def rescaled_tokens(traj: Trajectory, model: Model) -> np.ndarray | None:
    """z along the trajectory (T, n, d), or None when there is no single V to rescale by."""
    ts, xs = traj.numpy()
    if traj.variable == "z":
        return xs
    if model.weights.heads > 1:
        return None
    V = to_numpy(model.weights.V[0])
    d = V.shape[0]
    if traj.step_size is not None:
        Rinv = np.linalg.inv(np.eye(d) + traj.step_size * V)
        zs, M = np.empty_like(xs), np.eye(d)
        for k in range(len(ts)):
            zs[k] = xs[k] @ M.T
            M = Rinv @ M
        return zs
    return np.stack([x @ sla.expm(-t * V).T for t, x in zip(ts, xs, strict=True)])


def final_attention(traj: Trajectory, model: Model) -> torch.Tensor:
    """P at the final saved state, ``(heads, n, n)``."""
    t = float(traj.ts[-1])
    x = traj.xs[-1]
    if traj.step_size is not None and traj.variable == "z":
        V = model.weights.V[0].to(x.dtype)
        R = torch.eye(V.shape[0], dtype=x.dtype) + traj.step_size * V
        x = x @ torch.linalg.matrix_power(R, len(traj.ts) - 1).T
        plain = dataclasses.replace(model, rescaled=False, attention="dense")
        return attention_matrix(plain, x)
    return attention_matrix(model, x, t=t if traj.step_size is None else 0.0)


def _fit_rate(ts: np.ndarray, dist: np.ndarray, scale: float) -> dict | None:
    """Exponential rate r of dist(t) ~ C e^{-r t}: least squares on log dist over the second half of
    the window where dist is above rounding and t <= 0.8 T (the last points sit on the reference)."""
    T = ts[-1]
    ok = (dist > RATE_FLOOR_RTOL * max(scale, 1e-300)) & (ts <= 0.8 * T)
    idx = np.flatnonzero(ok)
    if len(idx) < 4:
        return None
    idx = idx[len(idx) // 2 :]
    if len(idx) < 3:
        return None
    slope = np.polyfit(ts[idx], np.log(dist[idx]), 1)[0]
    return {"rate": float(-slope), "t_from": float(ts[idx[0]]), "t_to": float(ts[idx[-1]])}


def _monotone(values: np.ndarray, scale: float, *, increasing: bool = False) -> dict:
    """Largest step against the expected direction along axis 0, and whether it stays within tolerance."""
    steps = np.diff(values, axis=0)
    worst = float((-steps if increasing else steps).max()) if steps.size else 0.0
    tol = MONOTONE_RTOL * max(scale, 1.0)
    return {"max_violation": worst if worst > 0 else 0.0, "tolerance": tol, "monotone": bool(worst <= tol)}


def horizon_warnings(traj: Trajectory, model: Model, zs: np.ndarray | None) -> list[str]:
    """A warning when a rescaled run goes past the precision horizon its spectrum implies.

    Uses :func:`attndyn.analysis.numerics.horizon_estimate`; :func:`attndyn.analysis.numerics.precision_horizon`
    measures it (two more integrations) when the exact time matters.
    """
    if zs is None or not model.rescaled:
        return []
    spread = float(np.ptp(zs[0], axis=0).max()) if zs.shape[1] > 1 else 1.0
    t_star = numerics.horizon_estimate(to_numpy(model.weights.V[0]), spread)
    t_end = float(traj.ts[-1])
    if t_end <= t_star:
        return []
    return [
        f"the run reaches t = {t_end:g}, past its float64 precision horizon t* ~ {t_star:.3g}: the slower unstable "
        "coordinates are decided by rounding after t*; measure it with attndyn.analysis.numerics.precision_horizon"
    ]


def analyze(traj: Trajectory, model: Model, *, seed: int = 0) -> Analysis:
    """Compare the paper's prediction for ``model`` with ``traj`` (see the module docstring)."""
    if not isinstance(traj, Trajectory) or not isinstance(model, Model):
        raise TypeError("analyze takes (Trajectory, Model).")
    if traj.xs.ndim != 3:
        raise ValueError(f"analyze takes one system, xs of shape (T, n, d); got {tuple(traj.xs.shape)}.")
    ts, xs = traj.numpy()
    if not np.isfinite(xs).all():
        raise ValueError("the trajectory contains non-finite states.")
    follow_up = model.geometry == "sphere" or model.mask != "full" or model.normalization == "unnormalized"
    if follow_up:
        reg = spectra.Regime(
            "none",
            "a follow-up model (sphere, masks or unnormalized attention): the paper's theorems are about full softmax attention in R^d",
            "",
            "",
            "",
        )
    else:
        reg = spectra.regime(model.weights, beta=1.0 if model.hard else model.beta)
    zs = rescaled_tokens(traj, model) if not follow_up else None
    V = to_numpy(model.weights.V[0])
    scale = float(np.abs(xs[0]).max())

    # The space in which the prediction is a limit, and the distance to the predicted object.
    predicted: dict = {}
    dist = None
    if reg.name == "collapse" or zs is None:
        space, path = "x", xs
    elif reg.name in ("hyperplanes", "boolean-1d"):
        phi_star, lam1, _ = geometry.left_eigenvector(V)
        space, path = "phi1*(z)", (zs @ phi_star)[..., None]
        c = path[-1, :, 0]
        a, b = float(c.min()), float(c.max())
        dist = np.minimum(np.minimum(np.abs(c - a), np.abs(c - b)), np.abs(c)) / np.linalg.norm(phi_star)
        predicted = {"a": a, "b": b, "phi_star": phi_star.tolist(), "lambda_1": lam1}
    elif reg.name == "polytope-subspace":
        split = geometry.paranormal_split(V)
        coords = np.linalg.lstsq(split.F, (zs @ split.pi_F.T).reshape(-1, V.shape[0]).T, rcond=None)[0].T
        space, path = "pi_F z", coords.reshape(*zs.shape[:-1], split.dim_F)
        predicted = {"dim_F": split.dim_F, "lambda": split.lam}
    elif reg.name == "codimension-conjecture":
        space, path = "unstable(z)", geometry.unstable_projection(zs, V)
    else:
        space, path = "z", zs
    final = path[-1]
    # the count relative to where the system started: a collapse is one point, not a cloud
    stable = clusters.stable_cluster_count(final, scale=clusters.diameter_of(path[0]))
    tol = math.sqrt(stable.tol_low * stable.tol_high) if np.isfinite(stable.tol_high) else max(stable.scale, 1.0)
    labels = clusters.cluster_labels(final, tol=tol) if stable.scale > 0 else np.zeros(len(final), dtype=np.int64)
    centres = [final[labels == k].mean(0).tolist() for k in range(labels.max() + 1)]
    if reg.name in ("polytope", "polytope-subspace"):
        # distance of every token to the nearest hull vertex; the polytope's vertices are the
        # limit points (cluster centres) that are hull vertices.
        verts = geometry.hull_vertices(final)
        dist = geometry.distance_to_vertices(final, final[verts])
        c = np.asarray(centres)
        predicted = {**predicted, "vertices": c[geometry.hull_vertices(c)].tolist()}
    elif reg.name == "collapse":
        dist = np.linalg.norm(final, axis=1)
        predicted = {"point": [0.0] * final.shape[1]}
    if reg.name == "codimension-conjecture":
        dist = np.linalg.norm(final - np.asarray(centres)[labels], axis=1)
        predicted = {"at_most_points": 3, "k": final.shape[1]}

    # Attention at the final time.
    P = to_numpy(final_attention(traj, model))
    bdist, rank, lead, exc = [], [], [], []
    for Ph in P:
        bdist.append(lowrank.boolean_distance(Ph))
        rank.append(lowrank.numerical_rank(Ph, tol=RANK_TOL))
        lead.append(lowrank.leaders(Ph, tol=LEADER_TOL).tolist())
        exc.append(lowrank.exceptional_rows(Ph, tol=EXCEPTIONAL_TOL).tolist())

    # Rates.
    rates = {}
    dev = np.linalg.norm(path - path[-1], axis=-1).max(axis=1)
    if reg.name == "collapse":
        norms = np.linalg.norm(xs, axis=-1).max(axis=1)
        keep = ts >= max(ts[-1] / 4, ts[1] if len(ts) > 1 else 0)
        if keep.sum() >= 3 and (norms[keep] > 0).all():
            rates["algebraic_exponent_max_norm_x"] = float(np.polyfit(np.log(ts[keep]), np.log(norms[keep]), 1)[0])
    elif reg.name != "none":
        fit = _fit_rate(ts, dev, float(np.abs(path[0]).max()))
        if fit is not None:
            rates[f"max_i |{space}_i(t) - {space}_i(T)|"] = fit

    # Monotone quantities (arXiv 2305.05465, the non-increase propositions).
    monotone = {}
    if zs is not None:
        lam = spectra.scalar_identity(V)
        if lam is not None and lam > 0:
            u = geometry.random_directions(V.shape[0], N_DIRECTIONS, np.random.default_rng(seed))
            monotone["support function of conv{z_i} (non-increasing)"] = _monotone(geometry.support_function(zs, u), scale)
        ok, _ = geometry.top_eigen_status(V)
        if ok:
            c = zs @ geometry.left_eigenvector(V)[0]
            monotone["max_i phi1*(z_i) (non-increasing)"] = _monotone(c.max(1), scale)
            monotone["min_i phi1*(z_i) (non-decreasing)"] = _monotone(c.min(1), scale, increasing=True)
    if xs.shape[-1] == 1:
        order = np.argsort(xs[0, :, 0], kind="stable")
        ordered = xs[:, order, 0]
        monotone["token order (d = 1)"] = {
            "max_violation": float(max(0.0, -np.diff(ordered, axis=1).min())),
            "tolerance": 0.0,
            "monotone": bool((np.diff(ordered, axis=1) > 0).all()),
        }

    return Analysis(
        regime=reg,
        t_final=float(ts[-1]),
        space=space,
        cluster_count=stable.count,
        cluster_verdict=stable.verdict,
        cluster_tol_range=(stable.tol_low, stable.tol_high),
        cluster_decades=stable.decades,
        labels=labels.tolist(),
        limit_points=centres,
        distance_to_prediction=None if dist is None else np.asarray(dist).tolist(),
        max_distance_to_prediction=None if dist is None else float(np.max(dist)),
        predicted=predicted,
        boolean_distance=bdist,
        rank=rank,
        leaders=lead,
        exceptional_rows=exc,
        rates=rates,
        monotone=monotone,
        warnings=horizon_warnings(traj, model, zs),
    )
