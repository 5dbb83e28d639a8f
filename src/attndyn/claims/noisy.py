"""The noisy Transformer on the circle: the Kuramoto transition at kappa = 2 (McKean-Vlasov dynamics; the noisy Kuramoto model at beta = 0)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import ive

from attndyn.claims import circle
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report
from attndyn.core import noise
from attndyn.theory import closed_forms as theory
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="noisy",
    paper_ref="the noisy transformer: a mean-field McKean-Vlasov equation on the sphere (attndyn's convention, stated in the claim)",
    title="Noise: the order parameter against kappa at beta = 0 on the circle, and the linear threshold at beta > 0",
    statement=(
        "dX_i = P_{X_i}((1/n) sum_j e^{beta <X_i, X_j>} X_j) dt + sqrt(2 / kappa) dW_i on S^1 (projected Euler-Maruyama, "
        "strong order 1/2). At beta = 0 this is the noisy Kuramoto model: the uniform state is the only stationary state for "
        "kappa <= 2; above, the stationary order parameter solves R = I_1(kappa R) / I_0(kappa R). Reported: the time- and "
        "seed-averaged order parameter of the particles against that prediction (finite n leaves R ~ n^{-1/2} below the "
        "threshold and rounds the transition). Drawn: the linear threshold kappa_c(beta) = min_l l^2 / lambda_l(beta) "
        "of the linearisation of arXiv:2410.23228 (USA rates against diffusion l^2 / kappa), which is 2 at beta = 0."
    ),
    hypotheses="beta = 0, d = 2, n = 256 (quick 128), 4 seeds (quick 2), dt = 0.05, t in [0, 40] (quick 20), averages over the last half.",
    kind="report",
)


class Config(ExperimentConfig):
    kappas: list[float] = [0.5, 1.0, 1.5, 2.5, 3.0, 4.0, 6.0]
    n: int = 256
    seeds: int = 4
    T: float = 40.0
    dt: float = 0.05


QUICK = {"n": 128, "seeds": 2, "T": 20.0, "kappas": [1.0, 1.5, 3.0, 4.0, 6.0]}


def stationary_order(kappa: float) -> float:
    """The stable solution of R = I_1(kappa R) / I_0(kappa R) (0 for kappa <= 2)."""
    if kappa <= 2:
        return 0.0
    return float(brentq(lambda r: ive(1, kappa * r) / ive(0, kappa * r) - r, 1e-9, 1.0 - 1e-12))


def threshold(beta: float, ls: int = 40) -> float:
    """kappa_c(beta) = min_l l^2 / lambda_l(beta) on the circle (USA rates); 2 at beta = 0."""
    if beta == 0:
        return 2.0
    ls_ = np.arange(1, ls + 1)
    return float((ls_**2 / theory.growth_rates(beta, 2, ls_, usa=True)).min())


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    ts = np.linspace(0.0, config.T, round(config.T / 1.0) + 1)
    R = np.empty((len(config.kappas), len(ts)))
    for k, kappa in enumerate(config.kappas):
        theta0 = rng.uniform(0, 2 * math.pi, (config.seeds, config.n))
        _, xs = noise.simulate_sde(circle.model(0.0, usa=True), circle.to_plane(theta0), ts, kappa=kappa, dt=config.dt, seed=int(rng.integers(2**31)))
        R[k] = circle.amplitudes(circle.angles(xs), np.array([1]))[..., 0].mean(-1)  # (T,) seed-averaged
    arrays = {"kappas": np.array(config.kappas), "ts": ts, "R": R}
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    ts = arrays["ts"]
    late = ts >= ts[-1] / 2
    measured = arrays["R"][:, late].mean(1)
    predicted = np.array([stationary_order(k) for k in arrays["kappas"]])
    above = arrays["kappas"] >= 3
    below = arrays["kappas"] <= 1.5
    checks = {
        "kappa >= 3: max |R_measured - R_predicted|": report(float(np.abs(measured - predicted)[above].max()) if above.any() else float("nan")),
        "kappa <= 1.5: max R_measured (finite-n floor ~ sqrt(pi / (4 n)))": report(
            float(measured[below].max()) if below.any() else float("nan"), f"sqrt(pi/(4n)) = {math.sqrt(math.pi / (4 * config.n)):.3f}"
        ),
        "linear threshold kappa_c(beta) at beta = 0, 1, 4": report(threshold(0.0), f"{threshold(1.0):.3f}, {threshold(4.0):.3f}"),
    }
    return checks, {"measured": measured.tolist(), "predicted": predicted.tolist()}


def figures(result: Result) -> dict:
    a = result.arrays
    fine = np.linspace(0.3, max(8.0, a["kappas"].max()), 300)
    betas = np.linspace(0.0, 10.0, 101)
    return {
        "order_vs_kappa": plots.curves(
            fine,
            {"R = I_1(kappa R) / I_0(kappa R)": [stationary_order(k) for k in fine]},
            xlabel=r"$\kappa$",
            ylabel="stationary order parameter R",
            title=f"noisy Kuramoto (beta = 0), n = {result.params['n']}",
            points={"particles (time and seed average)": (a["kappas"], result.info["measured"])},
        ),
        "threshold_vs_beta": plots.curves(
            betas,
            {"kappa_c(beta) = min_l l^2 / lambda_l(beta)": [threshold(b) for b in betas]},
            xlabel=r"$\beta$",
            ylabel=r"$\kappa_c$",
            title="linear instability of the uniform state with noise (USA, S^1)",
        ),
    }
