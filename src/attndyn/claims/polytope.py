"""Thm 3.1 (t:Idcase11int): V = I and Q^T K SPD -> every z_i converges to a vertex of a polytope (arXiv 2305.05465 §3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import Field

import attndyn as ad
from attndyn.analysis import clusters, geometry, lowrank
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every, fraction, report, simulate_batch
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="polytope",
    paper_ref="arXiv:2305.05465v6 §3, Theorem 3.1 (and its full form)",
    title="V = I: clustering toward the vertices of a convex polytope",
    statement=(
        r"With \(V = I_d\) and \(Q^\top K\) symmetric positive definite, the convex hull of the rescaled tokens "
        r"\(z_i(t) = e^{-t} x_i(t)\) shrinks to a convex polytope \(\mathcal{K}\), and each \(z_i(t)\) converges to 0 or to a "
        r"point of the boundary of \(\mathcal{K}\); generically "
        "every token converges to a vertex and the attention matrix becomes Boolean."
    ),
    hypotheses="V = I_d; Q^T K symmetric positive definite; any initial tokens.",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    dims: list[int] = [2, 3]
    ns: list[int] = [10, 20, 50]
    forms: list[str] = ["identity", "spd"]
    scales: list[float] = [1.0, 5.0]
    seeds: int = 20
    dt: float = 0.01
    directions: int = 200
    # perturbations the sensitivity tests make (the claim is the defaults): the dynamics run with Q^T K + qk_error E
    # (E a fixed symmetric unit matrix) while the judge uses Q^T K; V = v_scale I integrated in x and judged as
    # z = e^{-t} x (a rescaling error); the horizon T times t_factor
    qk_error: float = 0.0
    v_scale: float = Field(1.0, gt=0)
    t_factor: float = Field(1.0, gt=0)


QUICK = {"ns": [20], "scales": [5.0]}
# T = 12 for U[-1,1], T = 10 for U[-5,5]; tolerances (a)-(f).
T_FOR_SCALE = {1.0: 12.0, 5.0: 10.0}
VERTEX_TOL = 1e-3
BOOLEAN_TOL = 1e-8
MONOTONE_RTOL = 64 * float(np.finfo(np.float64).eps)  # rounding: the measured worst increase is 8.9e-16 of the scale


DETECTS_RESCALING = "a rescaling error of +1e-6 (V = (1 + 1e-6) I integrated, judged as z = e^{-t} x)"
DETECTS_RESCALING_EITHER = "a rescaling error of 1e-6, either sign (V = (1 +- 1e-6) I integrated, judged as z = e^{-t} x)"
DETECTS_EARLY = "the run stopped at 0.7 T"
DETECTS_QUARTER = "the run stopped at T / 4 (T / 2 only at 3 of the 7 seeds tried)"


def qk_matrix(form: str, d: int, rng: np.random.Generator) -> np.ndarray:
    if form == "identity":
        return np.eye(d)
    G = rng.normal(size=(d, d))
    A = np.eye(d) + 0.3 * G @ G.T / d
    return A @ A  # A^2 with A = I + 0.3 G G^T / d


def run(config: Config) -> Result:
    """Simulate every case; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    arrays = {}
    k = 0
    for d in config.dims:
        for n in config.ns:
            for form in config.forms:
                for scale in config.scales:
                    B = qk_matrix(form, d, rng)
                    z0 = rng.uniform(-scale, scale, (config.seeds, n, d))
                    T = T_FOR_SCALE.get(scale, 10.0) * config.t_factor
                    ts, zs = _simulate(B, z0, T, config)
                    arrays |= {
                        f"ts{k}": ts,
                        f"z{k}": zs,
                        f"B{k}": B,
                        f"u{k}": geometry.random_directions(d, config.directions, rng),
                        f"scale{k}": np.float64(scale),
                    }
                    k += 1
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def _simulate(B: np.ndarray, z0: np.ndarray, T: float, config: Config) -> tuple[np.ndarray, np.ndarray]:
    """The rescaled run with V = I (or, for the sensitivity tests, a perturbed one: see :class:`Config`)."""
    d = B.shape[0]
    E = np.ones((d, d)) / d  # symmetric, norm 1
    weights = ad.Weights(np.eye(d), B + config.qk_error * E, config.v_scale * np.eye(d))
    saves = round(T * 10) + 1
    if config.v_scale == 1.0:
        return simulate_batch(ad.Model(weights, rescaled=True), z0, T, dt=config.dt, saves=saves, engine=config)
    ts, xs = simulate_batch(ad.Model(weights), z0, T, dt=config.dt, saves=saves, engine=config)
    return ts, xs * np.exp(-ts)[:, None, None, None]


def outermost_motion(ts: np.ndarray, z: np.ndarray, B: np.ndarray, scale: float) -> tuple[float, float, int]:
    """How far the outermost token moves over the last unit of time, and how far the dynamics let it.

    ``z`` is one run's saves ``(len(ts), n, d)``; v is the token of largest |A z_i| at the first save of
    [T - 1, T] (A^T A = Q^T K = B). It is its own leader: by Cauchy-Schwarz in the A inner product,
    <A z_v, A z_j> <= |A z_v| |A z_j| <= |A z_v|^2, with equality only for z_j = z_v. Its velocity is
    z_v' = sum_{j != v} P_vj (z_j - z_v), so its speed is at most s(t) = sum_{j != v} P_vj |z_j - z_v|,
    computed here in NumPy from the saved tokens (logits e^{2t} z_v^T B z_j). Over [T - 1, T] the
    logit gaps to z_v's own, already positive, grow like e^{2t}, so s decreases and the largest of its
    values at the saves (every 0.1) times the interval's length bounds the distance; rounding adds at
    most 64 eps of the scale (a step adds dt times a velocity that is zero to rounding). The budget is
    derived from the saved states alone, with no constant that a correct run could reach: in the runs
    measured, z_v moves by exactly 0 (every P_vj, j != v, underflows), while a rescaling error eps in
    z = e^{-t} x moves it by eps |z_v| per unit of time, outward or inward; inward, toward the origin, is
    what the hull check (a) cannot see when the origin is inside the hull (a shrinking hull is what the
    theorem allows).

    Returns ``(distance, budget, v)``.
    """
    k1 = int(np.searchsorted(ts, ts[-1] - 1.0))
    v = int(np.argmax(np.einsum("ni,ij,nj->n", z[k1], B, z[k1])))
    logits = np.exp(2 * ts[k1:])[:, None] * (z[k1:] @ B @ z[k1:, v, :, None])[..., 0]  # (saves, n)
    logits -= logits.max(1, keepdims=True)
    w = np.exp(logits)
    others = np.delete(w, v, axis=1) / w.sum(1, keepdims=True)
    gaps = np.delete(np.linalg.norm(z[k1:] - z[k1:, v : v + 1], axis=-1), v, axis=1)
    speed = (others * gaps).sum(1)
    budget = float((ts[-1] - ts[k1]) * speed.max() + MONOTONE_RTOL * scale)
    return float(np.linalg.norm(z[-1, v] - z[k1, v])), budget, v


def cases(arrays: dict) -> list[int]:
    return sorted(int(key[2:]) for key in arrays if key.startswith("ts") and key[2:].isdigit())


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    """The checks of Theorem 3.1 as a pure function of the saved states (every run, every token)."""
    ok = {"hull": [], "bounded": [], "converged": [], "outermost": [], "S": [], "boundary": [], "boolean": [], "leader": []}
    at_vertex, rates, rows = [], [], []
    # each case's own value and limit, so that a counted check names its closest case (common.every)
    val = {key: [] for key in ("hull", "bounded", "converged", "outermost", "S", "boundary", "boolean")}
    lim = {key: [] for key in val}
    names = {"run": [], "token": []}
    for k in cases(arrays):
        ts, zs, B, u, scale = arrays[f"ts{k}"], arrays[f"z{k}"], arrays[f"B{k}"], arrays[f"u{k}"], float(arrays[f"scale{k}"])
        T, d = float(ts[-1]), zs.shape[-1]
        model = ad.Model(ad.Weights(np.eye(d), B, np.eye(d)), rescaled=True)
        A = np.linalg.cholesky(B).T  # <Au, Av> = u^T B v
        k1 = np.searchsorted(ts, T - 1.0)
        rows.append({"d": d, "n": zs.shape[2], "scale": scale, "T": T, "QK=I": bool(np.allclose(B, np.eye(d)))})
        for s in range(zs.shape[1]):
            z = zs[:, s]
            h = geometry.support_function(z, u)
            ok["hull"].append(np.diff(h, axis=0).max() <= MONOTONE_RTOL * scale)
            ok["bounded"].append((h - h[0]).max() <= MONOTONE_RTOL * scale)
            step = np.linalg.norm(z[-1] - z[k1], axis=1).max()
            ok["converged"].append(T >= 1.0 and step < 1e-3 * scale)
            moved, allowed, _ = outermost_motion(ts, z, B, scale) if T >= 1.0 else (np.inf, 0.0, 0)
            ok["outermost"].append(moved <= allowed)
            for key, value, limit in (
                ("hull", np.diff(h, axis=0).max(), MONOTONE_RTOL * scale),
                ("bounded", (h - h[0]).max(), MONOTONE_RTOL * scale),
                ("converged", step if T >= 1.0 else np.inf, 1e-3 * scale),
                ("outermost", moved, allowed),
            ):
                val[key].append(float(value))
                lim[key].append(limit)
            run_name = f"d = {d}, n = {zs.shape[2]}, scale {scale:g}, case {k}, seed {s}"
            names["run"].append(run_name)
            p = z[-1]
            verts = geometry.hull_vertices(p)
            at_vertex.extend(geometry.distance_to_vertices(p, p[verts]) <= VERTEX_TOL)
            # S-equation of Thm 3.1: |Ap|^2 = max_j <Ap, Av_j>, and the limit in dK u {0}
            Ap = p @ A.T
            lhs = (Ap**2).sum(1)
            rhs = (Ap @ (p[verts] @ A.T).T).max(1)
            ok["S"].extend(np.abs(lhs - rhs) <= 1e-3 * np.maximum(lhs, 1e-12))
            bdist = np.minimum(geometry.boundary_distance(p), np.linalg.norm(p, axis=1))
            ok["boundary"].extend(bdist <= VERTEX_TOL * scale)
            val["S"].extend(np.abs(lhs - rhs))
            lim["S"].extend(1e-3 * np.maximum(lhs, 1e-12))
            val["boundary"].extend(bdist)
            lim["boundary"].extend([VERTEX_TOL * scale] * len(p))
            names["token"].extend(f"{run_name}, token {i}" for i in range(len(p)))
            P = ad.attention_matrix(model, p, t=T)[0].numpy()
            ok["boolean"].append(lowrank.boolean_distance(P) <= BOOLEAN_TOL)
            val["boolean"].append(float(lowrank.boolean_distance(P)))
            lim["boolean"].append(BOOLEAN_TOL)
            labels = clusters.cluster_labels(p, tol=VERTEX_TOL * 10)
            ok["leader"].extend(labels[P.argmax(1)] == labels)
            dev = np.linalg.norm(z - z[-1], axis=-1).max(1)
            sel = (ts >= 2.0) & (ts <= 0.6 * T) & (dev > 1e-12)
            if sel.sum() >= 3:
                rates.append(-np.polyfit(ts[sel], np.log(dev[sel]), 1)[0])
    checks = {
        "(a) hull of z non-increasing (200 directions, to 64 eps of the scale): failing runs": every(
            ok["hull"], detects=DETECTS_RESCALING, values=val["hull"], limits=lim["hull"], cases=names["run"]
        ),
        "(b) z_i(t) in conv{z_j(0)} (to 64 eps of the scale): failing runs": every(
            ok["bounded"], detects=DETECTS_RESCALING, values=val["bounded"], limits=lim["bounded"], cases=names["run"]
        ),
        "(c) |z(T) - z(T-1)| < 1e-3 scale: failing runs": every(
            ok["converged"], detects=DETECTS_EARLY, values=val["converged"], limits=lim["converged"], cases=names["run"]
        ),
        "(c') the outermost token (largest |A z_i| at T-1, its own leader) moves over [T-1, T] within its speed bound: failing runs": every(
            ok["outermost"], detects=DETECTS_RESCALING_EITHER, values=val["outermost"], limits=lim["outermost"], cases=names["run"]
        ),
        "(d) S-equation |Ap|^2 = max_j <Ap, Av_j> (rel. 1e-3): failing tokens": every(
            ok["S"], detects=DETECTS_EARLY, values=val["S"], limits=lim["S"], cases=names["token"]
        ),
        "(d) limit in dK u {0} (distance <= 1e-3 scale): failing tokens": every(
            ok["boundary"], detects="the run stopped at T / 2", values=val["boundary"], limits=lim["boundary"], cases=names["token"]
        ),
        "(e) P(T) Boolean to 1e-8: failing runs": every(
            ok["boolean"], detects=DETECTS_QUARTER, values=val["boolean"], limits=lim["boolean"], cases=names["run"]
        ),
        "(e) leader of row i in the vertex cluster of z_i: failing rows": every(ok["leader"], detects="the run stopped at T / 2"),
        "generic: fraction of tokens within 1e-3 of a hull vertex": report(fraction(at_vertex), "the authors' run: 400 of 400 tokens"),
        "(f) fitted rate of max_i |z_i(t) - z_i(T)|, median over runs": report(
            np.median(rates) if rates else float("nan"), "the authors' run: about 1"
        ),
    }
    info = {"runs": len(ok["hull"]), "tokens": len(ok["S"]), "cases": rows, "rates": [float(r) for r in rates]}
    return checks, info


def _example(result: Result, d: int):
    """One seed of the Q^T K = I case in dimension d with the largest scale (for figures and movies)."""
    a = result.arrays
    best = None
    for k in cases(a):
        if a[f"z{k}"].shape[-1] == d and np.allclose(a[f"B{k}"], np.eye(d)):
            if best is None or (float(a[f"scale{k}"]), a[f"z{k}"].shape[2] <= 20) >= best[0]:
                best = ((float(a[f"scale{k}"]), a[f"z{k}"].shape[2] <= 20), k)
    if best is None:
        return None
    k = best[1]
    return a[f"ts{k}"], a[f"z{k}"][:, 0]


def figures(result: Result) -> dict:
    figs = {}
    for d in (2, 3):
        ex = _example(result, d)
        if ex is None:
            continue
        ts, z = ex
        p = z[-1]
        figs[f"trajectories_{d}d"] = plots.paths_with_hulls(ts, z, title=f"Thm 3.1, d = {d}, Q = K = V = I (one seed)")
        verts = p[geometry.hull_vertices(p)]
        dist = np.array([geometry.distance_to_vertices(zt, verts).max() for zt in z])
        sel = (ts >= 2) & (ts <= 0.6 * ts[-1])
        slope, icpt = np.polyfit(ts[sel], np.log(dist[sel]), 1)
        figs[f"distance_{d}d"] = plots.distance_log(
            ts,
            dist,
            ylabel="max_i distance of z_i(t) to the limit vertices",
            title=f"d = {d}: convergence to the vertices",
            fit=(-slope, icpt, ts[sel][0], ts[sel][-1]),
        )
        if d == 2:
            counts = [clusters.cluster_count_profile(zt, [1e-3 * 5])[0] for zt in z]
            figs["cluster_count"] = plots.counts_vs_time(ts, {"tol = 5e-3": counts}, ylabel="number of clusters", title="clusters of z(t), d = 2")
            model = ad.Model(ad.Weights.identity(2), rescaled=True)
            times = [0.0, 1.0, 2.0, 4.0, ts[-1]]
            Ps = [ad.attention_matrix(model, z[np.searchsorted(ts, t)], t=t)[0].numpy() for t in times]
            figs["attention"] = plots.attention_heatmaps(Ps, times, [lowrank.numerical_rank(P, tol=1e-8) for P in Ps], tol=1e-8, title="P(t), d = 2")
    return figs


def movies(result: Result, folder: Path) -> list:
    out = []
    for d in (2, 3):
        ex = _example(result, d)
        if ex is not None:
            out.append(plots.points_movie(folder / f"polytope_{d}d.gif", *ex, title=f"Thm 3.1, d = {d}"))
    return out
