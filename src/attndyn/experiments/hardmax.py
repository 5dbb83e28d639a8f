"""Hardmax limit (Alcalde, Geshkovski, Ruiz-Balet, arXiv 2508.09628; SPEC §5.3): vertices fixed, straight paths."""

from __future__ import annotations

import math

import numpy as np

import attndyn as ad

from .. import plots
from .common import ClaimInfo, ExperimentConfig, Result, at_most, fraction, simulate_batch, within

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


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    model = ad.Model(ad.Weights.identity(2), beta=math.inf, rescaled=True)
    z0 = rng.uniform(-5, 5, (config.seeds, config.n, 2))
    ts, zs = simulate_batch(model, z0, config.T, dt=config.dt, saves=51, engine=config)
    drift, line_err, collinear, ratio_err, fixed_total = [], [], [], [], 0
    for s in range(config.seeds):
        z = z0[s]
        target = (z @ z.T).argmax(1)
        fixed = target == np.arange(config.n)
        fixed_total += fixed.sum()
        drift.append(np.abs(zs[:, s][:, fixed] - z[fixed]).max())
        movers = np.flatnonzero(~fixed & fixed[target])  # tokens whose vertex is fixed
        for i in movers:
            sv = z[target[i]]
            exact = sv + np.outer(np.exp(-ts), z[i] - sv)
            path = zs[:, s, i]
            line_err.append(np.abs(path - exact).max())
            u, w = path - sv, z[i] - sv
            collinear.append(np.abs(u[:, 0] * w[1] - u[:, 1] * w[0]).max() / (w @ w))
            dist = np.linalg.norm(u, axis=1)
            ratio_err.append(np.abs(np.log(dist[1:] / dist[:-1]) + np.diff(ts)).max())
    # Finite beta tracks the hardmax path better as beta grows (deviation over t in [0, 1]), measured on the tokens
    # where the hardmax is well-posed: their vertex is fixed and their argmax wins by a margin >= 1 at t = 0.
    scores = np.einsum("sid,sjd->sij", z0[:4], z0[:4])
    top2 = np.sort(scores, axis=-1)[..., -2:]
    target = scores.argmax(-1)
    fixed = target == np.arange(config.n)
    clear = ((top2[..., 1] - top2[..., 0]) >= 1.0) & np.take_along_axis(fixed, target, axis=1)
    devs = []
    for beta in (2.0, 8.0, 32.0):
        finite = ad.Model(ad.Weights.identity(2), beta=beta, rescaled=True)
        tf, zf = simulate_batch(finite, z0[:4], 1.0, dt=config.dt, saves=11, engine=config)
        devs.append(np.linalg.norm(zf - zs[: len(tf), :4], axis=-1)[:, clear].max())
    checks = {
        "self-argmax tokens (cell vertices) stationary: max drift": at_most(max(drift), 1e-13),
        "tokens with a fixed vertex: max |z_i(t) - (s_i + (z_i(0) - s_i) e^{-t})| (RK4, dt = 0.01)": at_most(max(line_err), 1e-9),
        "collinearity residual |(z_i(t) - s_i) x (z_i(0) - s_i)| / |z_i(0) - s_i|^2": at_most(max(collinear), 1e-12),
        "geometric decay: max |log(d(t+dt)/d(t)) + dt|": at_most(max(ratio_err), 1e-9),
        "finite beta = 2, 8, 32: deviation from hardmax on t in [0, 1] decreasing (fraction of increases)": at_most(
            fraction(np.diff(devs) >= 0), 0.0, "tokens with a fixed vertex and an argmax margin >= 1"
        ),
        "tokens checked on straight paths": within(len(line_err), 1, 10**9),
    }
    return Result(CLAIM, checks, config.model_dump(), {"ts": ts, "z": zs[:, 0]}, {"deviations": devs, "fixed tokens": int(fixed_total)})


def figures(result: Result) -> dict:
    return {"paths": plots.paths_with_hulls(result.arrays["ts"], result.arrays["z"], title="hardmax: straight paths to the cell vertices (z-form)")}
