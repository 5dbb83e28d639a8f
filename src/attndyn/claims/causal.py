"""Causal attention on the sphere (Karagodin, Polyanskiy, Rigollet, arXiv 2411.04990)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from scipy.integrate import solve_ivp

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every, every_within, fraction, report, unit_rows
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="causal",
    paper_ref="arXiv:2411.04990 (Karagodin, Polyanskiy, Rigollet, NeurIPS 2024): causal masking, V = I",
    title="Causal masking: every token goes to the first",
    statement=(
        "With a causal mask (token k attends to j <= k) on the sphere and V = I, the first token never moves and, for "
        "(almost) every initialization, every token converges to x_1(0). Judged for Q = K = I: the first token's drift "
        "(to rounding), every token within 1e-6 of x_1(0) at T, and the second token exactly: it attends to x_1 and itself, "
        "so its angle to x_1 solves theta' = -sin(theta) e^{beta cos theta} / (e^{beta cos theta} + e^beta), judged at every "
        "save within 3x its measured integration error (the run against the same run at 100x tighter tolerance)."
    ),
    hypotheses="S^{d-1}, d = 3, n = 20, V = I, beta = 1; Q = K = I (judged) and random Q, K (reported: the convergence is slow).",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 20
    seeds: int = 20
    T: float = 100.0
    T_random: float = 300.0
    # the particle runs only: 1, 1 and causal are the claim; the sensitivity tests change them
    beta_factor: float = 1.0
    coupling: float = 1.0
    mask: Literal["causal", "full"] = "causal"
    rtol: float = 1e-9


QUICK = {"T_random": 150.0}
TOL = 1e-6
ROUNDING = 64 * float(np.finfo(np.float64).eps)
# The reference ODE (SciPy DOP853) runs at rtol 1e-13. At rtol 1e-12 its own error reached 6.1e-11 (against a
# quadrature of the separable ODE, seeds 100-129 at the quick size), 60x the 1e-12 the budget allowed it, and it
# was the largest error in the check at seeds 110, 113, 118 and 121 (0.55-0.61 of the budget where the run
# against a tight reference sat at 0.31-0.33). At rtol 1e-13 its error is 0.4-1.6e-12 there; the budget adds it
# as measured in the judge, by the same ODE at 10x looser tolerance (REFERENCE_RTOL x 10), whose difference
# bounds the tighter run's error (it is the looser run's error, 20-170x the tighter one's where measured).
REFERENCE_RTOL = 1e-13
INTEGRATION_TOL = 1.5e-9  # 3x the measured integration error of token 2 (4.8e-10 at rtol 1e-9)


def token2_angle(beta: float, theta0: float, ts: np.ndarray, rtol: float = REFERENCE_RTOL) -> np.ndarray:
    """The angle between the second and the first token, which sees only x_1 and itself (V = Q = K = I)."""

    def f(t, th):
        e = math.exp(beta * (math.cos(th[0]) - 1.0))  # e^{beta cos} / e^beta, overflow-free
        return [-math.sin(th[0]) * e / (e + 1.0)]

    return solve_ivp(f, (0.0, float(ts[-1])), [theta0], t_eval=ts, method="DOP853", rtol=rtol, atol=rtol * 1e-2).y[0]


def angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The angle between unit rows ``a`` and ``b`` from atan2 (accurate near 0, where arccos loses half the digits)."""
    return np.arctan2(np.linalg.norm(np.cross(a, b), axis=-1), np.einsum("...d,...d->...", a, b))


LABELS = ("Q = K = I", "random Q, K")


def run(config: Config) -> Result:
    """Simulate both series; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    arrays = {}
    identity = ad.Weights(np.eye(3), np.eye(3), config.coupling * np.eye(3))
    for k, W in enumerate((identity, ad.Weights(rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), np.eye(3)))):
        T = config.T if k == 0 else config.T_random
        model = ad.Model(W, beta=1.0 * config.beta_factor, geometry="sphere", mask=config.mask)  # beta = 1 in the claim
        x0 = unit_rows(rng.normal(size=(config.seeds, config.n, 3)))
        ts = np.linspace(0, T, 101)
        step = ad.AdaptiveStep(rtol=config.rtol, atol=config.rtol * 1e-2)
        xs = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=step, max_steps=10_000_000).xs.numpy()
        arrays |= {f"ts{k}": ts, f"x{k}": xs}
        if k == 0:  # the same run at 100x tighter tolerance: the integration error of token 2's angle, measured
            step = ad.AdaptiveStep(rtol=config.rtol * 1e-2, atol=config.rtol * 1e-4)
            fine = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=step, max_steps=10_000_000)
            arrays["fine_angle"] = angle(fine.xs.numpy()[:, :, 1], fine.xs.numpy()[:, :, 0])
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    checks = {}
    for k, label in enumerate(LABELS):
        ts, xs = arrays[f"ts{k}"], arrays[f"x{k}"]
        drift = np.abs(xs[:, :, 0] - xs[0, :, 0]).max((0, 2))  # per seed
        gap = 1 - np.einsum("sid,sd->si", xs[-1], xs[0, :, 0]).min(1)
        checks[f"{label}: x_1 stationary, max_t |x_1(t) - x_1(0)|, every seed"] = every_within(
            drift,
            0.0,
            ROUNDING,
            "the budget is rounding (64 eps)",
            cases=[f"seed {s}" for s in range(len(drift))],
            detects="the full mask in place of the causal one",
        )
        if k == 0:
            checks[f"{label}: every token within 1e-6 of x_1(0) at T = {ts[-1]:g} (1 - <x_k, x_1(0)>): failing seeds"] = every(
                gap <= TOL, detects="V = 0.1 I (tokens ten times slower)"
            )
            theta = angle(xs[:, :, 1], xs[:, :, 0])  # (T, S)
            exact = np.stack([token2_angle(1.0, float(theta[0, s]), ts) for s in range(theta.shape[1])], 1)
            looser = np.stack([token2_angle(1.0, float(theta[0, s]), ts, 10 * REFERENCE_RTOL) for s in range(theta.shape[1])], 1)
            err = np.abs(theta - exact)
            reference = float(np.abs(exact - looser).max())  # bounds the reference's own error (see REFERENCE_RTOL)
            integration = np.abs(theta - arrays["fine_angle"])
            checks[f"{label}: token 2's integration error (against the same run at 100x tighter tolerance), every seed and save"] = (
                every_within(integration[1:].ravel(), 0.0, INTEGRATION_TOL, "3x the measured 4.8e-10", detects="rtol 1e-5 instead of 1e-9",
                             cases=[f"t = {t:g}, seed {s}" for t in ts[1:] for s in range(integration.shape[1])])
            )  # fmt: skip
            budget = 3.0 * (float(integration.max()) + reference)
            checks[f"{label}: token 2's angle to x_1 against its exact ODE, every seed and save"] = every_within(
                err[1:].ravel(), 0.0, budget,
                f"budget = 3 x (the run against the same run at 100x tighter tolerance + the reference ODE at rtol {REFERENCE_RTOL:g} "
                f"against itself at 10x looser, {reference:.2g}) = {budget:.2g}",
                cases=[f"t = {t:g}, seed {s}" for t in ts[1:] for s in range(theta.shape[1])], detects="beta off by 1e-6 (relative)",
            )  # fmt: skip
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
