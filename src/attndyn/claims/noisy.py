"""The noisy Transformer on the circle: the Kuramoto transition at kappa = 2 (McKean-Vlasov dynamics; the noisy Kuramoto model at beta = 0)."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, field_validator
from scipy.optimize import brentq
from scipy.special import ive
from scipy.stats import t as student_t

from attndyn.claims import circle
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every_within, report
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
        "kappa <= 2; above, the stationary order parameter solves R = I_1(kappa R) / I_0(kappa R). At beta = 0 the n-particle "
        "SDE is a gradient flow on the torus with potential -n R^2 / 2, so its stationary law is exactly the Gibbs measure "
        "exp(kappa n R^2 / 2) dtheta: E_n R = int r p_n(r) e^{kappa n r^2 / 2} dr / int p_n(r) e^{kappa n r^2 / 2} dr, with "
        "p_n the law of |(1/n) sum e^{i theta_j}| for uniform angles, here by its saddle point (the von Mises tilt), exact to "
        "O(1/n^2). Above the threshold it is R(kappa) plus the O(1/n) term; below it is the finite-n floor (the linear "
        "sqrt(pi / (4 n (1 - kappa / 2))), less a few per cent that the nonlinearity saturates). Judged at every kappa: "
        "each run integrates the same Brownian paths at dt and dt / 2, and |R(dt / 2) - E_n R(kappa)| is within its budget, "
        "derived in the run: the step error measured by halving (|mean of R(dt) - R(dt / 2)| plus its Student-t band) plus "
        "the sampling error of the dt / 2 window means over independent replicas (Student-t, Bonferroni over the kappas at "
        "a family-wise 1e-3). Each replica starts in the predicted stationary state (uniform below the threshold, von Mises "
        "above), discards burn-in relaxation times 1 / |1/kappa - 1/2| and averages over the window. Reported: the step "
        "error against the first-order prediction kappa_eff = kappa E[1 / (1 + s^2 Z^2)] s^2 / E[atan(s Z)^2] of the exact "
        "chain theta' = theta + atan(drift dt + s Z), s^2 = 2 dt / kappa, and the measured floor against the linear one. "
        "Drawn: the linear threshold kappa_c(beta) = min_l l^2 / lambda_l(beta) of the linearisation of arXiv:2410.23228 "
        "(USA rates against diffusion l^2 / kappa), which is 2 at beta = 0."
    ),
    hypotheses=(
        "beta = 0, d = 2, n = 128 (quick 64), 32 replicas, dt = 0.05 and 0.025 on the same Brownian paths, "
        "a window of 40 (quick 20) after 3 relaxation times."
    ),
    kind="pass/fail",
)


class Config(ExperimentConfig):
    kappas: list[float] = [0.5, 1.0, 1.5, 3.0, 4.0, 6.0, 8.0]
    n: int = Field(128, ge=2)
    seeds: int = Field(32, ge=3)  # independent replicas: their spread is the sampling error (Student-t with seeds - 1 dof)
    window: float = Field(40.0, gt=0)
    burn_in: float = Field(3.0, ge=0)  # relaxation times discarded before the window
    dt: float = Field(0.05, gt=0)  # the coarse step; the judged run takes dt / 2 on the same paths
    family_alpha: float = Field(1e-3, gt=0, lt=1)  # the false-alarm rate of one run, over all kappas
    # sensitivity knobs (1 in the claim): the dynamics run at kappa * kappa_factor and V = coupling I, the predictions at kappa
    kappa_factor: float = Field(1.0, gt=0)
    coupling: float = Field(1.0, gt=0)

    @field_validator("kappas")
    @classmethod
    def _off_the_threshold(cls, kappas: list[float]) -> list[float]:
        for k in kappas:
            if not (math.isfinite(k) and k > 0 and k != 2):
                raise ValueError(f"kappa = {k!r} must be a finite number > 0 other than 2 (at 2 the relaxation time is infinite)")
        return kappas


QUICK = {"n": 64, "seeds": 32, "window": 20.0, "kappas": [1.0, 1.5, 3.0, 4.0, 6.0]}
SAVE_EVERY = 0.5
CHUNK = 10.0  # time per drawn block of Brownian increments (bounds the memory of the coupled runs)


def effective_kappa(kappa: float, dt: float) -> float:
    """kappa_eff of projected Euler-Maruyama on S^1 at beta = 0 (see the claim): the chain theta' = theta +
    atan(drift dt + s Z) has, to first order in the drift, coupling E[1 / (1 + s^2 Z^2)] and diffusion
    E[atan(s Z)^2] / (2 dt) (Gauss-Hermite quadrature over Z)."""
    z, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    s = math.sqrt(2 * dt / kappa)
    coupling = float((w / (1 + (s * z) ** 2)).sum())
    diffusion = float((w * np.arctan(s * z) ** 2).sum()) / (2 * dt)
    return coupling / diffusion


def floor(kappa: float, n: int) -> float:
    """The linear floor below the threshold: the first Fourier mode is a complex Ornstein-Uhlenbeck process with
    E|z|^2 = 1 / (n (1 - kappa / 2)), so R = |z| is Rayleigh with mean sqrt(pi E|z|^2 / 4)."""
    return math.sqrt(math.pi / (4 * n * (1 - kappa / 2))) if kappa < 2 else math.nan


def gibbs_order(kappa: float, n: int, points: int = 40_001) -> float:
    """E R under the n-particle stationary law at beta = 0, the Gibbs measure exp(kappa n R^2 / 2) on the torus.

    The density of z = (1/n) sum e^{i theta_j} (uniform angles) at |z| = r is, by the saddle point of its von Mises
    tilt lambda (I_1(lambda) / I_0(lambda) = r), n exp(-n (lambda r - log I_0(lambda))) / (2 pi sqrt(det C)) (1 + O(1/n)),
    with C = diag(1 - r / lambda - r^2, r / lambda) the tilted covariance of one e^{i theta}; the O(1/n) factor is smooth
    in r, so E R is exact to O(1/n^2) (below the threshold it reduces to the Rayleigh floor as kappa n r^2 is small)."""
    lam = np.concatenate([np.linspace(1e-6, 2.0, 2001), np.geomspace(2.001, 1e5, 6000)])
    ratio = ive(1, lam) / ive(0, lam)
    r = np.linspace(1e-6, ratio[-1], points)
    L = np.interp(r, ratio, lam)
    a = ive(1, L) / ive(0, L)
    log_i0 = np.log(ive(0, L)) + L
    logw = n * (kappa * r**2 / 2 - L * r + log_i0) + np.log(r) - 0.5 * np.log((1 - a / L - a**2) * (a / L))
    w = np.exp(logw - logw.max())
    return float((r * w).sum() / w.sum())


def relaxation_time(kappa: float) -> float:
    """1 / |1/kappa - 1/2|: the first mode's linear rate about the uniform state (the slowest scale near kappa = 2)."""
    return 1.0 / abs(1.0 / kappa - 0.5)


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


def coupled_runs(kappa: float, config: Config, theta0: np.ndarray, ts: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """R(t) ``(T, seeds)`` at dt and at dt / 2 on the same Brownian paths (the dt / 2 increments, summed in pairs
    for dt), drawn in blocks of CHUNK time."""
    model = circle.model(0.0, usa=True, coupling=config.coupling)
    k_dyn, fine = kappa * config.kappa_factor, config.dt / 2
    xs = {config.dt: circle.to_plane(theta0), fine: circle.to_plane(theta0)}
    Rs = {config.dt: [], fine: []}
    per_chunk = round(CHUNK / SAVE_EVERY)
    for c, lo in enumerate(range(0, len(ts) - 1, per_chunk)):
        seg = ts[lo : lo + per_chunk + 1] - ts[lo]
        inc = noise.brownian_increments(seed + c, round(seg[-1] / fine), theta0.shape + (2,), fine)
        for step, path in ((fine, inc), (config.dt, noise.coarsen(inc, 2))):
            _, x = noise.simulate_sde(model, xs[step], seg, kappa=k_dyn, dt=step, increments=path)
            R = circle.amplitudes(circle.angles(x), np.array([1]))[..., 0]
            Rs[step].append(R if lo == 0 else R[1:])
            xs[step] = x[-1]
    return np.concatenate(Rs[config.dt]), np.concatenate(Rs[fine])


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    out = {}
    for k, kappa in enumerate(config.kappas):
        start = config.burn_in * relaxation_time(kappa)
        steps = math.ceil((start + config.window) / SAVE_EVERY)
        ts = np.arange(steps + 1) * SAVE_EVERY
        R0 = stationary_order(kappa)
        # the predicted stationary state: uniform below the threshold, von Mises(kappa R) above
        shape = (config.seeds, config.n)
        theta0 = rng.vonmises(0.0, kappa * R0, shape) if R0 > 0 else rng.uniform(0, 2 * math.pi, shape)
        coarse, fine = coupled_runs(kappa, config, theta0, ts, int(rng.integers(2**31)))
        out[f"ts{k}"], out[f"R{k}"], out[f"R_half{k}"] = ts, coarse, fine
        out[f"from{k}"] = np.float64(ts[int(np.searchsorted(ts, start))])
    arrays = {"kappas": np.array(config.kappas)} | out
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    kappas = arrays["kappas"]
    m = len(kappas)
    rows = []
    for k, kappa in enumerate(kappas):
        inside = arrays[f"ts{k}"] >= arrays[f"from{k}"]
        coarse, fine = arrays[f"R{k}"][inside].mean(0), arrays[f"R_half{k}"][inside].mean(0)  # window means per replica
        S = fine.size
        q = float(student_t.ppf(1 - config.family_alpha / (2 * m), S - 1)) if S > 1 else math.nan
        step = coarse - fine  # the step error of the dt / 2 run, to first order (paired: the same paths)
        se_fine, se_step = fine.std(ddof=1) / math.sqrt(S), step.std(ddof=1) / math.sqrt(S)
        predicted = gibbs_order(float(kappa), config.n)
        budget = abs(step.mean()) + q * se_step + q * se_fine
        eff = [effective_kappa(float(kappa), h) for h in (config.dt, config.dt / 2)]
        step_eff = gibbs_order(eff[0], config.n) - gibbs_order(eff[1], config.n)
        rows.append((float(kappa), fine.mean(), predicted, budget, step.mean(), se_step, se_fine, q, step_eff))
    rows = np.array(rows)
    kap, meas, pred, budget, step, se_step, se_fine, q, step_eff = rows.T
    gap = np.abs(meas - pred)
    checks = {}
    for label, sel in (("above the threshold (kappa > 2)", kap > 2), ("below the threshold (kappa < 2)", kap < 2)):
        idx = np.flatnonzero(sel)
        checks[f"{label}: |R(dt / 2) - E_n R(kappa)| / its budget, every kappa"] = every_within(
            gap[idx] / budget[idx],
            0.0,
            1.0,
            "E_n R from the n-particle Gibbs law (R(kappa) plus the O(1/n) term above the threshold, the floor below); "
            "budget = |step error by halving| + t (its SE) + t (SE of the window means over replicas), t = "
            f"{q[0]:.2f}: "
            + ", ".join(
                f"kappa = {kap[i]:g}: {meas[i]:.4f} vs {pred[i]:.4f} (gap {meas[i] - pred[i]:+.4f}, budget {budget[i]:.4f} = "
                f"{abs(step[i]):.4f} + {q[i] * se_step[i]:.4f} + {q[i] * se_fine[i]:.4f})"
                for i in idx
            ),
            cases=[f"kappa = {kap[i]:g}" for i in idx],
            detects=(
                "at the quick size: kappa off by 10 % either way (the dynamics at 1.1 kappa or kappa / 1.1)"
                if label.startswith("above")
                else "at the quick size: the noise's factor 2 dropped (sqrt(1 / kappa) dW, the dynamics at 2 kappa)"
            ),
        )
    checks["step error R(dt) - R(dt / 2): measured vs kappa_eff's first-order prediction"] = report(
        float(np.abs(step).max()),
        ", ".join(f"kappa = {k:g}: {s:+.4f} +- {e:.4f} vs {p:+.4f}" for k, s, e, p in zip(kap, step, se_step, step_eff, strict=True)),
    )
    below = kap < 2
    floors = np.array([floor(k, config.n) for k in kap])
    checks["below the threshold: R(dt / 2) / the linear floor sqrt(pi / (4 n (1 - kappa / 2)))"] = report(
        float((meas / floors)[below].max()) if below.any() else float("nan"),
        ", ".join(
            f"kappa = {k:g}: {r:.3f} +- {e:.3f} (Gibbs: {g:.3f})"
            for k, r, e, g in zip(kap[below], (meas / floors)[below], (se_fine / floors)[below], (pred / floors)[below], strict=True)
        ),
    )
    checks["linear threshold kappa_c(beta) at beta = 0, 1, 4"] = report(threshold(0.0), f"{threshold(1.0):.3f}, {threshold(4.0):.3f}")
    info = {"measured": meas.tolist(), "predicted": pred.tolist(), "budget": budget.tolist(), "step_error": step.tolist()}
    info |= {"step_error_se": se_step.tolist(), "sampling_se": se_fine.tolist(), "t_quantile": q.tolist(), "step_error_kappa_eff": step_eff.tolist()}
    return checks, info


def figures(result: Result) -> dict:
    a = result.arrays
    fine = np.linspace(0.3, max(8.0, a["kappas"].max()), 300)
    betas = np.linspace(0.0, 10.0, 101)
    return {
        "order_vs_kappa": plots.curves(
            fine,
            {
                "R = I_1(kappa R) / I_0(kappa R)": [stationary_order(k) for k in fine],
                f"E_n R, the n = {result.params['n']} Gibbs law": (fine[::4], [gibbs_order(k, result.params["n"], 4001) for k in fine[::4]]),
            },
            xlabel=r"$\kappa$",
            ylabel="stationary order parameter R",
            title=f"noisy Kuramoto (beta = 0), n = {result.params['n']}",
            points={"particles at dt / 2 (stationary window, replica average)": (a["kappas"], result.info["measured"])},
        ),
        "threshold_vs_beta": plots.curves(
            betas,
            {"kappa_c(beta) = min_l l^2 / lambda_l(beta)": [threshold(b) for b in betas]},
            xlabel=r"$\beta$",
            ylabel=r"$\kappa_c$",
            title="linear instability of the uniform state with noise (USA, S^1)",
        ),
    }
