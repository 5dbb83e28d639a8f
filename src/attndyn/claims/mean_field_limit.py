"""Particles converge to the mean-field density as n grows (SPEC §1.6, §8.8)."""

from __future__ import annotations

import math

import numpy as np

from attndyn.claims import circle
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every_within, report
from attndyn.theory import meanfield
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="mean-field-limit",
    paper_ref="arXiv:2305.05465v6 §6 (the continuity equation as the n -> infinity limit of the particle system)",
    title="Particles converge to the mean-field solution at rate n^{-1/2}",
    statement=(
        "Tokens drawn i.i.d. from a density rho0 on S^1 and moved by the engine (SA, Q = K = V = I) stay close to the "
        "solution of the continuity equation from rho0. Judged: the root-mean-square over systems of the Wasserstein-1 "
        "distance (arc length) between the particles' empirical measure at time T and the mean-field density at T decreases "
        "like n^p with a fitted exponent p in [-0.6, -0.4], for beta = 1 and beta = 4."
    ),
    hypotheses=(
        "rho0 = 0.6 vM(0, 2) + 0.4 vM(2.5, 1) (von Mises mixture); T = 1; mean field: pseudo-spectral, M = 1024, rtol 1e-10; "
        "particles: RK4 dt = 0.05, many systems per n (fewer for large n)."
    ),
    kind="pass/fail",
)


class Config(ExperimentConfig):
    betas: list[float] = [1.0, 4.0]
    T: float = 1.0
    M: int = 1024
    ns: list[int] = [16, 32, 64, 128, 256, 512, 1024]
    budget: int = 512
    dt: float = 0.05
    means: list[float] = [0.0, 2.5]
    kappas: list[float] = [2.0, 1.0]
    weights: list[float] = [0.6, 0.4]
    slope_range: tuple[float, float] = (-0.6, -0.4)


QUICK = {"ns": [16, 32, 64, 128, 256], "budget": 256, "dt": 0.1}


def sample(rng: np.random.Generator, config: Config, shape: tuple[int, ...]) -> np.ndarray:
    comp = rng.choice(len(config.weights), size=shape, p=np.asarray(config.weights) / np.sum(config.weights))
    mu = np.asarray(config.means)[comp]
    kappa = np.asarray(config.kappas)[comp]
    return np.mod(rng.vonmises(mu, kappa), 2 * math.pi)


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    rho0 = meanfield.initial_density("von-mises", config.M, means=config.means, kappas=config.kappas, weights=config.weights)
    arrays = {"betas": np.array(config.betas), "ns": np.array(config.ns)}
    seeds = circle.seeds_for(config.ns, config.budget)
    for b, beta in enumerate(config.betas):
        sol = meanfield.solve_circle(rho0, np.linspace(0, config.T, 5), beta=beta, rtol=1e-10, atol=1e-12)
        arrays[f"rho_b{b}"] = sol.rho
        for n, S in zip(config.ns, seeds, strict=True):
            theta0 = sample(rng, config, (S, n))
            _, theta = circle.run(theta0, beta, config.T, dt=config.dt, saves=2, engine=config)
            arrays[f"w1_b{b}_n{n}"] = meanfield.w1_circle(theta[-1], sol.rho[-1])
            arrays[f"w1start_b{b}_n{n}"] = meanfield.w1_circle(theta[0], sol.rho[0])
    arrays["theta_example"] = theta[-1, 0]
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def rms(arrays: dict, b: int, prefix: str = "w1") -> np.ndarray:
    return np.array([np.sqrt((arrays[f"{prefix}_b{b}_n{n}"] ** 2).mean()) for n in arrays["ns"]])


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    lo, hi = config.slope_range
    slopes, info = [], {"rms": {}, "slopes": {}}
    for b, beta in enumerate(arrays["betas"]):
        err = rms(arrays, b)
        slope = circle.loglog_slope(arrays["ns"], err) if len(err) >= 2 else float("nan")
        slopes.append(slope)
        info["rms"][f"{beta:g}"] = err.tolist()
        info["slopes"][f"{beta:g}"] = slope
    checks = {
        "fitted exponent p of RMS W1(particles, mean field) at T ~ n^p, every beta": every_within(
            slopes, lo, hi, "; ".join(f"beta={k}: {v:.3f}" for k, v in info["slopes"].items())
        )
    }
    start = rms(arrays, len(arrays["betas"]) - 1, "w1start")
    checks["RMS W1 at t = 0 and at T, largest n, last beta"] = report(info["rms"][f"{arrays['betas'][-1]:g}"][-1], f"at t = 0: {start[-1]:.4g}")
    return checks, info


def figures(result: Result) -> dict:
    a = result.arrays
    ns = a["ns"]
    series, points = {}, {}
    for _b, beta in enumerate(a["betas"]):
        err = result.info["rms"][f"{beta:g}"]
        points[f"beta = {beta:g} (p = {result.info['slopes'][f'{beta:g}']:.3f})"] = (ns, err)
        series[f"C n^(-1/2), beta = {beta:g}"] = err[0] * np.sqrt(ns[0] / ns)
    figs = {
        "w1_vs_n": plots.curves(
            ns, series, xlabel="n", ylabel="RMS W1 at T", title="particles vs mean field on S^1", points=points, logx=True, logy=True
        )
    }
    last = len(a["betas"]) - 1
    rho = a[f"rho_b{last}"]
    theta = 2 * math.pi * np.arange(rho.shape[-1]) / rho.shape[-1]
    hist, edges = np.histogram(a["theta_example"], bins=32, range=(0, 2 * math.pi), density=True)
    figs["density_at_T"] = plots.curves(
        theta,
        {"mean field at T": rho[-1], "rho0": rho[0]},
        xlabel=r"$\theta$ (rad)",
        ylabel="density",
        title=f"beta = {a['betas'][last]:g}: one particle system (n = {len(a['theta_example'])}) at T",
        points={"particles (histogram)": ((edges[:-1] + edges[1:]) / 2, hist)},
    )
    return figs
