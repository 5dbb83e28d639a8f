"""beta = 0 on the circle: the Kuramoto model and its Ott-Antonsen closed form."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import t as student

from attndyn.claims import circle
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, at_most, every_within, report
from attndyn.theory import closed_forms as theory
from attndyn.theory import meanfield
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="kuramoto-closed-form",
    paper_ref="Kuramoto with identical oscillators and the Ott-Antonsen reduction (beta = 0 on the circle), derived for attndyn",
    title="beta = 0 on the circle: the Ott-Antonsen closed form, in the mean field and for particles",
    statement=(
        "At beta = 0, SA on S^1 is the Kuramoto model with coupling 1. From a wrapped-Cauchy density with order parameter R0 the "
        "order parameter follows R(t) = R0 e^{t/2} / sqrt(1 + R0^2 (e^t - 1)). Judged: (i) the mean-field solver matches R(t) "
        "to 3e-12 over the run (3x its discretisation error: Dopri5 at rtol 1e-10, and spectral truncation R(T)^{M/3} < 1e-15); "
        "(ii) particles from stratified starts (the density's quantiles at (j + U)/n, one uniform shift U per system, so the start "
        "is exact to O(1/n)) have a mean R_n(t) over systems within its standard error of R(t) at every save. Reported, not "
        "judged: particles drawn i.i.d. from the density approach R(t) at rate n^{-1/2} (the central limit theorem); the fitted exponent of the "
        "root-mean-square (over systems) of sup_t |R_n(t) - R(t)| against n (a band on one fitted slope is not derived)."
    ),
    hypotheses="beta = 0, R0 = 0.3, t in [0, 3]; mean field on M = 512 points; particles RK4 dt = 0.1, many systems per n (fewer for large n).",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    R0: float = 0.3
    T: float = 3.0
    M: int = 512
    ns: list[int] = [16, 32, 64, 128, 256, 512, 1024]
    budget: int = 1024  # systems at the smallest n; S n^2 is kept about constant, with at least 16
    dt: float = 0.1
    meanfield_tol: float = 3e-12  # 3x the solver's error here (measured 3e-13 at rtol 1e-10, 2e-12 at rtol 1e-5)
    meanfield_rtol: float = 1e-10
    # multiplies R0 in the mean-field solver's start only: 1 is the claim; the sensitivity test sets 1 + 1e-10
    meanfield_R0_factor: float = 1.0
    stratified_ns: list[int] = [256, 512]
    stratified_systems: int = 16
    family_alpha: float = 1e-3
    # scales V = coupling I in the particle runs only: 1 is the claim; the sensitivity test sets 0.95
    coupling: float = 1.0


QUICK = {"ns": [16, 32, 64, 128, 256], "budget": 512}
SAVES = 31


def wrapped_cauchy(rng: np.random.Generator, R0: float, shape: tuple[int, ...]) -> np.ndarray:
    """Samples of the wrapped Cauchy law with order parameter R0 (scale -log R0), mean 0."""
    return np.mod(-math.log(R0) * np.tan(math.pi * (rng.random(shape) - 0.5)), 2 * math.pi)


def stratified_wrapped_cauchy(rng: np.random.Generator, R0: float, systems: int, n: int) -> np.ndarray:
    """``(systems, n)`` angles at the quantiles (j + U) / n of the wrapped Cauchy law, one uniform U per system."""
    u = (np.arange(n)[None, :] + rng.random((systems, 1))) / n
    return np.mod(-math.log(R0) * np.tan(math.pi * (u - 0.5)), 2 * math.pi)


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    ts = np.linspace(0.0, config.T, SAVES)
    rho0 = meanfield.initial_density("wrapped-cauchy", config.M, R0=config.R0 * config.meanfield_R0_factor)
    sol = meanfield.solve_circle(rho0, ts, beta=0.0, rtol=config.meanfield_rtol, atol=config.meanfield_rtol * 1e-2)
    arrays = {"ts": ts, "meanfield_R": meanfield.order_parameter(sol.rho), "ns": np.array(config.ns)}
    arrays["rho"] = sol.rho
    seeds = circle.seeds_for(config.ns, config.budget)
    for n, S in zip(config.ns, seeds, strict=True):
        pts, theta = circle.run(
            wrapped_cauchy(rng, config.R0, (S, n)), 0.0, config.T, dt=config.dt, saves=SAVES, engine=config, coupling=config.coupling
        )
        idx = np.searchsorted(pts, ts - 1e-9)
        arrays[f"R_n{n}"] = circle.amplitudes(theta[idx], np.array([1]))[..., 0]  # (T, S)
    arrays["stratified_ns"] = np.array(config.stratified_ns)
    for n in config.stratified_ns:
        theta0 = stratified_wrapped_cauchy(rng, config.R0, config.stratified_systems, n)
        pts, theta = circle.run(theta0, 0.0, config.T, dt=config.dt, saves=SAVES, engine=config, coupling=config.coupling)
        arrays[f"R_strat{n}"] = circle.amplitudes(theta[np.searchsorted(pts, ts - 1e-9)], np.array([1]))[..., 0]
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def errors(arrays: dict, config: Config) -> np.ndarray:
    """Root-mean-square over systems of sup_t |R_n(t) - R(t)|, one per n."""
    exact = theory.kuramoto_order(arrays["ts"], config.R0)
    return np.array([np.sqrt((np.abs(arrays[f"R_n{n}"] - exact[:, None]).max(0) ** 2).mean()) for n in arrays["ns"]])


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    exact = theory.kuramoto_order(arrays["ts"], config.R0)
    gap = float(np.abs(arrays["meanfield_R"] - exact).max())
    checks = {
        "mean field: sup_t |R(t) - Ott-Antonsen R(t)|": at_most(
            gap, config.meanfield_tol, n=len(exact), detects="the mean-field start's R0 off by 1e-10 (relative)"
        )
    }
    err = errors(arrays, config)
    slope = circle.loglog_slope(arrays["ns"], err) if len(err) >= 2 else float("nan")
    # reported, not judged: the n^{-1/2} law is the central limit theorem's, but a band on one fitted slope is not derived
    # from it (the slope's sampling spread is not known in closed form; [-0.6, -0.4] failed correct
    # dynamics at seeds 14 and 18 at quick size); the stratified check below carries the verdict
    checks["particles: fitted exponent p of the RMS error ~ n^p"] = report(
        slope, f"expected -1/2; RMS errors {np.round(err, 5).tolist()} (not judged: the band on one slope is not derived)"
    )
    z, cases, dof = [], [], 1
    for n in arrays["stratified_ns"]:
        Rn = arrays[f"R_strat{int(n)}"]
        if Rn.ndim != 2 or Rn.shape[1] < 2:
            continue
        dof = Rn.shape[1] - 1
        se = Rn.std(1, ddof=1) / math.sqrt(Rn.shape[1])
        z += list(np.abs(Rn.mean(1) - exact)[1:] / se[1:])
        cases += [f"n = {int(n)}, t = {t:.3g}" for t in arrays["ts"][1:]]
    band = float(student.ppf(1 - config.family_alpha / (2 * max(len(z), 1)), dof))
    checks["stratified particles: |mean R_n - R| / standard error, every save and n"] = every_within(
        z,
        0.0,
        band,
        f"band: Student-t ({dof} degrees of freedom) at family-wise {config.family_alpha:g} over {len(z)} comparisons",
        cases=cases,
        detects="a coupling 5 % off (V = 0.95 I) in the particle dynamics",
    )
    checks["particles: RMS error at the largest n"] = report(err[-1], f"n = {int(arrays['ns'][-1])}")
    return checks, {"errors": err.tolist(), "slope": slope}


def figures(result: Result) -> dict:
    a, p = result.arrays, result.params
    fine = np.linspace(0, p["T"], 200)
    n_big = int(a["ns"][-1])
    figs = {
        "order_parameter": plots.curves(
            fine,
            {"Ott-Antonsen R(t)": theory.kuramoto_order(fine, p["R0"])},
            xlabel="t",
            ylabel="order parameter R",
            title="beta = 0 on the circle from a wrapped-Cauchy start",
            points={
                "mean-field solver": (a["ts"], a["meanfield_R"]),
                f"particles, n = {n_big} (one system)": (a["ts"], a[f"R_n{n_big}"][:, 0]),
            },
        ),
        "particle_error": plots.curves(
            a["ns"],
            {"C n^{-1/2}": result.info["errors"][0] * np.sqrt(a["ns"][0] / a["ns"])},
            xlabel="n",
            ylabel="RMS of sup_t |R_n - R|",
            title=f"particles approach the closed form (fitted exponent {result.info['slope']:.3f})",
            points={"measured": (a["ns"], result.info["errors"])},
            logx=True,
            logy=True,
        ),
    }
    return figs
