"""Shared pieces of the claim modules: claim metadata, checks, results, batched runs.

Contract
--------
What a claim module exports is written once, in :data:`CONTRACT` (required) and :data:`OPTIONAL`
(with the default the runner applies), and checked over every claim by
``tests/claims/test_contract.py`` (:func:`contract_problems`). ``Result.checks`` maps a check name to
:class:`Check` ``(value, threshold, passed)``; for claims of kind ``report`` the verdict is
``report`` whatever the checks say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

import attndyn as ad


class ExperimentConfig(BaseModel):
    """Every claim's config: ``seed`` (required), and where the batched simulations run.

    ``device``/``dtype`` move the claim's batched runs (:func:`simulate_batch`) to a GPU or to
    float32. The checks' thresholds are float64's: a float32 run is allowed, and its verdicts say
    what float32 reaches. Small auxiliary runs (exact-identity checks) stay on the host in float64.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int
    device: str = "cpu"
    dtype: Literal["float64", "float32"] = "float64"


@dataclass(frozen=True)
class ClaimInfo:
    id: str
    paper_ref: str
    title: str
    statement: str
    hypotheses: str
    kind: str  # "pass/fail" or "report"


@dataclass(frozen=True)
class Check:
    """One numerical check: ``passed`` is None for values that are reported, not judged.

    ``n_judged`` counts the cases (seeds, rows, ratios, tokens) the verdict rests on; ``None`` for
    reported values. A judged check over zero cases fails (it would otherwise pass vacuously).
    """

    value: float
    threshold: str
    passed: bool | None
    note: str = ""
    n_judged: int | None = None
    # how far the value is inside its threshold (negative: outside), in the value's units, and which
    # case it is (for a check over many cases the value is its worst case)
    margin: float | None = None
    worst_case: str = ""
    # the stated power: the smallest physically meaningful error this check is shown (by a test that
    # runs it through the pipeline) to detect, e.g. "beta off by 5 %"
    detects: str = ""


# The claim module contract: every name a claim module must export, and what it is.
CONTRACT = {
    "CLAIM": "ClaimInfo: id (the key in attndyn.claims.EXPERIMENTS), paper reference, title, statement, hypotheses, kind",
    "Config": "a pydantic ExperimentConfig subclass (extra='forbid', seed required); its defaults are the full-size inputs",
    "QUICK": "dict of Config overrides for the quick size (reproduce --quick), possibly empty",
    "run": "run(config) -> Result: computes the arrays and the checks, no I/O",
    "judge": "judge(arrays, config) -> (checks, info): the checks as pure functions of the saved arrays (attndyn judge)",
    "figures": "figures(result) -> dict of name to Figure",
}
# Optional exports, with what the runner does without them.
OPTIONAL = {
    "available": "available() -> (ok, reason): whether the claim's data is here (default: always); a claim without it is skipped",
    "movies": "movies(result, folder) -> list of the movie files written into the run folder (default: none)",
}


def contract_problems(module: ModuleType) -> list[str]:
    """What ``module`` lacks or gets wrong of :data:`CONTRACT` (an empty list when it keeps it)."""
    problems = [f"no {name} ({what})" for name, what in CONTRACT.items() if not hasattr(module, name)]
    if problems:
        return problems
    if not isinstance(module.CLAIM, ClaimInfo) or module.CLAIM.kind not in ("pass/fail", "report"):
        problems.append(f"CLAIM is not a ClaimInfo of kind 'pass/fail' or 'report': {module.CLAIM!r}")
    if not (isinstance(module.Config, type) and issubclass(module.Config, ExperimentConfig)):
        problems.append("Config is not an ExperimentConfig subclass")
    elif not isinstance(module.QUICK, dict) or set(module.QUICK) - set(module.Config.model_fields):
        problems.append(f"QUICK is not a dict of Config fields: {module.QUICK!r}")
    for name in ("run", "judge", "figures", *OPTIONAL):
        if hasattr(module, name) and not callable(getattr(module, name)):
            problems.append(f"{name} is not callable")
    return problems


def available(module: ModuleType) -> tuple[bool, str]:
    """``module.available()`` where the claim defines it (:data:`OPTIONAL`), else available."""
    return module.available() if hasattr(module, "available") else (True, "")


NOTHING_JUDGED = "no case was judged, so the check cannot pass"


def _judged(value: float, threshold: str, ok: bool, n: int, note: str, margin: float | None = None, worst: str = "", detects: str = "") -> Check:
    value = float(value)
    if n < 1 or value != value:  # zero cases, or a NaN statistic
        why = NOTHING_JUDGED if n < 1 else "the value is NaN"
        return Check(value, threshold, False, f"{note}; {why}" if note else why, int(n), None, worst, detects)
    return Check(value, threshold, bool(ok), note, int(n), None if margin is None else float(margin), worst, detects)


def at_most(value: float, limit: float, note: str = "", *, n: int = 1, worst: str = "", detects: str = "") -> Check:
    """``value <= limit``; ``n`` is the number of cases the value summarises (e.g. a maximum over n,
    named by ``worst``); ``detects`` states the check's power (see :class:`Check`)."""
    return _judged(value, f"<= {limit:g}", value <= limit, n, note, limit - float(value), worst, detects)


def within(value: float, lo: float, hi: float, note: str = "", *, n: int = 1, worst: str = "", detects: str = "") -> Check:
    return _judged(value, f"in [{lo:g}, {hi:g}]", lo <= value <= hi, n, note, min(float(value) - lo, hi - float(value)), worst, detects)


def one_of(value: float, allowed: list[int], note: str = "", *, detects: str = "") -> Check:
    """``value`` is one of the integers ``allowed`` (a set the run derives, e.g. the modes it cannot resolve)."""
    text = "in {" + ", ".join(str(a) for a in allowed) + "}"
    return _judged(value, text, float(value) in [float(a) for a in allowed], 1 if allowed else 0, note, detects=detects)


def every(
    ok: np.ndarray | list,
    note: str = "",
    *,
    cases: list[str] | None = None,
    detects: str = "",
    values: np.ndarray | list | None = None,
    limits: np.ndarray | list | float | None = None,
) -> Check:
    """Judge every case: ``ok`` holds one flag per case (True = the theorem's statement holds).

    The value is the number of failing cases; the check passes when it is 0 of at least 1. Without
    ``values`` the first failing case is named (by ``cases[k]`` when given) and the margin is minus
    the count. With ``values`` and ``limits`` (each case's own measured quantity and the bound it
    must stay at or below), the worst case is the one with the largest ``value / limit`` (among the
    failing cases when there are any): it is named with its value and its limit, and the margin is that case's ``limit - value``
    in the quantity's own units, so a passing counted check shows how close it came.
    """
    flags = np.asarray(ok, dtype=bool).ravel()
    bad = int((~flags).sum())
    name = lambda k: cases[k] if cases is not None else f"case {k + 1} of {flags.size}"  # noqa: E731
    if values is not None and flags.size:
        vals = np.asarray(values, dtype=np.float64).ravel()
        lims = np.broadcast_to(np.asarray(limits, dtype=np.float64), vals.shape)
        if vals.shape != flags.shape:
            raise ValueError(f"every: {vals.size} values for {flags.size} cases")
        ratio = np.where(np.isnan(vals), np.inf, vals / lims)
        if bad:  # a failing case is named before any passing one, however close that came
            ratio = np.where(flags, -np.inf, ratio)
        k = int(np.argmax(ratio))
        worst = f"{name(k)}: {vals[k]:.3g} against <= {lims[k]:.3g}"
        return _judged(bad, f"0 of {flags.size} fail", bad == 0, flags.size, note, float(lims[k] - vals[k]), worst, detects)
    worst = ""
    if bad:
        worst = name(int(np.argmin(flags)))
    return _judged(bad, f"0 of {flags.size} fail", bad == 0, flags.size, note, float(-bad), worst, detects)


def every_within(values: np.ndarray | list, lo: float, hi: float, note: str = "", *, cases: list[str] | None = None, detects: str = "") -> Check:
    """Judge every value in ``[lo, hi]``; the reported value is the worst case: the one farthest
    outside, or, when all pass, the one closest to a bound (the upper one for magnitudes, lo = 0),
    named by ``cases[k]`` when given, with its margin to that bound. A median is never the value
    of a judged check."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return _judged(float("nan"), f"all in [{lo:g}, {hi:g}]", False, 0, note, detects=detects)
    # > 0 outside, else minus the distance to the bound that matters: both bounds of a two-sided
    # band, only the upper one for a magnitude (an error, a drift: lo = 0 and every value >= 0)
    magnitude = lo == -math.inf or (lo == 0 and bool((v[~np.isnan(v)] >= 0).all()))
    outside = (v - hi) if magnitude else np.maximum(lo - v, v - hi)
    k = int(np.nanargmax(outside)) if np.isfinite(outside).any() else 0
    if np.isnan(v).any():
        k = int(np.argmax(np.isnan(v)))
    name = cases[k] if cases is not None else f"case {k + 1} of {v.size}"
    ok = bool((outside <= 0).all())
    return _judged(float(v[k]), f"all in [{lo:g}, {hi:g}]", ok, v.size, note, float(-outside[k]), name, detects)


def report(value: float, note: str = "") -> Check:
    return Check(float(value), "(reported)", None, note)


@dataclass
class Result:
    claim: ClaimInfo
    checks: dict[str, Check]
    params: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return verdict_of(self.claim.kind, self.checks)


def verdict_of(kind: str, checks: dict[str, Check]) -> str:
    """``report`` for report claims; else ``pass`` when every judged check passed (at least one judged)."""
    if kind == "report":
        return "report"
    judged = [c.passed for c in checks.values() if c.passed is not None]
    return "pass" if judged and all(judged) else "fail"


def simulate_batch(
    model: ad.Model,
    x0: np.ndarray,
    t1: float,
    *,
    dt: float | None = None,
    saves: int = 101,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    engine: ExperimentConfig | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Simulate a batch ``x0`` ``(S, n, d)`` to ``t1``; RK4 with ``dt`` or adaptive Dopri5. Returns (ts, xs numpy).

    ``engine`` (the claim's config) says on which device and in which dtype to integrate.
    """
    if engine is not None:
        import torch  # here, not at the top: `attndyn judge` reads a run folder without the engine

        x0 = torch.as_tensor(np.asarray(x0, dtype=np.float64)).to(device=engine.device, dtype=getattr(torch, engine.dtype))
    if dt is not None:
        steps = round(t1 / dt)
        every = max(1, steps // (saves - 1))
        k = np.arange(0, steps + 1, every)
        if k[-1] != steps:
            k = np.append(k, steps)
        ts = k * dt
        traj = ad.simulate(model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(dt), max_steps=10_000_000)
    else:
        ts = np.linspace(0.0, t1, saves)
        traj = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=rtol, atol=atol), max_steps=10_000_000)
    return traj.numpy()


def fraction(flags: np.ndarray) -> float:
    flags = np.asarray(flags, dtype=bool)
    return float(flags.mean()) if flags.size else 0.0


def unit_rows(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)
