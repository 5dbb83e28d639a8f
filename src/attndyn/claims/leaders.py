"""F-leaders (the authors' leaders experiment): in d = 2 with V = B B^T and Q^T K = C C^T, few columns of P survive."""

from __future__ import annotations

import numpy as np

import attndyn as ad
from attndyn.analysis import lowrank
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="leaders",
    paper_ref="arXiv:2305.05465v6 §2 (leaders; authors' leaders.py, GIF movies/Th21/2d)",
    title="Leaders in d = 2: the number of attended columns collapses",
    statement=(
        "Smoke test of the leaders picture beyond d = 1: with V = B B^T and Q^T K = C C^T (PSD), explicit Euler on x with "
        "dt = 0.1 to T = 10 as in the authors' script, the number of columns of P carrying attention (entries > 1e-4) "
        "drops to a small number (2 in the authors' run). attndyn treats this as a smoke test, not a theorem: reported, "
        "not judged."
    ),
    hypotheses="d = 2; V = B B^T, Q^T K = C C^T with B, C ~ U[-1, 1]^{2x2}; x0 ~ U[-1, 1]^2; residual (Euler) dynamics on x.",
    kind="report",
)


class Config(ExperimentConfig):
    n: int = 20
    seeds: int = 20
    dt: float = 0.1
    T: float = 10.0


QUICK: dict = {}
SUPPORT_TOL = 1e-4
SMALL = 3  # "a small number" of surviving columns


def run(config: Config) -> Result:
    """The Euler runs; the reported values are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    layers = round(config.T / config.dt)
    arrays = {"ts": np.arange(layers + 1) * config.dt}
    for s in range(config.seeds):
        B, C = rng.uniform(-1, 1, (2, 2)), rng.uniform(-1, 1, (2, 2))
        model = ad.Model(ad.Weights(np.eye(2), C @ C.T, B @ B.T))
        x0 = rng.uniform(-1, 1, (config.n, 2))
        arrays |= {f"x{s}": ad.residual_layers(model, x0, layers, step_size=config.dt).xs.numpy(), f"V{s}": B @ B.T, f"QK{s}": C @ C.T}
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def counts_of(arrays: dict, s: int) -> tuple[list[int], np.ndarray]:
    model = ad.Model(ad.Weights(np.eye(2), arrays[f"QK{s}"], arrays[f"V{s}"]))
    P = ad.attention_matrix(model, arrays[f"x{s}"]).numpy()[:, 0]
    return [len(lowrank.support_columns(p, tol=SUPPORT_TOL)) for p in P], P


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    seeds = sorted(int(k[1:]) for k in arrays if k.startswith("x") and k[1:].isdigit())
    final, initial = [], []
    for s in seeds:
        counts, _ = counts_of(arrays, s)
        final.append(counts[-1])
        initial.append(counts[0])
    final = np.array(final)
    checks = {
        "median number of columns with an entry > 1e-4 at T": report(np.median(final) if len(final) else float("nan"), "the authors' run: 2"),
        f"fraction of seeds ending with more than {SMALL} such columns": report(np.mean(final > SMALL) if len(final) else float("nan")),
        "median number of such columns at t = 0": report(np.median(initial) if initial else float("nan")),
    }
    return checks, {"final_counts": final.tolist()}


def figures(result: Result) -> dict:
    a = dict(result.arrays)
    a["counts"], a["P"] = counts_of(a, 0)
    idx = [0, 20, 50, len(a["ts"]) - 1]
    return {
        "columns": plots.counts_vs_time(
            a["ts"], {"seed 0": a["counts"]}, ylabel="columns of P with an entry > 1e-4", title="Leaders: attended columns over time (d = 2)"
        ),
        "attention": plots.attention_heatmaps(
            [a["P"][k] for k in idx],
            [a["ts"][k] for k in idx],
            [lowrank.numerical_rank(a["P"][k], tol=1e-8) for k in idx],
            tol=1e-8,
            title="P along the Euler iteration",
        ),
    }
