"""Sphere dynamics (GLPR, arXiv 2312.10794): single cluster for d = 3, USA energy, hemisphere rate, orthogonal start."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import Field

import attndyn as ad
from attndyn.analysis import clusters
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, at_most, every, every_within, report, unit_rows, within
from attndyn.theory import closed_forms as theory
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="sphere",
    paper_ref=(
        "arXiv:2312.10794 (A mathematical perspective on Transformers): the single-cluster theorem (d >= 3), the energy "
        "lemma, the hemisphere lemma and the orthogonal-start theorem (the equiangular ODE)"
    ),
    title="Tokens on the sphere: one cluster",
    statement=(
        "On the unit sphere (x_i' = P_{x_i}(sum_j P_ij x_j), Q = K = V = I), for d >= 3 and any beta, almost every initial "
        "configuration converges to a single cluster (a t -> infinity statement). Judged: "
        "beta = 4, every seed in one cluster by T = 10 e^{2 beta} (adaptive steps), and "
        "every seed still split at T = 300 is k >= 2 tight clusters (diameter <= 1e-6) whose centres follow the k-point "
        "reduced ODE (point masses = cluster sizes / n) to 1e-6 over [300, 600]; "
        "from a hemisphere, 1 - min_i <x_i, x*> decays at the linearised rate 2 (fitted within 3e-3, 3x the nonlinear "
        "correction where the fit starts); pairwise orthogonal "
        "tokens stay equiangular with cos(angle) solving the equiangular ODE (to 1e-10). Reported, because no small error "
        "of the dynamics moves them: the beta = 1 seeds not in one cluster at T = 300 (they cluster by t ~ 20), E_beta "
        "non-decreasing along SA and USA; and the beta = 9 times to one cluster against e^{2 beta}."
    ),
    hypotheses="Q = K = V = I_d on S^{d-1}; d = 3, n = 32 uniform starts (20 seeds); orthogonal starts with d = n.",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 32
    seeds: int = 20
    T: float = 300.0
    reduced_T: float = 600.0
    beta_slow: float = 9.0
    slow_seeds: int = 2
    slow_T: float = 1e5
    orthogonal_n: int = 8
    hemisphere_T: float = 15.0
    # perturbations the sensitivity tests make (the claim is the defaults): every run's beta times beta_factor and
    # V = I + v_skew J (J a rotation generator in the first two coordinates), while the judge uses beta and V = I
    beta_factor: float = Field(1.0, gt=0)
    v_skew: float = 0.0
    # and the beta = 4 horizon 10 e^{2 beta} times horizon_factor
    horizon_factor: float = Field(1.0, gt=0)


# The beta = 9 merge times are of order e^{18} ~ 7e7: the full run reports how many seeds merged by
# slow_T = 1e5 (more is out of a 20-minute budget on 2 cores); the quick run skips them.
QUICK = {"slow_seeds": 0}
CLUSTER_TOL = 1e-6
REDUCED_TOL = 1e-6
STEP = {"rtol": 1e-9, "atol": 1e-11}
HEMISPHERE_RATE = (1.994, 2.006)  # 2 +- 3e-3: the fit starts at a gap of 1e-3, where the quadratic term moves the rate by ~1e-3
ORTHOGONAL_TOL = 1e-10  # the runs' rtol is 1e-11; measured 6e-12


def sphere_model(beta: float, *, usa: bool = False, d: int = 3, config: Config | None = None) -> ad.Model:
    """Q = K = V = I_d on the sphere (SA, or USA); ``config`` applies the sensitivity tests' perturbations."""
    V = np.eye(d)
    if config is not None:
        beta, V[0, 1], V[1, 0] = beta * config.beta_factor, -config.v_skew, config.v_skew
    weights = ad.Weights(np.eye(d), np.eye(d), V)
    return ad.Model(weights, beta=beta, geometry="sphere", normalization="unnormalized" if usa else "softmax")


def min_inner(xs: np.ndarray) -> np.ndarray:
    G = np.einsum("...id,...jd->...ij", xs, xs)
    return G.min((-1, -2))


def long_times(T: float, T_end: float, dense_to: float) -> np.ndarray:
    """Saves every 10 up to ``dense_to`` (so [T, 2T] is resolved for the reduced ODE), then geometric to ``T_end``."""
    parts = [np.arange(0.0, dense_to + 1e-9, 10.0), [T, T_end]]
    if T_end > dense_to * (1 + 1e-9):
        parts.append(np.geomspace(max(dense_to, 1.0), T_end, 40))
    ts = np.unique(np.concatenate(parts))
    return ts[np.concatenate([[True], np.diff(ts) > 1e-9 * ts[1:]])]


def energy(xs: np.ndarray, beta: float) -> np.ndarray:
    """E_beta = (1/(2 beta n^2)) sum_ij e^{beta <x_i, x_j>} along ``xs`` ``(T, n, d)`` (beta > 0)."""
    n = xs.shape[-2]
    return np.exp(beta * np.einsum("tid,tjd->tij", xs, xs)).sum((1, 2)) / (2 * beta * n**2)


def run(config: Config) -> Result:
    """Simulate every part; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    step = ad.AdaptiveStep(**STEP)
    arrays = {}
    # beta = 1 to T; beta = 4 to 10 e^{8}, resolving [0, reduced_T] for the reduced-ODE check
    for key, beta, T_end in (("b1", 1.0, config.T), ("b4", 4.0, config.horizon_factor * 10 * np.exp(8.0))):
        x0 = unit_rows(rng.normal(size=(config.seeds, config.n, 3)))
        ts = long_times(config.T, T_end, min(config.reduced_T, T_end))
        traj = ad.simulate(sphere_model(beta, config=config), x0, ts, solver=ad.Dopri5(), step=step, max_steps=10_000_000)
        arrays |= {f"{key}_ts": ts, f"{key}_x": traj.xs.numpy(), f"{key}_beta": np.float64(beta)}
    if config.slow_seeds:
        x0 = unit_rows(rng.normal(size=(config.slow_seeds, config.n, 3)))
        ts = np.unique(np.concatenate([np.linspace(0, 600, 61), np.geomspace(600, config.slow_T, 40)]))
        traj = ad.simulate(sphere_model(config.beta_slow), x0, ts, solver=ad.Dopri5(), step=step, max_steps=50_000_000)
        arrays |= {"slow_ts": ts, "slow_x": traj.xs.numpy()}
    # energy along SA and USA (beta = 1), one seed each
    ts = np.linspace(0, 20, 201)
    for usa in (False, True):
        x0 = unit_rows(rng.normal(size=(config.n, 3)))
        model = sphere_model(1.0, usa=usa, config=config)
        arrays[f"energy_{'usa' if usa else 'sa'}_x"] = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=step).xs.numpy()
    arrays["energy_ts"] = ts
    # orthogonal start (SA and USA, d = n)
    n = config.orthogonal_n
    ts = np.linspace(0, 10, 51)
    for usa in (False, True):
        model = sphere_model(1.0, usa=usa, d=n, config=config)
        xs = ad.simulate(model, np.eye(n), ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-11, atol=1e-12)).xs.numpy()
        arrays[f"orth_{'usa' if usa else 'sa'}_x"] = xs
    arrays["orth_ts"] = ts
    # hemisphere start
    x0 = unit_rows(rng.normal(size=(config.n, 3)))
    x0[:, 0] = np.abs(x0[:, 0]) + 0.05
    ts = np.linspace(0, config.hemisphere_T, 151)
    arrays["hemi_ts"] = ts
    hemi = ad.AdaptiveStep(rtol=1e-12, atol=1e-13)
    arrays["hemi_x"] = ad.simulate(sphere_model(1.0, config=config), unit_rows(x0), ts, solver=ad.Dopri5(), step=hemi).xs.numpy()
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def one_cluster_times(ts: np.ndarray, xs: np.ndarray) -> list[float]:
    """First save time at which each seed is one cluster (1 - min <x_i, x_j> <= 1e-6); inf if never."""
    done = 1 - min_inner(xs) <= CLUSTER_TOL  # (T, S)
    return [float(ts[np.argmax(done[:, s])]) if done[:, s].any() else float("inf") for s in range(xs.shape[1])]


def reduced_ode_misfit(ts: np.ndarray, xs: np.ndarray, beta: float, T: float, T2: float) -> tuple[bool, float, int]:
    """For one seed split at T: (tight clusters?, max deviation of the cluster centres from the k-point ODE over [T, T2], k)."""
    k0, k2 = np.searchsorted(ts, T), np.searchsorted(ts, T2)
    x = xs[k0]
    labels = clusters.cluster_labels(x, tol=1e-3)
    ks = np.unique(labels)
    diam = max(float(np.ptp(x[labels == a], axis=0).max()) if (labels == a).sum() > 1 else 0.0 for a in ks)
    masses = np.array([(labels == a).mean() for a in ks])
    centres = np.stack([unit_rows(x[labels == a].mean(0)) for a in ks])
    window = ts[k0 : k2 + 1]
    y = theory.k_point(centres, masses, beta, window)
    particles = np.stack([unit_rows(xs[k0 : k2 + 1][:, labels == a].mean(1)) for a in ks], 1)
    return diam <= CLUSTER_TOL, float(np.abs(particles - y).max()), len(ks)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    info = {}
    ts, xs = arrays["b1_ts"], arrays["b1_x"]
    k = np.searchsorted(ts, config.T)
    checks = {
        # reported: beta = 1 clusters long before T (by t ~ 20), and no perturbation tried (beta up to 3x) keeps a seed split
        f"beta = 1: seeds not in one cluster (1 - min <x_i, x_j> <= 1e-6) at T = {config.T:g}": report(
            int((~((ts[-1] >= config.T) & (1 - min_inner(xs[min(k, len(ts) - 1)]) <= CLUSTER_TOL))).sum()),
            "the theorem's expectation is 0; beta = 1 seeds cluster by t ~ 20, so no small error reaches this",
        )
    }
    ts, xs = arrays["b4_ts"], arrays["b4_x"]
    T_end = 10 * np.exp(8.0)
    times = one_cluster_times(ts, xs)
    info["beta=4 time to one cluster"] = times
    checks["beta = 4: every seed in one cluster by T = 10 e^{2 beta}: failing seeds"] = every(
        [ts[-1] >= T_end * (1 - 1e-9) and t <= T_end for t in times], detects="beta off by 50 % (a pair stays split past 10 e^{2 beta})"
    )
    k = np.searchsorted(ts, config.T)
    split = np.flatnonzero(1 - min_inner(xs[k]) > CLUSTER_TOL)
    tight, misfit, counts = [], [], []
    for s in split:
        t_ok, dev, kk = reduced_ode_misfit(ts, xs[:, s], 4.0, config.T, config.reduced_T)
        tight.append(t_ok and kk >= 2)
        misfit.append(dev)
        counts.append(kk)
    info["beta=4 split at T"] = {"seeds": split.tolist(), "clusters": counts, "misfit": misfit}
    checks[f"beta = 4, seeds split at T = {config.T:g}: k >= 2 clusters of diameter <= 1e-6: failing seeds"] = (
        every(tight, detects="the split judged at T = 20 instead of 300 (clusters not yet tight)")
        if len(split)
        else report(0, "no seed was split at T (nothing to judge here)")
    )
    checks[f"beta = 4, seeds split at T: cluster centres vs the k-point reduced ODE over [{config.T:g}, {config.reduced_T:g}]"] = (
        every_within(misfit, 0.0, REDUCED_TOL, detects="beta off by 1e-6 in the dynamics") if len(split) else report(0, "no seed was split at T")
    )
    checks["beta = 4: fraction of seeds not yet one cluster at T = 300 (metastable pairs)"] = report(len(split) / xs.shape[1])
    if "slow_x" in arrays:
        slow = one_cluster_times(arrays["slow_ts"], arrays["slow_x"])
        info[f"beta={config.beta_slow:g} time to one cluster"] = slow
        merged = [t for t in slow if np.isfinite(t)]
        checks[
            f"beta = {config.beta_slow:g}: fraction of seeds in one cluster by t = {config.slow_T:g} (e^2beta = {np.exp(2 * config.beta_slow):.1e})"
        ] = report(len(merged) / len(slow), "merge times of order e^{beta(1 - cos theta)} <= e^{2 beta}")
        checks[f"beta = {config.beta_slow:g}: median time to one cluster among merged seeds / e^(2 beta)"] = report(
            np.median(merged) / np.exp(2 * config.beta_slow) if merged else float("nan")
        )
    for flow in ("sa", "usa"):
        E = energy(arrays[f"energy_{flow}_x"], 1.0)
        # reported: the gradient-flow identity holds for every beta and V = I + a small rotation (nothing tried breaks it)
        checks[f"E_beta non-decreasing along {flow.upper()} (beta = 1): largest relative decrease between saves"] = report(
            max(0.0, float(-(np.diff(E) / E[:-1]).min())), "0 up to rounding expected; beta off by 10 % or a 1e-3 rotation in V keep it 0"
        )
    ts = arrays["orth_ts"]
    for flow in ("sa", "usa"):
        xs = arrays[f"orth_{flow}_x"]
        n = xs.shape[-1]
        off = np.einsum("tid,tjd->tij", xs, xs)[:, ~np.eye(n, dtype=bool)]
        g = theory.equiangular(1.0, n, ts, usa=flow == "usa")
        checks[f"orthogonal start ({flow.upper()}, n = d = {n}): max |<x_i, x_j> - rho(t)| (equiangular ODE), every pair and time"] = at_most(
            np.abs(off - g[:, None]).max(), ORTHOGONAL_TOL, n=off.size, detects="beta off by 1e-6 in the dynamics"
        )
    ts, xs = arrays["hemi_ts"], arrays["hemi_x"]
    xstar = unit_rows(xs[-1].mean(0))
    gap = 1 - (xs @ xstar).min(1)
    # fit on the linear (consensus) regime: from 1e-3 down to 1e-10, above rounding
    sel = (gap < 1e-3) & (gap > 1e-10)
    rate = -np.polyfit(ts[sel], np.log(gap[sel]), 1)[0] if sel.sum() >= 4 else float("nan")
    checks["hemisphere: fitted decay rate of 1 - min_i <x_i, x*> (linearisation: 2)"] = within(
        rate, *HEMISPHERE_RATE, n=int(sel.sum()), detects="a rotation of 1e-4 in V (V = I + 1e-4 J)"
    )
    return checks, info


def figures(result: Result) -> dict:
    a = result.arrays
    ts = a["energy_ts"]
    figs = {
        "energy": plots.coordinates_vs_time(
            ts,
            np.stack([energy(a["energy_sa_x"], 1.0), energy(a["energy_usa_x"], 1.0)], 1),
            levels={},
            ylabel=r"$E_\beta(x(t))$",
            title="E_beta increases along SA and USA (beta = 1)",
        ),
    }
    xs = a["hemi_x"]
    gap = 1 - (xs @ unit_rows(xs[-1].mean(0))).min(1)
    figs["hemisphere"] = plots.distance_log(a["hemi_ts"], gap, ylabel=r"$1 - \min_i \langle x_i(t), x^*\rangle$", title="hemisphere start: rate 2")
    xs = a["orth_sa_x"]
    n = xs.shape[-1]
    off = np.einsum("tid,tjd->tij", xs, xs)[:, ~np.eye(n, dtype=bool)]
    fig = plots.coordinates_vs_time(
        a["orth_ts"], off, levels={}, ylabel=r"$\langle x_i(t), x_j(t)\rangle$", title="orthogonal start: all pairs follow rho(t)"
    )
    fig.axes[0].plot(a["orth_ts"], theory.equiangular(1.0, n, a["orth_ts"]), "--", color="#D55E00", lw=2, label="rho(t), the equiangular ODE")
    fig.axes[0].legend(fontsize=9)
    figs["orthogonal"] = fig
    ts, xs = a["b4_ts"], a["b4_x"]
    sel = ts > 0
    figs["beta4_merging"] = plots.counts_vs_time(
        ts[sel],
        {f"seed {s}": [clusters.cluster_count_profile(x, [1e-3])[0] for x in xs[sel, s]] for s in range(min(6, xs.shape[1]))},
        ylabel="clusters (tol 1e-3)",
        title="beta = 4: metastable clusters merge by 10 e^{2 beta}",
        logx=True,
    )
    return figs


def movies(result: Result, folder: Path) -> list:
    a = result.arrays
    keep = a["b1_ts"] <= 60
    return [plots.points_movie(folder / "sphere.gif", a["b1_ts"][keep], a["b1_x"][keep, 0], title="sphere, beta = 1", variable="x")]
