"""The phase diagram of the sphere dynamics (Geshkovski, Letrouit, Polyanskiy, Rigollet, arXiv 2312.10794)."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every, every_within, report
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
        "t50(beta) approaches t*(beta). t50 is the median of the pooled pair crossing times, each interpolated in its "
        "(smooth) inner product between saves. Judged at every beta: (i) at the largest d, |t50 - t*| / t* within its "
        "budget: 3 bootstrap standard errors over the systems, 3x the interpolation error (from every other save), and "
        "the previous d's error scaled by (d_prev / d)^(1/2), the slower of the two finite-d laws the data show; (ii) "
        "|t50 - t*| non-increasing over every consecutive pair of d, within 3 standard errors; (iii) from an exactly "
        "orthogonal start (d = n) every pairwise inner product follows "
        "the equiangular ODE to 3e-10 (adaptive Dopri5 at rtol 1e-10 against scipy DOP853). The sweep runs through "
        "attndyn.sweep (seeds batched into one tensor per beta and d). Reported: Wendel's probability that the n starting "
        "points lie in one hemisphere (then one cluster is guaranteed), and the median over beta of the error at the largest d."
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
    orthogonal_betas: list[float] = [1.0, 4.0, 9.0]
    orthogonal_T: float = 10.0
    orthogonal_tol: float = 3e-10  # 3x the orthogonal runs' rtol (1e-10); measured 3.7e-11
    # the perturbation the sensitivity tests make: every saved time read late by time_shift (one save interval is 0.2)
    time_shift: float = 0.0
    # and the t*(beta) the judge compares with, computed for star_n tokens instead of n (None: n); the orthogonal
    # runs' beta times orthogonal_beta_factor
    star_n: int | None = Field(None, ge=2)
    orthogonal_beta_factor: float = Field(1.0, gt=0)


CROSSING = "attndyn.claims.phase_diagram:pair_crossing_times"
DETECTS_SHIFT = "every saved time read one save interval (0.2) early or late; t*(beta) for n = 20 instead of 32"
DETECTS_ORDER = "the order of the dimensions reversed"
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


def pair_crossing_times(ts: np.ndarray, xs: np.ndarray, model: ad.Model, options: dict) -> np.ndarray:
    """A sweep measure: each pair's first time with cos(x_i, x_j) >= ``pair_threshold``, interpolated linearly in
    the (smooth) cosine between the two saves around the crossing (inf if it never crosses): ``(2, n(n-1)/2)``.
    Row 0 reads every save, row 1 every other save (its interpolation error is 4x row 0's, which bounds it)."""
    n = xs.shape[-2]
    u = xs / np.linalg.norm(xs, axis=-1, keepdims=True)
    iu = np.triu_indices(n, 1)
    cos = (u @ np.swapaxes(u, -1, -2))[:, iu[0], iu[1]]  # (T, pairs)
    out = np.empty((2, cos.shape[1]))
    for row, stride in enumerate((1, 2)):
        t, c = ts[::stride], cos[::stride]
        out[row] = _first_crossing(t, c, options["pair_threshold"])
    return out


pair_crossing_times.inner_products_only = True  # a sweep task may read it off span coordinates


def _first_crossing(t: np.ndarray, c: np.ndarray, level: float) -> np.ndarray:
    hit = c >= level
    k = np.argmax(hit, axis=0)
    cols = np.arange(c.shape[1])
    k0 = np.maximum(k - 1, 0)
    c0, c1 = c[k0, cols], c[k, cols]
    frac = np.where(c1 > c0, (level - c0) / np.where(c1 > c0, c1 - c0, 1.0), 0.0)
    times = np.where(k == 0, t[0], t[k0] + np.clip(frac, 0.0, 1.0) * (t[k] - t[k0]))
    return np.where(hit.any(axis=0), times, np.inf)


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
        "measures": ["pair_fraction", "attndyn.claims.phase_diagram:pair_crossing_times"],
        "pair_threshold": config.threshold,
    }


def run(config: Config) -> Result:
    spec = grid.parse(sweep_spec(config))
    fraction = np.full((len(config.ds), len(config.betas), len(spec.ts)), np.nan)
    pairs = config.n * (config.n - 1) // 2
    crossing = np.full((len(config.ds), len(config.betas), config.systems, 2, pairs), np.nan)
    for task in spec.tasks:
        results = tasks.run_task([spec.points[p].config for p in task], spec.measures, spec.options)
        coords = spec.points[task[0]].coords
        a, b = config.ds.index(coords["d"]), config.betas.index(coords["model.beta"])
        fraction[a, b] = results["pair_fraction"].mean(axis=0)
        crossing[a, b] = results[CROSSING]
    # orthogonal starts: the equiangular ODE exactly
    n = config.n
    ts = np.linspace(0.0, config.orthogonal_T, 51)
    ortho = np.empty((len(config.orthogonal_betas), len(ts)))
    spread = np.empty(len(config.orthogonal_betas))
    for k, beta in enumerate(config.orthogonal_betas):
        model = ad.Model(ad.Weights.identity(n), beta=beta * config.orthogonal_beta_factor, geometry="sphere")
        traj = ad.simulate(model, np.eye(n), ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-10, atol=1e-12))
        x = traj.numpy()[1]
        G = np.einsum("tid,tjd->tij", x, x)[:, *np.triu_indices(n, 1)]
        ortho[k] = G.mean(1)
        spread[k] = float((G.max(1) - G.min(1)).max())
    arrays = {"ds": np.array(config.ds), "betas": np.array(config.betas), "ts": np.array(spec.ts) + config.time_shift, "fraction": fraction}
    arrays["crossing"] = crossing + config.time_shift
    arrays.update(orth_ts=ts, orth_rho=ortho, orth_spread=spread, orth_betas=np.array(config.orthogonal_betas))
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def t50(ts: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """First save time at which the averaged fraction reaches 1/2 (inf if never), per leading index (the figures' reading)."""
    hit = fraction >= 0.5
    out = np.where(hit.any(-1), ts[np.argmax(hit, -1)], np.inf)
    return out


BOOTSTRAP = 200


def boundary(crossing: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """(t50, its bootstrap standard error over systems, its interpolation error) from one grid point's crossing
    times ``(systems, 2, pairs)``: t50 is the median of the pooled pair crossing times, the time at which the
    averaged fraction of pairs reaches 1/2; the interpolation error is a third of the change from reading every
    other save (linear interpolation's error is O(dt^2))."""
    fine, coarse = np.median(crossing[:, 0]), np.median(crossing[:, 1])
    S = crossing.shape[0]
    boot = [np.median(crossing[rng.integers(0, S, S), 0]) for _ in range(BOOTSTRAP)]
    se = float(np.std(boot)) if np.isfinite(boot).all() else math.inf
    return float(fine), se, float(abs(coarse - fine) / 3) if np.isfinite(fine) else math.inf


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    ts, betas, ds = arrays["ts"], arrays["betas"], arrays["ds"]
    star_n = config.n if config.star_n is None else config.star_n
    stars = np.array([t_star(float(b), star_n) for b in betas])
    keep = stars <= 0.6 * config.T
    rng = np.random.default_rng(0)
    t, se, interp = (np.full((len(ds), len(betas)), np.nan) for _ in range(3))
    for a in range(len(ds)):
        for b in range(len(betas)):
            t[a, b], se[a, b], interp[a, b] = boundary(arrays["crossing"][a, b], rng)
    errors = (t - stars) / stars  # (d, beta), signed
    cases = [f"beta = {float(x):g}" for x in betas[keep]]
    checks = {}
    if len(ds) > 1:
        # the budget at the largest d: 3 standard errors, 3x the interpolation error, and the finite-d bias read off
        # the previous d by the slower of the two laws the data show (d = 128 -> 1024 shrinks it about 2x = d^{-1/2}
        # at beta <= 3 and 9x = d^{-1} at beta >= 5)
        bias = np.abs(errors[-2]) * np.sqrt(ds[-2] / ds[-1])
        budget = (3 * se[-1] + 3 * interp[-1]) / stars + bias
        ratio = np.abs(errors[-1]) / budget
        checks[
            f"every beta: |t50 - t*| / t* at d = {int(ds[-1])} over its budget (3 standard errors + 3x interpolation"
            f" + d = {int(ds[-2])}'s error x ({int(ds[-2])}/{int(ds[-1])})^(1/2))"
        ] = every_within(ratio[keep], 0.0, 1.0, cases=cases, detects=DETECTS_SHIFT)
        noise = 3 * np.hypot(se[1:], se[:-1]) / stars
        closer = np.abs(errors[1:]) <= np.abs(errors[:-1]) + noise  # (d - 1, beta)
        checks["the boundary approaches t*(beta) as d grows: |t50 - t*| non-increasing over every consecutive d, every beta (3 standard errors)"] = (
            every(
                closer[:, keep].ravel(),
                cases=[f"d = {int(ds[k])} -> {int(ds[k + 1])}, {c}" for k in range(len(ds) - 1) for c in cases],
                detects=DETECTS_ORDER,
            )
        )
    checks[f"median over beta of |t50 - t*| / t* at the largest d = {int(ds[-1])}"] = report(
        float(np.median(np.abs(errors[-1][keep]))) if keep.any() else float("nan"),
        f"per d: {dict(zip(ds.tolist(), np.round(np.median(np.abs(errors[:, keep]), 1), 4).tolist(), strict=True))}",
    )
    ode = np.stack([theory.equiangular(float(b), config.n, arrays["orth_ts"]) for b in arrays["orth_betas"]])
    gap = np.abs(arrays["orth_rho"] - ode).max(1)
    checks["orthogonal start: max |<x_i, x_j> - rho_ODE(t)| over pairs and times, every beta"] = every_within(
        np.maximum(gap, arrays["orth_spread"]), 0.0, config.orthogonal_tol, detects="beta off by 1e-6 in the orthogonal runs"
    )
    wendel = {int(d): theory.wendel(config.n, int(d)) for d in ds}
    checks["Wendel: P(the n starts lie in one hemisphere), smallest d"] = report(wendel[int(ds[0])], f"per d: {wendel}")
    info = {"t_star": stars.tolist(), "t50": t.tolist(), "standard_error": se.tolist(), "interpolation_error": interp.tolist()}
    return checks, info | {"relative_error": errors.tolist(), "t50 (save grid)": t50(ts, arrays["fraction"]).tolist(), "wendel": wendel}


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
