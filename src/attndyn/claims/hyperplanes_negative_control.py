"""Negative control for Thm 4.2: a complex leading eigenvalue pair; the paper expects no clustering (arXiv 2305.05465 §4)."""

from __future__ import annotations

import numpy as np

import attndyn as ad
from attndyn.analysis import clusters, spectra
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every, report, simulate_batch
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="hyperplanes-negative-control",
    paper_ref="arXiv:2305.05465v6 §4 (the remark after Theorem 4.2: a complex leading eigenvalue)",
    title="Negative control: complex leading eigenvalues",
    statement=(
        "When the eigenvalue of V of largest modulus is complex, Thm 4.2 does not apply and the paper says 'we do not expect "
        "any clustering to occur'. The control must be one: Q^T K is not rotation invariant (with Q = K = I a rotation-scaling "
        "V leaves the logits of V = aI and the tokens converge). We judge that regime() does not call this triple 'hyperplanes' "
        "and that the rescaled tokens keep moving: the movement over [T-1, T] is at least a tenth of that over [T/2-1, T/2], "
        "for every seed. We also report a contrasting V (a = 0.5: growth faster than rotation) where the tokens do converge."
    ),
    hypotheses="V = [[a, -b], [b, a]] (eigenvalues a +- ib, a = 0.1, b = 1), Q = I, K = [[1, 0.3], [0.3, 0.4]] (SPD, anisotropic), z0 ~ U[-5, 5]^2.",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    a: float = 0.1
    b: float = 1.0
    a_contrast: float = 0.5
    n: int = 20
    seeds: int = 20
    T: float = 30.0
    dt: float = 0.01
    # the perturbation the regime test makes: V = [[a + split, -b], [b, a - split]], whose eigenvalues
    # a +- sqrt(split^2 - b^2) are real once split > b (0 is the claim)
    split: float = 0.0


QUICK: dict = {}
QK = [[1.0, 0.3], [0.3, 0.4]]


def value_matrix(a: float, b: float, split: float = 0.0) -> np.ndarray:
    return np.array([[a + split, -b], [b, a - split]])


def run(config: Config) -> Result:
    """Simulate the control and the contrast; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    arrays = {}
    for key, a in (("", config.a), ("contrast_", config.a_contrast)):
        V = value_matrix(a, config.b, config.split)
        model = ad.Model(ad.Weights(np.eye(2), np.array(QK), V), rescaled=True)
        saves = int(config.T * 10) + 1
        ts, zs = simulate_batch(model, rng.uniform(-5, 5, (config.seeds, config.n, 2)), config.T, dt=config.dt, saves=saves, engine=config)
        arrays |= {f"{key}ts": ts, f"{key}z": zs, f"{key}V": V}
    arrays["QK"] = np.array(QK)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def movement(ts: np.ndarray, zs: np.ndarray, t: float) -> np.ndarray:
    """max_i |z_i(t) - z_i(t - 1)| per seed."""
    k, k1 = np.searchsorted(ts, t), np.searchsorted(ts, t - 1.0)
    return np.linalg.norm(zs[k] - zs[k1], axis=-1).max(-1)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    ts, zs, V, QKm = arrays["ts"], arrays["z"], arrays["V"], arrays["QK"]
    T = float(ts[-1])
    late, mid = movement(ts, zs, T), movement(ts, zs, T / 2)
    counts = [clusters.cluster_count_profile(zs[-1, s], [1e-3])[0] for s in range(zs.shape[1])]
    contrast = movement(arrays["contrast_ts"], arrays["contrast_z"], float(arrays["contrast_ts"][-1]))
    checks = {
        "regime() of this triple is not 'hyperplanes'": every(
            [spectra.regime(ad.Weights(np.eye(2), QKm, V)).name != "hyperplanes"],
            detects="V's pair made real by 1e-6 past the boundary (eigenvalues 0.1 +- 0.0014: a good triple)",
        ),
        "movement over [T-1, T] >= 0.1 x movement over [T/2-1, T/2] (no decay): failing seeds": every(
            late >= 0.1 * mid, detects="a = 0.25 instead of 0.1 (growth outpaces the rotation and the tokens settle)"
        ),
        "movement over [T/2-1, T/2] >= 1e-2 (the tokens move at all): failing seeds": every(
            mid >= 1e-2, detects="V = 0.5 I in place of the rotation (a polytope case: the tokens settle by T/2)"
        ),
        "median number of clusters of z(T) at tol 1e-3": report(np.median(counts)),
        "contrast a = 0.5: median max_i |z_i(T) - z_i(T-1)| (the tokens converge: the expectation is not universal)": report(np.median(contrast)),
    }
    return checks, {"counts": [int(c) for c in counts], "moved_late": late.tolist(), "moved_mid": mid.tolist()}


def figures(result: Result) -> dict:
    a = result.arrays
    return {
        "trajectories": plots.paths_with_hulls(
            a["ts"], a["z"][:, 0], title="complex leading pair, anisotropic Q^T K: z-paths (one seed)", limit_label=None
        )
    }
