"""Negative control for Thm 4.2: a complex leading eigenvalue pair; the paper expects no clustering (SPEC §4.5)."""

from __future__ import annotations

import numpy as np

import attndyn as ad

from .. import clusters, plots, spectra
from .common import ClaimInfo, ExperimentConfig, Result, report, simulate_batch

CLAIM = ClaimInfo(
    id="hyperplanes-negative-control",
    paper_ref="arXiv:2305.05465v6 §4 (remark after l:3hyperplanes11: complex leading eigenvalue)",
    title="Negative control: complex leading eigenvalues",
    statement=(
        "When the eigenvalue of V of largest modulus is complex, Thm 4.2 does not apply and the paper says 'we do not expect "
        "any clustering to occur'. We report whether the rescaled tokens keep moving and how many clusters they form."
    ),
    hypotheses="V = [[a, -b], [b, a]] (eigenvalues a +- ib), Q = K = I, z0 ~ U[-5, 5]^2.",
    kind="report",
)


class Config(ExperimentConfig):
    a: float = 0.5
    b: float = 1.0
    n: int = 20
    seeds: int = 10
    T: float = 15.0
    dt: float = 0.01


QUICK = {"seeds": 5}


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    V = np.array([[config.a, -config.b], [config.b, config.a]])
    model = ad.Model(ad.Weights.from_value(V), rescaled=True)
    ts, zs = simulate_batch(model, rng.uniform(-5, 5, (config.seeds, config.n, 2)), config.T, dt=config.dt, saves=151, engine=config)
    k1 = np.searchsorted(ts, config.T - 1.0)
    moved = np.linalg.norm(zs[-1] - zs[k1], axis=-1).max(-1)
    counts = [clusters.cluster_count_profile(zs[-1, s], [1e-3])[0] for s in range(config.seeds)]
    checks = {
        "regime() of this V": report(float(spectra.regime(model.weights).name == "none"), "1 = 'none', as the paper expects"),
        "median max_i |z_i(T) - z_i(T-1)| (large: no convergence)": report(np.median(moved)),
        "median number of clusters of z(T) at tol 1e-3": report(np.median(counts)),
    }
    return Result(CLAIM, checks, config.model_dump(), {"ts": ts, "z": zs[:, 0]}, {"counts": [int(c) for c in counts], "moved": moved.tolist()})


def figures(result: Result) -> dict:
    return {"trajectories": plots.paths_with_hulls(result.arrays["ts"], result.arrays["z"], title="complex leading pair: z-paths (one seed)")}
