"""Conj. 4.3 (c:codim): the unstable projection of z converges to at most 3 points (arXiv 2305.05465 §4). Exploratory."""

from __future__ import annotations

import numpy as np

import attndyn as ad
from attndyn.analysis import clusters, geometry, numerics
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report, simulate_batch
from attndyn.theory import matrices
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="codimension",
    paper_ref="arXiv:2305.05465v6 §4, Conjecture 4.3",
    title="The codimension conjecture (exploratory)",
    statement=(
        "Conjecture: if V has k eigenvalues with positive real part, the rescaled tokens approach at most three parallel affine "
        "subspaces of codimension k, with no hypothesis on (Q, K); equivalently, their projection onto the unstable invariant "
        "subspace (along the stable one) converges to at most 3 points. In float64 a slow unstable coordinate is resolved only "
        "up to a precision horizon: we measure it (two perturbation sizes of z0 diverging together is rounding) "
        "and read every value at min(T, horizon). The testable V has eigenvalues {1.0, 0.6, -0.3} in a random orthogonal "
        "basis (T = 60 >= 30 / 0.6 inside its horizon); the paper's Vc and V3b have horizons far below the T they need, and "
        "are reported at their horizons. Read literally the conjecture fails for V = I (k = d, more than 3 vertices): we report "
        "that counterexample too."
    ),
    hypotheses=(
        "V = O diag(1.0, 0.6, -0.3) O^T (k = 2), the paper's Vc (k = 2) and V3b (k = 3), with random Gaussian Q, K; V = I for the literal reading."
    ),
    kind="report",
)


class Config(ExperimentConfig):
    n: int = 30
    seeds: int = 5
    T: float = 60.0  # >= 30 / 0.6 for the testable V (within the precision horizon)
    T_paper: float = 40.0  # Vc and V3b: their horizons (~16, ~33) are below this anyway
    dt: float = 0.02
    identity_seeds: int = 20


QUICK = {"seeds": 3}


def cases(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    basis = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    return [("testable", basis @ np.diag([1.0, 0.6, -0.3]) @ basis.T), ("Vc", matrices.VC()), ("V3b", matrices.V3B())]


def run(config: Config) -> Result:
    """Simulate every case with its precision horizon; the values are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    arrays = {}
    for k, (name, V) in enumerate(cases(rng)):
        Q, K = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
        model = ad.Model(ad.Weights(Q, K, V), rescaled=True)
        T = config.T if name == "testable" else config.T_paper
        ts = np.linspace(0.0, T, int(T * 2) + 1)
        z0 = rng.uniform(-5, 5, (config.seeds, config.n, 3))
        h = numerics.precision_horizon(
            model, z0, ts, solver=ad.RK4(), step=ad.FixedStep(config.dt), quantity=lambda z, V=V: geometry.unstable_projection(z, V)
        )
        arrays |= {f"name{k}": np.array(name), f"V{k}": V, f"ts{k}": ts, f"z{k}": h.ref, f"horizon{k}": h.t}
    # The literal statement with V = I (k = d = 2): at most 3 limit points would be required.
    model = ad.Model(ad.Weights.identity(2), rescaled=True)
    _, zs = simulate_batch(model, rng.uniform(-5, 5, (config.identity_seeds, 20, 2)), 10.0, dt=0.01, saves=11, engine=config)
    arrays["identity_z"] = zs[-1]
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    checks, info = {}, {}
    for k in sorted(int(key[4:]) for key in arrays if key.startswith("name") and key[4:].isdigit()):
        name, V, ts, zs, horizon = str(arrays[f"name{k}"]), arrays[f"V{k}"], arrays[f"ts{k}"], arrays[f"z{k}"], arrays[f"horizon{k}"]
        u = geometry.unstable_projection(zs, V)  # (T, S, n, k)
        t_read = min(float(ts[-1]), float(horizon.min()))
        kr = int(np.searchsorted(ts, t_read, side="right")) - 1
        k5 = int(np.searchsorted(ts, t_read - 5.0))
        scale = np.abs(u[kr]).max()
        counts = [clusters.cluster_count_profile(u[kr, s], [0.02 * scale])[0] for s in range(u.shape[1])]
        moved = np.linalg.norm(u[kr] - u[k5], axis=-1).max(-1) / scale
        past = "" if t_read >= ts[-1] else f" (read at the horizon t = {t_read:g} < T = {ts[-1]:g})"
        checks[f"{name}: precision horizon of the unstable projection (min over seeds)"] = report(float(horizon.min()), f"T = {ts[-1]:g}")
        checks[f"{name} (k = {u.shape[-1]}): median clusters of the unstable projection at tol 2% of its scale{past}"] = report(np.median(counts))
        checks[f"{name}: median max_i |u_i(t) - u_i(t - 5)| / scale{past}"] = report(np.median(moved))
        info[name] = {"counts": [int(c) for c in counts], "moved": moved.tolist(), "horizon": horizon.tolist(), "read_at": t_read}
    counts = np.array([clusters.cluster_count_profile(z, [1e-2])[0] for z in arrays["identity_z"]])
    checks["V = I, d = 2, n = 20: fraction of seeds with more than 3 limit points (literal reading fails)"] = report(
        np.mean(counts > 3), f"counts from {counts.min()} to {counts.max()}"
    )
    info["identity_counts"] = counts.tolist()
    return checks, info


def figures(result: Result) -> dict:
    a = result.arrays
    ts, V, z = a["ts0"], a["V0"], a["z0"][:, 0]
    u = geometry.unstable_projection(z, V)
    horizon = float(a["horizon0"].min())
    figs = {}
    for k in range(u.shape[-1]):
        fig = plots.coordinates_vs_time(
            ts,
            u[:, :, k],
            levels={},
            ylabel=f"unstable coordinate {k + 1} of z_i",
            title=f"V = O diag(1, 0.6, -0.3) O^T: unstable coordinate {k + 1}",
        )
        if np.isfinite(horizon):
            fig.axes[0].axvline(horizon, color="#D55E00", ls="--", lw=1, label="precision horizon")
            fig.axes[0].legend(fontsize=9)
        figs[f"unstable_{k}"] = fig
    return figs
