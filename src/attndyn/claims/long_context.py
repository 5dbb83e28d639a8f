"""Critical attention scaling for long contexts (Chen, Lin, Polyanskiy, Rigollet, arXiv 2510.05554)."""

from __future__ import annotations

import math

import numpy as np

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every_within, report
from attndyn.theory import closed_forms as theory
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="long-context",
    paper_ref="arXiv:2510.05554 (critical attention scaling in long-context transformers)",
    title="Long contexts: the critical scaling beta = gamma log n",
    statement=(
        "On n equiangular unit inputs (<x_i, x_j> = rho) with Q = K = V = I and beta_n = gamma log n, the pairwise cosine of "
        "one attention layer's outputs tends to 1 for gamma < 1/(1 - rho), to 4 rho / (1 + 3 rho) at gamma = 1/(1 - rho), and "
        "to rho above. Judged: the engine's one layer, dense and fused, on explicit inputs x_i = sqrt(rho) u + sqrt(1 - rho) e_i "
        "(d = n + 1) equals the exact finite-n cosine (attndyn.theory.one_layer_cosine) to 1e-12 for every n and gamma. "
        "Reported: the exact cosine at n = 10^6 against its limit (a property of the formula, which no run can fail). Drawn: "
        "the cosine against gamma for n up to 10^6."
    ),
    hypotheses="Q = K = V = I; rho = 0.4; gamma in {0.5, 1, 1.5, 2.5} / (1 - rho); engine n up to 4096 (quick: 1024).",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    rho: float = 0.4
    ns: list[int] = [16, 256, 4096]
    gammas: list[float] = [0.5, 1.0, 1.5, 2.5]  # in units of the critical 1 / (1 - rho)
    formula_ns: list[int] = [10**2, 10**3, 10**4, 10**5, 10**6]
    # multiplies beta in the engine's layer only: 1 is the claim; the sensitivity test sets 1 + 1e-9
    beta_factor: float = 1.0


QUICK = {"ns": [16, 256, 1024]}
TOL = 1e-12


def inputs(n: int, rho: float) -> np.ndarray:
    """x_i = sqrt(rho) u + sqrt(1 - rho) e_i in R^{n + 1}: unit vectors with pairwise inner products rho."""
    x = np.zeros((n, n + 1))
    x[:, 0] = math.sqrt(rho)
    x[np.arange(n), np.arange(1, n + 1)] = math.sqrt(1 - rho)
    return x


def run(config: Config) -> Result:
    """The engine's layer for every (n, gamma, kernel); the checks are :func:`judge` of the saved arrays."""
    critical = 1 / (1 - config.rho)
    arrays = {"ns": np.array(config.ns), "gammas": np.array(config.gammas) * critical}
    for kernel in ("dense", "fused"):
        cos = np.empty((len(config.ns), len(config.gammas)))
        for a, n in enumerate(config.ns):
            x = ad.core.weights.as_float_tensor(inputs(n, config.rho), "x")
            for b, gamma in enumerate(arrays["gammas"]):
                model = ad.Model(ad.Weights.identity(n + 1), beta=gamma * math.log(n) * config.beta_factor, attention=kernel)
                y = ad.core.dynamics.vector_field(0.0, x, ad.core.dynamics.prepare(model, x))[:2].numpy()  # rows 0 and 1 of P x
                cos[a, b] = float(y[0] @ y[1] / math.sqrt((y[0] @ y[0]) * (y[1] @ y[1])))
        arrays[f"cos_{kernel}"] = cos
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    ns, gammas = arrays["ns"], arrays["gammas"]
    exact = np.array([[theory.one_layer_cosine(int(n), config.rho, g * math.log(n)) for g in gammas] for n in ns])
    checks = {}
    for kernel in ("dense", "fused"):
        cases = [f"n = {n}, gamma = {g:.3g}" for n in ns for g in gammas]
        checks[f"{kernel} attention: |engine cosine - exact finite-n cosine|, every n and gamma"] = every_within(
            np.abs(arrays[f"cos_{kernel}"] - exact),
            0.0,
            TOL,
            "budget: rounding of a softmax over n terms and two dot products in float64 (measured <= 2e-15)",
            cases=cases,
            detects="beta off by 1e-9 (relative) in the engine's layer",
        )
    closer = []
    for g in gammas:
        limit = theory.one_layer_cosine_limit(config.rho, g)
        small, large = (abs(theory.one_layer_cosine(n, config.rho, g * math.log(n)) - limit) for n in (config.formula_ns[0], config.formula_ns[-1]))
        closer.append(large / max(small, 1e-300))
    checks[f"exact cosine: distance to its limit at n = {config.formula_ns[-1]:g} / at n = {config.formula_ns[0]:g}, largest over gamma"] = report(
        max(closer), "below 1: the finite-n cosine approaches each limit (a property of the closed form, not of a run)"
    )
    g_crit = 1 / (1 - config.rho)
    checks["at the critical gamma, n = 1e6: cosine (limit 4 rho / (1 + 3 rho))"] = report(
        theory.one_layer_cosine(10**6, config.rho, g_crit * math.log(10**6)), f"limit {4 * config.rho / (1 + 3 * config.rho):.4f}"
    )
    return checks, {"exact": exact.tolist()}


def figures(result: Result) -> dict:
    rho = result.params["rho"]
    critical = 1 / (1 - rho)
    gammas = np.linspace(0.2, 3.0, 141) * critical
    series = {f"n = {n:g}": np.array([theory.one_layer_cosine(n, rho, g * math.log(n)) for g in gammas]) for n in result.params["formula_ns"]}
    fig = plots.curves(
        gammas * (1 - rho),
        series,
        xlabel=r"$\gamma\,(1 - \rho)$",
        ylabel="cosine of two outputs",
        title="one layer at beta = gamma log n",
        points={"4 rho / (1 + 3 rho) at the critical gamma": ([1.0], [4 * rho / (1 + 3 * rho)])},
        hlines={"rho": rho, "1": 1.0},
    )
    return {"cosine_vs_gamma": fig}
