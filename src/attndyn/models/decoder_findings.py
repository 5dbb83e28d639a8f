"""The decoder page's findings: decisions and sentences written from the study's data alone.

Contract
--------
``decided(rows, study)``: each block's decision against each null (:func:`~attndyn.models.decoder_nulls.decide` over
the replicates the study measured) and the comparison sentences, or, where uniform causal attention's value is
fixed by construction, that value. ``findings_text(record)``: the findings as Markdown sentences (the README and
the docs take theirs from here), every number the record's. Blocks are numbered from 0 (:func:`block_of`, by
:data:`~attndyn.models.decoder_nulls.LAYER_CONVENTION`). No measurement, no files, no figures.
"""

from __future__ import annotations

import numpy as np

from attndyn.models import decoder_geometry as geo
from attndyn.models import decoder_nulls as nulls
from attndyn.models.decoder_study import NULLS

NULL_NAMES = {"uniform": "uniform causal attention", "random": "random weights", "shuffled": "shuffled tokens"}
DRAW_NAMES = {"random": "{n} random-weight draws", "shuffled": "{n} shuffles of each prompt"}


def block_of(row: int) -> int:
    """The block a per-layer table row is named by in the sentences (:func:`~attndyn.models.decoder_nulls.where`): the
    block that wrote the row's state or holds its attention, row - 1 (-1: the embeddings, row 0)."""
    return int(row) - 1


def random_name(stds: tuple[float, ...]) -> str:
    """The random-weight null named with the initialiser scale(s) it was drawn at."""
    if len(stds) == 1:
        return f"random weights (drawn at the model's initialiser scale, N(0, {stds[0]:.3g}^2))"
    at = " and ".join(f"N(0, {s:.3g}^2)" for s in stds)
    return f"random weights (the model's initialiser scale is not known: the block counts only where it holds at both {at})"


METRIC_NAMES = {
    "mean_cosine": "mean pairwise cosine",
    "mean_cosine_without_first": "mean pairwise cosine without token 0",
    "effective_rank": "effective rank",
    "norm_ratio": "norm ratio |h_0| / median over tokens i >= 1 of |h_i|",
    "massive_activation_ratio": "massive-activation ratio (Sun et al.)",
    "sink_rate": "sink rate (Gu et al., eps = 0.3, T = 64)",
    "sink_rate_all_queries": "sink rate over all queries (eps = 0.3, not Gu et al.'s T)",
    "attention_on_first": "attention on token 0",
    "first_token_sole_leader": "share of heads with token 0 as sole leader",
}


def decided(rows: list[dict] | None, study: dict) -> tuple[list[dict] | None, dict]:
    """The decisions and sentences of a prompt set's study (:func:`attndyn.models.decoder_study.prompt_set_study`):
    new rows with each ``KEY_diff_NULL_decision`` beside its interval, and the summary with ``sentences`` and each
    difference's ``decision`` in place of the replicates (``comparisons``). A block is decided where its
    interval is defined; uniform causal attention's sink rates, fixed by construction, get their value instead
    of a comparison (:func:`~attndyn.models.decoder_nulls.uniform_sink_fixed`)."""
    words, sentences, diffs = {}, [], dict(study["differences"])
    for c in study["comparisons"]:
        key, name, sel = c["key"], c["null"], c["defined"]
        lo, hi = np.asarray(c["lo_sets"], dtype=np.float64), np.asarray(c["hi_sets"], dtype=np.float64)
        w = [nulls.decide(lo[:, k], hi[:, k]).word if k in sel else None for k in range(lo.shape[1])]
        words[key, name] = w
        diffs[f"{key}:{name}"] = diffs[f"{key}:{name}"] | {"decision": w}
        if name == "uniform" and c["queries"] is not None:  # fixed by construction: the exact value instead of a comparison
            fixed = nulls.uniform_sink_fixed(c["queries"], geo.SINK_THRESHOLD, what=METRIC_NAMES[key])
            if fixed:
                sentences.append(fixed)
                continue
        text = nulls.comparison_sentence(
            METRIC_NAMES.get(key, key),
            random_name(tuple(c["stds"])) if name == "random" else NULL_NAMES[name],
            sel,
            {"lo_sets": lo[:, sel], "hi_sets": hi[:, sel]},
            pool=study["pool"],
            unit="attention" if key in geo.ATTENTION_KEYS else "hidden",
            draws=DRAW_NAMES[name].format(n=c["draws"]) if c["draws"] > 1 else "",
        )
        if text:
            sentences.append(text)
    summary = {}
    for k, v in study.items():
        if k == "differences":
            summary["sentences"] = sentences
        if k != "comparisons":
            summary[k] = diffs if k == "differences" else v
    if rows is None:
        return None, summary
    out = []
    for layer, row in enumerate(rows):
        new = {}
        for k, v in row.items():
            new[k] = v
            key, _, name = k.removesuffix("_ci").rpartition("_diff_")
            if k.endswith("_ci") and (key, name) in words and words[key, name][layer] is not None:
                new[f"{key}_diff_{name}_decision"] = words[key, name][layer]
        out.append(new)
    return out, summary


def _fmt(v, digits: int = 3) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if v is None or not np.isfinite(v):
        return "-"
    return f"{v:.{digits}g}"


def _ci(ci) -> str:
    return f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


def _finite(v) -> bool:
    """A number that is not NaN (the JSON record writes NaN as null)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))


def _spread(d: dict, key: str) -> str:
    """A null's value with its range over draws: "0.704 (8 draws: 0.678-0.73)"."""
    sp = d.get(f"{key}_spread")
    n = d.get(f"{key}_draws")
    if not sp or not n or n < 2:
        return _fmt(d.get(key))
    return f"{_fmt(d.get(key))} ({n} draws: {_fmt(sp[0])}-{_fmt(sp[1])})"


def _nulls_at(row: dict, key: str, draws: dict) -> str:
    """The three nulls' values of ``key`` at one layer, each with its range over draws and what the interval of
    the network's difference to it says: "uniform causal attention 28.8 (the network exceeds it), ..."."""
    parts = []
    for name in NULLS:
        value = row.get(f"{key}_null_{name}")
        if not _finite(value):
            continue
        sp, n = row.get(f"{key}_null_{name}_spread"), draws.get(name, 1)
        text = f"{NULL_NAMES[name]} {_fmt(value)}" + (f" ({n} draws: {_fmt(sp[0])}-{_fmt(sp[1])})" if sp and n and n > 1 else "")
        ci = row.get(f"{key}_diff_{name}_ci")
        if ci and _finite(ci[0]) and _finite(ci[1]):
            text += f", difference {_ci(ci)}: {_verdict(row.get(f'{key}_diff_{name}_decision'), ci)}"
        parts.append(text)
    return "; ".join(parts) if parts else "no null"


VERDICTS = {"exceeds": "the network exceeds it", "falls below": "the network falls below it", "cannot be told": "cannot be told from the network"}


def _verdict(word: str | None, ci: list) -> str:
    """The decision over replicates (:func:`~attndyn.models.decoder_nulls.decide`); a record written before
    it holds one interval, whose answer is given as that interval's alone."""
    if word is not None:
        return VERDICTS.get(word, word)
    one = "exceeds" if ci[0] > 0 else "falls below" if ci[1] < 0 else "cannot be told"
    return f"{VERDICTS[one]} (by one interval: this record predates the decision over replicates)"


def _by_interval(rows: list[dict], key: str, level: float) -> dict[str, list[int]]:
    """The rows whose interval of ``key`` lies above ``level``, below it, or contains it (undetermined)."""
    out: dict[str, list[int]] = {"above": [], "below": [], "undetermined": []}
    for x in rows:
        ci = x.get(f"{key}_ci")
        if not ci or not (_finite(ci[0]) and _finite(ci[1])):
            continue
        out["above" if ci[0] > level else "below" if ci[1] < level else "undetermined"].append(x["layer"])
    return out


def _blocks(rows: list[int]) -> str:
    return nulls.where(rows, "attention") if rows else "in no block"


def sink_sentence(rows: list[dict], s1: dict) -> str:
    """Gu et al.'s Sink_1^eps at T = 64 with its interval and nulls, the all-queries value under its own label, and
    the per-layer onsets decided by each layer's interval (above / below / undetermined), never by the means."""
    rows = rows[1:]
    half, most = _by_interval(rows, "sink_rate", 0.5), _by_interval(rows, "sink_rate", 0.8)
    onset = block_of(most["above"][0]) if most["above"] else None
    zero = [x["layer"] for x in rows if x.get("sink_rate_ci") and _finite(x["sink_rate_ci"][1]) and x["sink_rate_ci"][1] == 0]
    short = s1.get("shorter_than_T", 0)
    allq = s1.get("all_queries") or {}
    nulls_text = (
        f"(uniform causal attention {_spread(s1, 'null_uniform')}, random weights {_spread(s1, 'null_random')}, shuffled tokens "
        f"{_spread(s1, 'null_shuffled')})"
    )
    if "T" not in s1:  # a record written before the value at Gu et al.'s T: its Sink_1 is over all queries and gets no T
        text = (
            "- Attention sinks (eps = 0.3): Sink_1 averaged over all queries of each prompt, not at Gu et al.'s T = 64 (this record "
            f"predates that value) = {_fmt(s1['value'])} {_ci(s1['ci'])} {nulls_text}"
        )
    else:
        text = (
            f"- Attention sinks (Gu et al., arXiv 2410.10781 §3: Sink_1^eps, eps = 0.3, on the first T = {s1['T']} tokens of each "
            f"prompt, {s1.get('prompts', '?')} prompts"
            + (f"; {short} shorter than T left out" if short else "")
            + f"): Sink_1^eps = {_fmt(s1['value'])} {_ci(s1['ci'])} {nulls_text}"
        )
    if allq:
        text += f"; averaged over all queries instead of the first T (not Gu et al.'s protocol) {_fmt(allq['value'])} {_ci(allq['ci'])}"
    if not any(x.get("sink_rate_ci") for x in rows):
        return text + ". The per-block intervals of the rate are not in this record, so no block is said to lie above or below a level."
    text += (
        f". Per block, by the 95 % interval of its rate: at least 0.5 {_blocks(half['above'])}, below 0.5 {_blocks(half['below'])}, "
        f"undetermined {_blocks(half['undetermined'])}; 0 in every prompt {_blocks(zero)}; the first block whose interval lies above 0.8 is "
        f"{onset if onset is not None else 'none'} (undetermined against 0.8 {_blocks(most['undetermined'])})."
    )
    return text


def attribution_sentence(twin: list[dict]) -> str:
    """Per twin block: the attention sublayer's Shapley share with its interval over the prompts and the
    random-weights null, both orders; where a share leaves [0, 1] the sentence says which sublayer opposes the change."""
    if not twin:
        return ""
    n = twin[0].get("prompts")
    parts = []
    for t in twin:
        a = t["attention_share_shapley"]
        f = t.get("ffn_share_shapley", 1 - a)  # the two Shapley shares add up to the whole change (the claim checks it to 1e-6)
        ci = t.get("attention_share_shapley_ci")
        null = t.get("attention_share_shapley_null_random")
        extra = f"; random weights {_fmt(null, 2)}" if _finite(null) else ""
        orders = f"added first {_fmt(t['attention_share_first'], 2)}, removed last {_fmt(t['attention_share_last'], 2)}"
        if 0 <= a <= 1:
            head = f"block {t['layer']}: attention {_fmt(a, 2)}" + (f" {_ci(ci)}" if ci else "")
            parts.append(f"{head} ({orders}{extra})")
        else:
            sign = "attention's" if a < 0 else "the feed-forward sublayer's"
            other = a if a < 0 else f
            parts.append(
                f"block {t['layer']}: no shares, {sign} contribution is negative ({_fmt(other, 2)} of the change: it opposes the change) and "
                f"the other's is {_fmt(f if a < 0 else a, 2)} times the change"
                + (f" (attention {_ci(ci)}; {orders}{extra})" if ci else f" ({orders}{extra})")
            )
    odd = [t["layer"] for t in twin for k in ("attention_share_first", "attention_share_last") if not 0 <= t[k] <= 1]
    note = (
        f" {nulls.where([k + 1 for k in sorted(set(odd))], 'attention').capitalize()} one ablation order gives a contribution outside [0, 1]: "
        "the other sublayer's is negative in that order."
        if odd
        else ""
    )
    return (
        "- Attribution (sublayer ablation; the Shapley average of the two orders of the attention sublayer's contribution to the block's "
        + (
            f"change of direction, mean over {n} prompts with its 95 % interval over them, the random-weights model's beside it): "
            if n
            else "change of direction, mean over the twin prompts; this record holds no intervals or null for it): "
        )
        + "; ".join(parts)
        + "."
        + note
    )


def leaders_word(lead: dict) -> str:
    """The twin against the mask: decided over the replicates (bootstrap seeds: both sides are deterministic), or by
    the one interval of a record that predates them."""
    if lead.get("top_difference_sets"):
        return nulls.decide(*np.array(lead["top_difference_sets"], dtype=np.float64).T).word
    lo, hi = lead["top_difference_ci"]
    return "exceeds" if lo > 0 else "falls below" if hi < 0 else "cannot be told"


def leaders_sentence(lead: dict) -> str:
    """The leaders' comparison with its power: the baseline "always token 0" (uniform causal attention's top answer) beside
    the twin's score, and the interval of the difference resampled by prompt."""
    n, k = lead["pairs"], lead.get("network_top_is_token_0")
    sets, word = lead.get("top_difference_sets"), leaders_word(lead)
    verdict = {
        "exceeds": "the twin's top leader agrees more often than the mask's",
        "falls below": "the twin's top leader agrees less often than the mask's",
        "cannot be told": "the twin cannot be told from the mask alone",
    }.get(word, f"{word}: the twin against the mask alone")
    verdict += (
        f" (decided where the margin exceeds {nulls.MC_SE_MIN:g} Monte-Carlo standard errors over {len(sets)} bootstrap seeds)"
        if sets
        else " (by one interval: this record predates the decision over replicates)"
    )
    power = ""
    if k is not None:
        power = (
            f"The network's top leader is token 0 in {k} of {n} pairs, so a rule that always answers token 0 (uniform causal attention's "
            f"answer) scores {k} of {n}; against it a predictor can gain at most {n - k} pair{'s' * (n - k != 1)}: the comparison has "
            f"{'no' if n == k else 'almost no' if n - k <= max(2, n // 10) else 'limited' if n - k < n // 2 else 'some'} power. "
        )
    mask = lead.get("twin_top3_is_mask")
    return (
        "- Leaders ("
        + (f"blocks {', '.join(str(x) for x in lead['layers'])}; {lead['prompts']} prompts; " if "layers" in lead and "prompts" in lead else "")
        + f"{n} (block, prompt) pairs): "
        f"the particle twin's top leader agrees with the network's in {lead['twin_top_agrees']} of {n} pairs, uniform causal attention "
        f"(tokens 0, 1, 2 exactly, from the mask alone) in {lead['uniform_top_agrees']} of {n}. "
        + power
        + (f"The twin's top 3 are exactly the mask's {{0, 1, 2}} in {mask} of {n} pairs; " if mask is not None else "")
        + f"top-3 overlap {_fmt(lead['twin_overlap'])} against {_fmt(lead['uniform_overlap'])}. The difference in top-leader agreement, "
        f"{int(nulls.LEVEL * 100)} % interval resampled "
        + ("by prompt" if lead.get("resampled") == "prompts" else "by (block, prompt) pair (this record predates the interval by prompt)")
        + f" {_ci(lead['top_difference_ci'])}: {verdict}."
    )


def regime_sentence(r: dict) -> str:
    counts, und = r.get("regime_counts") or {}, r.get("regime_undetermined") or {}
    if not counts:
        return ""
    parts = ", ".join(f"{k} {v} ({und.get(k, 0)} undetermined)" for k, v in counts.items())
    draws = r.get("regime_draws") or {}
    groups = draws.get("groups") or []
    null = r.get("regime_counts_null_random") or {}
    text = (
        f"- Regimes of the {sum(counts.values())} heads, each alone with the RMSNorm gain folded in (formal: the theorems' "
        f"hypotheses do not hold): {parts}; undetermined means a deciding quantity is within what a quantisation-step "
        f"perturbation of the weights moves it, {sum(und.values())} in all"
        + (f" over {draws['draws']} perturbation draws" if draws.get("draws") else " (the number of perturbation draws is not in this record)")
    )
    if groups:
        text += f" (over each of {len(groups)} disjoint sets of {draws['draws'] // len(groups)} draws: {', '.join(str(g) for g in groups)})"
    if null:
        init = (r.get("study") or {}).get("null_init") or [{"std": nulls.INIT_STD}]
        text += f". Null: the same architecture with random weights (N(0, {init[0]['std']:.3g}^2), norm gain 1, folded the same way): " + ", ".join(
            f"{k} {null.get(k, 0)}" for k in dict.fromkeys([*counts, *null])
        )
    return text + "."


def findings_text(r: dict) -> str:
    """The trained-model findings as Markdown sentences written from the record (README and docs take
    theirs from here): every number is the record's, every difference to a null is stated only where the
    interval of the difference excludes zero, every per-layer threshold is decided by the layer's interval."""
    rows, study = r["per_layer"], r["study"]
    pool = study["pool"]
    draws = study.get("null_draws") or {}
    nd = f", the nulls' forwards in {r['null_dtype']}" if r.get("null_dtype") not in (None, r["dtype"]) else ""
    lines = [f"Findings for {r['file']} ({r['tuning']}, {r['quantisation']}, run in {r['dtype']}{nd}) on {pool} of "
             f"{min(r['tokens'])}-{max(r['tokens'])} tokens; intervals are 95 % percentile-bootstrap intervals over the prompts "
             "(a nominal level: over 12 prompts such intervals cover somewhat less, over 4 less still; each block's interval stands "
             "alone, not corrected for the number of blocks read)"
             + (f", and for the random-weights and shuffled-token nulls also over their draws ({draws.get('random')} random-weight "
                f"models, {draws.get('shuffled')} shuffles of each prompt; a null's range over its draws is given beside it)" if draws else "")
             + (f". A difference to a null is decided (exceeds, falls below, cannot be told) only where its margin exceeds "
                f"{nulls.MC_SE_MIN:g} Monte-Carlo standard errors over {study['replicates']} independent replicates (disjoint sets of the "
                "null's draws, each with its own bootstrap seed; uniform causal attention, which is not random, by the seeds alone), "
                f"else it is {nulls.UNDETERMINED}" if study.get("replicates") else "")
             + f". {nulls.LAYER_CONVENTION}"]  # fmt: skip
    init = study.get("null_init")
    if init:
        lines[0] += " The random weights are drawn at " + (
            f"the model's initialiser scale, N(0, {init[0]['std']:.3g}^2) ({init[0]['source']})."
            if len(init) == 1
            else "both "
            + " and ".join(f"N(0, {i['std']:.3g}^2) ({i['source']})" for i in init)
            + "; a difference to them is stated only where it holds at both."
        )
    s1 = dict(study["sink_1"])
    if study.get("sink_1_all_queries"):
        s1["all_queries"] = study["sink_1_all_queries"]
    lines.append(sink_sentence(rows, s1))
    big = max(rows, key=lambda x: x["massive_activation_ratio"] if _finite(x.get("massive_activation_ratio")) else -1)
    nr = max(rows, key=lambda x: x["norm_ratio"] if _finite(x.get("norm_ratio")) else -1)
    lines.append(
        f"- Massive activations (Sun et al., arXiv 2402.17762: the largest entry magnitude over the median entry magnitude): "
        f"largest {nulls.where([big['layer']], 'hidden')}, {_fmt(big['massive_activation_ratio'])} {_ci(big['massive_activation_ratio_ci'])}, "
        f"token {big['massive_token']}, dimension {big['massive_dim']}; at that layer {_nulls_at(big, 'massive_activation_ratio', draws)}. "
        f"The norm ratio |h_0| / median over tokens i >= 1 of |h_i| peaks at {_fmt(nr['norm_ratio'])} {_ci(nr['norm_ratio_ci'])} "
        f"{nulls.where([nr['layer']], 'hidden')}; there {_nulls_at(nr, 'norm_ratio', draws)}."
    )
    last = rows[-1]
    lines.append(
        f"- Token geometry {nulls.where([last['layer']], 'hidden')} (the last): mean pairwise cosine {_fmt(last['mean_cosine'])} "
        f"{_ci(last['mean_cosine_ci'])} ({_nulls_at(last, 'mean_cosine', draws)}); standardised with the statistics of {pool} "
        f"{_fmt(last['standardized_cosine'])} {_ci(last['standardized_cosine_ci'])} (descriptive, no null: the standardised value depends "
        "on the pool and is defined for this pool only)."
    )
    shown = ("sink rate (Gu", "massive-activation ratio", *(f"mean pairwise cosine {w}" for w in ("cannot", "exceeds", "falls", "is undetermined")))
    starts = (*(f"The network's {m}" for m in shown), "Under uniform causal attention the sink rate (Gu")
    lines += [f"- {s}" for s in study["sentences"] if s.startswith(starts)]
    lead = r.get("leaders") or {}
    if lead:
        lines.append(leaders_sentence(lead))
    if r["twin"]:
        lines.append(attribution_sentence(r["twin"]))
    regime = regime_sentence(r)
    if regime:
        lines.append(regime)
    held = r.get("held_out")
    if held:
        h1 = held["sink_1"]
        hl = held["per_layer"][-1]
        lines.append(
            f"- Held out ({held['pool']}): "
            + (f"Sink_1^eps (T = {h1['T']})" if "T" in h1 else "Sink_1 over all queries (not at Gu et al.'s T)")
            + f" = {_fmt(h1['value'])} {_ci(h1['ci'])}; mean pairwise "
            f"cosine {nulls.where([hl['layer']], 'hidden')} {_fmt(hl['mean_cosine'])} {_ci(hl['mean_cosine_ci'])}."
        )
    return "\n".join(lines) + "\n"
