"""Causal attention on the sphere (Karagodin, Polyanskiy, Rigollet, arXiv 2411.04990; SPEC §5.2)."""

from __future__ import annotations

import numpy as np

import attndyn as ad

from .. import plots
from .common import ClaimInfo, ExperimentConfig, Result, at_most, fraction, report, unit_rows

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


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    checks, arrays = {}, {}
    for label, W in (("Q = K = I", ad.Weights.identity(3)), ("random Q, K", ad.Weights(rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), np.eye(3)))):
        T = config.T if label == "Q = K = I" else config.T_random
        model = ad.Model(W, beta=1.0, geometry="sphere", mask="causal")
        x0 = unit_rows(rng.normal(size=(config.seeds, config.n, 3)))
        ts = np.linspace(0, T, 101)
        xs = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-9, atol=1e-11), max_steps=10_000_000).xs.numpy()
        drift = np.abs(xs[:, :, 0] - xs[0, :, 0]).max()
        gap = 1 - np.einsum("sid,sd->si", xs[-1], x0[:, 0]).min(1)
        if label == "Q = K = I":
            checks["x_1 stationary: max_t |x_1(t) - x_1(0)|"] = at_most(drift, 1e-14)
            checks[f"seeds with some token farther than 1e-6 from x_1(0) at T = {T:g} (1 - <x_k, x_1(0)>)"] = at_most(fraction(gap > TOL), 0.0)
            arrays["ts"], arrays["x"], arrays["x1"] = ts, xs[:, 0], x0[0, 0]
        else:
            checks["random Q, K: x_1 drift"] = at_most(drift, 1e-14)
            checks[f"random Q, K: seeds not yet at x_1(0) at T = {T:g}"] = report(fraction(gap > TOL), "slow convergence; not judged")
    return Result(CLAIM, checks, config.model_dump(), arrays, {})


def figures(result: Result) -> dict:
    a = result.arrays
    inner = a["x"] @ a["x1"]
    return {
        "alignment": plots.coordinates_vs_time(
            a["ts"], inner, levels={"1": 1.0}, ylabel="<x_k(t), x_1(0)>", title="causal mask: every token aligns with the first (seed 0)"
        )
    }
