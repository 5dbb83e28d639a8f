"""V = -I, Q^T K = I: every token goes to 0, algebraically (t:cas-Idintro; SPEC §2.3, §4.4)."""

from __future__ import annotations

import numpy as np

import attndyn as ad

from .. import plots
from .common import ClaimInfo, ExperimentConfig, Result, at_most, fraction, within

CLAIM = ClaimInfo(
    id="collapse",
    paper_ref="arXiv:2305.05465v6 t:cas-Idintro (Part I; proof in §8, s:c<0)",
    title="V = -I: a single cluster at the origin, at an algebraic rate",
    statement=(
        "With V = -I_d and Q^T K = I_d, every token x_i(t) tends to 0 and P(t) tends to the uniform matrix (1/n) 1 1^T. "
        "The decay is algebraic (max |x_i| ~ t^{-1/2}, max |P - 1/n| ~ 1/t), not exponential."
    ),
    hypotheses="V = -I_d, Q = K = I_d; any initial tokens (x-form, since z = e^{t} x diverges).",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    dims: list[int] = [2, 3]
    ns: list[int] = [5, 10]
    seeds: int = 20
    T: float = 640.0


QUICK = {"T": 160.0, "ns": [10]}
T_FROM = 40.0


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    ts = np.concatenate([[0.0], 10.0 * 4.0 ** np.arange(0, int(round(np.log(config.T / 10) / np.log(4))) + 1)])
    dense = np.unique(np.concatenate([ts, np.linspace(0, config.T, 401)]))
    ratios, pratios, fails_mono, fails_energy, kept = [], [], [], [], None
    for d in config.dims:
        for n in config.ns:
            model = ad.Model(ad.Weights(np.eye(d), np.eye(d), -np.eye(d)))
            x0 = rng.uniform(-2, 2, (config.seeds, n, d))
            traj = ad.simulate(model, x0, dense, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-9, atol=1e-12), max_steps=10_000_000)
            xs = traj.xs.numpy()
            norms = np.linalg.norm(xs, axis=-1).max(-1)  # (T, S)
            P = ad.attention_matrix(model, traj.xs).numpy()[:, :, 0]
            pdev = np.abs(P - 1.0 / n).max((-1, -2))
            at = {t: np.searchsorted(dense, t) for t in ts}
            for t in ts[(ts >= T_FROM) & (ts * 4 <= config.T)]:
                ratios.extend(norms[at[4 * t]] / norms[at[t]])
                pratios.extend(pdev[at[4 * t]] / pdev[at[t]])
            late = dense >= T_FROM
            fails_mono.extend((np.diff(norms[late], axis=0) > 1e-12).any(0))
            speed2 = np.stack([(np.linalg.norm(ad.velocity(0.0, traj.xs[k], model).numpy(), axis=-1) ** 2).sum(-1) for k in range(len(dense))])
            energy = np.concatenate([[np.zeros(speed2.shape[1])], np.cumsum(0.5 * (speed2[1:] + speed2[:-1]) * np.diff(dense)[:, None], 0)])
            # a plateau: the last quarter adds under 1% of the total
            q = np.searchsorted(dense, 0.75 * config.T)
            fails_energy.extend((energy[-1] - energy[q]) > 0.01 * energy[-1])
            if kept is None:
                kept = {"ts": dense, "norm": norms[:, 0], "pdev": pdev[:, 0], "energy": energy[:, 0], "x": xs[:, 0]}
    ratios, pratios = np.array(ratios), np.array(pratios)
    checks = {
        "max|x(4t)| / max|x(t)| for t >= 40 (median; t^{-1/2} gives 0.5)": within(np.median(ratios), 0.4, 0.6),
        "fraction of runs and times with that ratio outside [0.4, 0.6]": at_most(fraction((ratios < 0.4) | (ratios > 0.6)), 0.05),
        "max|P - 1/n| at 4t over at t (median; 1/t gives 0.25)": within(np.median(pratios), 0.15, 0.35),
        "runs where max|x_i| increases after t = 40": at_most(fraction(fails_mono), 0.0),
        "runs where int |x'|^2 dt has not plateaued (last quarter > 1%)": at_most(fraction(fails_energy), 0.0),
    }
    return Result(CLAIM, checks, config.model_dump(), kept, {"ratios": ratios.tolist(), "P ratios": pratios.tolist()})


def figures(result: Result) -> dict:
    a = result.arrays
    sel = a["ts"] > 0
    t = a["ts"][sel]
    return {
        "decay": plots.loglog(
            t,
            {"max_i |x_i(t)|": a["norm"][sel], "max |P(t) - 1/n|": a["pdev"][sel]},
            ylabel="size",
            title="V = -I: algebraic decay",
            slopes={"slope -1/2": (t, a["norm"][sel][-1] * (t / t[-1]) ** -0.5), "slope -1": (t, a["pdev"][sel][-1] * (t / t[-1]) ** -1.0)},
        ),
        "energy": plots.coordinates_vs_time(
            a["ts"], a["energy"][:, None], levels={}, ylabel="int_0^t sum_i |x_i'|^2 ds", title="finite kinetic energy (e:finiteinegral)"
        ),
    }
