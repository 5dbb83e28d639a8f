"""Metastability on the circle (GLPR, arXiv 2312.10794): for large beta, clusters form fast and merge only after long plateaus."""

from __future__ import annotations

import numpy as np

import attndyn as ad
from attndyn.analysis import clusters
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report, unit_rows
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="sphere-metastability",
    paper_ref="arXiv:2312.10794 §5 (metastability, conjectured); Geshkovski-Koubbi-Polyanskiy-Rigollet arXiv:2410.06833",
    title="Metastability: long plateaus in the number of clusters",
    statement=(
        "For large beta, several clusters form quickly and persist for very long times before merging. We count clusters as "
        "the rank of the thresholded Gram matrix (<x_i, x_j> > 0.999), as in the authors' code, and report the plateaus and "
        "the merge times."
    ),
    hypotheses="d = 2 (the circle), n = 32, Q = K = V = I, uniform start.",
    kind="report",
)


class Config(ExperimentConfig):
    n: int = 32
    betas: list[float] = [25.0, 64.0]
    T: float = 10000.0


QUICK = {"betas": [25.0], "T": 2000.0}


def gram_count(x: np.ndarray) -> int:
    G = (x @ x.T > 0.999).astype(float)
    return int(np.linalg.matrix_rank(G))


def run(config: Config) -> Result:
    """One run per beta; the reported values are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    ts = np.unique(np.concatenate([[0.0], np.geomspace(0.01, config.T, 300)]))
    arrays = {"ts": ts}
    for beta in config.betas:
        x0 = unit_rows(rng.normal(size=(config.n, 2)))
        model = ad.Model(ad.Weights.identity(2), beta=beta, geometry="sphere")
        arrays[f"x_{beta:g}"] = ad.simulate(
            model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-8, atol=1e-10), max_steps=10_000_000
        ).xs.numpy()
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    ts, checks = arrays["ts"], {}
    for key in sorted((k for k in arrays if k.startswith("x_")), key=lambda k: float(k[2:])):
        beta, xs = float(key[2:]), arrays[key]
        counts = np.array([gram_count(x) for x in xs])
        events = clusters.merge_events(ts, xs, tol=0.05)
        changes = np.flatnonzero(np.diff(counts) != 0)
        plateau = np.diff(np.concatenate([[ts[1]], ts[changes + 1], [ts[-1]]]))
        checks[f"beta = {beta:g}: clusters (Gram > 0.999) at t = 1"] = report(counts[np.searchsorted(ts, 1.0)])
        checks[f"beta = {beta:g}: clusters at T = {ts[-1]:g}"] = report(counts[-1])
        checks[f"beta = {beta:g}: longest plateau of the count (time units)"] = report(plateau.max())
        checks[f"beta = {beta:g}: merge events (single linkage at 0.05)"] = report(len(events), ", ".join(f"t = {e.t:.3g}" for e in events[:8]))
    return checks, {}


def figures(result: Result) -> dict:
    a = result.arrays
    series = {f"beta = {k[2:]}": np.array([gram_count(x) for x in a[k]]) for k in a if k.startswith("x_")}
    return {
        "counts": plots.counts_vs_time(
            a["ts"][1:],
            {k: v[1:] for k, v in series.items()},
            ylabel="clusters (rank of Gram > 0.999)",
            title="metastable plateaus on the circle",
            logx=True,
        )
    }
