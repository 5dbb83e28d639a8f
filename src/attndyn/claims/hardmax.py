"""Hardmax limit (Alcalde, Geshkovski, Ruiz-Balet, arXiv 2508.09628): vertices fixed, straight paths."""

from __future__ import annotations

import math

import numpy as np

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every, every_within, simulate_batch
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="hardmax",
    paper_ref="arXiv:2508.09628 (Attention's forward pass and Frank-Wolfe), beta -> inf with B = Q^T K PSD",
    title="Hardmax attention: fixed vertices, straight paths to the cell's vertex",
    statement=(
        "With beta = inf (each token attends uniformly to argmax_j <B z_i, z_j>), B = I and V = I in the rescaled form, "
        "tokens that are their own argmax (the vertices of their dominance cells) are stationary, and every other token "
        "moves on a straight segment toward its cell's vertex, z_i(t) = s_i + (z_i(0) - s_i) e^{-t}; finite beta tracks "
        "this path better as beta grows."
    ),
    hypotheses="B = Q^T K = I, V = I, d = 2; z0 ~ U[-5, 5]^2; dense hardmax with explicit ties.",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 20
    seeds: int = 20
    T: float = 5.0
    dt: float = 0.01


QUICK: dict = {}


BETAS = (2.0, 8.0, 32.0)


def run(config: Config) -> Result:
    """The hardmax run and the finite-beta runs; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    model = ad.Model(ad.Weights.identity(2), beta=math.inf, rescaled=True)
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
    drift, line_err, collinear, ratio_err = [], [], [], []
    for s in range(zs.shape[1]):
        z = z0[s]
        target = (z @ z.T).argmax(1)
        fixed = target == np.arange(len(z))
        drift.extend(np.abs(zs[:, s][:, fixed] - z[fixed]).max((0, 2)))
        for i in np.flatnonzero(~fixed & fixed[target]):  # tokens whose vertex is fixed
            sv = z[target[i]]
            path = zs[:, s, i]
            line_err.append(np.abs(path - (sv + np.outer(np.exp(-ts), z[i] - sv))).max())
            u, w = path - sv, z[i] - sv
            collinear.append(np.abs(u[:, 0] * w[1] - u[:, 1] * w[0]).max() / (w @ w))
            dist = np.linalg.norm(u, axis=1)
            ratio_err.append(np.abs(np.log(dist[1:] / dist[:-1]) + np.diff(ts)).max())
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
    checks = {
        "self-argmax tokens (cell vertices) stationary: drift <= 1e-13, every vertex token": every_within(drift, 0.0, 1e-13),
        "tokens with a fixed vertex: |z_i(t) - (s_i + (z_i(0) - s_i) e^{-t})| <= 1e-9 (RK4, dt = 0.01), every token": every_within(
            line_err, 0.0, 1e-9
        ),
        "collinearity residual |(z_i(t) - s_i) x (z_i(0) - s_i)| / |z_i(0) - s_i|^2 <= 1e-12, every token": every_within(collinear, 0.0, 1e-12),
        "geometric decay |log(d(t+dt)/d(t)) + dt| <= 1e-9, every token": every_within(ratio_err, 0.0, 1e-9),
        "finite beta = 2, 8, 32: deviation from hardmax on t in [0, 1] decreases with beta (each step)": every(np.diff(devs) < 0),
    }
    return checks, {"deviations": devs, "tokens on straight paths": len(line_err)}


def figures(result: Result) -> dict:
    a = result.arrays
    return {"paths": plots.paths_with_hulls(a["ts"], a["z"][:, 0], title="hardmax: straight paths to the cell vertices (z-form)")}
