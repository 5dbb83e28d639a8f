"""Thm 5.2 (t:multiplicity): paranormal V -> pi_F z_i approaches the boundary of a polytope in F (arXiv 2305.05465 §5)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

import attndyn as ad
from attndyn.analysis import geometry
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every, fraction, report, simulate_batch
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="polytope-subspace",
    paper_ref="arXiv:2305.05465v6 §5, Definition 5.1 and Theorem 5.2 (proof in §10)",
    title="Paranormal V: a polytope times a subspace",
    statement=(
        r"If \(Q^\top K\) is symmetric positive definite and \(V\) is paranormal (\(\mathbb{R}^d = F \oplus G\), \(V|_F = \lambda I\), "
        r"\(\rho(V|_G) < \lambda\)), there is a convex polytope \(\mathcal{K} \subset F\) such that the \(F\)-component of every "
        r"\(z_i(t)\) approaches the boundary of \(\mathcal{K}\) or 0; the \(G\)-component is unconstrained (it may diverge in \(z\))."
    ),
    hypotheses=(
        "V = diag(lambda I_p, M), rho(M) < lambda; Q^T K = I or SPD respecting the splitting (judged). Reported, because "
        "the proof's bound on r_j needs Q^T K to respect the splitting: the orthogonal splitting with a generic "
        "(not block-diagonal) SPD Q^T K, and a non-orthogonal splitting with generic SPD Q^T K."
    ),
    kind="pass/fail",
)


class Config(ExperimentConfig):
    cases: list[str] = ["diag(1,1,-0.5)", "diag(2,2,1,-1)"]
    n: int = 20
    seeds: int = 20
    dt: float = 0.01
    # perturbations the sensitivity tests make (the claim is the defaults): the judged series run with V + v_error E
    # (E a fixed unit matrix; the judge uses the stated V), and every horizon times t_factor
    v_error: float = 0.0
    t_factor: float = Field(1.0, gt=0)


QUICK: dict = {}
VERTEX_TOL = 1e-3
# rounding of the support function of pi_F z over a run: measured at worst 4 eps of the scale (full size)
MONOTONE_RTOL = 16 * float(np.finfo(np.float64).eps)


# The horizon, lambda_F T = 15 (lambda_F the eigenvalue of V on F). Once a token's attention has concentrated,
# pi_F z_i approaches the boundary of the polytope (or 0) like e^{-lambda_F t}: measured on seed 113's worst token
# (case diag(2,2,1,-1)), 6.9e-3, 3.4e-4, 1.7e-5 at lambda_F T = 12, 15, 18, the factor e^{-lambda_F dT} exactly. The
# fixed lambda_F T of 10 and 12 failed 1 of 60 seeds there (1 token of 1600 at 6.9x the 1e-3 tolerance); at 15 the
# same token sits at 0.34 of it, and the worst over the seeds 0-29 and 100-129 is given in the claims guide. Far
# longer is not open: the logits grow like e^{2 lambda_F t} |z|^2 (e^{30} x 25 ~ 3e14 at lambda_F T = 15), and past
# about 1e15 their rounding moves the attention itself (the rescaled dynamics' precision horizon).
LAMBDA_T = 15.0


def case(name: str) -> tuple[np.ndarray, float]:
    if name == "diag(1,1,-0.5)":
        return np.diag([1.0, 1.0, -0.5]), LAMBDA_T / 1.0
    if name == "diag(2,2,1,-1)":
        return np.diag([2.0, 2.0, 1.0, -1.0]), LAMBDA_T / 2.0
    raise ValueError(f"unknown case {name!r}")


def spd_respecting(d: int, p: int, rng: np.random.Generator) -> np.ndarray:
    """An SPD Q^T K that is block-diagonal for F (+) G = R^p (+) R^{d-p}."""
    G = rng.normal(size=(d, d))
    A = np.eye(d) + 0.3 * G @ G.T / d
    A[:p, p:] = 0
    A[p:, :p] = 0
    return A @ A


def generic_spd(d: int, rng: np.random.Generator) -> np.ndarray:
    G = rng.normal(size=(d, d))
    A = np.eye(d) + 0.3 * G @ G.T / d
    return A @ A


def run(config: Config) -> Result:
    """Simulate every series; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    arrays, k = {}, 0

    def add(series: str, V: np.ndarray, B: np.ndarray, T: float) -> None:
        nonlocal arrays, k
        d, T = len(V), T * config.t_factor
        error = config.v_error * np.ones((d, d)) / d if series == "judged" else 0.0
        model = ad.Model(ad.Weights(np.eye(d), B, V + error), rescaled=True)
        ts, zs = simulate_batch(model, rng.uniform(-5, 5, (config.seeds, config.n, d)), T, dt=config.dt, saves=round(T * 10) + 1, engine=config)
        arrays |= {f"series{k}": np.array(series), f"V{k}": V, f"B{k}": B, f"ts{k}": ts, f"z{k}": zs}
        k += 1

    for name in config.cases:
        V, T = case(name)
        d, p = len(V), int((np.diag(V) == V.max()).sum())
        add("judged", V, np.eye(d), T)
        add("judged", V, spd_respecting(d, p, rng), T)
    V, _ = case(config.cases[0])
    add("generic-spd", V, generic_spd(len(V), rng), 10.0)  # reported series: their horizon as before
    S = np.array([[1.0, 0.3, 0.4], [0.0, 1.0, 0.5], [0.2, 0.0, 1.0]])
    add("non-orthogonal", S @ np.diag([1.0, 1.0, -0.5]) @ np.linalg.inv(S), generic_spd(3, rng), 10.0)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def measure(V: np.ndarray, zs: np.ndarray, scale: float) -> dict:
    """Per seed: hull of pi_F z non-increasing; per token: at a vertex, on dK u {0}; growth of the G-part."""
    split = geometry.paranormal_split(V)
    f = np.linalg.lstsq(split.F, (zs @ split.pi_F.T).reshape(-1, len(V)).T, rcond=None)[0].T.reshape(*zs.shape[:-1], split.dim_F)
    u = geometry.random_directions(split.dim_F, 100, np.random.default_rng(0))
    out = {"mono": [], "vertex": [], "boundary": [], "growth": [], "f": f}
    for s in range(zs.shape[1]):
        h = geometry.support_function(f[:, s], u)
        out["mono"].append(np.diff(h, axis=0).max() <= MONOTONE_RTOL * scale)
        p = f[-1, s]
        out["vertex"].extend(geometry.distance_to_vertices(p, p[geometry.hull_vertices(p)]) <= VERTEX_TOL)
        out["boundary"].extend(np.minimum(geometry.boundary_distance(p), np.linalg.norm(p, axis=1)) <= VERTEX_TOL)
        g = zs[:, s] @ (np.eye(len(V)) - split.pi_F).T
        out["growth"].append(np.abs(g[-1]).max() / max(np.abs(g[0]).max(), 1e-300))
    return out


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    res = {"judged": {"mono": [], "vertex": [], "boundary": [], "growth": []}, "generic-spd": None, "non-orthogonal": None}
    for k in sorted(int(key[6:]) for key in arrays if key.startswith("series") and key[6:].isdigit()):
        series = str(arrays[f"series{k}"])
        m = measure(arrays[f"V{k}"], arrays[f"z{k}"], 5.0)
        if series == "judged":
            for key in res["judged"]:
                res["judged"][key] += list(m[key])
        else:
            res[series] = m
    j = res["judged"]
    checks = {
        "conv{pi_F z_i} non-increasing (100 directions, to 16 eps of the scale): failing runs": every(
            j["mono"], detects="V off by 1e-6 in the dynamics, either sign (the judge uses the stated V's splitting)"
        ),
        "pi_F z_i(T) within 1e-3 of the boundary of the limit polytope or of 0: failing tokens": every(
            j["boundary"], detects="the run stopped at 0.5 T (lambda_F T = 7.5)"
        ),
        "pi_F z_i within 1e-3 of a vertex (generic expectation, not the theorem): fraction of tokens": report(fraction(j["vertex"])),
        "median growth of the G-component of z (unconstrained; may diverge)": report(np.median(j["growth"]) if j["growth"] else float("nan")),
    }
    for series, label in (("generic-spd", "orthogonal split, generic SPD Q^T K"), ("non-orthogonal", "non-orthogonal split, generic SPD")):
        m = res[series]
        if m is not None:
            checks[f"{label}: fraction of runs with a non-monotone hull"] = report(1 - fraction(m["mono"]))
            checks[f"{label}: fraction of tokens off the boundary and 0 (tol 1e-3)"] = report(1 - fraction(m["boundary"]))
    return checks, {}


def figures(result: Result) -> dict:
    a = result.arrays
    ts, z = a["ts0"], a["z0"]
    f = measure(a["V0"], z[:, :1], 5.0)["f"][:, 0]
    return {
        "trajectories_3d": plots.paths_with_hulls(ts, z[:, 0], title="V = diag(1, 1, -0.5): columns over a polygon (z-form)"),
        "F_component": plots.paths_with_hulls(ts, f, title="F-component pi_F z: a polytope in F", variable="pi_F z"),
    }
