"""Open problem 2 (§12): the feed-forward variant z' = W sigma(V sum_j P_ij (z_j - z_i))."""

from __future__ import annotations

import numpy as np

import attndyn as ad
from attndyn.analysis import clusters, geometry
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report, simulate_batch
from attndyn.theory import matrices
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="feedforward",
    paper_ref="arXiv:2305.05465v6 §12, open problem 2 (the feed-forward equation and its figure)",
    title="Feed-forward layers: three rows of the paper's figure",
    statement=(
        "With a feed-forward map, z_i' = W sigma(V sum_j P_ij (z_j - z_i)), the paper observes: with ReLU and W = I the "
        "tokens follow one of three hyperplanes; with tanh and W = I, or ReLU and a random W, they appear to collapse. "
        "We report the number of limits of phi_1*(z) and how far the configuration shrank."
    ),
    hypotheses="V = the paper's V2 (a good triple), Q = K = I, n = 40, z0 ~ U[-5, 5]^2, T = 15.",
    kind="report",
)

V2 = matrices.V2()


class Config(ExperimentConfig):
    n: int = 40
    seeds: int = 5
    T: float = 15.0
    dt: float = 0.01


QUICK = {"seeds": 3, "n": 30}
ROWS = (("relu", "identity"), ("tanh", "identity"), ("relu", "random"))


def run(config: Config) -> Result:
    """The three rows of the paper's figure; the reported values are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    z = rng.normal(size=(7, 2))
    # W = I with sigma = id reproduces the rescaled attention equation exactly (judged in model-equivalence; reported here)
    arrays = {
        "id_base": ad.velocity(0.7, z, ad.Model(ad.Weights.from_value(V2), rescaled=True)),
        "id_ff": ad.velocity(0.7, z, ad.Model(ad.Weights(np.eye(2), np.eye(2), V2, ad.FeedForward(np.eye(2), "identity")), rescaled=True)),
    }
    for sigma, wkind in ROWS:
        W = np.eye(2) if wkind == "identity" else rng.normal(size=(2, 2)) / np.sqrt(2)
        model = ad.Model(ad.Weights(np.eye(2), np.eye(2), V2, ad.FeedForward(W, sigma)), rescaled=True)
        z0 = rng.uniform(-5, 5, (config.seeds, config.n, 2))
        ts, zs = simulate_batch(model, z0, config.T, dt=config.dt, saves=151, engine=config)
        arrays[f"ts_{sigma}_{wkind}"], arrays[f"z_{sigma}_{wkind}"] = ts, zs
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    phi_star, _, _ = geometry.left_eigenvector(V2)
    checks = {
        "W = I, sigma = id reproduces the rescaled attention equation (max difference; judged in model-equivalence)": report(
            np.abs(arrays["id_base"] - arrays["id_ff"]).max()
        )
    }
    for sigma, wkind in ROWS:
        zs = arrays[f"z_{sigma}_{wkind}"]
        c = zs[-1] @ phi_star
        counts = [clusters.cluster_count_profile(c[s], [1e-3])[0] for s in range(zs.shape[1])]
        shrink = np.abs(zs[-1]).max((1, 2)) / np.abs(zs[0]).max((1, 2))
        label = f"sigma = {sigma}, W = {wkind}"
        checks[f"{label}: median number of limits of phi_1*(z_i) (tol 1e-3)"] = report(np.median(counts))
        checks[f"{label}: median max|z(T)| / max|z(0)| (near 0: collapse)"] = report(np.median(shrink))
    return checks, {}


def figures(result: Result) -> dict:
    figs = {}
    for sigma, wkind in ROWS:
        ts, z = result.arrays[f"ts_{sigma}_{wkind}"], result.arrays[f"z_{sigma}_{wkind}"][:, 0]
        figs[f"{sigma}_{wkind}"] = plots.paths_with_hulls(ts, z, title=f"feed-forward: sigma = {sigma}, W = {wkind}", limit_label=None)
    return figs
