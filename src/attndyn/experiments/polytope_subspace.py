"""Thm 5.2 (t:multiplicity): paranormal V -> pi_F z_i approaches the boundary of a polytope in F (SPEC §2.6, §4.7)."""

from __future__ import annotations

import numpy as np

import attndyn as ad

from .. import geometry, plots
from .common import ClaimInfo, ExperimentConfig, Result, at_most, fraction, report, simulate_batch

CLAIM = ClaimInfo(
    id="polytope-subspace",
    paper_ref="arXiv:2305.05465v6 Def. 5.1 (d:goodmulti), Thm 5.2 (t:multiplicity); proof in §10",
    title="Paranormal V: a polytope times a subspace",
    statement=(
        "If Q^T K is symmetric positive definite and V is paranormal (R^d = F + G, V|_F = lambda I, rho(V|_G) < lambda), "
        "there is a convex polytope K in F such that the F-component of every z_i(t) approaches the boundary of K or 0; "
        "the G-component is unconstrained (it may diverge in z)."
    ),
    hypotheses=(
        "V = diag(lambda I_p, M), rho(M) < lambda; Q^T K SPD. A second series with a non-orthogonal splitting and generic "
        "SPD Q^T K is reported (e:boundrj, SPEC §6.6)."
    ),
    kind="pass/fail",
)


class Config(ExperimentConfig):
    cases: list[str] = ["diag(1,1,-0.5)", "diag(2,2,1,-1)"]
    n: int = 20
    seeds: int = 20
    dt: float = 0.01


QUICK = {"seeds": 10}
VERTEX_TOL = 1e-3


def case(name: str) -> tuple[np.ndarray, int]:
    if name == "diag(1,1,-0.5)":
        return np.diag([1.0, 1.0, -0.5]), 10.0
    if name == "diag(2,2,1,-1)":
        return np.diag([2.0, 2.0, 1.0, -1.0]), 6.0
    raise ValueError(f"unknown case {name!r}")


def spd_respecting(d: int, p: int, rng: np.random.Generator) -> np.ndarray:
    """An SPD Q^T K that is block-diagonal for F (+) G = R^p (+) R^{d-p}."""
    G = rng.normal(size=(d, d))
    A = np.eye(d) + 0.3 * G @ G.T / d
    A[:p, p:] = 0
    A[p:, :p] = 0
    return A @ A


def measure(V: np.ndarray, B: np.ndarray, zs: np.ndarray, ts: np.ndarray, rng: np.random.Generator, scale: float) -> dict:
    split = geometry.paranormal_split(V)
    f = np.linalg.lstsq(split.F, (zs @ split.pi_F.T).reshape(-1, len(V)).T, rcond=None)[0].T.reshape(*zs.shape[:-1], split.dim_F)
    u = geometry.random_directions(split.dim_F, 100, rng)
    mono, far, off, g_growth = [], [], [], []
    for s in range(zs.shape[1]):
        h = geometry.support_function(f[:, s], u)
        mono.append(np.diff(h, axis=0).max() > 1e-10 * scale)
        p = f[-1, s]
        far.extend(geometry.distance_to_vertices(p, p[geometry.hull_vertices(p)]) > VERTEX_TOL)
        off.extend(np.minimum(geometry.boundary_distance(p), np.linalg.norm(p, axis=1)) > VERTEX_TOL)
        g = zs[:, s] @ (np.eye(len(V)) - split.pi_F).T
        g_growth.append(np.abs(g[-1]).max() / max(np.abs(g[0]).max(), 1e-300))
    return mono, far, off, g_growth, f


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    mono, far, off, growth, arrays = [], [], [], [], {}
    for name in config.cases:
        V, T = case(name)
        d, p = len(V), int((np.diag(V) == V.max()).sum())
        for form in ("identity", "spd"):
            B = np.eye(d) if form == "identity" else spd_respecting(d, p, rng)
            model = ad.Model(ad.Weights(np.eye(d), B, V), rescaled=True)
            ts, zs = simulate_batch(model, rng.uniform(-5, 5, (config.seeds, config.n, d)), T, dt=config.dt, saves=int(T * 10) + 1, engine=config)
            m, fa, of, g, f = measure(V, B, zs, ts, rng, 5.0)
            mono += m
            far += fa
            off += of
            growth += g
            if name == config.cases[0] and form == "identity":
                arrays = {"ts": ts, "z": zs[:, 0], "f": f[:, 0]}
    # Second series: non-orthogonal splitting and generic SPD Q^T K (reported separately, SPEC §4.7 / §6.6).
    S = np.array([[1.0, 0.3, 0.4], [0.0, 1.0, 0.5], [0.2, 0.0, 1.0]])
    V = S @ np.diag([1.0, 1.0, -0.5]) @ np.linalg.inv(S)
    G = rng.normal(size=(3, 3))
    A = np.eye(3) + 0.3 * G @ G.T / 3
    model = ad.Model(ad.Weights(np.eye(3), A @ A, V), rescaled=True)
    ts2, zs2 = simulate_batch(model, rng.uniform(-5, 5, (config.seeds, config.n, 3)), 10.0, dt=config.dt, saves=101, engine=config)
    m2, _, of2, _, _ = measure(V, A @ A, zs2, ts2, rng, 5.0)
    checks = {
        "conv{pi_F z_i} non-increasing (100 directions): failing runs": at_most(fraction(mono), 0.0),
        "pi_F z_i farther than 1e-3 from the boundary of the limit polytope and from 0: fraction of tokens": at_most(fraction(off), 0.0),
        "pi_F z_i farther than 1e-3 from a vertex (generic expectation, not the theorem): fraction of tokens": report(fraction(far)),
        "median growth of the G-component of z (unconstrained; may diverge)": report(np.median(growth)),
        "non-orthogonal split, generic SPD: failing hull monotonicity": report(fraction(m2)),
        "non-orthogonal split, generic SPD: tokens off the boundary and 0 (tol 1e-3)": report(fraction(of2)),
    }
    return Result(CLAIM, checks, config.model_dump(), arrays, {})


def figures(result: Result) -> dict:
    a = result.arrays
    return {
        "trajectories_3d": plots.paths_with_hulls(a["ts"], a["z"], title="V = diag(1, 1, -0.5): columns over a polygon (z-form)"),
        "F_component": plots.paths_with_hulls(a["ts"], a["f"], title="F-component pi_F z: a polytope in F", variable="pi_F z"),
    }
