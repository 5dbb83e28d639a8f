"""``attndyn checkpoint smollm2|FILE.gguf|LLAMA_FOLDER``: token geometry of a trained decoder across
depth, its heads, and the particle twin of chosen layers (edge: files and figures).

Contract
--------
``decoder_report(name_or_path, prompts=..., out=...)`` runs the real network on every prompt
(:mod:`attndyn.models.decoder`), and writes into ``out`` (an attndyn ``checkpoint`` folder, see
:mod:`attndyn.workflow.ownership`): ``decoder.json`` (the per-layer table, the per-head table, the
twin), ``layers.csv``, ``heads.csv``, figures (token geometry against depth; an attention map of a
chosen head; the heads' spectra) and ``index.html``, the page last. Returns the JSON record.
"""

from __future__ import annotations

import csv
import html
import io
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attndyn import __version__
from attndyn.app.tables import TABLE_SCRIPT, sortable_table
from attndyn.claims.trained_decoder import depth_figures
from attndyn.models import decoder_geometry as geo
from attndyn.models.architectures import default_twin_layers, twin_refusal
from attndyn.models.bert import CheckpointError
from attndyn.models.decoder import forward
from attndyn.models.decoder_files import load_decoder
from attndyn.workflow import ownership
from attndyn.workflow.files import atomic_write_text, write_json

TWIN_PROMPTS = 4  # the twin runs on the first prompts (one RK4 flow of a layer costs about a second)


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    keys = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def decoder_report(
    name_or_path: str,
    *,
    prompts: list[str],
    out: Path,
    twin_layers: tuple[int, ...] | None = None,
    regime_layers: tuple[int, ...] | str = "all",
    heatmap: tuple[int, int] | None = None,
    dtype: torch.dtype = torch.float32,
    progress: Callable[[str], None] | None = None,
) -> dict:
    from attndyn.workflow import plots

    step = progress or (lambda msg: None)
    step("reading the model")
    dec = load_decoder(name_or_path)
    if dec.tokenizer is None:
        raise CheckpointError(f"{dec.name} carries no tokenizer: a tokenizer.json is needed beside its weights")
    L = len(dec.layers)
    no_twin = twin_refusal(dec)
    if no_twin and twin_layers:
        raise CheckpointError(f"--twin-layers: the particle twin is not offered for {dec.name}: {no_twin}")
    if no_twin:
        twin_layers = ()  # the rest of the page applies
    twin_layers = tuple(twin_layers) if twin_layers is not None else default_twin_layers(L)
    bad = [k for k in twin_layers if not 0 <= k < L - 1]
    if bad:
        raise CheckpointError(f"--twin-layers: layer {bad[0]} is not in 0..{L - 2} (the twin is compared with the next layer)")
    if regime_layers == "all":
        regime_layers = tuple(range(L))
    elif regime_layers == "twins":
        regime_layers = twin_layers
    elif isinstance(regime_layers, str) or any(not 0 <= k < L for k in regime_layers):
        raise CheckpointError(f"--regime-layers {regime_layers!r}: give 'all', 'twins' or layers in 0..{L - 1}")
    lay, head = heatmap if heatmap is not None else (L // 2, 0)
    if not (0 <= lay < L and 0 <= head < dec.heads):
        raise CheckpointError(f"--layer {lay} --head {head}: the attention map needs a layer in 0..{L - 1} and a head in 0..{dec.heads - 1}")
    owner = ownership.claim(out, "checkpoint", "attndyn checkpoint")
    ownership.clear(owner)
    out = owner.folder
    (out / "figures").mkdir(exist_ok=True)
    start = time.perf_counter()
    step(f"forward passes of {len(prompts)} prompts")
    context = dec.context or (dec.pos_embed.shape[0] if dec.pos_embed is not None else None)
    fws = [forward(dec, dec.encode(p)[:context], dtype=dtype) for p in prompts]  # a prompt longer than the context is cut to it
    step("token geometry of every layer")
    layers = geo.layer_table(fws)
    step(f"spectra of every head, the paper's regime of {len(regime_layers) * dec.heads} heads")
    heads = geo.head_table(dec, regime_layers=tuple(regime_layers))
    step("particle twins")
    twins = [{**geo.twin(dec, fw, k), "prompt": i} for k in twin_layers for i, fw in enumerate(fws[:TWIN_PROMPTS])]
    summary = []
    for k in twin_layers:
        rows = [t for t in twins if t["layer"] == k]
        keys = ("identity", "one_step", "flow", "best_one_step", "leader_overlap", "top_leader_agrees",
                "twin_clusters", "network_clusters_next", "network_clusters_last",
                *(f"{kind}_{name}" for name, _, _ in geo.VARIANTS for kind in ("one_step", "flow")))  # fmt: skip
        summary.append({key: float(np.mean([t[key] for t in rows])) for key in keys} | {"layer": k})
    depth = np.arange(L + 1)
    col = lambda key: np.array([r.get(key, np.nan) for r in layers])  # noqa: E731
    figures = {
        **depth_figures(dec.name, {key: col(key) for key in layers[-1] if key != "layer"}, prompts=len(prompts)),
        "ranks": plots.curves(
            depth,
            {"effective rank": col("effective_rank"), "stable rank": col("stable_rank")},
            xlabel="layer",
            ylabel="rank of the token matrix",
            title=f"{dec.name}: ranks across depth",
        ),
        "norms": plots.curves(
            depth,
            {"|h_0| / median |h_i|": col("massive_ratio"), "median |h|": col("median_norm")},
            xlabel="layer",
            ylabel="norm",
            title=f"{dec.name}: massive activations and residual growth",
            logy=True,
        ),
        "heads": plots.curves(
            np.array([h["effective_beta"] for h in heads]),
            {},
            xlabel=r"effective $\beta = \|Q_h^\top K_h\| / \sqrt{d_h}$",
            ylabel="top real part of eig(W_O,h W_V,h)",
            title=f"{dec.name}: {len(heads)} heads",
            points={"heads": (np.array([h["effective_beta"] for h in heads]), np.array([h["top_eig_V_real"] for h in heads]))},
        ),
        f"attention_L{lay}_H{head}": plots.attention_heatmaps(
            [fws[0].attentions[lay, head].double().numpy()], np.array([lay]), [0], tol=1e-4, title=f"layer {lay}, head {head}: P (prompt 0)"
        ),
    }
    names = []
    for name, fig in figures.items():
        plots.save(fig, out / "figures" / f"{name}.png")
        names.append(f"figures/{name}.png")
    owner.add(*names, *(str(Path(n).with_suffix(".svg")) for n in names))
    record = {
        "version": __version__,
        "model": dec.name,
        "source": dec.source,
        "layers": L,
        "heads": dec.heads,
        "kv_heads": dec.kv_heads,
        "head_dim": dec.head_dim,
        "d_model": dec.d_model,
        "prompts": len(prompts),
        "tokens": [len(f.ids) for f in fws],
        "dtype": str(dtype).removeprefix("torch."),
        "per_layer": layers,
        "per_head": heads,
        "twin": summary,
        "twin_per_prompt": twins,
        "regime_counts": dict(Counter(h["regime"] for h in heads if "regime" in h).most_common()),
        "figures": names,
        "seconds": round(time.perf_counter() - start, 2),
    }
    atomic_write_text(out / "layers.csv", _csv(layers))
    atomic_write_text(out / "heads.csv", _csv(heads))
    write_json(out / "decoder.json", record)
    owner.add("layers.csv", "heads.csv", "decoder.json")
    atomic_write_text(out / "index.html", render(record))
    owner.add("index.html")
    return record


def _num(v) -> str:
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else (f"{v:.4g}" if isinstance(v, float) else html.escape(str(v)))


def render(r: dict) -> str:
    keys = ["layer", "mean_cosine", "mean_cosine_without_first", "standardized_cosine", "clusters", "effective_rank", "stable_rank",
            "massive_ratio", "norm_growth", "sink_rate", "first_token_sole_leader", "attention_entropy", "boolean_distance"]  # fmt: skip
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    rows = "".join("<tr>" + "".join(f"<td>{_num(row.get(k))}</td>" for k in keys) + "</tr>" for row in r["per_layer"])
    twin = "".join(
        f"<tr><td>{t['layer']}</td><td>{_num(t['identity'])}</td><td>{_num(t['one_step'])}</td><td>{_num(t['flow'])}</td><td>{_num(t['best_one_step'])}</td>"
        + "".join(f"<td>{_num(t.get(f'{kind}_{name}'))}</td>" for name in ("rope", "ffn", "rope_ffn") for kind in ("one_step", "flow"))
        + f"<td>{_num(t.get('leader_overlap'))}</td><td>{_num(t.get('top_leader_agrees'))}</td>"
        + "".join(f"<td>{_num(t.get(k))}</td>" for k in ("twin_clusters", "network_clusters_next", "network_clusters_last"))
        + "</tr>"
        for t in r["twin"]
    )
    hk = [
        "layer",
        "head",
        "kv_group",
        "effective_beta",
        "effective_beta_rope",
        "positive_share_QK",
        "positive_share_rope",
        "top_eig_V_real",
        "top_eig_V_imag",
        "regime",
    ]
    heads_table = sortable_table("heads", hk, [[_num(h.get(k)) for k in hk] for h in r["per_head"]])
    figs = "".join(f'<figure><img src="{html.escape(f)}" alt="{html.escape(f)}"></figure>' for f in r["figures"])
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(r['model'])}: token geometry</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1300px;margin:auto;padding:1em}table{border-collapse:collapse;font-size:.8em}"
        "td,th{border:1px solid #ccc;padding:2px 6px}figure{display:inline-block;margin:4px}img{max-width:620px}</style></head><body>"
        f"<h1>{html.escape(r['model'])}</h1><p>{r['layers']} layers, {r['heads']} query heads sharing {r['kv_heads']} key/value heads, "
        f"head dimension {r['head_dim']}, width {r['d_model']}; {r['prompts']} prompts of {min(r['tokens'])}-{max(r['tokens'])} tokens, "
        f"{html.escape(r['dtype'])}, attndyn {html.escape(r['version'])}.</p>"
        f"<div>{figs}</div><h2>Per layer</h2><table><tr>{head}</tr>{rows}</table>"
        "<h2>Particle twin</h2><p>Mean 1 - cos over tokens between the real layer l + 1 and: the layer's input (nothing moves), one "
        "residual step of the particle model with layer l's own attention (pre-norm, causal, grouped heads, no RoPE, no feed-forward), "
        "its flow over unit time, and the one step at the best multiple of beta.</p>"
        "<p>Leaders: the three tokens that receive the most attention, in the real layer and in the twin's attention after its flow "
        "to t = 8 (the paper's Boolean limit, where a few leader columns take all the weight): their overlap, and the share of "
        "prompts where the top leader agrees.</p>"
        "<p>The layer's own maps beside it: with RoPE, with the feed-forward block, and with both (one residual step, "
        "attention then feed-forward as in the network, and the flow x' = attn(x) + ffn(x) over unit time). With both on, "
        "the step is the real layer, so its discrepancy is rounding: the columns show what the positions and the "
        "feed-forward block add to the attention alone.</p>"
        f"<table><tr><th>layer</th><th>identity</th><th>one step</th><th>flow</th><th>best beta</th>"
        "<th>step + RoPE</th><th>flow + RoPE</th><th>step + FFN</th><th>flow + FFN</th><th>step + both</th><th>flow + both</th>"
        "<th>leader overlap</th><th>top leader agrees</th><th>twin clusters (t = 8)</th><th>network clusters, next layer</th>"
        f"<th>network clusters, last layer</th></tr>{twin}</table>"
        f"<h2>Per head ({len(r['per_head'])} heads)</h2>{_regime_sentence(r)}{heads_table}"
        f"{TABLE_SCRIPT}</body></html>"
    )


def _regime_sentence(r: dict) -> str:
    """Which result of the paper applies to how many heads (each head alone, its position-free weights)."""
    counts = r.get("regime_counts") or {}
    if not counts:
        return ""
    parts = ", ".join(f"{html.escape(k)} {v}" for k, v in counts.items())
    return (
        f"<p>The paper's regime of each head alone (its position-free Q, K and value-output map; attndyn.analysis.spectra.regime), "
        f"for {sum(counts.values())} heads: {parts}.</p>"
    )


def prompts_from(path: Path | None) -> list[str]:
    from attndyn.models.prompts import PROMPTS, read_prompts

    return list(PROMPTS) if path is None else read_prompts(path)
