"""The phase diagram of the sphere dynamics (Geshkovski, Letrouit, Polyanskiy, Rigollet, arXiv 2312.10794)."""

from __future__ import annotations

import math

import numpy as np

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every_within, report, within
from attndyn.theory import closed_forms as theory
from attndyn.workflow import grid, plots, tasks

CLAIM = ClaimInfo(
    id="phase-diagram",
    paper_ref="arXiv:2312.10794 (Geshkovski, Letrouit, Polyanskiy, Rigollet: the equiangular model and the phase diagram)",
    title="Phase diagram on the sphere: random starts approach the equiangular time t*(beta) as d grows",
    statement=(
        "n = 32 tokens start uniformly on S^{d-1} (SA, Q = K = V = I); the statistic is the fraction of pairs with "
        "<x_i, x_j> >= 0.999 averaged over systems, drawn over (beta, t) with t*(beta), the time at which the equiangular ODE "
        "(an orthogonal start) reaches 1 - 1e-3. As d grows random starts become nearly orthogonal and the 50 % boundary "
        "t50(beta) approaches t*(beta). Judged: (i) the median over beta of |t50 - t*| / t* at the largest d is <= 0.1 and "
        "below its value at the smallest d; (ii) from an exactly orthogonal start (d = n) every pairwise inner product follows "
        "the equiangular ODE to 1e-7 (adaptive Dopri5 at rtol 1e-10 against scipy DOP853). The sweep runs through "
        "attndyn.sweep (seeds batched into one tensor per beta and d). Reported: Wendel's probability that the n starting "
        "points lie in one hemisphere (then one cluster is guaranteed)."
    ),
    hypotheses="n = 32; beta in [1, 8]; t in [0, 30], RK4 dt = 0.1, saves every 0.2; betas with t*(beta) > 0.6 T are not judged.",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 32
    ds: list[int] = [8, 128, 1024]
    betas: list[float] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    systems: int = 32
    T: float = 30.0
    dt: float = 0.1
    save_every: float = 0.2
    threshold: float = 0.999
    median_tol: float = 0.1
    orthogonal_betas: list[float] = [1.0, 4.0, 9.0]
    orthogonal_T: float = 10.0
    orthogonal_tol: float = 1e-7


QUICK = {"ds": [8, 64], "betas": [1.0, 2.0, 3.0, 4.0, 5.0], "systems": 12}


def t_star(beta: float, n: int, delta: float = 1e-3, horizon: float = 200.0) -> float:
    """Time at which the equiangular ODE reaches 1 - delta (inf beyond ``horizon``)."""
    fine = np.linspace(0.0, horizon, 20001)
    rho = theory.equiangular(beta, n, fine)
    hit = rho >= 1 - delta
    if not hit.any():
        return math.inf
    k = int(np.argmax(hit))
    # linear interpolation between the two samples around the crossing
    t0, t1, r0, r1 = fine[k - 1], fine[k], rho[k - 1], rho[k]
    return float(t0 + (1 - delta - r0) * (t1 - t0) / (r1 - r0))


def sweep_spec(config: Config) -> dict:
    base = {
        "seed": 0,
        "n": config.n,
        "d": config.ds[0],
        "init": {"kind": "sphere"},
        "model": {"beta": 1.0, "geometry": "sphere"},
        "solver": {"method": "rk4", "dt": config.dt, "t1": config.T, "save_every": config.save_every},
    }
    seeds = [config.seed * 100_000 + s for s in range(config.systems)]
    return {
        "base": base,
        "grid": {"d": config.ds, "model.beta": config.betas, "seed": seeds},
        "measures": ["pair_fraction"],
        "pair_threshold": config.threshold,
    }


def run(config: Config) -> Result:
    spec = grid.parse(sweep_spec(config))
    fraction = np.full((len(config.ds), len(config.betas), len(spec.ts)), np.nan)
    for task in spec.tasks:
        results = tasks.run_task([spec.points[p].config for p in task], spec.measures, spec.options)
        coords = spec.points[task[0]].coords
        a, b = config.ds.index(coords["d"]), config.betas.index(coords["model.beta"])
        fraction[a, b] = results["pair_fraction"].mean(axis=0)
    # orthogonal starts: the equiangular ODE exactly
    n = config.n
    ts = np.linspace(0.0, config.orthogonal_T, 51)
    ortho = np.empty((len(config.orthogonal_betas), len(ts)))
    spread = np.empty(len(config.orthogonal_betas))
    for k, beta in enumerate(config.orthogonal_betas):
        model = ad.Model(ad.Weights.identity(n), beta=beta, geometry="sphere")
        traj = ad.simulate(model, np.eye(n), ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-10, atol=1e-12))
        x = traj.numpy()[1]
        G = np.einsum("tid,tjd->tij", x, x)[:, *np.triu_indices(n, 1)]
        ortho[k] = G.mean(1)
        spread[k] = float((G.max(1) - G.min(1)).max())
    arrays = {"ds": np.array(config.ds), "betas": np.array(config.betas), "ts": np.array(spec.ts), "fraction": fraction}
    arrays.update(orth_ts=ts, orth_rho=ortho, orth_spread=spread, orth_betas=np.array(config.orthogonal_betas))
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def t50(ts: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """First save time at which the averaged fraction reaches 1/2 (inf if never), per leading index."""
    hit = fraction >= 0.5
    out = np.where(hit.any(-1), ts[np.argmax(hit, -1)], np.inf)
    return out


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    ts, betas, ds = arrays["ts"], arrays["betas"], arrays["ds"]
    stars = np.array([t_star(float(b), config.n) for b in betas])
    keep = stars <= 0.6 * config.T
    errors = np.abs(t50(ts, arrays["fraction"]) - stars) / stars  # (d, beta)
    medians = [float(np.median(e[keep])) if keep.any() else float("nan") for e in errors]
    checks = {
        f"median over beta of |t50 - t*| / t* at the largest d = {int(ds[-1])}": within(
            medians[-1], 0.0, config.median_tol, f"per d: {dict(zip(ds.tolist(), np.round(medians, 3).tolist(), strict=True))}", n=int(keep.sum())
        ),
        "the boundary moves toward t*(beta) as d grows: median error at the largest d minus at the smallest d": within(
            medians[-1] - medians[0] if len(ds) > 1 else float("nan"), -math.inf, -1e-12, n=1 if len(ds) > 1 else 0
        ),
    }
    ode = np.stack([theory.equiangular(float(b), config.n, arrays["orth_ts"]) for b in arrays["orth_betas"]])
    gap = np.abs(arrays["orth_rho"] - ode).max(1)
    checks["orthogonal start: max |<x_i, x_j> - rho_ODE(t)| over pairs and times, every beta"] = every_within(
        np.maximum(gap, arrays["orth_spread"]), 0.0, config.orthogonal_tol
    )
    wendel = {int(d): theory.wendel(config.n, int(d)) for d in ds}
    checks["Wendel: P(the n starts lie in one hemisphere), smallest d"] = report(wendel[int(ds[0])], f"per d: {wendel}")
    return checks, {"t_star": stars.tolist(), "t50": t50(ts, arrays["fraction"]).tolist(), "median_error": medians, "wendel": wendel}


def figures(result: Result) -> dict:
    a = result.arrays
    betas = a["betas"]
    fine = np.linspace(betas.min(), betas.max(), 60)
    stars = np.array([t_star(float(b), result.params["n"]) for b in fine])
    figs = {}
    for k, d in enumerate(a["ds"]):
        figs[f"phase_d{int(d)}"] = plots.grid_heatmap(
            betas,
            a["ts"],
            a["fraction"][k].T,
            xlabel=r"$\beta$",
            ylabel="t",
            label="fraction of pairs with <x_i, x_j> >= 0.999",
            title=f"n = {result.params['n']}, d = {int(d)}, {result.params['systems']} systems per beta",
            curve={"t*(beta), equiangular ODE": (fine, stars)},
        )
    # the largest d first: it is the claim's picture
    return dict(reversed(list(figs.items())))
