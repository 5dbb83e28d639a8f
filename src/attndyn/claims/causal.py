"""Causal attention on the sphere (Karagodin, Polyanskiy, Rigollet, arXiv 2411.04990)."""

from __future__ import annotations

import numpy as np

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every, fraction, report, unit_rows
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="causal",
    paper_ref="arXiv:2411.04990 (Karagodin, Polyanskiy, Rigollet, NeurIPS 2024): causal masking, V = I",
    title="Causal masking: every token goes to the first",
    statement=(
        "With a causal mask (token k attends to j <= k) on the sphere and V = I, the first token never moves and, for "
        "(almost) every initialization, every token converges to x_1(0)."
    ),
    hypotheses="S^{d-1}, d = 3, n = 20, V = I, beta = 1; Q = K = I (judged) and random Q, K (reported: the convergence is slow).",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 20
    seeds: int = 20
    T: float = 100.0
    T_random: float = 300.0


QUICK = {"T_random": 150.0}
TOL = 1e-6


LABELS = ("Q = K = I", "random Q, K")


def run(config: Config) -> Result:
    """Simulate both series; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    arrays = {}
    for k, W in enumerate((ad.Weights.identity(3), ad.Weights(rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), np.eye(3)))):
        T = config.T if k == 0 else config.T_random
        model = ad.Model(W, beta=1.0, geometry="sphere", mask="causal")
        x0 = unit_rows(rng.normal(size=(config.seeds, config.n, 3)))
        ts = np.linspace(0, T, 101)
        xs = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-9, atol=1e-11), max_steps=10_000_000).xs.numpy()
        arrays |= {f"ts{k}": ts, f"x{k}": xs}
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    checks = {}
    for k, label in enumerate(LABELS):
        ts, xs = arrays[f"ts{k}"], arrays[f"x{k}"]
        drift = np.abs(xs[:, :, 0] - xs[0, :, 0]).max((0, 2))  # per seed
        gap = 1 - np.einsum("sid,sd->si", xs[-1], xs[0, :, 0]).min(1)
        checks[f"{label}: x_1 stationary, max_t |x_1(t) - x_1(0)| <= 1e-14: failing seeds"] = every(drift <= 1e-14)
        if k == 0:
            checks[f"{label}: every token within 1e-6 of x_1(0) at T = {ts[-1]:g} (1 - <x_k, x_1(0)>): failing seeds"] = every(gap <= TOL)
        else:
            checks[f"{label}: seeds not yet at x_1(0) at T = {ts[-1]:g}"] = report(fraction(gap > TOL), "slow convergence; not judged")
    return checks, {}


def figures(result: Result) -> dict:
    a = result.arrays
    inner = a["x0"][:, 0] @ a["x0"][0, 0, 0]
    return {
        "alignment": plots.coordinates_vs_time(
            a["ts0"],
            inner,
            levels={"1": 1.0},
            ylabel=r"$\langle x_k(t), x_1(0)\rangle$",
            title="causal mask: every token aligns with the first (seed 0)",
        )
    }
