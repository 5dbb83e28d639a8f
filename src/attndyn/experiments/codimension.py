"""Conj. 4.3 (c:codim): the unstable projection of z converges to at most 3 points (SPEC §2.5, §4.6). Exploratory."""

from __future__ import annotations

import numpy as np

import attndyn as ad

from .. import clusters, geometry, matrices, plots
from .common import ClaimInfo, ExperimentConfig, Result, report, simulate_batch

CLAIM = ClaimInfo(
    id="codimension",
    paper_ref="arXiv:2305.05465v6 Conj. 4.3 (c:codim)",
    title="The codimension conjecture (exploratory)",
    statement=(
        "Conjecture: if V has k eigenvalues with positive real part, the rescaled tokens approach at most three parallel affine "
        "subspaces of codimension k, with no hypothesis on (Q, K); equivalently, their projection onto the unstable invariant "
        "subspace (along the stable one) converges to at most 3 points. Read literally it fails for V = I (k = d, more than 3 "
        "vertices): we report that counterexample too."
    ),
    hypotheses="The paper's Vc (eigenvalues -0.222, 0.253, 1.963; k = 2) and V3b (k = 3) with random Gaussian Q, K; V = I for the literal reading.",
    kind="report",
)

VC = matrices.VC()
V3B = matrices.V3B()


class Config(ExperimentConfig):
    n: int = 30
    seeds: int = 5
    T: float = 120.0  # >= 30 / 0.253 (SPEC §4.6)
    dt: float = 0.02
    identity_seeds: int = 20


QUICK = {"T": 40.0, "seeds": 3}


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    checks, arrays, info = {}, {}, {}
    for name, V in (("Vc", np.array(VC)), ("V3b", np.array(V3B))):
        Q, K = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
        model = ad.Model(ad.Weights(Q, K, V), rescaled=True)
        T = config.T if name == "Vc" else min(config.T, 40.0)
        ts, zs = simulate_batch(model, rng.uniform(-5, 5, (config.seeds, config.n, 3)), T, dt=config.dt, saves=161, engine=config)
        u = geometry.unstable_projection(zs, V)  # (T, S, n, k)
        k5 = np.searchsorted(ts, T - 5.0)
        scale = np.abs(u[-1]).max()
        counts = [clusters.cluster_count_profile(u[-1, s], [0.02 * scale])[0] for s in range(config.seeds)]
        lead = [clusters.cluster_count_profile(u[-1, s, :, :1], [1e-3 * scale])[0] for s in range(config.seeds)]
        moved = np.linalg.norm(u[-1] - u[k5], axis=-1).max(-1)
        checks[f"{name} (k = {u.shape[-1]}): median number of clusters of the unstable projection at tol 2% of its scale"] = report(np.median(counts))
        checks[f"{name}: median number of clusters of the leading unstable coordinate at tol 1e-3 of scale"] = report(np.median(lead))
        checks[f"{name}: median max_i |u_i(T) - u_i(T-5)| (convergence)"] = report(np.median(moved))
        info[name] = {"counts": [int(c) for c in counts], "moved": moved.tolist(), "T": T}
        if name == "Vc":
            arrays["ts"], arrays["u"] = ts, u[:, 0]
    # The literal statement with V = I (k = d = 2): at most 3 limit points would be required.
    model = ad.Model(ad.Weights.identity(2), rescaled=True)
    _, zs = simulate_batch(model, rng.uniform(-5, 5, (config.identity_seeds, 20, 2)), 10.0, dt=0.01, saves=11, engine=config)
    counts = np.array([clusters.cluster_count_profile(zs[-1, s], [1e-2])[0] for s in range(config.identity_seeds)])
    checks["V = I, d = 2, n = 20: fraction of seeds with more than 3 limit points (literal reading fails)"] = report(
        np.mean(counts > 3), f"counts from {counts.min()} to {counts.max()}"
    )
    info["identity_counts"] = counts.tolist()
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def figures(result: Result) -> dict:
    ts, u = result.arrays["ts"], result.arrays["u"]
    return {
        f"unstable_{k}": plots.coordinates_vs_time(
            ts,
            u[:, :, k],
            levels={},
            ylabel=f"unstable coordinate {k + 1} of z_i",
            title=f"Vc: projection on the unstable subspace, coordinate {k + 1}",
        )
        for k in range(u.shape[-1])
    }
