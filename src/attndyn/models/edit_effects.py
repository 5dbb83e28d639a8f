"""The effects of edits of a decoder's forward (:mod:`attndyn.models.edits`): every edit and its nulls run
in one layer-major pass (:func:`attndyn.models.executor.run`), with bootstrap intervals over prompts and the
findings' decision of each edit against its null. :func:`intervene` takes specs, :func:`evaluate` edits given
per prompt (the massive study's). :mod:`attndyn.models.interventions` re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from attndyn.models.edits import FORMS, Edit, parse_all

if TYPE_CHECKING:
    from attndyn.models.decoder import Decoder
    from attndyn.models.executor import BranchResult


# effects
def pooled_bootstrap(nll_sum: np.ndarray, count: np.ndarray, *, resamples: int = 2000, seed: int = 0, level: float = 0.95) -> np.ndarray:
    """Resampled pooled means sum(nll_sum[idx]) / sum(count[idx]) over prompts: the draws, for intervals of
    any function of the pooled loss (paired across branches by the same ``seed``)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(count), size=(resamples, len(count)))
    return nll_sum[idx].sum(1) / count[idx].sum(1)


def _interval(draws: np.ndarray, level: float = 0.95) -> list[float]:
    a = (1 - level) / 2
    return [float(np.quantile(draws, a)), float(np.quantile(draws, 1 - a))]


def effects(plain: Sequence[BranchResult], edited: Sequence[BranchResult], *, resamples: int = 2000, seed: int = 0) -> dict:
    """NLL (pooled over every predicted token), perplexity ratio exp(NLL_edit - NLL_plain) and KL from the
    plain output (averaged over predicted positions), each with a percentile bootstrap interval over prompts
    (paired: the same resamples for the plain and the edited branch). ``plain``/``edited``: one
    :class:`~attndyn.models.executor.BranchResult` per prompt, in the same order."""
    count = np.array([len(r.nll) for r in plain], dtype=np.float64)
    p_sum = np.array([float(r.nll.sum()) for r in plain])
    e_sum = np.array([float(r.nll.sum()) for r in edited])
    k_sum = np.array([float(r.kl.sum()) for r in edited])
    p_draw = pooled_bootstrap(p_sum, count, resamples=resamples, seed=seed)
    e_draw = pooled_bootstrap(e_sum, count, resamples=resamples, seed=seed)
    k_draw = pooled_bootstrap(k_sum, count, resamples=resamples, seed=seed)
    nll, base = e_sum.sum() / count.sum(), p_sum.sum() / count.sum()
    return {
        "nll": float(nll),
        "nll_interval": _interval(e_draw),
        "ppl_ratio": float(np.exp(nll - base)),
        "ppl_ratio_interval": _interval(np.exp(e_draw - p_draw)),
        "kl": float(k_sum.sum() / count.sum()),
        "kl_interval": _interval(k_draw),
        "_draws": np.exp(e_draw - p_draw),
    }


def plain_effect(plain: Sequence[BranchResult], *, resamples: int = 2000, seed: int = 0) -> dict:
    count = np.array([len(r.nll) for r in plain], dtype=np.float64)
    p_sum = np.array([float(r.nll.sum()) for r in plain])
    return {"nll": float(p_sum.sum() / count.sum()), "nll_interval": _interval(pooled_bootstrap(p_sum, count, resamples=resamples, seed=seed))}


# nulls
def perturb_null(edit: Edit, rng: np.random.Generator) -> Edit:
    """The second null of an entry edit: its change's L2 norm, per token, in a random direction."""
    seed = int(rng.integers(2**31))
    return Edit("perturb", edit.blocks, token=edit.token, draw=seed, of=edit, spec=f"equal-L2 random direction of {edit.spec} (draw {seed})")


def null_edits(edit: Edit, decoder: Decoder, lengths: list[int], rng: np.random.Generator) -> Edit | None:
    """One draw of ``edit``'s null (module docstring), or None where the kind has no random place (attention
    replacements other than no-first-key, patches: the caller shuffles the source prompt)."""
    from dataclasses import replace

    L = len(decoder.layers)
    if edit.kind in ("zero", "mean", "scale", "set", "clip") and edit.dim is not None:
        seed = int(rng.integers(2**31))
        return replace(edit, dim=None, draw=seed, of=edit, spec=f"null of {edit.spec}: a random non-massive dimension (draw {seed})")
    if edit.kind == "skip" and edit.head is not None:
        choices = [h for h in range(decoder.heads) if h != edit.head]
        return replace(edit, head=int(rng.choice(choices)), spec=f"null of {edit.spec}") if choices else None
    if edit.kind == "skip":
        span = edit.blocks[1] - edit.blocks[0]
        starts = [a for a in range(L - span) if a != edit.blocks[0]]
        a = int(rng.choice(starts)) if starts else edit.blocks[0]
        return replace(edit, blocks=(a, a + span), spec=f"null of {edit.spec}")
    if edit.kind == "attention" and edit.with_ == "no-first-key":
        key = int(rng.integers(1, max(2, min(lengths) - 1)))
        return Edit("drop-key", edit.blocks, token=key, spec=f"null of {edit.spec}: key {key} removed")
    return None


def decide(lo: list[float], hi: list[float]) -> str:
    """The findings' rule (:func:`attndyn.models.decoder_nulls.decide`, shared by every finding) on the
    difference edit - null over >= 5 independent null draws: a word where its margin exceeds 3 Monte-Carlo
    standard errors of the draws, 'undetermined (depends on the draw)' otherwise. ``lo``/``hi``: per null
    draw, the interval of the difference edit - null."""
    from attndyn.models.decoder_nulls import decide as shared

    return shared(lo, hi).word


def _pooled(results, resamples: int, seed: int) -> tuple[float, np.ndarray]:
    count = np.array([len(r.nll) for r in results], dtype=np.float64)
    total = np.array([float(r.nll.sum()) for r in results])
    return float(total.sum() / count.sum()), pooled_bootstrap(total, count, resamples=resamples, seed=seed)


def _clean(effect: dict) -> dict:
    return {k: v for k, v in effect.items() if not k.startswith("_")}


def intervene(
    decoder: Decoder,
    prompts: list[list[int]],
    specs: list[str],
    *,
    draws: int = 5,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    resamples: int = 2000,
    progress: Callable[[int, int], None] | None = None,
    runner: Callable | None = None,
) -> dict:
    """Every spec (one string; several edits joined by ';' act at once) on every prompt, beside ``draws``
    draws of its null, in one layer-major run (``progress``: the executor's, :func:`attndyn.models.executor.run`).
    The record :func:`attndyn.app.commands.intervene` writes
    as interventions.json: the unedited ``nll``; per spec ``edit``, ``nll``, ``ppl_ratio``, ``kl`` each
    with its ``_interval``, its ``null`` (the same, pooled over the draws' branches, with each draw's
    perplexity ratio), the second null ``null_l2`` for entry edits, and the ``decision`` of the edit
    against its null by the findings' rule (the paired interval of NLL_edit - NLL_null per draw). ``runner``:
    what runs the branches, with :func:`attndyn.models.executor.run`'s arguments and result (default: that
    function; :func:`attndyn.app.intervene_tasks.run_in_tasks` splits them into tasks)."""
    if draws < 1:
        raise ValueError(f"draws {draws} is below 1")
    rng = np.random.default_rng(seed)
    parsed = [parse_all(s) for s in specs]
    for s, edits in zip(specs, parsed, strict=True):
        if not edits:
            raise ValueError(f"edit {s!r} is empty; accepted forms: {'; '.join(FORMS)}")
    n = len(prompts)
    all_prompts = list(prompts)
    plans = []
    lengths = [len(p) for p in prompts]
    for spec, edits in zip(specs, parsed, strict=True):
        for e in edits:
            e.check(decoder, lengths)
        nulls, l2 = [], []
        for _ in range(draws):
            drawn = []
            for e in edits:
                if e.kind == "patch":  # the same patch from the source prompt with its tokens shuffled
                    src = list(prompts[e.source])
                    perm = rng.permutation(len(src) - 1) + 1  # the first token (often BOS) stays
                    all_prompts.append([src[0], *(src[j] for j in perm)])
                    from dataclasses import replace

                    drawn.append(replace(e, source=len(all_prompts) - 1, spec=f"null of {e.spec}: from a shuffled prompt"))
                else:
                    drawn.append(null_edits(e, decoder, lengths, rng))
            if all(x is not None for x in drawn):
                nulls.append([tuple(drawn)] * n)
            if all(e.kind in ("zero", "mean", "scale", "set", "clip") for e in edits):
                l2.append([tuple(perturb_null(e, rng) for e in edits)] * n)
        plans.append({"edit": spec, "branches": [edits] * n, "null": nulls, "null_l2": l2})
    return evaluate(decoder, all_prompts, n, plans, draws=draws, dtype=dtype, seed=seed, resamples=resamples, progress=progress, runner=runner)


def evaluate(
    decoder: Decoder,
    prompts: list[list[int]],
    n: int,
    plans: list[dict],
    *,
    draws: int,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    resamples: int = 2000,
    progress: Callable[[int, int], None] | None = None,
    runner: Callable | None = None,
) -> dict:
    """The record of :func:`intervene` for edits given per prompt, in one layer-major run. ``prompts``: the
    first ``n`` are the prompts measured (the rest are sources of patches' nulls); ``plans``: per entry
    ``edit`` (its spec or label), ``branches`` (one edit tuple per prompt), ``null`` and ``null_l2`` (per
    draw, one edit tuple per prompt; empty where the edit has no such null) and optionally ``labels`` (a
    name per draw of ``null``)."""
    from attndyn.models.executor import BranchResult, run

    branches: list[tuple[int, tuple]] = []

    def add(per_prompt: list[tuple]) -> list[int]:
        first = len(branches)
        branches.extend(enumerate(per_prompt))
        return list(range(first, first + n))

    plan = [(add(p["branches"]), [add(d) for d in p["null"]], [add(d) for d in p["null_l2"]]) for p in plans]
    plain, edited, counts = (runner or run)(decoder, prompts, branches, dtype=dtype, progress=progress)
    plain = plain[:n]
    base, base_draws = _pooled(plain, resamples, seed)
    out = {"nll": base, "nll_interval": _interval(base_draws), "prompts": n, "draws": draws, "counts": counts, "edits": []}
    for p, (mine, nulls, l2) in zip(plans, plan, strict=True):
        entry = {"edit": p["edit"], **_clean(effects(plain, [edited[b] for b in mine], resamples=resamples, seed=seed))}
        e_nll, e_draws = _pooled([edited[b] for b in mine], resamples, seed)
        for key, group in (("null", nulls), ("null_l2", l2)):
            if not group:
                continue
            pooled = [  # per prompt, the mean over the draws (the interval is over prompts, as the edit's)
                BranchResult(
                    i,
                    (),
                    torch.stack([edited[ids[i]].nll for ids in group]).mean(0),
                    torch.stack([edited[ids[i]].kl for ids in group]).mean(0),
                )
                for i in range(n)
            ]
            eff = [effects(plain, [edited[b] for b in ids], resamples=resamples, seed=seed) for ids in group]
            lo, hi = [], []
            for ids in group:
                _, n_draws = _pooled([edited[b] for b in ids], resamples, seed)
                lo.append(float(np.quantile(e_draws - n_draws, 0.025)))
                hi.append(float(np.quantile(e_draws - n_draws, 0.975)))
            merged = _clean(effects(plain, pooled, resamples=resamples, seed=seed))
            merged["ppl_ratio_draws"] = [x["ppl_ratio"] for x in eff]
            labels = p.get("labels") if key == "null" else None
            merged["edits"] = labels or [", ".join(e.spec for e in edited[ids[0]].edits) for ids in group]
            merged["difference_intervals"] = [[a, b] for a, b in zip(lo, hi, strict=True)]
            merged["decision"] = decide(lo, hi)
            entry[key] = merged
        if "null" not in entry:
            entry["null"] = None
            entry["decision"] = "no random place: compared with the other replacements"
        else:
            entry["decision"] = entry["null"]["decision"]
        out["edits"].append(entry)
    return out
