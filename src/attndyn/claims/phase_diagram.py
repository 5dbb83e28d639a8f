"""The phase diagram of the sphere dynamics (Geshkovski, Letrouit, Polyanskiy, Rigollet, arXiv 2312.10794).

How the largest d is judged (issue 33). Random starts in finite d are not orthogonal: their Gram matrix is
G0 = I + E with off-diagonal entries of size d^{-1/2}, and t50 carries a finite-d bias (at d = 64, +0.8 to +1.1 %
at beta = 1..3, -0.2 % at 4, -4.9 % at 5, over 96 systems), larger than its standard error. The budget does not
borrow that bias from the smaller d; the run removes it. The same draws are restarted with Gram matrix
I + lam (G0 - I) at lam = 1/2 and 1/4 (``init.gram_scale``: the fluctuations of a sphere in d / lam^2 dimensions);
lam = 0 is the orthogonal start, whose time is t*. Measured at d = 64 over 96 systems (lam = 1, 3/4, 1/2, 0.35,
1/4), the bias after the interpolation error (the lam = 0 run's) is taken out is c lam^2 + O(lam^4), the 1/d law:
its ratio to lam^2 stays within 15 % at beta <= 3 and the lam^4 term is about a third of the lam^2 term at lam = 1,
beta = 5. A term linear in lam is the sampling fluctuation (the median of the first-order response, lam times that
of lam = 1): fitted as a lam + b lam^2 at beta = 1, a = 0.03 % against b = 0.55 %. Richardson's extrapolation in
lam^2 through lam = 1/2 and 1/4, (4 t50(1/4) - t50(1/2)) / 3, leaves O(lam^4) at lam = 1/4 (under 0.1 % at
beta = 5); the pair lam = 1, 1/2 left -0.9 % there.

The budget is made of this run's own errors: z bootstrap standard errors of the extrapolated value (the systems
resampled together at both lams: the pairing keeps the first-order fluctuation at weight sum_k w_k lam_k = 1/6 (not
cancelled: the joint bootstrap carries it); z the
Student-t quantile, systems - 1 degrees of freedom, at family-wise 1e-3 over the judged betas: 5.45 at quick
size), 3x its interpolation error (every other save; crossings are interpolated in log(1 - cos), 4e-6 at
lam = 0), the change when lam = 1 joins as a third point (an estimate of the O(lam^4) remainder), and the RK4
error (16/15 of each pair's change when the first system's step is halved, times sum_k |w_k|). A 3 % time
stretch and t* for n = 48 fail it at the quick size (the borrowed budget admitted both).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field
from scipy.stats import t as student

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
        "t50(beta) approaches t*(beta). t50 is the median of the pooled pair crossing times, each interpolated in "
        "log(1 - <x_i, x_j>) between saves. Judged at every beta: (i) at the largest d, the finite-d bias removed "
        "in the same run: the same draws G0 restarted with Gram matrix I + lam (G0 - I) at lam = 1/2 and 1/4 (the "
        "fluctuations of a sphere in d / lam^2 dimensions; the bias falls as lam^2, i.e. as 1/d, measured), t50 "
        "extrapolated to lam = 0 by Richardson in lam^2, (4 t50(1/4) - t50(1/2)) / 3, and |t50(0) - t*| / t* within its "
        "budget: z bootstrap standard errors of the extrapolated value (the systems resampled together at every lam; z the "
        "Student-t quantile, systems - 1 degrees of freedom, at family-wise 1e-3 over the judged betas: 5.45 at 12 "
        "systems and 5 betas), "
        "3x its interpolation error (from every other save), its difference to the three-point extrapolation through "
        "lam = 1 (the remainder), and the RK4 error of the extrapolation (16/15 of each pair's change when the step of "
        "the first system is halved); (ii) "
        "|t50 - t*| non-increasing over every consecutive pair of d, within 3 standard errors; (iii) from an exactly "
        "orthogonal start (d = n) every pairwise inner product follows "
        "the equiangular ODE to 3e-10 (adaptive Dopri5 at rtol 1e-10 against scipy DOP853). The sweeps run through "
        "attndyn.sweep (seeds batched into one tensor per beta, d and lam). Reported: the median over beta of "
        "|t50 - t*| / t* at the largest d before the extrapolation (its finite-d bias), and Wendel's probability that "
        "the n starting points lie in one hemisphere (then one cluster is guaranteed)."
    ),
    hypotheses=(
        "n = 32; beta in [1, 8]; t in [0, 30], RK4 dt = 0.1, saves every 0.2 (the paired starts to 1.25 max t*); betas with "
        "t*(beta) > 0.6 T are not judged."
    ),
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
    # the paired starts at the largest d: Gram matrix I + lam (G0 - I) with the same draws G0 (two values, the first
    # larger; the extrapolation to lam = 0 is Richardson's in lam^2)
    gram_scales: list[float] = [0.5, 0.25]
    # the extrapolated t50's band: the Student-t quantile (systems - 1 degrees of freedom) at this family-wise level over
    # the judged betas, in bootstrap standard errors
    family_alpha: float = Field(1e-3, gt=0, lt=1)
    # the perturbations the sensitivity tests make: every saved time read late by time_shift (one save interval is
    # 0.2), or multiplied by time_stretch (a clock 3 % fast or slow)
    time_shift: float = 0.0
    time_stretch: float = Field(1.0, gt=0)
    # and the t*(beta) the judge compares with, computed for star_n tokens instead of n (None: n); the orthogonal
    # runs' beta times orthogonal_beta_factor
    star_n: int | None = Field(None, ge=2)
    orthogonal_beta_factor: float = Field(1.0, gt=0)


CROSSING = "attndyn.claims.phase_diagram:pair_crossing_times"
DETECTS_SHIFT = "every saved time read one save interval (0.2) early or late, or 3 % fast or slow; t*(beta) for n = 20 or 48 instead of 32"
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
    log(1 - cos) between the two saves around the crossing (inf if it never crosses): ``(2, n(n-1)/2)``. Near 1 the
    cosine approaches exponentially, so this is exact up to the change of the rate over one save (linear in the cosine
    itself read t50 0.08-0.18 % late at 0.2 between saves; in log(1 - cos), 4e-6). Row 0 reads every save, row 1
    every other save (its interpolation error is 4x row 0's, which bounds it)."""
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
    gap = np.log(np.maximum(1.0 - c, 1e-300))  # log(1 - cos): linear in t where 1 - cos decays exponentially
    c0, c1, target = -gap[k0, cols], -gap[k, cols], -math.log(max(1.0 - level, 1e-300))
    frac = np.where(c1 > c0, (target - c0) / np.where(c1 > c0, c1 - c0, 1.0), 0.0)
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


def paired_T(config: Config) -> float:
    """The paired starts' horizon: 1.25 times the largest judged t*(beta) on the save grid (at lam <= 1/2 t50 lies within
    a few % of t*, so the median crossing is reached well before), at most T."""
    stars = [t_star(b, config.n) for b in config.betas]
    judged = [t for t in stars if t <= 0.6 * config.T] or [config.T]
    saves = math.ceil(1.25 * max(judged) / config.save_every)
    return min(config.T, round(saves * config.save_every, 10))


def paired_specs(config: Config) -> tuple[dict, dict]:
    """The sweeps of the paired starts at the largest d (every lam of ``gram_scales``, every beta and system, to
    ``paired_T``) and of the step-halving run (the first lam and system at dt / 2, every beta)."""
    spec = sweep_spec(config)
    spec["base"] = spec["base"] | {"d": max(config.ds), "solver": spec["base"]["solver"] | {"t1": paired_T(config)}}
    spec["measures"] = [CROSSING]
    seeds = spec["grid"]["seed"]
    paired = spec | {"grid": {"init.gram_scale": config.gram_scales, "model.beta": config.betas, "seed": seeds}}
    halving = {"init.gram_scale": config.gram_scales[:1], "solver.dt": [config.dt / 2], "model.beta": config.betas, "seed": seeds[:1]}
    halving = spec | {"grid": halving}
    return paired, halving


def run(config: Config) -> Result:
    if max(config.ds) < config.n:
        raise ValueError(f"ds = {config.ds}: the paired starts at the largest d need d >= n = {config.n}")
    if not (len(config.gram_scales) == 2 and 1 > config.gram_scales[0] > config.gram_scales[1] > 0):
        raise ValueError(f"gram_scales = {config.gram_scales}: two values with 1 > lam_1 > lam_2 > 0")
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
    # the paired starts at the largest d (the same seeds, hence the same draws G0) and the step-halving run
    paired_spec, halving_spec = (grid.parse(x) for x in paired_specs(config))
    paired = np.full((len(config.gram_scales), len(config.betas), config.systems, 2, pairs), np.nan)
    for task in paired_spec.tasks:
        coords = paired_spec.points[task[0]].coords
        a, b = config.gram_scales.index(coords["init.gram_scale"]), config.betas.index(coords["model.beta"])
        paired[a, b] = tasks.run_task([paired_spec.points[p].config for p in task], paired_spec.measures, paired_spec.options)[CROSSING]
    halving = np.full((len(config.betas), pairs), np.nan)
    for task in halving_spec.tasks:
        b = config.betas.index(halving_spec.points[task[0]].coords["model.beta"])
        halving[b] = tasks.run_task([halving_spec.points[p].config for p in task], halving_spec.measures, halving_spec.options)[CROSSING][0, 0]
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
    arrays = {"ds": np.array(config.ds), "betas": np.array(config.betas), "ts": np.array(spec.ts) * config.time_stretch + config.time_shift}
    arrays["fraction"] = fraction
    for key, value in (("crossing", crossing), ("paired_crossing", paired), ("halving_crossing", halving)):
        arrays[key] = value * config.time_stretch + config.time_shift
    arrays["gram_scales"] = np.array(config.gram_scales)
    arrays.update(orth_ts=ts, orth_rho=ortho, orth_spread=spread, orth_betas=np.array(config.orthogonal_betas))
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def t50(ts: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """First save time at which the averaged fraction reaches 1/2 (inf if never), per leading index (the figures' reading)."""
    hit = fraction >= 0.5
    out = np.where(hit.any(-1), ts[np.argmax(hit, -1)], np.inf)
    return out


BOOTSTRAP = 200


def richardson(lams: np.ndarray) -> np.ndarray:
    """Weights w with sum_k w_k f(lam_k) = f(0) for every polynomial f of degree < len(lams) in lam^2 (Lagrange's at 0)."""
    x = np.asarray(lams, dtype=np.float64) ** 2
    return np.array([np.prod([-x[j] / (x[k] - x[j]) for j in range(len(x)) if j != k]) for k in range(len(x))])


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


def extrapolated(full: np.ndarray, paired: np.ndarray, halving: np.ndarray, lams: np.ndarray, rng: np.random.Generator) -> dict:
    """t50 at lam = 0 from one beta's crossing times at the largest d: ``full`` (systems, 2, pairs) at lam = 1,
    ``paired`` (2, systems, 2, pairs) at ``lams`` from the same draws, ``halving`` (pairs,) the first paired system at
    half the step. Returns the extrapolated value and its budget's terms (absolute times):

    * ``value``: Richardson in lam^2 through the two paired starts, w @ t50(lams) (lam = 1/2, 1/4: (4 t50(1/4) -
      t50(1/2)) / 3); the finite-d bias is c lam^2 + O(lam^4), which this removes to O(lam_1^2 lam_2^2);
    * ``standard_error``: bootstrap over the systems, the same resample at both lams (the pairing keeps the
      first-order fluctuation at weight sum_k w_k lam_k = 1/6, which this resampling carries);
    * ``interpolation``: a third of the change in the extrapolated value when every other save is read;
    * ``remainder``: the change when lam = 1 joins the extrapolation (three points), an estimate of the O(lam^4) term;
    * ``step``: the RK4 error, 16/15 of the largest change of a pair's crossing time when the first system's step is
      halved (the fourth-order error at dt is 1/15 of the change), times sum_k |w_k|.
    """
    with np.errstate(invalid="ignore"):  # a beta past the paired horizon (not judged) never crosses: inf - inf
        return _extrapolated(full, paired, halving, lams, rng)


def _extrapolated(full: np.ndarray, paired: np.ndarray, halving: np.ndarray, lams: np.ndarray, rng: np.random.Generator) -> dict:
    w2, w3 = richardson(lams), richardson(np.concatenate([[1.0], lams]))
    fine = np.array([np.median(c[:, 0]) for c in paired])
    coarse = np.array([np.median(c[:, 1]) for c in paired])
    value = float(w2 @ fine)
    three = float(w3 @ np.concatenate([[np.median(full[:, 0])], fine]))
    S = full.shape[0]
    boot = []
    for _ in range(BOOTSTRAP):
        k = rng.integers(0, S, S)
        boot.append(w2 @ np.array([np.median(c[k, 0]) for c in paired]))
    se = float(np.std(boot)) if np.isfinite(boot).all() else math.inf
    change = np.abs(paired[0, 0, 0] - halving)
    both = np.isfinite(paired[0, 0, 0]) & np.isfinite(halving)
    # a pair that crosses at one step and not at the other has no measured error: the budget is not finite
    step = float(np.max(change[both], initial=0.0)) * 16 / 15 * float(np.abs(w2).sum()) if (both == np.isfinite(halving)).all() else math.inf
    return {"value": value, "standard_error": se, "interpolation": abs(float(w2 @ coarse) - value) / 3, "remainder": abs(three - value), "step": step}


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
    # the largest d: the finite-d bias removed by the paired starts, the budget made of this run's own errors
    big = int(np.argmax(ds))
    ext = [
        extrapolated(arrays["crossing"][big, b], arrays["paired_crossing"][:, b], arrays["halving_crossing"][b], arrays["gram_scales"], rng)
        for b in range(len(betas))
    ]
    terms = {key: np.array([e[key] for e in ext]) for key in ext[0]}
    S = arrays["crossing"].shape[2]
    z = float(student.ppf(1.0 - config.family_alpha / (2.0 * max(int(keep.sum()), 1)), max(S - 1, 1)))
    budget = z * terms["standard_error"] + 3 * terms["interpolation"] + terms["remainder"] + terms["step"]
    extrapolated_error = (terms["value"] - stars) / stars
    # a budget that is not finite (a boundary or a bootstrap that never crossed) is no budget: the case fails
    ratio = np.where(np.isfinite(budget), np.abs(extrapolated_error) * stars / budget, np.inf)
    lam1, lam2 = (f"{float(x):g}" for x in arrays["gram_scales"])
    checks[
        f"every beta: |t50 - t*| / t* at d = {int(ds[big])}, t50 extrapolated to lam = 0 from the paired starts I + lam (G0 - I)"
        f" at lam = {lam1}, {lam2}, over its budget ({z:.2f} bootstrap standard errors + 3x interpolation + remainder + RK4 step halving)"
    ] = every_within(ratio[keep], 0.0, 1.0, cases=cases, detects=DETECTS_SHIFT)
    if len(ds) > 1:
        noise = 3 * np.hypot(se[1:], se[:-1]) / stars
        closer = np.abs(errors[1:]) <= np.abs(errors[:-1]) + noise  # (d - 1, beta)
        checks["the boundary approaches t*(beta) as d grows: |t50 - t*| non-increasing over every consecutive d, every beta (3 standard errors)"] = (
            every(
                closer[:, keep].ravel(),
                cases=[f"d = {int(ds[k])} -> {int(ds[k + 1])}, {c}" for k in range(len(ds) - 1) for c in cases],
                detects=DETECTS_ORDER,
            )
        )
    checks[f"median over beta of |t50 - t*| / t* at the largest d = {int(ds[big])}, before the extrapolation (its finite-d bias)"] = report(
        float(np.median(np.abs(errors[big][keep]))) if keep.any() else float("nan"),
        f"per d: {dict(zip(ds.tolist(), np.round(np.median(np.abs(errors[:, keep]), 1), 4).tolist(), strict=True))}; "
        f"extrapolated: {float(np.median(np.abs(extrapolated_error[keep]))) if keep.any() else float('nan'):.4f}",
    )
    ode = np.stack([theory.equiangular(float(b), config.n, arrays["orth_ts"]) for b in arrays["orth_betas"]])
    gap = np.abs(arrays["orth_rho"] - ode).max(1)
    checks["orthogonal start: max |<x_i, x_j> - rho_ODE(t)| over pairs and times, every beta"] = every_within(
        np.maximum(gap, arrays["orth_spread"]), 0.0, config.orthogonal_tol, detects="beta off by 1e-6 in the orthogonal runs"
    )
    wendel = {int(d): theory.wendel(config.n, int(d)) for d in ds}
    checks["Wendel: P(the n starts lie in one hemisphere), smallest d"] = report(wendel[int(ds[0])], f"per d: {wendel}")
    info = {"t_star": stars.tolist(), "t50": t.tolist(), "standard_error": se.tolist(), "interpolation_error": interp.tolist()}
    info |= {"extrapolated t50": terms["value"].tolist(), "extrapolated relative_error": extrapolated_error.tolist()}
    info |= {f"budget: {key}": (terms[key] / stars).tolist() for key in ("standard_error", "interpolation", "remainder", "step")}
    info |= {"budget (relative)": (budget / stars).tolist(), "budget ratio": ratio.tolist()}
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
