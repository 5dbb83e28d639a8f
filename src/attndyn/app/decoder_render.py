"""The decoder page's rendering: figures and HTML drawn from the study's record and its findings.

Contract
--------
``finding_figures(record)``: one figure per finding, each the network's value per block with its 95 %
interval as a band, each null's mean with its band over draws (uniform causal attention, which is not
random, as a line), the held-out prompts beside it; blocks on the x-axis numbered from 0 as the sentences
number them (:func:`~attndyn.models.decoder_findings.block_of`; -1: the embeddings). The pooled findings
(the leaders, the regimes) show their intervals and nulls the same way. ``other_figures(record, A)``: the
figures that carry no finding (ranks, the heads' spectra, an attention map). ``page(record, finding_names,
other_names)``: ``index.html``, opening with the findings' figures, then the compact table of findings
(:func:`findings_rows`: each finding's decision, as the findings made it, and its numbers), then the full sentences, then the tables.
Reads the record; computes nothing and decides nothing.
"""

from __future__ import annotations

import html

import numpy as np

from attndyn.app.tables import TABLE_SCRIPT, sortable_table
from attndyn.models import decoder_findings as fnd
from attndyn.models import decoder_nulls as nulls
from attndyn.models.decoder_findings import METRIC_NAMES, NULL_NAMES, _finite, block_of, regime_sentence
from attndyn.models.decoder_study import NULLS

# a finding drawn against depth: (title, y label, unit of its rows, log scale, reference levels of its sentence)
CURVES = {
    "sink_rate": ("Attention sinks (Gu et al., eps = 0.3, T = 64)", "share of heads that sink", "attention", False, (0.5, 0.8)),
    "massive_activation_ratio": ("Massive activations (Sun et al.)", "max |h_ij| / median |h_ij|", "hidden", True, ()),
    "norm_ratio": ("Norm ratio of token 0", "|h_0| / median over i >= 1 of |h_i|", "hidden", True, ()),
    "mean_cosine": ("Token geometry", "mean pairwise cosine", "hidden", False, ()),
}
XLABEL = {
    "hidden": "block (0-based; the state after it; -1: the embeddings)",
    "attention": "block (0-based; the block's attention)",
}


def _blocks_axis(ax) -> None:
    """Integer ticks, the block numbers of the sentences; -1 named as the embeddings."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "emb" if round(v) == -1 else f"{v:.0f}"))


def _band(ax, rows: list[dict], key: str, label: str, color, style: str = "-", alpha: float = 0.25) -> None:
    """A value per block (``rows[key]``) with its band (``rows[key + "_ci"]`` or ``_spread``) where the rows carry one."""
    x = np.array([block_of(row["layer"]) for row in rows])
    y = np.array([row.get(key, np.nan) for row in rows], dtype=float)
    ax.plot(x, y, style, marker="o" if style == "-" else None, ms=3, lw=1.5, color=color, label=label)
    band = [row.get(f"{key}_ci") or row.get(f"{key}_spread") for row in rows]
    if all(b is not None for b in band):
        lo, hi = (np.array([b[k] for b in band], dtype=float) for k in (0, 1))
        ax.fill_between(x, lo, hi, color=color, alpha=alpha, lw=0)


def curve_figure(r: dict, key: str) -> object | None:
    """One finding against depth (module docstring); None where the record holds no value of it."""
    from attndyn.workflow import plots

    title, ylabel, unit, logy, levels = CURVES[key]
    rows = [row for row in r["per_layer"] if _finite(row.get(key))]
    if not rows:
        return None
    colors = plots.CURVE_COLORS
    fig, ax = plots._subplots(figsize=(6, 4))
    draws = (r.get("study") or {}).get("null_draws") or {}
    fixed = [s for s in (r.get("study") or {}).get("sentences", []) if s.startswith(f"Under uniform causal attention the {METRIC_NAMES[key]}")]
    _band(ax, rows, key, f"network, 95 % interval over {r['study']['pool']}", colors[0])
    for k, name in enumerate(NULLS, start=1):
        if any(_finite(row.get(f"{key}_null_{name}")) for row in rows):
            n = draws.get(name, 1)
            what = " (0 by construction)" if fixed and name == "uniform" else f" ({n} draws: mean, range)" if n > 1 else ""
            _band(ax, rows, f"{key}_null_{name}", f"{NULL_NAMES[name]}{what}", colors[k], "--", alpha=0.18)
    held = [row for row in ((r.get("held_out") or {}).get("per_layer") or []) if _finite(row.get(key))]
    if len(held) > 1:
        _band(ax, held, key, f"network, {r['held_out']['pool']}", colors[4], ":", alpha=0.12)
    for level in levels:
        ax.axhline(level, color="gray", ls=":", lw=1)
    if logy:
        ax.set_yscale("log")
        plots._plain_log_ticks(ax.yaxis)
    _blocks_axis(ax)
    ax.set(xlabel=XLABEL[unit], ylabel=ylabel, title=f"{title}\n{r['file']}")
    ax.legend(fontsize=7, framealpha=0.9)
    return fig


def leaders_figure(lead: dict) -> object:
    """The twin's top-leader agreement minus the mask's (the null: 0), pooled over the twin blocks, with its interval
    and the interval of each replicate (bootstrap seed) the decision reads."""
    from attndyn.workflow import plots

    n, sets = lead["pairs"], lead.get("top_difference_sets") or []
    d = (lead["twin_top_agrees"] - lead["uniform_top_agrees"]) / n
    cis = [lead["top_difference_ci"], *sets]
    blocks = ", ".join(str(k) for k in lead.get("layers", []))
    fig, ax = plots._subplots(figsize=(6, 4))
    x = np.arange(len(cis))
    lo, hi = (np.array([c[k] for c in cis], dtype=float) for k in (0, 1))
    err = [np.maximum(d - lo, 0), np.maximum(hi - d, 0)]
    ax.errorbar(x, np.full(len(cis), d), yerr=err, fmt="o", capsize=4, color=plots.CURVE_COLORS[0], label="twin - mask, 95 % interval")
    ax.axhline(0.0, color=plots.CURVE_COLORS[1], ls="--", label="uniform causal attention (the mask alone): 0")
    ax.set_xticks(x, ["all pairs", *(f"seed {k}" for k in range(len(sets)))])
    ax.set(xlabel="the interval, then each replicate's (bootstrap seed)", ylabel="twin - mask, top-leader agreement")
    ax.set_title(f"Leaders: the particle twin against the mask alone\nblocks {blocks}; {n} (block, prompt) pairs")
    ax.legend(fontsize=7)
    return fig


def attribution_figure(twin: list[dict]) -> object:
    """The attention sublayer's Shapley share at each twin block with its interval, and the random-weights model's."""
    from attndyn.workflow import plots

    fig, ax = plots._subplots(figsize=(6, 4))
    x = np.array([t["layer"] for t in twin])
    a = np.array([t["attention_share_shapley"] for t in twin])
    ci = np.array([t.get("attention_share_shapley_ci", [np.nan, np.nan]) for t in twin], dtype=float)
    ax.errorbar(x, a, yerr=[a - ci[:, 0], ci[:, 1] - a], fmt="o", capsize=4, color=plots.CURVE_COLORS[0], label="network, 95 % interval")
    null = np.array([t.get("attention_share_shapley_null_random", np.nan) for t in twin], dtype=float)
    if np.isfinite(null).any():
        ax.plot(x, null, "x", ms=8, color=plots.CURVE_COLORS[2], label="random weights (first draw)")
    _blocks_axis(ax)
    ax.set(xlabel="block (0-based)", ylabel="attention's Shapley share", title="Attribution: the attention sublayer's share of the change")
    ax.legend(fontsize=7)
    return fig


def regimes_figure(r: dict) -> object:
    """The heads' regimes, the undetermined part of each count hatched, beside the random-weights model's."""
    from attndyn.workflow import plots

    counts, und, null = r["regime_counts"], r.get("regime_undetermined") or {}, r.get("regime_counts_null_random") or {}
    names = list(dict.fromkeys([*counts, *null]))
    x = np.arange(len(names))
    fig, ax = plots._subplots(figsize=(6, 4))
    c = plots.CURVE_COLORS
    sure = np.array([counts.get(k, 0) - und.get(k, 0) for k in names])
    ax.bar(x - 0.2, sure, 0.4, color=c[0], label="network, determined")
    ax.bar(x - 0.2, [und.get(k, 0) for k in names], 0.4, bottom=sure, color=c[0], alpha=0.35, hatch="//", label="network, undetermined")
    ax.bar(x + 0.2, [null.get(k, 0) for k in names], 0.4, color=c[2], label="random weights")
    ax.set_xticks(x, names, rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="heads", title=f"Regimes of the {sum(counts.values())} heads (formal)")
    ax.legend(fontsize=7)
    return fig


def finding_figures(r: dict) -> dict:
    """``{name: figure}``, one a finding the record holds, in the order of the findings."""
    out = {f"finding_{key}": fig for key in CURVES if (fig := curve_figure(r, key)) is not None}
    if r.get("leaders"):
        out["finding_leaders"] = leaders_figure(r["leaders"])
    if r.get("twin"):
        out["finding_attribution"] = attribution_figure(r["twin"])
    if r.get("regime_counts"):
        out["finding_regimes"] = regimes_figure(r)
    return out


def other_figures(r: dict, A: np.ndarray) -> dict:
    """The figures without a finding: the ranks across depth, the heads' spectra, one head's attention map."""
    from attndyn.workflow import plots

    fig, ax = plots._subplots(figsize=(6, 4))
    for k, key in enumerate(("effective_rank", "stable_rank")):
        _band(ax, [row for row in r["per_layer"] if _finite(row.get(key))], key, key.replace("_", " "), plots.CURVE_COLORS[k])
    _blocks_axis(ax)
    ax.set(xlabel=XLABEL["hidden"], ylabel="rank of the token matrix", title=f"{r['file']}: ranks across depth (descriptive)")
    ax.legend(fontsize=7)
    heads = [h for h in r["per_head"] if "effective_beta_folded" in h and "lambda1_real" in h]
    spectra = plots.curves(
        np.array([h["effective_beta_folded"] for h in heads]),
        {},
        xlabel=r"$\beta \|Q_h^\top K_h\|$ at the tokens' norm (RMSNorm gain folded in)",
        ylabel=r"$\mathrm{Re}\,\lambda_1 / |\lambda_1|$, $\lambda_1$ of largest modulus",
        title=f"{r['file']}: {len(heads)} heads",
        points={"heads": (np.array([h["effective_beta_folded"] for h in heads]), np.array([h["lambda1_real"] for h in heads]))},
    )
    lay, head = r["heatmap"]["layer"], r["heatmap"]["head"]
    return {"ranks": fig, "heads": spectra, f"attention_L{lay}_H{head}": attention_figure(A, lay, head, r["file"])}


def attention_figure(P: np.ndarray, layer: int, head: int, file: str, tol: float = 1e-4) -> object:
    """One head's attention on prompt 0, titled with the layer, the head and the matrix's numerical rank."""
    from attndyn.workflow import plots

    fig, ax = plots._subplots(figsize=(4.6, 4.2))
    image = ax.imshow(P, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
    rank = int(np.linalg.matrix_rank(P, tol=tol))
    ax.set_title(f"{file}\nlayer {layer}, head {head}: P on prompt 0 (rank {rank} of {P.shape[0]}, tol {tol:g})", fontsize=9)
    ax.set_xlabel("j (attended)")
    ax.set_ylabel("i (query)")
    fig.colorbar(image, ax=ax, label="$P_{ij}$", fraction=0.046, pad=0.04)
    return fig


def _num(v) -> str:
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else (f"{v:.4g}" if isinstance(v, float) else html.escape(str(v)))


LAYER_KEYS = ["mean_cosine", "mean_cosine_without_first", "standardized_cosine", "clusters", "effective_rank", "stable_rank",
              "norm_ratio", "massive_activation_ratio", "massive_token", "massive_dim", "norm_growth", "sink_rate", "sink_rate_all_queries",
              "attention_on_first",
              "first_token_sole_leader", "attention_entropy", "boolean_distance"]  # fmt: skip


def _finite_or_text(v) -> bool:
    return isinstance(v, str) or (isinstance(v, (int, float)) and bool(np.isfinite(v)))


def varying(rows: list[dict], keys: list[str]) -> list[str]:
    """The keys whose column is not constant over the rows (a constant column says nothing per layer)."""
    out = []
    for k in keys:
        vals = {r[k] if isinstance(r[k], str) else round(float(r[k]), 12) for r in rows if k in r and _finite_or_text(r[k])}
        if len(vals) > 1:
            out.append(k)
    return out


def _cell(row: dict, key: str) -> str:
    v = _num(row.get(key))
    if f"{key}_ci" in row:
        v += f"<br><small>[{_num(row[f'{key}_ci'][0])}, {_num(row[f'{key}_ci'][1])}]</small>"

    def null(n: str) -> str:
        sp = row.get(f"{key}_null_{n}_spread")
        return _num(row[f"{key}_null_{n}"]) + (f" ({_num(sp[0])}-{_num(sp[1])})" if sp else "")

    nul = [null(n) for n in NULLS if f"{key}_null_{n}" in row]
    if nul:
        v += f"<br><small>null: {' / '.join(nul)}</small>"
    return v


def _decisions(row: dict, key: str) -> str:
    """The decisions at one block against each null, or a record's one-interval answer (said so)."""
    out = []
    for name in NULLS:
        ci, word = row.get(f"{key}_diff_{name}_ci"), row.get(f"{key}_diff_{name}_decision")
        if ci and _finite(ci[0]) and _finite(ci[1]):
            one = "exceeds" if ci[0] > 0 else "falls below" if ci[1] < 0 else "cannot be told"
            out.append(f"{NULL_NAMES[name]}: {word or one + ' (one interval)'}")
    return "; ".join(out) or "no null"


def findings_rows(r: dict) -> list[tuple[str, str, str]]:
    """The compact table: one row per finding of :func:`~attndyn.models.decoder_findings.findings_text`, (finding,
    decision, numbers), the decisions the findings made (by block where the finding has blocks)."""
    rows, study = r["per_layer"], r["study"]
    s1, fmt, ci = study["sink_1"], fnd._fmt, lambda row, key: fnd._ci(row.get(f"{key}_ci") or [None, None])
    half, most = fnd._by_interval(rows[1:], "sink_rate", 0.5), fnd._by_interval(rows[1:], "sink_rate", 0.8)
    out = [(
        "Attention sinks (Gu et al., eps = 0.3, T = 64)",
        f"at least 0.5 {fnd._blocks(half['above'])}; the first block above 0.8: {block_of(most['above'][0]) if most['above'] else 'none'}"
        if any(row.get("sink_rate_ci") for row in rows) else f"no block: no prompt has T = {s1.get('T', 64)} tokens",
        f"Sink_1^eps {fmt(s1['value'])} {fnd._ci(s1['ci'])}; random weights {fnd._spread(s1, 'null_random')}; "
        f"shuffled tokens {fnd._spread(s1, 'null_shuffled')}",
    )]  # fmt: skip
    for key, what in (("massive_activation_ratio", "Massive activations (Sun et al.)"), ("norm_ratio", "Norm ratio |h_0| / median |h_i|")):
        peak = max(rows, key=lambda x, key=key: x[key] if _finite(x.get(key)) else -1)
        at = f", token {peak.get('massive_token')}, dimension {peak.get('massive_dim')}" if key == "massive_activation_ratio" else ""
        out.append((f"{what}: the peak", _decisions(peak, key), f"{nulls.where([peak['layer']], 'hidden')}: {fmt(peak[key])} {ci(peak, key)}{at}"))
    last = rows[-1]
    where = nulls.where([last["layer"]], "hidden")
    out.append(
        ("Mean pairwise cosine: the last block", _decisions(last, "mean_cosine"), f"{where}: {fmt(last['mean_cosine'])} {ci(last, 'mean_cosine')}")
    )
    lead = r.get("leaders")
    if lead:
        n = lead["pairs"]
        numbers = f"twin {lead['twin_top_agrees']} of {n}, mask {lead['uniform_top_agrees']} of {n}; difference {fnd._ci(lead['top_difference_ci'])}"
        out.append(("Leaders: the particle twin against the mask alone", fnd.leaders_word(lead), numbers))
    if r.get("twin"):
        shares = [f"block {t['layer']}: {fmt(t['attention_share_shapley'], 2)} {ci(t, 'attention_share_shapley')}"
                  + (f" (random weights {fmt(t['attention_share_shapley_null_random'], 2)})" if "attention_share_shapley_null_random" in t else "")
                  for t in r["twin"]]  # fmt: skip
        out.append(("Attribution: attention's Shapley share of each block's change", "reported, not decided", "; ".join(shares)))
    counts = r.get("regime_counts") or {}
    if counts:
        und, null = r.get("regime_undetermined") or {}, r.get("regime_counts_null_random") or {}
        numbers = ", ".join(f"{k} {v} ({und.get(k, 0)} undetermined)" for k, v in counts.items())
        numbers += "; random weights " + ", ".join(f"{k} {v}" for k, v in null.items())
        out.append(("Regimes of the heads", "formal: the theorems' hypotheses do not hold", numbers))
    held = r.get("held_out")
    if held:
        h1, hl = held["sink_1"], held["per_layer"][-1]
        numbers = f"Sink_1 {fmt(h1['value'])} {fnd._ci(h1['ci'])}; mean pairwise cosine {where} {fmt(hl['mean_cosine'])} {ci(hl, 'mean_cosine')}"
        out.append((f"Held out: {held['pool']}", "the same measures on other prompts (no null)", numbers))
    return out


def _figures_html(names: list[str], cls: str) -> str:
    return "".join(f'<figure class="{cls}"><img src="{html.escape(n)}" alt="{html.escape(n)}"></figure>' for n in names)


def page(r: dict, finding_names: list[str], other_names: list[str]) -> str:
    """``index.html`` (module docstring): ``finding_names``, ``other_names``: the figures' paths in the folder."""
    keys = varying(r["per_layer"], LAYER_KEYS)
    constant = [k for k in LAYER_KEYS if k not in keys and any(k in row for row in r["per_layer"])]
    head = "<th>layer</th><th>block</th>" + "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    rows = "".join(
        f"<tr><td>{row['layer']}</td><td>{'emb' if row['layer'] == 0 else block_of(row['layer'])}</td>"
        + "".join(f"<td>{_cell(row, k)}</td>" for k in keys)
        + "</tr>"
        for row in r["per_layer"]
    )
    twin = "".join(
        f"<tr><td>{t['layer']}</td><td>{_num(t['identity'])}</td><td>{_num(t['one_step'])}</td><td>{_num(t['flow'])}</td><td>{_num(t['best_one_step'])}</td>"
        + "".join(f"<td>{_num(t.get(f'{kind}_{name}'))}</td>" for name in ("rope", "ffn", "rope_ffn") for kind in ("one_step", "flow"))
        + "".join(
            f"<td>{_num(t.get(k))}</td>" for k in ("attention_share_first", "attention_share_last", "attention_share_shapley", "ffn_share_shapley")
        )
        + f"<td>{_num(t.get('leader_overlap'))}</td><td>{_num(t.get('uniform_leader_overlap'))}</td><td>{_num(t.get('top_leader_agrees'))}</td>"
        f"<td>{_num(t.get('uniform_top_leader_agrees'))}</td>"
        + "".join(f"<td>{_num(t.get(k))}</td>" for k in ("twin_clusters", "network_clusters_next", "network_clusters_last"))
        + "</tr>"
        for t in r["twin"]
    )
    hk = ["layer", "head", "kv_group", "effective_beta", "effective_beta_folded", "positive_share_QK", "positive_share_rope",
          "lambda1_abs", "lambda1_real", "lambda1_imag", "modulus_gap", "qk_cos", "quant_shift_modulus_gap", "quant_shift_qk_cos",
          "regime", "determined"]  # fmt: skip
    heads_table = sortable_table("heads", hk, [[_num(h.get(k)) for k in hk] for h in r["per_head"]])
    lines = r["findings"].splitlines()
    findings = "".join(f"<li>{html.escape(line[2:])}</li>" for line in lines if line.startswith("- "))
    table = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(c)}</td></tr>" for a, b, c in findings_rows(r))
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(r['title'])}: token geometry</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1400px;margin:auto;padding:1em}table{border-collapse:collapse;font-size:.75em}"
        "td,th{border:1px solid #ccc;padding:2px 6px}figure{display:inline-block;margin:4px}img{max-width:620px}"
        "figure.finding img{width:440px}table.findings{font-size:.85em}table.findings td{vertical-align:top}</style></head><body>"
        f"<h1>{html.escape(r['title'])}</h1><p>{html.escape(r['model'])} (the file's own name); {r['layers']} layers, {r['heads']} query heads "
        f"sharing {r['kv_heads']} key/value heads, head dimension {r['head_dim']}, width {r['d_model']}; {html.escape(r['study']['pool'])} of "
        f"{min(r['tokens'])}-{max(r['tokens'])} tokens, {html.escape(r['dtype'])}{_rule(r)} (the nulls' forwards in "
        f"{html.escape(str(r.get('null_dtype', r['dtype'])))}), attndyn {html.escape(r['version'])}.</p>"
        f"<section id='finding-figures'>{_figures_html(finding_names, 'finding')}</section>"
        "<h2 id='findings-table'>Findings</h2><table class='findings'><tr><th>finding</th><th>decision</th><th>numbers</th></tr>"
        f"{table}</table><h2 id='findings-sentences'>The findings in full</h2><p>{html.escape(lines[0])}</p><ul>{findings}</ul>"
        f"<h2>Other figures (descriptive)</h2><div>{_figures_html(other_names, 'other')}</div>"
        f"<h2>Per layer</h2><p>{html.escape(nulls.LAYER_CONVENTION)} Each cell: the mean over the prompts, its 95 % "
        "bootstrap interval, and the nulls (uniform causal attention / random weights / shuffled tokens) where they apply, the last two "
        "as the mean over their draws with the range of the per-draw means in brackets. Sink rate: Gu et al. (arXiv 2410.10781 §3), the "
        "share of heads whose attention on token 0, averaged over the first T = 64 queries, exceeds 0.3 (sink_rate_all_queries: over "
        "all queries, not their T). Massive-activation ratio: Sun et al. "
        "(arXiv 2402.17762), the largest entry magnitude over the median entry magnitude, at the token and dimension given. Norm ratio: "
        "|h_0| / median over tokens i >= 1 of |h_i|. Sole leader: a head whose rows put more than 0.5 on token 0 in at least 90 % of its rows. "
        f"Columns constant over the layers are left out: {html.escape(', '.join(constant) or 'none')}.</p>"
        f"<table><tr>{head}</tr>{rows}</table>"
        "<h2>Sublayer ablation and particle twin</h2><p>Row k: block k (numbered from 0, as --twin-layers). Mean 1 - cos over tokens "
        "between block k's output and: its input (nothing moves), one residual step of the particle model with block k's own "
        "attention (pre-norm, causal, grouped heads, no "
        "RoPE, no feed-forward): that step is exactly the attention sublayer without RoPE, so these columns are a sublayer ablation; "
        "its flow over unit time (the particle model's test), and the one step at the best multiple of beta. The shares: the attention "
        "sublayer's share of the layer's change of direction added first, removed last, and their average (Shapley over the two "
        "sublayers), and the feed-forward block's Shapley share.</p>"
        "<p>Leaders: the three tokens that receive the most attention in the real layer, against the twin's attention after its flow "
        "to t = 8 and against uniform causal attention (the null from the mask alone: tokens 0, 1, 2).</p>"
        + _no_twin_note(r)
        + "<table><tr><th>layer</th><th>identity</th><th>one step</th><th>flow</th><th>best beta</th>"
        "<th>step + RoPE</th><th>flow + RoPE</th><th>step + FFN</th><th>flow + FFN</th><th>step + both</th><th>flow + both</th>"
        "<th>attention share, first</th><th>attention share, last</th><th>attention share, Shapley</th><th>FFN share, Shapley</th>"
        "<th>leader overlap, twin</th><th>leader overlap, uniform</th><th>top leader agrees, twin</th><th>top leader agrees, uniform</th>"
        "<th>twin clusters (t = 8)</th><th>network clusters, next layer</th>"
        f"<th>network clusters, last layer</th></tr>{twin}</table>"
        f"<h2>Per head ({len(r['per_head'])} heads)</h2>{_regime_html(r)}{heads_table}"
        f"{TABLE_SCRIPT}</body></html>"
    )


def _no_twin_note(r: dict) -> str:
    """Where the family has no particle twin, the reason (the family row's), in place of an empty table's silence."""
    why = r.get("twin_refused")
    return f"<p class='no-twin'>No particle twin for this model: {html.escape(why)}.</p>" if why else ""


def _regime_html(r: dict) -> str:
    """Which result of the paper applies to how many heads, with the undetermined ones and the hypotheses."""
    counts = r.get("regime_counts") or {}
    if not counts:
        return ""
    und = r.get("regime_undetermined") or {}
    parts = ", ".join(f"{html.escape(k)} {v} ({und.get(k, 0)} undetermined)" for k, v in counts.items())
    return (
        f"<p>The paper's regime of each head alone (its position-free Q, K and value-output map with the RMSNorm gain folded in, "
        f"beta at the tokens' norm; Def. 4.1's quantities by modulus), for {sum(counts.values())} heads: {parts}. Undetermined: a "
        "deciding quantity (the modulus gap of lambda_1, its imaginary part, the cosine of &lt;Q phi_1, K phi_1&gt;) lies within "
        "what perturbing the weights by half a 4-bit quantisation step moves it.</p>"
        f"<p>{html.escape(regime_sentence(r).removeprefix('- '))}</p>"
        f"<p>{html.escape(r.get('regime_hypotheses', ''))}</p>"
    )


def _rule(r: dict) -> str:  # why the page ran in its dtype, when the size chose it (--dtype auto)
    return "" if r.get("dtype_rule", "as asked") == "as asked" else f", {html.escape(r['dtype_rule'])}"
