"""Open problem 1 (§12, sec: first.new): V = I with a generic, indefinite Q^T K still clusters."""

from __future__ import annotations

import numpy as np

import attndyn as ad
from attndyn.analysis import clusters
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report, simulate_batch
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="polytope-relaxed",
    paper_ref="arXiv:2305.05465v6 §12, open problem 1 (and its figure)",
    title="V = I with generic Q^T K (not positive definite): an open problem",
    statement=(
        "The paper observes that 'none of the conclusions seem to change for generic choices of Q^T K'. With V = I and "
        "Q^T K with iid U[-1, 1] entries (typically indefinite and non-symmetric), we report the number of limit clusters "
        "and whether the velocities vanish. Nothing is proven, so there is no verdict."
    ),
    hypotheses="V = I_d; Q^T K with iid U[-1, 1] entries; z0 ~ U[-5, 5]^d.",
    kind="report",
)


class Config(ExperimentConfig):
    n: int = 20
    d: int = 2
    seeds: int = 20
    T: float = 10.0


QUICK = {"T": 8.0}


def run(config: Config) -> Result:
    """One run per seed; the reported values are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    arrays = {}
    for s in range(config.seeds):
        B = rng.uniform(-1, 1, (config.d, config.d))
        model = ad.Model(ad.Weights(np.eye(config.d), B, np.eye(config.d)), rescaled=True)
        ts, zs = simulate_batch(model, rng.uniform(-5, 5, (1, config.n, config.d)), config.T, rtol=1e-8, atol=1e-10, saves=81, engine=config)
        arrays |= {f"B{s}": B, f"ts{s}": ts, f"z{s}": zs[:, 0]}
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    counts, speeds, indefinite = [], [], 0
    for s in sorted(int(k[1:]) for k in arrays if k.startswith("B") and k[1:].isdigit()):
        B, ts, z = arrays[f"B{s}"], arrays[f"ts{s}"], arrays[f"z{s}"]
        d = len(B)
        indefinite += int(np.linalg.eigvalsh((B + B.T) / 2).min() < 0)
        model = ad.Model(ad.Weights(np.eye(d), B, np.eye(d)), rescaled=True)
        counts.append(clusters.cluster_count_profile(z[-1], [5e-3])[0])
        speeds.append(float(np.abs(ad.velocity(float(ts[-1]), z[-1], model)).max()))
    checks = {
        "median number of clusters of z(T) (tol 5e-3)": report(np.median(counts)),
        "min / max number of clusters": report(min(counts), f"max {max(counts)}"),
        "median max_i |z_i'(T)|": report(np.median(speeds), "small values mean the tokens have stopped"),
        "seeds whose Q^T K has an indefinite symmetric part": report(indefinite),
    }
    return checks, {"counts": [int(c) for c in counts], "speeds": speeds}


def figures(result: Result) -> dict:
    a = result.arrays
    return {
        "trajectories": plots.paths_with_hulls(
            a["ts0"], a["z0"], title="V = I, random indefinite Q^T K (seed 0)", limit_label="hull at the last time"
        )
    }
