"""Metastability: the energy staircase and the pairing phase (Geshkovski, Koubbi, Polyanskiy,
Rigollet, arXiv 2410.06833)."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field
from scipy.interpolate import CubicSpline

import attndyn as ad
from attndyn.analysis import metastability as meta
from attndyn.claims.common import Check, ClaimInfo, ExperimentConfig, Result, at_most, every_within, report, unit_rows
from attndyn.core.longtime import simulate_long
from attndyn.theory import closed_forms as theory
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="metastability",
    paper_ref="arXiv:2410.06833 (dynamic metastability in self-attention)",
    title="Metastability: an energy staircase at sum m_a^2, and the pairing phase",
    statement=(
        "On the sphere at large beta, tokens sit in clusters for times of order e^{beta (1 - cos theta)} before two of "
        "them merge. Judged: (i) every merge's waiting time: ln(t - t_previous) at the last accepted step before the merge "
        "against the isolated two-cluster law from the state after the previous merge to the distance the pair holds at "
        "that step (the exact ODE c' = (1 - c^2)(A_ab + A_ba) of two point clusters, whose leading term is "
        "e^{beta (1 - c0)} / (beta (1 - c0^2) k) with k = m_b/m_a + m_a/m_b), for every merge whose "
        "plateau is long (beta (1 - c0) >= 20) and whose other interactions are below 1e-3 of the merging pair's, within 3x "
        "the largest integration error (the change of that difference under a 10x tighter run) plus that neglected "
        "fraction (the merge time itself overshoots the merge distance by up to one step, h / t in ln t); (ii) in the rescaled time "
        "s = int e^{-beta (1 - c)} dt the closest pair's cosine follows the exact pair law, tanh(2 s + artanh c0) with its "
        "finite-beta factor, within 3x its integration error while beta (1 - c) >= 10; (iii) no interaction that the "
        "runs needed fell below the float64 range (largest logit gap < 745); (iv) the published figure's model, USA on the "
        "circle from the authors' five-token start at their beta = 500 to 4000, integrated in their time tau = e^beta t: "
        "its merges against the same two-cluster law (USA weights e^{beta c} / n), judged as in (i); (v) the law's mass "
        "factor: a merge of a two-token cluster with one token (SA, at the pairing beta), judged as in (i). Reported: the energy plateaus' distance "
        "from sum_a m_a^2 (an identity for merged point clusters), the tanh law's own deviation, and the plateau lengths "
        "in decades by level and beta."
    ),
    hypotheses=(
        "Q = K = V = I on S^2 (SA), n = 5, one random start for every beta; USA on S^1 from the authors' start "
        "0.5 (0, 0.5, 2, 4, 7) log(2000) / sqrt(2000) (its spread, beta (1 - cos 0.595) = 0.172 beta, stays in float64 up to "
        "beta = 4000). The authors used beta from 500 to 4000; from a start "
        "spread over the sphere beta (1 - cos theta) reaches 2 beta, so float64 (e^{-745}) allows beta up to about 370: the "
        "full run takes beta = 50, 100, 200, 300, the quick run 40, 80, 160. The pairing start holds a pair at cosine 0.5 "
        "and three tokens at cosine <= 0 to it and to each other (a unique closest pair, equal masses), at beta = 200; the "
        "unequal-mass start puts two identical tokens (mass 2) at cosine 0.5 to a third and e3, -e3 at cosine 0 to both. "
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
    law_margin: float = 10.0
    # the published figure's model (USA on the circle, the authors' start and betas)
    usa_betas: list[float] = [500.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0]
    # the perturbation the sensitivity tests make: the runs' beta times beta_factor (the judge uses beta)
    beta_factor: float = Field(1.0, gt=0)


QUICK = {"betas": [40.0, 80.0, 160.0], "saves": 200, "usa_betas": [500.0, 2000.0]}


def pair_start(c0: float) -> np.ndarray:
    """A pair at cosine ``c0`` in the (e1, e2) plane, and -e1, e3, -e3 (cosine <= 0 to the pair and each other)."""
    half = math.acos(c0) / 2
    return np.array([[math.cos(half), math.sin(half), 0], [math.cos(half), -math.sin(half), 0], [-1, 0, 0], [0, 0, 1], [0, 0, -1]], dtype=np.float64)


ROUNDING = 64 * float(np.finfo(np.float64).eps)
DETECTS_BETA = "beta off by 1e-9 in the runs (the judge uses beta)"
# tested at the quick USA betas (500, 2000) and the test size's (500, 1000): beta off by 1e-9 moves the worst judged
# merge by 1.9 to 2.2 of its budget at quick (seed 0)
DETECTS_USA = "beta off by 1e-9 in the USA runs (betas 500, 2000 and 500, 1000)"
DETECTS_MASS = "beta off by 1e-9 in the run; the law's mass factor replaced by equal masses' (k = 2 in place of 5/2)"
DETECTS_PAIR = "beta off by 1e-4 in the pairing run"
TIGHT = {"rtol": 1e-11, "atol": 1e-13}  # the step-halving stand-in: the same runs at a 10x tighter tolerance
MERGE_U = 0.5e-18  # 1 - cos at simulate_long's merge distance 1e-9
# a merge is judged when its plateau is long (beta (1 - c0) >= LAW_FROM) and every other interaction is below ISOLATION
# times the merging pair's; that fraction, e^{-beta (c0 - c_other)}, enters its budget as the law's neglected part
ISOLATION = 1e-3
LAW_FROM = 20.0


def _merge_arrays(traj, key: str, tag: str = "") -> dict:
    """A run's merges as arrays: times, tokens, the state just after each merge, and the last accepted step before
    it (its time and state). simulate_long merges at the end of the step at which the pair came closer than its
    merge distance, so the merge time overshoots the crossing by up to one step (h / t in ln t, up to 7e-8 at quick
    size, more than the two tolerance runs' difference); the step before is an exact state at an exact time, and the
    law is integrated to the distance it holds."""
    t, xs = traj.steps["t"], traj.steps["xs"]
    # the step of merge m: the first at which m + 1 tokens share another's position (merged tokens share it exactly).
    # Not by time: past t ~ 1e16 a step shorter than t's rounding leaves t unchanged, so several steps share one t.
    n = xs.shape[1]
    same = (xs[:, :, None, :] == xs[:, None, :, :]).all(-1) & np.tril(np.ones((n, n), dtype=bool), -1)
    merged = same.any(-1).sum(-1)
    idx = [int(np.argmax(merged >= m + 1)) for m in range(len(traj.merges))]
    empty = np.empty((0, *traj.xs.shape[1:]))
    return {
        f"{key}merge_t{tag}": np.array([m[0] for m in traj.merges]),
        f"{key}merge_tokens{tag}": np.array([m[1:] for m in traj.merges], dtype=np.int64).reshape(-1, 2),
        f"{key}after_merge{tag}": np.stack([traj.steps["xs"][i] for i in idx]) if idx else empty,
        f"{key}before_merge{tag}": np.stack([traj.steps["xs"][i - 1] for i in idx]) if idx else empty,
        f"{key}before_merge_t{tag}": np.array([t[i - 1] for i in idx]),
    }


def authors_start() -> np.ndarray:
    """The start of the published staircase (arXiv 2410.06833, the authors' staircase.py): five tokens on the circle at angles
    0.5 (0, 0.5, 2, 4, 7) log(2000) / sqrt(2000), computed once with beta = 2000 and used for every beta."""
    theta = 0.5 * np.array([0.0, 0.5, 2.0, 4.0, 7.0]) * math.log(2000) / math.sqrt(2000)
    return np.stack([np.cos(theta), np.sin(theta)], 1)


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    x0 = unit_rows(rng.normal(size=(config.n, config.d)))
    arrays = {"start": x0, "betas": np.array(config.betas)}
    gaps = []
    for k, beta in enumerate(config.betas):
        model = ad.Model(ad.Weights.identity(config.d), beta=beta * config.beta_factor, geometry="sphere")
        # log-spaced from e^-3 to past the last merge (cosines >= -1: merges by e^{2 beta + 10})
        ts = np.concatenate([[0.0], np.exp(np.linspace(-3.0, min(2 * beta + 10, 690.0), config.saves))])
        traj = simulate_long(model, x0, ts, every_step=True)
        tight = simulate_long(model, x0, ts, every_step=True, **TIGHT)
        arrays[f"ts{k}"], arrays[f"energy{k}"] = ts, meta.normalized_energy(traj.xs, beta)
        arrays[f"xs{k}"] = traj.xs
        arrays |= _merge_arrays(traj, "", f"{k}") | _merge_arrays(tight, "", f"_tight{k}")
        gaps.append(traj.stats["logit_gap"])
    # USA on the circle from the authors' five-token start, in tau = e^beta t (their time; t leaves float64 at beta > 709)
    x0 = authors_start()
    arrays |= {"usa_start": x0, "usa_betas": np.array(config.usa_betas)}
    spread = float(1 - (x0 @ x0.T).min())
    for k, beta in enumerate(config.usa_betas):
        model = ad.Model(ad.Weights.identity(2), beta=beta * config.beta_factor, geometry="sphere", normalization="unnormalized")
        taus = np.concatenate([[0.0], np.exp(np.linspace(-3.0, min(beta * spread + 10, 700.0), config.saves))])
        traj = simulate_long(model, x0, taus, every_step=True, rescaled_time=True)
        tight = simulate_long(model, x0, taus, every_step=True, rescaled_time=True, **TIGHT)
        arrays[f"usa_ts{k}"], arrays[f"usa_energy{k}"], arrays[f"usa_xs{k}"] = taus, meta.normalized_energy(traj.xs, beta), traj.xs
        arrays |= _merge_arrays(traj, "usa_", f"{k}") | _merge_arrays(tight, "usa_", f"_tight{k}")
        gaps.append(traj.stats["logit_gap"])
    arrays["logit_gap"] = np.array(gaps)
    c0, beta = config.pair_c0, config.pair_beta
    model = ad.Model(ad.Weights.identity(3), beta=beta * config.beta_factor, geometry="sphere")
    # the whole pairing phase lies within one float64 rounding of t ~ e^{beta (1 - c0)}: read it off the
    # accepted steps (exact states and clock) rather than off save times
    ts = np.array([0.0, 10.0 * math.exp(beta * (1 - c0))])
    for key, tol in (("pair", {}), ("pair_tight", TIGHT)):
        traj = simulate_long(model, pair_start(c0), ts, clock_pair=(0, 1), every_step=True, **tol)
        arrays[f"{key}_s"] = traj.steps["clock"]
        arrays[f"{key}_c"] = (traj.steps["xs"][:, 0] * traj.steps["xs"][:, 1]).sum(-1)
    # an unequal-mass merge (SA): a cluster of two identical tokens and one token at cosine pair_c0 (the equal-mass
    # merges of the random starts never test the law's mass factor k = m_b/m_a + m_a/m_b)
    x0 = mass_start(c0)
    ts = np.concatenate([[0.0], np.exp(np.linspace(-3.0, beta * (1 - c0) + 5.0, config.saves))])
    traj = simulate_long(model, x0, ts, every_step=True)
    tight = simulate_long(model, x0, ts, every_step=True, **TIGHT)
    arrays |= {"mass_start": x0, "mass_betas": np.array([beta]), "mass_ts0": ts, "mass_energy0": meta.normalized_energy(traj.xs, beta)}
    arrays |= _merge_arrays(traj, "mass_", "0") | _merge_arrays(tight, "mass_", "_tight0")
    arrays["logit_gap"] = np.append(arrays["logit_gap"], traj.stats["logit_gap"])
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def mass_start(c0: float) -> np.ndarray:
    """Two identical tokens at e1 (a point cluster of mass 2), one token at cosine ``c0`` to them in the (e1, e2) plane
    (mass 1), and e3, -e3 (cosine 0 to both, so their interactions are e^{-beta c0} of the merging pair's)."""
    half = math.acos(c0)
    return np.array([[1, 0, 0], [1, 0, 0], [math.cos(half), math.sin(half), 0], [0, 0, 1], [0, 0, -1]], dtype=np.float64)


def _clusters(X: np.ndarray) -> tuple[list[int], np.ndarray]:
    """simulate_long gives merged tokens one position: the first token of each point, and each token's point."""
    heads, label = [], np.empty(len(X), dtype=int)
    for i, x in enumerate(X):
        match = next((h for h, y in enumerate(heads) if np.abs(X[y] - x).max() < 1e-12), None)
        label[i] = len(heads) if match is None else match
        if match is None:
            heads.append(i)
    return heads, label


def _plateau(arrays: dict, prefix: str, k: int, m: int, tag: str, usa: bool) -> dict:
    """Merge ``m`` of run ``k`` (``tag`` "" or "_tight"): the two-cluster law from the state just after the previous
    merge to the distance the pair holds at the last accepted step before merge m, against that step's time."""
    beta = float(arrays[f"{prefix}betas"][k])
    times, tokens = arrays[f"{prefix}merge_t{tag}{k}"], arrays[f"{prefix}merge_tokens{tag}{k}"]
    X = arrays[f"{prefix}start"] if m == 0 else arrays[f"{prefix}after_merge{tag}{k}"][m - 1]
    t_prev = 0.0 if m == 0 else float(times[m - 1])
    heads, label = _clusters(X)
    i, j = (int(v) for v in tokens[m])
    a, b = label[i], label[j]
    mass = np.bincount(label)
    Y = X[heads]
    C = Y @ Y.T
    c0 = float(C[a, b])
    others = [C[p, q] for p in range(len(heads)) for q in range(p + 1, len(heads)) if {p, q} != {a, b}]
    isolation = max((math.exp(-beta * (c0 - c)) for c in others), default=0.0)
    end = arrays[f"{prefix}before_merge{tag}{k}"][m]
    u_end = 0.5 * float(np.sum((end[i] - end[j]) ** 2))  # 1 - cos without cancellation (unit rows)
    gap = float(arrays[f"{prefix}before_merge_t{tag}{k}"][m]) - t_prev
    row = {"beta": beta, "merge": m, "masses": (int(mass[a]), int(mass[b])), "c0": c0, "isolation": isolation, "u_end": u_end}
    row["log_dt"] = math.log(gap) if gap > 0 else -math.inf
    ok = 0 < u_end < 1 - c0 and c0 < 1 - 1e-12 and gap > 0
    law = theory.pair_log_time(beta, c0, mass[a], mass[b], u_end=u_end, n=len(X), usa=usa) if ok else math.nan
    row["law"] = law + beta if usa else law  # USA: ln tau = beta + ln t
    return row


def merge_table(arrays: dict, config: Config, prefix: str = "") -> list[dict]:
    """Every merge of every run with its plateau: the time from the previous merge to the last accepted step before
    this one, against the isolated two-cluster law (theory.pair_log_time) from the state just after the previous
    merge to the distance the pair holds at that step. For the USA runs (``prefix`` "usa_") times are tau = e^beta t
    and so is the law. ``integration``: the change of (ln dt - law) from the 10x tighter run (the law's neglected
    part is the same in both, so the difference is the integration error's)."""
    rows = []
    usa = prefix == "usa_"
    for k in _cases(arrays, prefix):
        tokens, tight_tokens = arrays[f"{prefix}merge_tokens{k}"], arrays[f"{prefix}merge_tokens_tight{k}"]
        same = tokens.shape == tight_tokens.shape and bool(np.all(tokens == tight_tokens))
        for m in range(len(tokens)):
            row = _plateau(arrays, prefix, k, m, "", usa)
            other = _plateau(arrays, prefix, k, m, "_tight", usa) if same else None
            row["integration"] = abs((row["log_dt"] - row["law"]) - (other["log_dt"] - other["law"])) if other is not None else math.inf
            if not np.isfinite(row["integration"]):
                row["integration"] = math.inf
            rows.append(row)
    return rows


def _cases(arrays: dict, prefix: str = "") -> list[int]:
    key = f"{prefix}energy"
    return sorted(int(k[len(key) :]) for k in arrays if k.startswith(key) and k[len(key) :].isdigit())


def plateau_table(arrays: dict, config: Config, prefix: str = "") -> list[dict]:
    """Every plateau of every run (``prefix`` "usa_": the USA runs): beta, start, end, level, sum m^2 at its middle, first/last flags."""
    rows = []
    for k in _cases(arrays, prefix):
        ts, E, xs = arrays[f"{prefix}ts{k}"], arrays[f"{prefix}energy{k}"], arrays[f"{prefix}xs{k}"]
        found = meta.plateaus(ts, E, tol=config.level_tol, min_decades=config.min_decades)
        for p in found:
            mid = int(np.searchsorted(ts, math.exp(0.5 * (math.log(p.start) + math.log(p.end)))))  # (start * end can overflow)
            m = meta.cluster_masses(xs[min(mid, len(ts) - 1)], 1e-3)
            rows.append(
                {
                    "beta": float(arrays[f"{prefix}betas"][k]),
                    "start": p.start,
                    "end": p.end,
                    "decades": p.decades,
                    "level": p.level,
                    "sum_m2": float(np.sum(m**2)),
                    "edge": bool(p.start <= ts[1] or p.end >= ts[-1]),
                }
            )
    return rows


def _merge_law(merges: list[dict], clock: str, detects: str) -> tuple[list[dict], Check]:
    """The judged merges (long plateaus, other interactions below ISOLATION) and the check of their waiting times
    against the two-cluster law: each over its budget, 3x the largest integration error plus its neglected fraction."""
    judged = [m for m in merges if m["isolation"] <= ISOLATION and m["beta"] * (1 - m["c0"]) >= LAW_FROM and np.isfinite(m["law"])]
    integration = max((m["integration"] for m in judged), default=math.nan)
    check = every_within(
        [abs(m["log_dt"] - m["law"]) / (3 * (integration + m["isolation"]) + ROUNDING) for m in judged],
        0.0,
        1.0,
        f"{len(judged)} of {len(merges)} merges; integration error {integration:.2g} in ln {clock}",
        cases=[f"beta = {m['beta']:g}, merge {m['merge'] + 1}" for m in judged],
        detects=detects,
    )
    return judged, check


def _pairing(s: np.ndarray, c: np.ndarray, beta: float, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """The pairing window (beta (1 - c) >= margin: a prefix of the run) and the exact pair law on it."""
    keep = beta * (1 - c) >= margin
    k = int(np.argmin(keep)) if not keep.all() else len(keep)
    return keep[:k], theory.pair_cosine_exact(s[:k], float(c[0]), beta) if k >= 2 else np.full(k, np.nan)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    rows = plateau_table(arrays, config)
    gaps = [abs(r["level"] - r["sum_m2"]) for r in rows]
    checks = {
        # an identity once the clusters are merged points (their tokens are equal, so each cluster adds m_a^2 exactly):
        # no small error moves it, so it is reported; the judged content is the merge-time law below
        f"every plateau of >= {config.min_decades:g} decades: |E - sum m_a^2|": report(
            max(gaps) if gaps else float("nan"), f"{len(rows)} plateaus; an identity for merged point clusters (finite-beta inter-cluster terms only)"
        ),
    }
    # (ii) the pairing phase against the exact isolated-pair law (the tanh law with its finite-beta factor), within
    # 3x the run's integration error (measured against a 10x tighter run, interpolated at the same clock values)
    beta, c, s = config.pair_beta, arrays["pair_c"], arrays["pair_s"]
    window, exact = _pairing(s, c, beta, config.law_margin)
    k = len(window)
    # the tight run's steps over the same window and a little past it (its tail, where s grows like t, is left out)
    ts_, tc_ = arrays["pair_tight_s"], arrays["pair_tight_c"]
    near = beta * (1 - tc_) >= config.law_margin / 2
    near[: int(np.argmin(near)) if not near.all() else len(near)] = True
    near[int(np.argmin(near)) if not near.all() else len(near) :] = False
    # (the first steps advance the clock by ~1e-47: knots closer than 1e-9 of the window would make the spline singular)
    idx = np.flatnonzero(near)
    spaced = idx[np.concatenate([[True], np.diff(np.maximum.accumulate(ts_[idx])) > 0])]
    spaced = spaced[np.concatenate([[True], np.diff(ts_[spaced]) > 1e-9 * max(ts_[spaced[-1]], 1e-300)])] if len(spaced) else spaced
    tight = CubicSpline(ts_[spaced], tc_[spaced])(s[:k]) if k >= 2 and len(spaced) >= 4 else np.full(k, np.nan)
    integration = float(np.abs(c[:k] - tight).max()) if k else float("nan")
    dev = float(np.abs(c[:k] - exact).max()) if k else float("nan")
    band = 3 * integration + ROUNDING
    checks[
        f"pairing at beta = {beta:g}: max |c(s) - exact pair law| while beta (1 - c) >= {config.law_margin:g}, within 3x the integration error"
    ] = at_most(dev, band, f"{k} accepted steps; integration error {integration:.2g}", n=k, detects=DETECTS_PAIR)
    law = theory.pairing_cosine(s[:k], c[0])
    checks[f"pairing at beta = {beta:g}: max |c(s) - tanh(2 s + artanh c0)| (the beta -> inf law) while beta (1 - c) >= {config.law_margin:g}"] = (
        report(
            float(np.abs(c[:k] - law).max()) if k else float("nan"),
            f"its finite-beta correction, from the exact pair law: {float(np.abs(exact - law).max()) if k else float('nan'):.2g}",
        )
    )
    # (iii) plateau lengths: each isolated merge's waiting time against the two-cluster law from the state after the
    # previous merge (e^{beta (1 - c0)} with its prefactor), within 3x the largest integration error of the judged merges
    merges = merge_table(arrays, config)
    judged, law_check = _merge_law(merges, "t", DETECTS_BETA)
    checks[
        f"plateau lengths: |ln(t_merge - t_previous) - ln t_law| / its budget, every merge with beta (1 - c0) >= {LAW_FROM:g} "
        "(3x the largest integration error + the neglected interactions)"
    ] = law_check
    # the same law for the published figure's USA runs, in tau = e^beta t
    usa_merges = merge_table(arrays, config, "usa_")
    checks[
        f"USA (the authors' start and betas): plateau lengths |ln(tau_merge - tau_previous) - ln tau_law| / its budget, every merge with "
        f"beta (1 - c0) >= {LAW_FROM:g}"
    ] = _merge_law(usa_merges, "tau", DETECTS_USA)[1]
    # the law's mass factor: the unequal-mass merge (2 and 1), judged the same way
    mass_merges = merge_table(arrays, config, "mass_")
    checks[
        f"unequal masses (2 and 1) at beta = {config.pair_beta:g}: |ln(t_merge - t_previous) - ln t_law| / its budget "
        "(the law's mass factor k = m_b/m_a + m_a/m_b)"
    ] = _merge_law(mass_merges, "t", DETECTS_MASS)[1]
    usa_rows = plateau_table(arrays, config, "usa_")
    usa_gaps = [abs(r["level"] - r["sum_m2"]) for r in usa_rows]
    checks[f"USA: every plateau of >= {config.min_decades:g} decades: |E - sum m_a^2|"] = report(
        max(usa_gaps) if usa_gaps else float("nan"),
        f"{len(usa_rows)} plateaus at levels " + ", ".join(f"{lv:.2f}" for lv in sorted({round(r["level"], 2) for r in usa_rows})),
    )
    checks["plateau lengths: largest |ln(t_merge - t_previous) - beta (1 - c0)| (the leading law without its prefactor)"] = report(
        max((abs(m["log_dt"] - m["beta"] * (1 - m["c0"])) for m in judged), default=float("nan")),
        "O(log beta): the prefactor 1 / (beta (1 - c0^2) k)",
    )
    # interior plateaus, matched by level across betas, lengthen with beta (reported: the law above is the judged form)
    betas = sorted(float(b) for b in arrays["betas"])
    interior = [r for r in rows if not r["edge"]]
    detail = []
    for level in sorted({round(r["level"], 2) for r in interior}):
        by_beta = {r["beta"]: r["decades"] for r in interior if round(r["level"], 2) == level}
        detail.append(f"{level:.2f}: " + ", ".join("-" if by_beta.get(b) is None else f"{by_beta[b]:.1f}" for b in betas))
    checks["interior plateaus: length in decades at each beta, by level"] = report(len(detail), "; ".join(detail))
    gap = arrays["logit_gap"]
    checks["largest logit gap (float64 range 745)"] = every_within(
        gap, 0.0, 745.0, detects="beta = 400 (interactions below e^{-745} would be dropped)"
    )
    seen = sorted({round(r["level"], 2) for r in rows})
    checks["plateau levels seen, over all betas"] = report(len(seen), ", ".join(f"{lv:.2f}" for lv in seen))
    return checks, {"plateaus": rows, "merges": merges, "usa_plateaus": usa_rows, "usa_merges": usa_merges, "mass_merges": mass_merges}


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
    usa = {f"beta = {a['usa_betas'][k]:g}": (np.log10(a[f"usa_ts{k}"][1:]), a[f"usa_energy{k}"][1:]) for k in _cases(a, "usa_")}
    usa_stair = plots.curves(
        None,
        usa,
        xlabel="log10 tau (tau = e^beta t)",
        ylabel="normalised energy E",
        title="USA from the authors' start (the published figure's model)",
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
    return {"staircase": stair, "usa_staircase": usa_stair, "pairing": pairing}
