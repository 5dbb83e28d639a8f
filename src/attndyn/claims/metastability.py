"""Metastability: the energy staircase and the pairing phase (Geshkovski, Koubbi, Polyanskiy,
Rigollet, arXiv 2410.06833)."""

from __future__ import annotations

import math

import numpy as np

import attndyn as ad
from attndyn.analysis import metastability as ms
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, at_most, every, every_within, report, unit_rows
from attndyn.core.longtime import simulate_long
from attndyn.theory import closed_forms as theory
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="metastability",
    paper_ref="arXiv:2410.06833 (dynamic metastability in self-attention)",
    title="Metastability: an energy staircase at sum m_a^2, and the pairing phase",
    statement=(
        "On the sphere at large beta, tokens sit in clusters for times of order e^{beta (1 - cos theta)} before two of "
        "them merge. Judged: (i) on every plateau of the normalised energy E(t) = n^-2 sum_ij e^{beta(<x_i, x_j> - 1)} "
        "lasting at least 2 decades of t, |E - sum_a m_a^2| <= 1e-3 with m_a the cluster masses measured at the "
        "plateau's middle (single linkage at distance 1e-3); (ii) in the rescaled time s = int e^{-beta (1 - c)} dt the "
        "closest pair's cosine follows tanh(2 s + artanh c_0) to 1e-3 while beta (1 - c) >= 10 (beyond that the law's "
        "e^{-beta(1-c)} corrections are not small); (iii) every plateau between the first and the last grows (in "
        "decades) as beta grows, from the same start; (iv) no interaction that the runs needed fell below the float64 "
        "range (largest logit gap < 745)."
    ),
    hypotheses=(
        "Q = K = V = I on S^2, n = 5, one random start for every beta. The authors used beta from 500 to 4000; from a start "
        "spread over the sphere beta (1 - cos theta) reaches 2 beta, so float64 (e^{-745}) allows beta up to about 370: the "
        "full run takes beta = 50, 100, 200, 300, the quick run 40, 80, 160. The pairing start holds a pair at cosine 0.5 "
        "and three tokens at cosine <= 0 to it and to each other (a unique closest pair, equal masses), at beta = 200. "
        "Integrated by attndyn.core.longtime.simulate_long (Dopri5 at rtol 1e-10 on the cancellation-free field, tokens merged "
        "below 1e-9)."
    ),
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 5
    d: int = 3
    betas: list[float] = [50.0, 100.0, 200.0, 300.0]
    saves: int = 400
    pair_beta: float = 200.0
    pair_c0: float = 0.5
    level_tol: float = 1e-3
    min_decades: float = 2.0
    law_tol: float = 1e-3
    law_margin: float = 10.0


QUICK = {"betas": [40.0, 80.0, 160.0], "saves": 200}


def pair_start(c0: float) -> np.ndarray:
    """A pair at cosine ``c0`` in the (e1, e2) plane, and -e1, e3, -e3 (cosine <= 0 to the pair and each other)."""
    half = math.acos(c0) / 2
    return np.array([[math.cos(half), math.sin(half), 0], [math.cos(half), -math.sin(half), 0], [-1, 0, 0], [0, 0, 1], [0, 0, -1]], dtype=np.float64)


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    x0 = unit_rows(rng.normal(size=(config.n, config.d)))
    arrays = {"start": x0, "betas": np.array(config.betas)}
    gaps = []
    for k, beta in enumerate(config.betas):
        model = ad.Model(ad.Weights.identity(config.d), beta=beta, geometry="sphere")
        # log-spaced from e^-3 to past the last merge (cosines >= -1: merges by e^{2 beta + 10})
        ts = np.concatenate([[0.0], np.exp(np.linspace(-3.0, min(2 * beta + 10, 690.0), config.saves))])
        traj = simulate_long(model, x0, ts)
        arrays[f"ts{k}"], arrays[f"energy{k}"] = ts, ms.normalized_energy(traj.xs, beta)
        arrays[f"xs{k}"] = traj.xs
        gaps.append(traj.stats["logit_gap"])
    arrays["logit_gap"] = np.array(gaps)
    c0, beta = config.pair_c0, config.pair_beta
    model = ad.Model(ad.Weights.identity(3), beta=beta, geometry="sphere")
    # the whole pairing phase lies within one float64 rounding of t ~ e^{beta (1 - c0)}: read it off the
    # accepted steps (exact states and clock) rather than off save times
    ts = np.array([0.0, 10.0 * math.exp(beta * (1 - c0))])
    traj = simulate_long(model, pair_start(c0), ts, clock_pair=(0, 1), every_step=True)
    arrays["pair_s"] = traj.steps["clock"]
    arrays["pair_c"] = (traj.steps["xs"][:, 0] * traj.steps["xs"][:, 1]).sum(-1)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def _cases(arrays: dict) -> list[int]:
    return sorted(int(k[6:]) for k in arrays if k.startswith("energy") and k[6:].isdigit())


def plateau_table(arrays: dict, config: Config) -> list[dict]:
    """Every plateau of every run: beta, start, end, level, sum m^2 at its middle, first/last flags."""
    rows = []
    for k in _cases(arrays):
        ts, E, xs = arrays[f"ts{k}"], arrays[f"energy{k}"], arrays[f"xs{k}"]
        found = ms.plateaus(ts, E, tol=config.level_tol, min_decades=config.min_decades)
        for p in found:
            mid = int(np.searchsorted(ts, math.exp(0.5 * (math.log(p.start) + math.log(p.end)))))  # (start * end can overflow)
            m = ms.cluster_masses(xs[min(mid, len(ts) - 1)], 1e-3)
            rows.append(
                {
                    "beta": float(arrays["betas"][k]),
                    "start": p.start,
                    "end": p.end,
                    "decades": p.decades,
                    "level": p.level,
                    "sum_m2": float(np.sum(m**2)),
                    "edge": bool(p.start <= ts[1] or p.end >= ts[-1]),
                }
            )
    return rows


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    rows = plateau_table(arrays, config)
    gaps = [abs(r["level"] - r["sum_m2"]) for r in rows]
    checks = {
        f"every plateau of >= {config.min_decades:g} decades: |E - sum m_a^2|": every_within(gaps, 0.0, config.level_tol, f"{len(rows)} plateaus"),
    }
    # (ii) the pairing law while beta (1 - c) >= margin
    beta, c, s = config.pair_beta, arrays["pair_c"], arrays["pair_s"]
    keep = beta * (1 - c) >= config.law_margin
    dev = np.abs(c - theory.pairing_cosine(s, c[0]))[keep]
    checks[f"pairing at beta = {beta:g}: max |c(s) - tanh(2 s + artanh c0)| while beta (1 - c) >= {config.law_margin:g}"] = at_most(
        float(dev.max()) if dev.size else float("nan"), config.law_tol, f"{int(keep.sum())} accepted steps", n=int(keep.sum())
    )
    # (iii) interior plateaus, matched by level across betas, lengthen with beta. A level may be
    # missing at the smaller betas (shorter than min_decades there), never after it has appeared.
    betas = sorted(float(b) for b in arrays["betas"])
    interior = [r for r in rows if not r["edge"]]
    levels = sorted({round(r["level"], 2) for r in interior})
    grows, detail = [], []
    for level in levels:
        by_beta = {r["beta"]: r["decades"] for r in interior if round(r["level"], 2) == level}
        seq = [by_beta.get(b) for b in betas]
        first = next(i for i, v in enumerate(seq) if v is not None)
        after = seq[first:]
        present = [v for v in after if v is not None]
        ok = len(present) == len(after) and all(b > a for a, b in zip(present[:-1], present[1:], strict=True))
        if len(present) >= 2 or not ok:
            grows.append(ok)
            detail.append(f"{level:.2f}: " + ", ".join("-" if v is None else f"{v:.1f}" for v in seq))
    checks["interior plateaus: length in decades grows with beta (each level seen at >= 2 betas)"] = every(grows, "; ".join(detail))
    gap = arrays["logit_gap"]
    checks["largest logit gap (float64 range 745)"] = every_within(gap, 0.0, 745.0)
    seen = sorted({round(r["level"], 2) for r in rows})
    checks["plateau levels seen, over all betas"] = report(len(seen), ", ".join(f"{lv:.2f}" for lv in seen))
    return checks, {"plateaus": rows}


def figures(result: Result) -> dict:
    a = result.arrays
    # against log10 t: the times reach 1e300, past where matplotlib's log axis overflows
    series = {f"beta = {a['betas'][k]:g}": (np.log10(a[f"ts{k}"][1:]), a[f"energy{k}"][1:]) for k in _cases(a)}
    n = int(result.params["n"])
    stair = plots.curves(
        None,
        series,
        xlabel="log10 t",
        ylabel="normalised energy E(t)",
        title=f"energy staircase, n = {n}: plateaus at sum m_a^2 (dotted: every level)",
        hlines={f"{level:.2f}": level for level in theory.staircase_levels(n)},
    )
    c, s = a["pair_c"], a["pair_s"]
    beta = float(result.params["pair_beta"])
    phase = c <= 1 - 1e-4  # the pairing phase; afterwards s grows like t
    sp, cp = s[phase], c[phase]
    every = max(1, len(sp) // 60)
    ss = np.linspace(0, sp.max(), 300)
    pairing = plots.curves(
        ss,
        {"tanh(2 s + artanh c0)": theory.pairing_cosine(ss, c[0])},
        xlabel=r"rescaled time $s = \int e^{-\beta (1 - c)}\,dt$",
        ylabel="cosine c of the closest pair",
        title=f"pairing phase at beta = {beta:g} (judged below the dotted line)",
        points={"simulated (accepted steps)": (sp[::every], cp[::every])},
        hlines={f"beta (1 - c) = {result.params['law_margin']:g}": 1 - float(result.params["law_margin"]) / beta},
    )
    return {"staircase": stair, "pairing": pairing}
