"""Open problem 3 (§12): multi-head residual dynamics (SPEC §1.7, §4.8). Exploratory."""

from __future__ import annotations

import numpy as np

import attndyn as ad

from .. import lowrank, plots
from .common import ClaimInfo, ExperimentConfig, Result, report

CLAIM = ClaimInfo(
    id="multihead",
    paper_ref="arXiv:2305.05465v6 §12, open problem 3 (multi-head, discrete time)",
    title="Multi-head attention (exploratory)",
    statement=(
        "x^{k+1} = x^k + dt sum_h sum_j P^h_ij V_h x_j^k with H heads. The paper calls clustering of multi-head dynamics an "
        "open problem and reports preliminary numerical clustering. We check that one head reproduces the residual "
        "equation exactly and report the ranks of the P^h over the layers."
    ),
    hypotheses="H in {2, 3, 4} heads with Gaussian (Q_h, K_h, V_h); dt = 0.1; n = 20, d = 2.",
    kind="report",
)


class Config(ExperimentConfig):
    heads: list[int] = [2, 3, 4]
    n: int = 20
    d: int = 2
    layers: int = 100
    dt: float = 0.1
    seeds: int = 5


QUICK = {"seeds": 3}
RANK_TOL = 1e-8


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    n, d = config.n, config.d
    checks, arrays = {}, {}
    # H = 1 reproduces e:discreteequation exactly (an independent NumPy loop).
    Q, K, V = (rng.normal(0, 0.5, (d, d)) for _ in range(3))
    x = rng.normal(size=(n, d))
    ours = ad.residual_layers(ad.Model(ad.Weights(Q, K, V)), x, 20, step_size=config.dt).xs.numpy()
    y = x.copy()
    for _ in range(20):
        L = (y @ Q.T) @ (y @ K.T).T
        P = np.exp(L - L.max(1, keepdims=True))
        P /= P.sum(1, keepdims=True)
        y = y + config.dt * P @ y @ V.T
    checks["H = 1 equals the residual equation (max relative difference after 20 layers; judged in model-equivalence)"] = report(
        np.abs(ours[-1] - y).max() / np.abs(y).max()
    )
    for H in config.heads:
        ranks = []
        for s in range(config.seeds):
            W = ad.Weights(rng.normal(0, 0.5, (H, d, d)), rng.normal(0, 0.5, (H, d, d)), rng.normal(0, 0.5, (H, d, d)))
            model = ad.Model(W)
            xs = ad.residual_layers(model, rng.uniform(-1, 1, (n, d)), config.layers, step_size=config.dt).xs
            P = ad.attention_matrix(model, xs).numpy()  # (layers+1, H, n, n)
            r = np.array([[lowrank.numerical_rank(P[k, h], tol=RANK_TOL) for h in range(H)] for k in range(len(P))])
            ranks.append(r[-1])
            if s == 0:
                arrays[f"ranks_H{H}"] = r
        checks[f"H = {H}: median rank of P^h at the last layer (tol 1e-8)"] = report(np.median(ranks))
        checks[f"H = {H}: fraction of heads with rank <= 3 at the last layer"] = report(np.mean(np.array(ranks) <= 3))
    arrays["layers"] = np.arange(config.layers + 1)
    return Result(CLAIM, checks, config.model_dump(), arrays, {})


def figures(result: Result) -> dict:
    a = result.arrays
    series = {}
    for key in sorted(k for k in a if k.startswith("ranks_H")):
        r = a[key]
        for h in range(r.shape[1]):
            series[f"{key[6:]} head {h + 1}"] = r[:, h]
    fig = plots.counts_vs_time(a["layers"] * 0.1, series, ylabel="rank of P^h (tol 1e-8)", title="multi-head: ranks of the attention matrices")
    fig.axes[0].set_xlabel("depth k dt")
    return {"ranks": fig}
