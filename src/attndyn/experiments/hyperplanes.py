"""Thm 4.2 (l:3hyperplanes11): a good triple -> phi_1*(z_i) converges to {a, 0, b} (SPEC §2.4, §4.5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.linalg as sla

import attndyn as ad

from .. import clusters, geometry, matrices, plots, spectra
from .common import ClaimInfo, ExperimentConfig, Result, at_most, fraction, simulate_batch

CLAIM = ClaimInfo(
    id="hyperplanes",
    paper_ref="arXiv:2305.05465v6 Def. 4.1 (d:good), Thm 4.2 (l:3hyperplanes11); proof in §9",
    title="Good triples: clustering toward at most three parallel hyperplanes",
    statement=(
        "If the eigenvalue of V of largest modulus is real, positive and simple (lambda_1, eigenvector phi_1, left "
        "eigenvector phi_1*) and <Q phi_1, K phi_1> > 0, then every phi_1*(z_i(t)) converges, and the limits lie in "
        "{a, 0, b} with a = lim min_j phi_1*(z_j), b = lim max_j phi_1*(z_j): the tokens approach at most three parallel "
        "hyperplanes orthogonal to phi_1*. z itself may diverge along other directions."
    ),
    hypotheses="(Q, K, V) a good triple (Def. 4.1); Q^T K need not be positive definite.",
    kind="pass/fail",
)

V2 = matrices.V2()
V3A = matrices.V3A()
V3B = matrices.V3B()


class Config(ExperimentConfig):
    cases: list[str] = ["V2", "V3a", "V3b", "perron2", "perron3", "V2-indefinite-QK"]
    n: int = 30
    seeds: int = 20
    T_V2: float = 15.0
    T_V3: float = 40.0
    dt: float = 0.01


QUICK = {"seeds": 8, "n": 16, "cases": ["V2", "V3a", "perron2", "V2-indefinite-QK"]}
LIMIT_TOL = 1e-3


def case(name: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """(V, Q^T K, T-key) of a named case."""
    if name == "V2":
        return np.array(V2), np.eye(2), "T_V2"
    if name == "V3a":
        return np.array(V3A), np.eye(3), "T_V3"
    if name == "V3b":
        return np.array(V3B), np.eye(3), "T_V3"
    if name.startswith("perron"):
        d = int(name[-1])
        return np.abs(rng.uniform(0, 1, (d, d))), np.eye(d), "T_V2"
    if name == "V2-indefinite-QK":
        # indefinite, non-symmetric Q^T K with <Q phi_1, K phi_1> > 0
        _, _, phi = geometry.left_eigenvector(np.array(V2))
        B = np.array([[1.0, 2.5], [-1.5, -1.0]])
        assert phi @ B @ phi > 0
        assert np.linalg.eigvalsh((B + B.T) / 2).min() < 0
        return np.array(V2), B, "T_V2"
    raise ValueError(f"unknown hyperplanes case {name!r}")


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    fails = {k: [] for k in ("a", "b", "c", "d", "bounded", "regime")}
    growth, kept, rows = [], {}, []
    for name in config.cases:
        V, B, tkey = case(name, rng)
        d = len(V)
        phi_star, lam1, phi = geometry.left_eigenvector(V)
        T = getattr(config, tkey) if not name.startswith("perron") else round(max(config.T_V2, 20.0 / lam1))
        model = ad.Model(ad.Weights(np.eye(d), B, V), rescaled=True)
        fails["regime"].append(spectra.regime(model.weights).name != "hyperplanes")
        # Fixed-step RK4 (SPEC §4.0 reference): with V3a the argmax inside a cluster chatters as the complex pair
        # rotates (logit gaps ~e^{lambda_1 t} against cross terms ~e^{0.94 t}), and adaptive steps collapse to ~1e-9 near t = 33.
        ts, zs = simulate_batch(model, rng.uniform(-5, 5, (config.seeds, config.n, d)), T, dt=config.dt, saves=int(T * 4) + 1, engine=config)
        c = zs @ phi_star  # (T, S, n)
        k1 = np.searchsorted(ts, T - 1.0)
        tol = 1e-10 * 5
        for s in range(config.seeds):
            cs = c[:, s]
            fails["a"].append(bool((np.diff(cs.max(1)) > tol).any() or (np.diff(cs.min(1)) < -tol).any()))
            fails["b"].append(bool(np.abs(cs[-1] - cs[k1]).max() >= 1e-6))
            a, b = cs[-1].min(), cs[-1].max()
            dist = np.minimum(np.minimum(np.abs(cs[-1] - a), np.abs(cs[-1] - b)), np.abs(cs[-1])) / np.linalg.norm(phi_star)
            count = clusters.cluster_count_profile(cs[-1], [LIMIT_TOL])[0]
            fails["c"].append(bool(count > 3))
            fails["d"].append(bool(dist.max() > LIMIT_TOL))
        w = np.linalg.eigvals(V)
        if np.all(np.abs(w.imag) < 1e-12) and np.all(w.real >= 0):
            fails["bounded"].extend(np.abs(zs).max((0, 2, 3)) > 10 * 5)  # c:bounded
        if name == "V3a":
            # l:nottoofassst in x: |phi_k*(x_i(t))| e^{-|lambda_k| t} stays bounded for every k (complex k included)
            wl, vl = sla.eig(V, left=True, right=False)
            tsx = np.linspace(0, 20, 81)
            tx = ad.simulate(ad.Model(ad.Weights(np.eye(d), B, V)), zs[0, 0], tsx, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-10, atol=1e-12))
            proj = np.abs(tx.xs.numpy() @ vl.conj()) * np.exp(-np.abs(wl) * tsx[:, None, None])
            first, second = proj[tsx <= 10].max((0, 1)), proj[tsx > 10].max((0, 1))
            growth.append(float((second / first).max()))
        if name in ("V2", "V3a"):
            kept[name] = (ts, zs[:, 0], c[:, 0])
        rows.append({"case": name, "lambda_1": lam1, "T": T, "phi_star": phi_star.tolist()})
    checks = {
        "good triples classified as 'hyperplanes' by regime(): failures": at_most(sum(fails["regime"]), 0),
        "(a) max_j c_j non-increasing and min_j c_j non-decreasing: failing runs": at_most(fraction(fails["a"]), 0.0),
        "(b) |c_i(T) - c_i(T-1)| < 1e-6: failing runs": at_most(fraction(fails["b"]), 0.0),
        "(c) more than 3 distinct limits of c_i (tol 1e-3): failing runs": at_most(fraction(fails["c"]), 0.0),
        "(d) distance to the nearest of the hyperplanes {a, 0, b} > 1e-3: failing runs": at_most(fraction(fails["d"]), 0.0),
        "c:bounded (all eigenvalues real >= 0): runs where |z| exceeded 10x its initial scale": at_most(fraction(fails["bounded"]), 0.0),
    }
    if growth:
        checks["l:nottoofassst (V3a, in x): growth of sup |phi_k*(x)| e^{-|lambda_k| t} from [0,10] to [10,20]"] = at_most(max(growth), 1.0 + 1e-9)
    arrays = {}
    for name, (ts, z, c) in kept.items():
        arrays[f"ts_{name}"], arrays[f"z_{name}"], arrays[f"c_{name}"] = ts, z, c
    return Result(CLAIM, checks, config.model_dump(), arrays, {"cases": rows})


def figures(result: Result) -> dict:
    a, figs = result.arrays, {}
    for name in ("V2", "V3a"):
        if f"c_{name}" not in a:
            continue
        ts, c = a[f"ts_{name}"], a[f"c_{name}"]
        figs[f"coordinates_{name}"] = plots.coordinates_vs_time(
            ts,
            c,
            levels={"a": float(c[-1].min()), "0": 0.0, "b": float(c[-1].max())},
            ylabel="phi_1*(z_i(t))",
            title=f"{name}: hyperplane coordinates (one seed)",
        )
    if "z_V2" in a:
        fig = plots.paths_with_hulls(a["ts_V2"], a["z_V2"], title="V2: tokens approach two parallel lines (z-form)")
        phi_star, _, _ = geometry.left_eigenvector(np.array(V2))
        ax = fig.axes[0]
        xs = np.linspace(*ax.get_xlim(), 2)
        for level in (float(a["c_V2"][-1].min()), float(a["c_V2"][-1].max())):
            ax.plot(xs, (level - phi_star[0] * xs) / phi_star[1], ":", color="navy", lw=1)
        figs["trajectories_V2"] = fig
    return figs


def movies(result: Result, folder: Path) -> list:
    if "z_V2" not in result.arrays:
        return []
    return [plots.points_movie(folder / "hyperplanes_V2.gif", result.arrays["ts_V2"], result.arrays["z_V2"], title="Thm 4.2, V2")]
