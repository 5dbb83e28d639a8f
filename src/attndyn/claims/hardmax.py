"""Hardmax limit (Alcalde, Geshkovski, Ruiz-Balet, arXiv 2508.09628): vertices fixed, straight paths."""

from __future__ import annotations

import math

import numpy as np

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every_within, report, simulate_batch
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="hardmax",
    paper_ref="arXiv:2508.09628 (Attention's forward pass and Frank-Wolfe), beta -> inf with B = Q^T K PSD",
    title="Hardmax attention: fixed vertices, straight paths to the cell's vertex",
    statement=(
        "With beta = inf (each token attends uniformly to argmax_j <B z_i, z_j>), B = I and V = I in the rescaled form, "
        "tokens that are their own argmax (the vertices of their dominance cells) are stationary, and every other token "
        "moves on a straight segment toward its cell's vertex, z_i(t) = s_i + (z_i(0) - s_i) e^{-t}; finite beta tracks "
        "this path better as beta grows (reported). Judged: vertex drift to rounding, the paths against the closed form "
        "within 3x RK4's error bound, collinearity against each token's rounding band (the absolute rounding RK4 carries, "
        "derived from the token's z0 and vertex, over |z0 - s|), and the per-save decay against 3x RK4's exact "
        "amplification plus that rounding."
    ),
    hypotheses="B = Q^T K = I, V = I, d = 2; z0 ~ U[-5, 5]^2; dense hardmax with explicit ties.",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 20
    seeds: int = 20
    T: float = 5.0
    dt: float = 0.01
    # the hardmax run only: V = coupling I + anisotropy E_12 at beta = hardmax_beta (inf, 1, 0 are the claim;
    # the sensitivity tests change them)
    coupling: float = 1.0
    anisotropy: float = 0.0
    hardmax_beta: float = math.inf


QUICK: dict = {}


BETAS = (2.0, 8.0, 32.0)
EPS = float(np.finfo(np.float64).eps)
ROUNDING = 64 * EPS


def rk4_amplification(h: float) -> float:
    """RK4's amplification R(-h) = 1 - h + h^2/2 - h^3/6 + h^4/24 on z' = -z: one step of it maps z - s to R(-h)(z - s)."""
    return 1 - h + h**2 / 2 - h**3 / 6 + h**4 / 24


def rk4_rate_error(h: float) -> float:
    """|log R(-h) + h| for RK4's amplification R(x) = 1 + x + x^2/2 + x^3/6 + x^4/24 on z' = -z: its error
    in log |z - s| per step (about h^5 / 120)."""
    return abs(math.log(rk4_amplification(h)) + h)


def rounding_bound(z0: np.ndarray, s: np.ndarray, h: float) -> np.ndarray:
    """A bound on |computed z_i(t) - RK4's exact-arithmetic z_i(t)| for tokens z0 moving to their vertices s (float64).

    Derived from the inputs alone (never from the engine's output). On a token's segment the field is
    z' = s - z, linear, so RK4 in exact arithmetic maps z - s to R(-h)(z - s) each step, and a rounding
    error made at one step is carried by the same map: with rho_k the error made at step k,
    delta_{k+1} = R(-h) delta_k + rho_k, hence |delta_k| <= max|rho| / (1 - R(-h)) at every step k
    (0 < R(-h) < 1 for 0 < h < 2.78). One step rounds the update z + h (k1 + 2 k2 + 2 k3 + k4) / 6 once
    (at most eps/2 of the coordinate, eps = 2^-52) and each stage state z + c h k and each field value
    s - z once; those enter multiplied by h, at most 5 h (eps/2) of 2 z_max, so for h <= 0.2 a step's
    error is at most eps z_max per coordinate, sqrt(2) eps z_max in the plane. z_max is the largest
    coordinate on the segment from z0 to s: max(|z0|_inf, |s|_inf). Hence

        |delta_i| <= B_i = sqrt(2) eps z_max,i / (1 - R(-h))   (about 1.4 eps z_max / h).

    The error is absolute, not relative to |z0 - s|: a token that starts near its vertex (seed 119 of
    the quick size has one 0.0081 from it) carries the same absolute rounding on a far shorter segment,
    which a constant tolerance on the relative residuals cannot allow for.
    """
    if not 0 < h <= 0.2:
        raise ValueError(f"the rounding bound is derived for 0 < h <= 0.2, not h = {h:g}")
    z_max = np.maximum(np.abs(z0).max(-1), np.abs(s).max(-1))
    return math.sqrt(2) * EPS * z_max / (1 - rk4_amplification(h))


def collinearity_band(z0: np.ndarray, s: np.ndarray, h: float) -> np.ndarray:
    """Each token's bound on |(z(t) - s) x (z0 - s)| / |z0 - s|^2: the exact RK4 path lies on the line
    (R(-h)^k (z0 - s)), so only the rounding delta leaves it, by at most |delta| |z0 - s| / |z0 - s|^2 =
    B / |z0 - s|. (Forming z - s, the cross product and the quotient add a few eps of |z - s| / |z0 - s|
    <= 1, below 1 % of B / |z0 - s| >= 0.5 eps / h.)"""
    return rounding_bound(z0, s, h) / np.linalg.norm(z0 - s, axis=-1)


def decay_band(z0: np.ndarray, s: np.ndarray, h: float, ts: np.ndarray) -> np.ndarray:
    """Each token's bound on |log(d(t_{k+1}) / d(t_k)) + (t_{k+1} - t_k)| per save, shape (tokens, saves - 1).

    In exact arithmetic RK4 gives d_k = |z0 - s| R(-h)^{m_k} after m_k steps, so the log ratio misses
    -(t_{k+1} - t_k) by exactly (m_{k+1} - m_k) |log R(-h) + h|: a correct run attains that term at 1x,
    and the band allows 3x of it (as before; the factor only costs power: V off by eps moves the log
    ratio by eps (t_{k+1} - t_k), caught from eps of about 2e-10 at h = 0.01, and it cannot fail a correct
    run). Rounding moves each d by at most B (rounding_bound), so log d moves by at most -log(1 - B / d)
    (infinite, no judgment, once B >= d), at each end of the save interval, with d taken on RK4's exact
    path from the inputs."""
    steps = np.rint(np.asarray(ts) / h)
    bound = rounding_bound(z0, s, h)[:, None]
    exact = np.linalg.norm(z0 - s, axis=-1)[:, None] * rk4_amplification(h) ** steps[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(bound < exact, bound / exact, 1.0)
        drift = -np.log1p(-rel)
    return 3 * np.diff(steps)[None, :] * rk4_rate_error(h) + drift[:, 1:] + drift[:, :-1]


def run(config: Config) -> Result:
    """The hardmax run and the finite-beta runs; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    V = config.coupling * np.eye(2) + config.anisotropy * np.array([[0.0, 1.0], [0.0, 0.0]])
    model = ad.Model(ad.Weights(np.eye(2), np.eye(2), V), beta=config.hardmax_beta, rescaled=True)
    z0 = rng.uniform(-5, 5, (config.seeds, config.n, 2))
    ts, zs = simulate_batch(model, z0, config.T, dt=config.dt, saves=51, engine=config)
    arrays = {"ts": ts, "z": zs}
    for beta in BETAS:
        finite = ad.Model(ad.Weights.identity(2), beta=beta, rescaled=True)
        tf, zf = simulate_batch(finite, z0[:4], 1.0, dt=config.dt, saves=11, engine=config)
        arrays[f"finite_ts_{beta:g}"], arrays[f"finite_z_{beta:g}"] = tf, zf
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    ts, zs = arrays["ts"], arrays["z"]
    z0 = zs[0]
    h = config.dt
    drift, line_ratio, collinear, ratio_err, vertices, movers = [], [], [], [], [], []
    for s in range(zs.shape[1]):
        z = z0[s]
        target = (z @ z.T).argmax(1)
        fixed = target == np.arange(len(z))
        drift.extend(np.abs(zs[:, s][:, fixed] - z[fixed]).max((0, 2)))
        vertices.extend(f"seed {s}, token {i}" for i in np.flatnonzero(fixed))
        for i in np.flatnonzero(~fixed & fixed[target]):  # tokens whose vertex is fixed
            movers.append(f"seed {s}, token {i}")
            sv = z[target[i]]
            path = zs[:, s, i]
            line_ratio.append(np.abs(path - (sv + np.outer(np.exp(-ts), z[i] - sv))).max() / np.linalg.norm(z[i] - sv))
            u, w = path - sv, z[i] - sv
            # each token against its own rounding band, derived from its z0 and vertex (rounding_bound)
            residual = np.abs(u[:, 0] * w[1] - u[:, 1] * w[0]).max() / (w @ w)
            collinear.append(residual / collinearity_band(z[i], sv, h))
            dist = np.linalg.norm(u, axis=1)
            decay = np.abs(np.log(dist[1:] / dist[:-1]) + np.diff(ts))
            ratio_err.append((decay / decay_band(z[i][None], sv[None], h, ts)[0]).max())
    # Finite beta tracks the hardmax path better as beta grows (deviation over t in [0, 1]), measured on the tokens
    # where the hardmax is well-posed: their vertex is fixed and their argmax wins by a margin >= 1 at t = 0.
    scores = np.einsum("sid,sjd->sij", z0[:4], z0[:4])
    top2 = np.sort(scores, axis=-1)[..., -2:]
    target = scores.argmax(-1)
    fixed = target == np.arange(z0.shape[1])
    clear = ((top2[..., 1] - top2[..., 0]) >= 1.0) & np.take_along_axis(fixed, target, axis=1)
    devs = []
    for beta in BETAS:
        zf = arrays[f"finite_z_{beta:g}"]
        devs.append(float(np.linalg.norm(zf - zs[: len(zf), :4], axis=-1)[:, clear].max()) if clear.any() else float("nan"))
    per_save = round(float(np.diff(ts).max()) / h)
    # RK4's global error on z' = s - z: |z(t) - exact| <= t e^{-t} (h^4 / 120) |z0 - s| <= e^{-1} (h^4 / 120) |z0 - s|
    line_budget = math.exp(-1) * h**4 / 120
    scale = float(np.abs(zs).max())
    checks = {
        "self-argmax tokens (cell vertices) stationary: drift, every vertex token": every_within(
            drift, 0.0, ROUNDING * scale, "the budget is rounding (64 eps of the coordinates)", cases=vertices,
            detects="a finite beta = 50 in place of the limit",
        ),
        "tokens with a fixed vertex: |z_i(t) - (s_i + (z_i(0) - s_i) e^{-t})| / RK4's error bound, every token": every_within(
            np.asarray(line_ratio) / line_budget, 0.0, 3.0, f"RK4's bound e^-1 h^4 / 120 |z0 - s| at h = {h:g}", cases=movers,
            detects="V off by 1e-6 (relative)",
        ),
        "collinearity residual |(z_i(t) - s_i) x (z_i(0) - s_i)| / |z_i(0) - s_i|^2 / the token's rounding band, every token": every_within(
            collinear,
            0.0,
            1.0,
            f"the band B_i / |z_i(0) - s_i|, B_i = sqrt(2) eps max|z| / (1 - R(-h)) at h = {h:g} (each token's z0 and vertex)",
            cases=movers,
            detects="an anisotropic V (an off-diagonal entry of 1e-6)",
        ),
        "geometric decay |log(d(t+dt)/d(t)) + dt| / the token's band, every token and save": every_within(
            ratio_err, 0.0, 1.0,
            f"3x RK4's exact per-save error ({per_save} steps of {rk4_rate_error(h):.2g}) plus the rounding B_i moves log d by, "
            "on RK4's exact path from each token's z0 and vertex",
            cases=movers, detects="V off by 1e-6 (relative)",
        ),
        "finite beta = 2, 8, 32: deviation from hardmax on t in [0, 1], per beta": report(
            devs[-1], "decreasing with beta: " + ", ".join(f"{d:.3g}" for d in devs) + " (reported: qualitative, no small error moves it)"
        ),
    }  # fmt: skip
    return checks, {"deviations": devs, "tokens on straight paths": len(line_ratio)}


def figures(result: Result) -> dict:
    a = result.arrays
    return {"paths": plots.paths_with_hulls(a["ts"], a["z"][:, 0], title="hardmax: straight paths to the cell vertices (z-form)")}
