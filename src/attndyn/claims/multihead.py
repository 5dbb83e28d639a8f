"""Open problem 3 (§12): multi-head residual dynamics (arXiv 2305.05465 §12). Exploratory."""

from __future__ import annotations

import numpy as np

import attndyn as ad
from attndyn.analysis import lowrank
from attndyn.claims import model_equivalence
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report
from attndyn.workflow import plots

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
    """The residual runs; the reported values are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    n, d = config.n, config.d
    # H = 1 against an independent NumPy loop (judged in model-equivalence; reported here)
    Q, K, V = (rng.normal(0, 0.5, (d, d)) for _ in range(3))
    x = rng.normal(size=(n, d))
    arrays = {
        "h1_Q": Q,
        "h1_K": K,
        "h1_V": V,
        "h1_x": x,
        "h1_ours": ad.residual_layers(ad.Model(ad.Weights(Q, K, V)), x, 20, step_size=config.dt).xs.numpy(),
    }
    for H in config.heads:
        for s in range(config.seeds):
            W = ad.Weights(rng.normal(0, 0.5, (H, d, d)), rng.normal(0, 0.5, (H, d, d)), rng.normal(0, 0.5, (H, d, d)))
            xs = ad.residual_layers(ad.Model(W), rng.uniform(-1, 1, (n, d)), config.layers, step_size=config.dt).xs.numpy()
            arrays |= {f"H{H}_s{s}_Q": W.Q.numpy(), f"H{H}_s{s}_K": W.K.numpy(), f"H{H}_s{s}_V": W.V.numpy(), f"H{H}_s{s}_x": xs}
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def ranks_of(arrays: dict, H: int, s: int) -> np.ndarray:
    """rank(P^h) at every layer ``(layers + 1, H)`` for run ``s`` with ``H`` heads."""
    p = f"H{H}_s{s}_"
    model = ad.Model(ad.Weights(arrays[p + "Q"], arrays[p + "K"], arrays[p + "V"]))
    P = ad.attention_matrix(model, arrays[p + "x"]).numpy()  # (layers+1, H, n, n)
    return np.array([[lowrank.numerical_rank(P[k, h], tol=RANK_TOL) for h in range(H)] for k in range(len(P))])


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    y = model_equivalence.residual_numpy(arrays["h1_Q"], arrays["h1_K"], arrays["h1_V"], arrays["h1_x"], 20, config.dt)
    checks = {
        "H = 1 equals the residual equation (max relative difference after 20 layers; judged in model-equivalence)": report(
            np.abs(arrays["h1_ours"][-1] - y).max() / np.abs(y).max()
        )
    }
    runs = sorted({(int(k.split("_")[0][1:]), int(k.split("_")[1][1:])) for k in arrays if k.startswith("H") and k.endswith("_x")})
    for H in sorted({h for h, _ in runs}):
        ranks = [ranks_of(arrays, H, s)[-1] for h, s in runs if h == H]
        checks[f"H = {H}: median rank of P^h at the last layer (tol 1e-8)"] = report(np.median(ranks))
        checks[f"H = {H}: fraction of heads with rank <= 3 at the last layer"] = report(np.mean(np.array(ranks) <= 3))
    return checks, {}


def figures(result: Result) -> dict:
    a = result.arrays
    series = {}
    for H in sorted({int(k.split("_")[0][1:]) for k in a if k.startswith("H") and k.endswith("_x")}):
        r = ranks_of(a, H, 0)
        for h in range(r.shape[1]):
            series[f"H{H} head {h + 1}"] = r[:, h]
    fig = plots.counts_vs_time(np.arange(len(r)) * 0.1, series, ylabel="rank of P^h (tol 1e-8)", title="multi-head: ranks of the attention matrices")
    fig.axes[0].set_xlabel("depth k dt")
    return {"ranks": fig}
