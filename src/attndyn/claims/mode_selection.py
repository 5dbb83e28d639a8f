"""Instability of the uniform state on the circle and the number of emerging clusters
(Bruno, Pasqualotto, Agazzi, arXiv 2410.23228)."""

from __future__ import annotations

import math

import numpy as np

from attndyn.claims import circle, s2
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every_within, one_of, report, within
from attndyn.theory import closed_forms as theory
from attndyn.theory import meanfield
from attndyn.theory import meanfield_sphere as ms
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="mode-selection",
    paper_ref="arXiv:2410.23228 (Bruno, Pasqualotto, Agazzi), Figure 4 and the linearisation",
    title="The uniform state's growth rates and the number of emerging clusters",
    statement=(
        "Linearised about the uniform measure on S^1, a mode-k perturbation grows at lambda_k = k^2 I_k(beta) / beta (USA) or "
        "k^2 I_k(beta) / (beta I_0(beta)) (SA), and the fastest mode k_max(beta) sets the number of clusters that first emerge. "
        "Judged: (i) particles (n in the thousands, a deterministic perturbation of size 1e-6 in modes 1-12) and (ii) the "
        "mean-field solver (perturbation 1e-8) grow at lambda_k, for SA and USA and every beta, on every mode whose rate is "
        "at least 25 % of the fastest, within 3x the error each run measures: the fitted rate's error is the nonlinear "
        "coupling of the modes, proportional to the perturbation, so a second run from half the perturbation measures it "
        "(e = 2 (r(delta) - r(delta/2))); the modes down to 1 % are reported; (iii) from white noise at beta = 5 the "
        "seed-averaged spectrum peaks at k_max(5) = 3 when the perturbation first reaches amplitude 1/4 (three clusters "
        "emerge), where the run can separate mode 3 from its neighbours: the linear theory puts mode k below mode 3 by "
        "2 (lambda_3 - lambda_k) t_e in log power at the emergence time t_e, and a finite sample of systems draws that "
        "log ratio with a spread sigma_k the run measures (the standard error of the log ratio of the seed-averaged powers "
        "over its systems); a mode with 2 (lambda_3 - lambda_k) t_e < 3 sigma_k is not resolved from mode 3 and is "
        "accepted as the peak too (at beta = 5, lambda_4 is 12 % below lambda_3 and sigma_k ~ sqrt(2 / S) for S systems: "
        "resolving mode 4 takes some 150 systems, which the quick size runs). On S^2 (d = 3) a degree-l zonal perturbation grows at "
        "l (l + 1) K_l / (beta K_0) (SA) or l (l + 1) K_l / beta (USA), K_l = sqrt(pi / (2 beta)) I_{l + 1/2}(beta). "
        "Judged: (iv) particles in d = 3 (the spherical Fibonacci "
        "lattice with a zonal displacement of size 1e-4 in degrees 1-12, the lattice's own discrepancy cancelled by the "
        "antithetic pair +-1e-4) grow at these rates within 3x the error the run measures (halving the displacement, plus "
        "the lattice's ~ l^2 / n^2 error measured at n / 2), and (v) the zonal Legendre-Galerkin mean-field solver within 3x "
        "the error measured by halving its perturbation, on every degree whose rate is at least 25 % of the fastest. "
        "Drawn: the emerging number against k_max(beta) over a range of beta, and the S^2 rates."
    ),
    hypotheses=(
        "Q = K = V = I on S^1; rates fitted by least squares of log |(1/n) sum_j e^{i k theta_j}| over t in [0, 2 / lambda_max] "
        "(RK4, 20 steps); mean field on M = 512 points, Dopri5 at rtol 1e-12; white noise: i.i.d. uniform angles, "
        "judged_seeds independent systems at the judged beta. "
        "S^2: n = 2048 particles, RK4 with 20 steps over 2 / lambda_max; the zonal solver at degree 64, "
        "Dopri5 at rtol 1e-12, from 1 + 1e-8 sum_l P_l."
    ),
    kind="pass/fail",
)


class Config(ExperimentConfig):
    betas: list[float] = [1.0, 5.0, 10.0]
    n: int = 2048
    modes: int = 12
    delta: float = 1e-6  # particle perturbation
    eps: float = 1e-8  # mean-field perturbation
    M: int = 512
    steps: int = 20
    # judged: the modes whose rate is at least this share of the fastest; slower ones are reported. The error of
    # the fitted rates is the nonlinear coupling of the modes, proportional to the perturbation's size and
    # largest for slow modes; each run measures it by halving the perturbation (SAFETY x that is the budget)
    rate_floor: float = 0.25
    report_floor: float = 1e-2
    noise_betas: list[float] = [1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0, 30.0]
    noise_n: int = 1024
    noise_seeds: int = 16
    noise_dt: float = 0.2
    judged_beta: float = 5.0
    # systems at the judged beta: the peak is resolved from mode k where 2 (lambda_kmax - lambda_k) t_e >= 3 sigma_k,
    # sigma_k ~ sqrt(2 / judged_seeds) (the seed average of exponential powers); at beta = 5 mode 4 needs ~ 150
    judged_seeds: int = 64
    emerged: float = 0.25  # amplitude at which a mode has "emerged"
    sphere_betas: list[float] = [1.0, 5.0, 10.0]
    sphere_n: int = 2048
    sphere_degrees: int = 12
    sphere_delta: float = 1e-4
    sphere_L: int = 64
    sphere_particle_floor: float = 0.25
    sphere_meanfield_floor: float = 0.25
    # multiply beta in the particles / the solver / the white-noise runs only: 1 is the claim; the sensitivity tests change them
    beta_factor: float = 1.0
    meanfield_beta_factor: float = 1.0
    noise_beta_factor: float = 1.0
    sphere_beta_factor: float = 1.0
    sphere_meanfield_beta_factor: float = 1.0


QUICK = {
    "n": 1024,
    "betas": [1.0, 5.0],
    "noise_betas": [2.0, 5.0, 10.0],
    "noise_n": 256,
    "noise_seeds": 32,
    "judged_seeds": 160,
    "sphere_betas": [1.0, 5.0],
    "sphere_n": 1024,
}


RATE_DETECTS = {
    "particle": "beta off by 0.1 % in the particles",
    "meanfield": "beta off by 1e-5 (relative) in the solver",
    "S^2 particle": "beta off by 0.5 % in the S^2 particles",
    "S^2 meanfield": "beta off by 1e-5 (relative) in the S^2 solver",
}
# at the quick size (160 systems of 256 particles at the judged beta): beta x 0.6 (beta = 3: two clusters), where the
# run resolves mode 3 from mode 2 with room; beta x 1.6 (beta = 8: k_max = 4) failed at seed 0 only, and an independent
# referee's linear-theory estimate puts mode 4's gap (0.33) at the edge of 3 sigma (0.34): not a reliable detection
NOISE_DETECTS = "beta x 0.6 in the white-noise runs at the quick size (beta = 3: two clusters); beta x 1.6 (k_max = 4) only at the edge"
RESOLVE_Z = 3.0  # mode k is resolved from k_max when the predicted log-power gap is at least this many measured sigma_k


SAMPLE_MODES = 12  # modes whose per-system power is kept at the judged beta (slower ones are never near the peak)

SAFETY = 3.0  # a measured error's budget: this many times the error each run measures by halving the perturbation


def measured_rate_errors(ts: np.ndarray, amp: np.ndarray, amp_half: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fitted rates, |fitted / lambda - 1|, and the error the run measures: the fitted rate's error is
    proportional to the perturbation (the modes' nonlinear coupling), so e(delta) = 2 (r(delta) - r(delta / 2))."""
    fitted = circle.slopes(ts, np.log(amp))
    half = circle.slopes(ts, np.log(amp_half))
    return fitted, np.abs(fitted / lam - 1), 2 * np.abs(fitted - half) / lam


def phases(ks: np.ndarray) -> np.ndarray:
    return 0.7 * ks  # fixed, distinct phases: no mode is special


def particle_start(n: int, ks: np.ndarray, delta: float) -> np.ndarray:
    """Angles of n particles: the uniform grid displaced by delta sum_k sin(k phi + phase_k) / k."""
    phi = 2 * math.pi * (np.arange(n) + 0.5) / n
    return phi + delta * sum(np.sin(k * phi + p) / k for k, p in zip(ks, phases(ks), strict=True))


def noise_horizon(beta: float, n: int) -> float:
    """Time for white noise (~ n^{-1/2}) to grow to order one at the fastest rate, plus margin."""
    fastest = theory.growth_rates(beta, 2, np.arange(1, 40)).max()
    return math.log(n) / fastest + 4.0


def run(config: Config) -> Result:
    ks = np.arange(1, config.modes + 1)
    B = len(config.betas)
    arrays = {"betas": np.array(config.betas), "ks": ks}
    shape_p, shape_m = (B, 2, config.steps + 1), (B, 2, 21)
    p_ts, m_ts = np.empty(shape_p), np.empty(shape_m)
    # every rate is fitted twice, from a perturbation of the claim's size and of half of it: the fitted
    # rate's error is the modes' nonlinear coupling, proportional to the perturbation, so the two differ by
    # half the error, which each run measures (as the step-halving budgets do)
    p_amp = {h: np.empty((*shape_p, len(ks))) for h in (1, 2)}
    m_amp = {h: np.empty((*shape_m, len(ks))) for h in (1, 2)}
    for b, beta in enumerate(config.betas):
        for u, usa in enumerate((False, True)):
            T = 2.0 / theory.growth_rates(beta, 2, ks, usa=usa).max()
            for h in (1, 2):
                ts, theta = circle.run(
                    particle_start(config.n, ks, config.delta / h)[None],
                    beta * config.beta_factor,
                    T,
                    dt=T / config.steps,
                    saves=config.steps + 1,
                    usa=usa,
                    engine=config,
                )
                p_ts[b, u], p_amp[h][b, u] = ts, circle.amplitudes(theta[:, 0], ks)
                rho0 = meanfield.initial_density("uniform", config.M, modes=ks.tolist(), amplitude=config.eps / h, phases=phases(ks).tolist())
                sol = meanfield.solve_circle(rho0, np.linspace(0, T, 21), beta=beta * config.meanfield_beta_factor, usa=usa, rtol=1e-12, atol=1e-16)
                m_ts[b, u] = sol.ts
                m_amp[h][b, u] = np.stack([meanfield.mode_amplitude(sol.rho, int(k)) for k in ks], -1)
    arrays.update(particle_ts=p_ts, particle_amp=p_amp[1], particle_amp_half=p_amp[2], meanfield_ts=m_ts)
    arrays.update(meanfield_amp=m_amp[1], meanfield_amp_half=m_amp[2])
    arrays.update(sphere(config))

    # white noise: seed-averaged power spectrum over time, per beta
    rng = np.random.default_rng(config.seed)
    K = 40
    wk = np.arange(1, K + 1)
    horizons = [noise_horizon(beta, config.noise_n) for beta in config.noise_betas]
    saves = 61
    power = np.empty((len(config.noise_betas), saves, K))
    times = np.empty((len(config.noise_betas), saves))
    final = np.empty((len(config.noise_betas), config.noise_seeds, config.noise_n))
    sample_power = np.empty((saves, 0, SAMPLE_MODES))
    for b, beta in enumerate(config.noise_betas):
        judged = beta == config.judged_beta
        theta0 = rng.uniform(0, 2 * math.pi, (config.judged_seeds if judged else config.noise_seeds, config.noise_n))
        dt = horizons[b] / round(horizons[b] / config.noise_dt)
        ts, theta = circle.run(theta0, beta * config.noise_beta_factor, horizons[b], dt=dt, saves=saves, engine=config)
        times[b] = ts[np.linspace(0, len(ts) - 1, saves).round().astype(int)] if len(ts) != saves else ts
        idx = np.searchsorted(ts, times[b])
        each = circle.amplitudes(theta[idx], wk) ** 2  # (saves, systems, K)
        power[b] = each.mean(1)
        final[b] = theta[-1, : config.noise_seeds]
        if judged:  # every system's power in the slow modes: the sampling spread of the peak is measured from them
            sample_power = each[..., :SAMPLE_MODES]
    arrays.update(noise_betas=np.array(config.noise_betas), noise_times=times, noise_power=power, noise_final=final)
    arrays.update(noise_sample_power=sample_power)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def sphere(config: Config) -> dict:
    """S^2 (d = 3): antithetic Fibonacci pairs through the engine and the zonal solver, per beta, SA and USA."""
    ls = np.arange(1, config.sphere_degrees + 1)
    B = len(config.sphere_betas)
    p_ts, m_ts = np.empty((B, 2, config.steps + 1)), np.empty((B, 2, 21))
    p_amp = {h: np.empty((B, 2, config.steps + 1, len(ls))) for h in (1, 2)}
    m_amp = {h: np.empty((B, 2, 21, len(ls))) for h in (1, 2)}
    p_coarse = np.empty_like(p_amp[1])
    for b, beta in enumerate(config.sphere_betas):
        for u, usa in enumerate((False, True)):
            T = 2.0 / theory.growth_rates(beta, 3, ls, usa=usa).max()
            for h in (1, 2):  # the claim's perturbation and half of it (see run)
                x0 = s2.zonal_pair(config.sphere_n, ls, config.sphere_delta / h)
                ts, xs = s2.run(x0, beta * config.sphere_beta_factor, T, dt=T / config.steps, saves=config.steps + 1, usa=usa, engine=config)
                moments = ms.particle_moments(xs, ls)  # (T, 2, L): half the antithetic difference
                p_ts[b, u], p_amp[h][b, u] = ts, np.abs(moments[:, 0] - moments[:, 1]) / 2
                if h == 1:  # the lattice's own error (~ l^2 / n^2, not proportional to delta): the same at n / 2
                    x0 = s2.zonal_pair(config.sphere_n // 2, ls, config.sphere_delta)
                    _, xs = s2.run(x0, beta * config.sphere_beta_factor, T, dt=T / config.steps, saves=config.steps + 1, usa=usa, engine=config)
                    moments = ms.particle_moments(xs, ls)
                    p_coarse[b, u] = np.abs(moments[:, 0] - moments[:, 1]) / 2
                a0 = ms.zonal_density("uniform", config.sphere_L, modes=ls.tolist(), amplitude=config.eps / h)
                sol = ms.solve_sphere(a0, np.linspace(0, T, 21), beta=beta * config.sphere_meanfield_beta_factor, usa=usa, rtol=1e-12, atol=1e-18)
                m_ts[b, u], m_amp[h][b, u] = sol.ts, np.abs(sol.coeffs[:, ls])
    return {"sphere_betas": np.array(config.sphere_betas), "sphere_ls": ls, "s2_particle_ts": p_ts, "s2_particle_amp": p_amp[1],
            "s2_particle_amp_half": p_amp[2], "s2_particle_amp_coarse": p_coarse, "s2_meanfield_ts": m_ts, "s2_meanfield_amp": m_amp[1],
            "s2_meanfield_amp_half": m_amp[2]}  # fmt: skip


def sphere_checks(arrays: dict, config: Config) -> tuple[dict, dict]:
    ls = arrays["sphere_ls"]
    checks, rates = {}, {}
    for source, floor, detects in (
        ("particle", config.sphere_particle_floor, RATE_DETECTS["S^2 particle"]),
        ("meanfield", config.sphere_meanfield_floor, RATE_DETECTS["S^2 meanfield"]),
    ):
        errors, measured, cases = [], [], []
        for b, beta in enumerate(arrays["sphere_betas"]):
            for u, usa in enumerate((False, True)):
                lam = theory.growth_rates(float(beta), 3, ls, usa=usa)
                ts = arrays[f"s2_{source}_ts"][b, u]
                fitted, err, est = measured_rate_errors(ts, arrays[f"s2_{source}_amp"][b, u], arrays[f"s2_{source}_amp_half"][b, u], lam)
                keep = lam >= floor * lam.max()
                if source == "particle":  # plus the lattice's error, ~ l^2 / n^2: e(n) = (r(n) - r(n/2)) / (1 - 4)
                    coarse = circle.slopes(ts, np.log(arrays["s2_particle_amp_coarse"][b, u]))
                    est = est + np.abs(fitted - coarse) / lam / 3
                errors.extend(err[keep])
                measured.extend(est[keep])
                cases.extend(f"beta = {beta:g} {'USA' if usa else 'SA'}, l = {deg}" for deg in ls[keep])
                rates[f"{source} beta={beta:g} {'USA' if usa else 'SA'}"] = fitted.tolist()
        name = "S^2 particles (d = 3)" if source == "particle" else "S^2 mean field (zonal solver)"
        tol = SAFETY * max(measured) if measured else 0.0
        checks[f"{name}: |fitted rate / lambda_l - 1|, every beta, SA and USA, degrees with lambda_l >= {floor:g} lambda_max"] = every_within(
            errors, 0.0, tol, f"budget {SAFETY:g} x the worst error measured in this run by halving the perturbation"
            + (" and n (the lattice's ~ l^2 / n^2)" if source == "particle" else "") + f" ({max(measured, default=0):.2g})",
            cases=cases, detects=detects
        )  # fmt: skip
    return checks, {"s2_rates": rates}


def emerging_count(power: np.ndarray, level: float) -> tuple[int, int]:
    """(mode, save index) of the seed-averaged spectrum's peak at the first save where it reaches ``level``^2."""
    top = power.max(1)
    reached = np.flatnonzero(top >= level**2)
    i = int(reached[0]) if reached.size else len(top) - 1
    return int(np.argmax(power[i]) + 1), i


def peak_resolution(sample_power: np.ndarray, i: int, t_e: float, beta: float) -> tuple[int, list[int], np.ndarray, np.ndarray]:
    """The modes the run cannot tell from k_max(beta) as the peak of the seed-averaged spectrum at save ``i``.

    Linear theory: every system's mode k grows by e^{2 lambda_k t}, so at t_e the seed-averaged log powers of
    k_max and k differ by gap_k = 2 (lambda_kmax - lambda_k) t_e plus the log ratio of the initial seed averages,
    a sampling fluctuation of the finite set of systems. Its spread sigma_k is measured at save ``i`` from the
    systems' own powers a_s (mode k_max) and b_s (mode k) by the delta method: Var(log mean a - log mean b)
    = Var_s(a_s / mean a - b_s / mean b) / S. Mode k is accepted as the peak when gap_k < RESOLVE_Z sigma_k.
    Returns (k_max, accepted modes, gap, sigma) over modes 1..K of ``sample_power`` ``(saves, S, K)``."""
    a = np.asarray(sample_power[i], dtype=np.float64)  # (S, K)
    S, K = a.shape
    ks = np.arange(1, K + 1)
    lam = theory.growth_rates(beta, 2, ks)
    kmax = theory.fastest_mode(beta, 2)
    if kmax > K:
        raise ValueError(f"k_max({beta:g}) = {kmax} is above the {K} modes whose per-system power was kept.")
    j = kmax - 1
    gap = 2 * (lam[j] - lam) * t_e
    if S < 2:  # no spread can be measured: no mode is accepted (the check then judges nothing and fails)
        return kmax, [], gap, np.full(K, np.nan)
    rel = a / a.mean(0)
    sigma = (rel[:, [j]] - rel).std(0, ddof=1) / math.sqrt(S)
    accepted = [int(k) for k in ks if k == kmax or gap[k - 1] < RESOLVE_Z * sigma[k - 1]]
    return kmax, accepted, gap, sigma


def gap_clusters(theta: np.ndarray, gap: float = 0.3) -> int:
    """Clusters of angles on the circle separated by empty arcs longer than ``gap``."""
    a = np.sort(np.mod(theta, 2 * math.pi))
    gaps = np.diff(np.concatenate([a, [a[0] + 2 * math.pi]]))
    return max(1, int((gaps > gap).sum()))


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    ks = arrays["ks"]
    checks, info = {}, {"rates": {}}
    detects = RATE_DETECTS
    for source in ("particle", "meanfield"):
        errors, measured, cases, slow = [], [], [], []
        for b, beta in enumerate(arrays["betas"]):
            for u, usa in enumerate((False, True)):
                lam = theory.growth_rates(float(beta), 2, ks, usa=usa)
                ts = arrays[f"{source}_ts"][b, u]
                fitted, err, est = measured_rate_errors(ts, arrays[f"{source}_amp"][b, u], arrays[f"{source}_amp_half"][b, u], lam)
                keep = lam >= config.rate_floor * lam.max()
                errors.extend(err[keep])
                measured.extend(est[keep])
                cases.extend(f"beta = {beta:g} {'USA' if usa else 'SA'}, k = {k}" for k in ks[keep])
                shown = (lam >= config.report_floor * lam.max()) & ~keep
                slow.extend(err[shown])
                info["rates"][f"{source} beta={beta:g} {'USA' if usa else 'SA'}"] = fitted.tolist()
        name = "particles" if source == "particle" else "mean field"
        size = "delta" if source == "particle" else "eps"
        tol = SAFETY * max(measured) if measured else 0.0
        why = f"budget {SAFETY:g} x the worst error measured in this run by halving {size} ({max(measured, default=0):.2g})"
        checks[f"{name}: |fitted rate / lambda_k - 1|, every beta, SA and USA, modes with lambda_k >= {config.rate_floor:g} lambda_max"] = (
            every_within(errors, 0.0, tol, why, cases=cases, detects=detects[source])
        )
        checks[f"slower modes ({config.report_floor:g} to {config.rate_floor:g} lambda_max), {name}: worst |fitted rate / lambda_k - 1|"] = report(
            float(max(slow)) if slow else float("nan"), "not judged: the coupling of the fast modes dominates there"
        )
    nb = list(np.asarray(arrays["noise_betas"], dtype=float))
    counts = [emerging_count(arrays["noise_power"][b], config.emerged)[0] for b in range(len(nb))]
    kmax = [theory.fastest_mode(beta, 2) for beta in nb]
    info.update(emerging=counts, k_max=kmax)
    if config.judged_beta in nb:
        b = nb.index(config.judged_beta)
        _, i = emerging_count(arrays["noise_power"][b], config.emerged)
        t_e = float(arrays["noise_times"][b, i])
        # runs saved before the per-system powers were kept have none: nothing can say which modes are resolved
        sample = arrays.get("noise_sample_power", np.empty((len(arrays["noise_times"][b]), 0, SAMPLE_MODES)))
        k0, accepted, gap, sigma = peak_resolution(sample, i, t_e, config.judged_beta)
        near = [k for k in (k0 - 1, k0 + 1) if 1 <= k <= len(gap)]
        why = (
            f"k_max({config.judged_beta:g}) = {k0}; accepted {accepted}: the modes whose predicted log-power gap to k_max at "
            f"t_e = {t_e:.3g}, 2 (lambda_kmax - lambda_k) t_e, is below {RESOLVE_Z:g} x the spread sigma_k measured over this "
            f"run's {sample.shape[1]} systems (" + ", ".join(f"k = {k}: gap {gap[k - 1]:.3g}, sigma {sigma[k - 1]:.3g}" for k in near) + ")"
        )
        checks[f"white noise at beta = {config.judged_beta:g}: number of emerging clusters (peak of the seed-averaged spectrum)"] = one_of(
            counts[b], accepted, why, detects=NOISE_DETECTS
        )
        info.update(accepted=accepted, resolution_gap=gap.tolist(), resolution_sigma=sigma.tolist())
    else:
        checks[f"white noise at beta = {config.judged_beta:g}: number of emerging clusters (peak of the seed-averaged spectrum)"] = within(
            float("nan"), 0, 0, f"beta = {config.judged_beta:g} is not among noise_betas", n=0
        )
    checks["white noise: betas where the emerging number equals k_max(beta)"] = report(
        float(np.mean(np.equal(counts, kmax))), f"{sum(np.equal(counts, kmax))} of {len(nb)}: emerging {counts}, k_max {kmax}"
    )
    final = arrays["noise_final"]
    gaps = [[gap_clusters(final[b, s]) for s in range(final.shape[1])] for b in range(len(nb))]
    info["clusters_at_end"] = gaps
    checks["white noise: clusters at the end of the run (gaps > 0.3 rad), per beta"] = report(
        float(np.median(gaps[nb.index(config.judged_beta)])) if config.judged_beta in nb else float("nan"),
        "; ".join(f"beta={beta:g}: {g}" for beta, g in zip(nb, gaps, strict=True)),
    )
    if "sphere_ls" in arrays:  # runs saved before the S^2 half existed have none
        more, extra = sphere_checks(arrays, config)
        checks.update(more)
        info.update(extra)
    return checks, info


def figures(result: Result) -> dict:
    a = result.arrays
    ks = a["ks"]
    figs = {}
    fine = np.arange(1, ks.max() + 1)
    series, points = {}, {}
    for _b, beta in enumerate(a["betas"]):
        series[f"lambda_k, beta = {beta:g} (SA)"] = theory.growth_rates(float(beta), 2, fine)
        points[f"particles, beta = {beta:g}"] = (ks, result.info["rates"][f"particle beta={beta:g} SA"])
        points[f"mean field, beta = {beta:g}"] = (ks, result.info["rates"][f"meanfield beta={beta:g} SA"])
    figs["growth_rates"] = plots.curves(
        fine, series, xlabel="mode k", ylabel="growth rate", title="SA on the circle: growth rates of the uniform state", points=points
    )
    if "sphere_ls" in a:
        ls = a["sphere_ls"]
        fine = np.arange(1, ls.max() + 1)
        series, points = {}, {}
        for beta in a["sphere_betas"]:
            series[rf"$\lambda_\ell$, $\beta$ = {beta:g} (SA, d = 3)"] = theory.growth_rates(float(beta), 3, fine)
            points[rf"particles, $\beta$ = {beta:g}"] = (ls, result.info["s2_rates"][f"particle beta={beta:g} SA"])
            points[rf"zonal solver, $\beta$ = {beta:g}"] = (ls, result.info["s2_rates"][f"meanfield beta={beta:g} SA"])
        figs["growth_rates_s2"] = plots.curves(
            fine,
            series,
            xlabel=r"degree $\ell$",
            ylabel="growth rate",
            title=r"SA on the sphere $S^2$: growth rates of the uniform state",
            points=points,
        )
    betas = np.linspace(0.5, max(a["noise_betas"].max(), 30.0), 200)
    figs["emerging_clusters"] = plots.curves(
        betas,
        {"k_max(beta) (theory)": [theory.fastest_mode(b, 2) for b in betas], "sqrt(2 beta)": np.sqrt(2 * betas)},
        xlabel=r"$\beta$",
        ylabel="number of clusters",
        title="clusters emerging from white noise (SA, S^1)",
        points={"particles (seed-averaged spectrum peak)": (a["noise_betas"], result.info["emerging"])},
    )
    return figs
