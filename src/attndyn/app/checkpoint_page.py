"""``attndyn checkpoint``: spectra of every head of a trained checkpoint, and the dynamics its
weights drive compared with the network's real hidden states (edge: I/O and figures).

Contract
--------
``checkpoint_report(path_or_name, text=..., layer=..., head=..., out=...)`` writes
``out/checkpoint.json``, ``out/figures/*.png`` and ``out/index.html`` (the page last, after the
JSON and figures, so an interrupted run leaves no page), and returns the JSON record.

* Spectra (the authors' ALBERT notebook, with its errors corrected): per layer and head, the eigenvalues of V_h (composed with the
  output projection), of the symmetric part of beta Q_h^T K_h, the good-triple flags with the
  unsymmetrized <Q phi_1, K phi_1>, ``regime()`` and the effective beta.
* Dynamics: the chosen layer's weights (one head, or all heads summed) frozen in time (ALBERT-style
  sharing), beta = 1/sqrt(d_k), started from the real token embeddings; the continuous flow at
  t = k and the residual iteration with step 1 after k layers are compared with the real hidden
  state after k layers: mean pairwise cosine similarity, effective rank, and the leader tokens
  (columns with the most attention).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attndyn import __version__
from attndyn.app.tables import TABLE_SCRIPT, sortable_table
from attndyn.core.dynamics import Model, attention_matrix
from attndyn.core.simulation import residual_layers, simulate
from attndyn.core.solvers import AdaptiveStep, Dopri5
from attndyn.core.weights import to_numpy
from attndyn.models.bert import CheckpointError, embed, encoder_layers, load_checkpoint, per_head_table, resolve
from attndyn.models.token_geometry import effective_rank, mean_cosine, most_attended, zero_norm_rows
from attndyn.workflow import ownership
from attndyn.workflow.files import atomic_write_text, write_json


def checkpoint_report(
    path_or_name: str,
    *,
    text: str,
    layer: int = 0,
    head: int | None = None,
    out: Path,
    allow_pickle: bool = False,
    progress: Callable[[str], None] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    spectra_only: bool = False,
) -> dict:
    """Spectra of every head and the dynamics of one layer's weights against the real network.

    The real encoder runs on the host; the simulated dynamics run on ``device`` in ``dtype``.
    ``spectra_only`` writes the head spectra alone: no text, so no tokenizer is needed.
    """
    from attndyn.workflow import plots

    ckpt = load_checkpoint(resolve(path_or_name), allow_pickle=allow_pickle)
    ckpt.weights(layer, head)  # validates layer and head before any work
    x0, tokens = (None, []) if spectra_only else embed(ckpt, text, dtype=dtype)
    zero = [] if spectra_only else zero_norm_rows(to_numpy(x0))
    if zero:  # no direction: the cosines and effective ranks of the page would be NaN (an SVD that does not converge)
        start = " ".join(text.split())[:40]
        raise CheckpointError(
            f"the text ({start!r}...): {len(zero)} of its {len(tokens)} tokens have a zero input vector in {ckpt.path.name}, the first "
            f"token {zero[0]} {tokens[zero[0]]!r}, so their cosines and the effective rank are undefined; remove them from the text"
        )
    owner = ownership.claim(out, "checkpoint", "attndyn checkpoint")
    ownership.clear(owner)  # the previous page, its JSON and figures; nothing attndyn did not write
    out = owner.folder
    (out / "figures").mkdir(parents=True, exist_ok=True)
    step = progress or (lambda msg: None)

    step("spectra of every head")
    table = per_head_table(ckpt)
    figures = []
    for lay in sorted({r["layer"] for r in table}):
        rows = [r for r in table if r["layer"] == lay]
        fig = plots.eigenvalue_grid(
            [r["eig_V"] for r in rows],
            [f"head {r['head']}{' (good triple)' if r['good_triple'] else ''}" for r in rows],
            title=f"layer {lay}: eigenvalues of V_h (value x output projection)",
        )
        name = f"figures/eigenvalues_layer{lay}.png"
        plots.save(fig, out / name)
        figures.append(name)

    if spectra_only:
        return _write(out, owner, ckpt, table, figures, text=None, tokens=[], layer=layer, head=head, regime_name=None, sim_error=None, comparison=[])
    step("real hidden states")
    hidden, probs = encoder_layers(ckpt, x0)
    L = len(hidden) - 1
    weights = ckpt.weights(layer, head)
    model = Model(weights, beta=ckpt.beta)
    step("simulated dynamics")
    ts = np.arange(L + 1, dtype=float)
    sim_error = None
    try:
        cont = simulate(model, x0.to(device), ts, solver=Dopri5(), step=AdaptiveStep(rtol=1e-8, atol=1e-10), max_steps=200_000).xs
        cont = to_numpy(cont)
    except (FloatingPointError, RuntimeError) as err:
        cont, sim_error = None, str(err)
    disc = to_numpy(residual_layers(model, x0.to(device), L, step_size=1.0).xs)
    comparison = []
    for k in range(L + 1):
        row = {"depth": k, "real": {"mean_cosine": mean_cosine(to_numpy(hidden[k])), "effective_rank": effective_rank(to_numpy(hidden[k]))}}
        if k >= 1:
            row["real"]["leaders"] = most_attended(to_numpy(probs[k - 1]), tokens)
        for label, traj in (("continuous", cont), ("residual", disc)):
            if traj is None:
                continue
            x = traj[k]
            P = to_numpy(attention_matrix(model, torch.from_numpy(x).to(dtype)))
            row[label] = {
                "mean_cosine": mean_cosine(x),
                "effective_rank": effective_rank(x),
                "leaders": most_attended(P, tokens),
                "norm": float(np.linalg.norm(x, axis=-1).max()),
            }
        comparison.append(row)
    series = {"real network": [r["real"]["mean_cosine"] for r in comparison]}
    ranks = {"real network": [r["real"]["effective_rank"] for r in comparison]}
    for label in ("continuous", "residual"):
        if label in comparison[0]:
            series[f"{label} dynamics"] = [r[label]["mean_cosine"] for r in comparison]
            ranks[f"{label} dynamics"] = [r[label]["effective_rank"] for r in comparison]
    who = f"layer {layer}, " + (f"head {head}" if head is not None else "all heads")
    for name, data, ylabel in (("cosine", series, "mean pairwise cosine similarity"), ("rank", ranks, "effective rank of the tokens")):
        fig = plots.counts_vs_time(ts, data, ylabel=ylabel, title=f"real hidden states vs dynamics of {who}")
        fig.axes[0].set_xlabel("depth (layers; t for the flow)")
        plots.save(fig, out / f"figures/{name}.png")
        figures.append(f"figures/{name}.png")
    regime_name = None
    if head is not None:
        from attndyn.analysis.spectra import regime

        regime_name = regime(weights, beta=ckpt.beta).name
    return _write(
        out,
        owner,
        ckpt,
        table,
        figures,
        text=text,
        tokens=tokens,
        layer=layer,
        head=head,
        regime_name=regime_name,
        sim_error=sim_error,
        comparison=comparison,
    )


def _write(out: Path, owner, ckpt, table: list, figures: list, *, text, tokens, layer, head, regime_name, sim_error, comparison) -> dict:
    record = {
        "version": __version__,
        "model": str(ckpt.config.get("_name_or_path") or ckpt.path.name).rstrip("/").split("/")[-1] or ckpt.path.name,
        "checkpoint": str(ckpt.path),
        "arch": ckpt.arch,
        "layers": len(ckpt.layers),
        "heads": ckpt.heads,
        "d_model": ckpt.d_model,
        "d_k": ckpt.d_k,
        "beta": ckpt.beta,
        "text": text,
        "tokens": tokens,
        "layer": layer,
        "head": head,
        "regime_of_simulated_weights": regime_name,
        "simulation_error": sim_error,
        "good_triples": sum(r["good_triple"] for r in table),
        "heads_total": len(table),
        "per_head": [{k: (v if not isinstance(v, complex) else [v.real, v.imag]) for k, v in r.items() if k != "eig_V"} for r in table],
        "comparison": comparison,
        "figures": figures,
    }
    owner.add(*figures, *(str(Path(f).with_suffix(".svg")) for f in figures))
    write_json(out / "checkpoint.json", record)
    owner.add("checkpoint.json")
    atomic_write_text(out / "index.html", render(record))
    owner.add("index.html")
    return record


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


HEAD_COLUMNS = [
    "layer",
    "head",
    "regime",
    "good triple",
    "lambda_1 of V_h",
    "next |lambda|",
    "<Q phi_1, K phi_1>",
    "eig sym(beta Q^T K)",
    "effective beta",
]


def render(r: dict) -> str:
    head_rows = [
        [
            str(h["layer"]),
            str(h["head"]),
            html.escape(h["regime"]),
            "yes" if h["good_triple"] else "no",
            f"{h['lambda_1'][0]:.4g}{h['lambda_1'][1]:+.4g}i",
            f"{h['next_abs']:.4g}",
            _num(h["qk_phi1"]),
            f"{h['sym_QK_min']:.3g} .. {h['sym_QK_max']:.3g}",
            f"{h['effective_beta']:.4g}",
        ]
        for h in r["per_head"]
    ]
    comp = "".join(
        f"<tr><td>{c['depth']}</td><td>{c['real']['mean_cosine']:.3f}</td><td>{c['real']['effective_rank']:.2f}</td>"
        f"<td>{html.escape(', '.join(c['real'].get('leaders', [])))}</td>"
        + "".join(
            f"<td>{c[k]['mean_cosine']:.3f}</td><td>{c[k]['effective_rank']:.2f}</td><td>{html.escape(', '.join(c[k]['leaders']))}</td>"
            if k in c
            else "<td colspan=3>-</td>"
            for k in ("continuous", "residual")
        )
        + "</tr>"
        for c in r["comparison"]
    )
    figs = "".join(f'<img src="{html.escape(f)}" alt="{html.escape(f)}" style="max-width:100%">' for f in r["figures"])
    who = f"layer {r['layer']}, " + (f"head {r['head']}" if r["head"] is not None else "all heads summed")
    dynamics = (
        f"<h2>Dynamics of {html.escape(who)} vs the real network</h2><p>Text: <code>{html.escape(r['text'] or '')}</code>. "
        "Weights frozen in time; continuous flow at t = depth and residual iteration with step 1, both from the real embeddings. "
        "The real network also has biases, LayerNorm and feed-forward layers, which the dynamics leave out.</p>"
        "<table><tr><th>depth</th><th>real cos</th><th>real eff. rank</th><th>real leaders</th><th>flow cos</th><th>flow eff. rank</th>"
        f"<th>flow leaders</th><th>residual cos</th><th>residual eff. rank</th><th>residual leaders</th></tr>{comp}</table>"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(r.get('model', 'checkpoint'))}: attndyn checkpoint report</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:0.2em 0.5em}</style></head><body>"
        f"<h1>{html.escape(r.get('model', 'Checkpoint'))}</h1><p>{html.escape(r['checkpoint'])}</p>"
        f"<p>attndyn {html.escape(r['version'])}; {r['arch']}, {r['layers']} layers, "
        f"{r['heads']} heads, d_model = {r['d_model']}, d_k = {r['d_k']}, beta = 1/sqrt(d_k) = {r['beta']:.4g}.</p>"
        f"<p><b>{r['good_triples']}</b> of {r['heads_total']} heads are good triples (Def. 4.1: eigenvalue of V_h of largest modulus "
        "real, positive, simple, and &lt;Q phi_1, K phi_1&gt; &gt; 0 with the unsymmetrized form).</p>"
        + sortable_table("heads", HEAD_COLUMNS, head_rows)
        + (dynamics if r.get("text") is not None else "<p>Spectra only (<code>--spectra-only</code>): no text was run through the network.</p>")
        + f"{figs}{TABLE_SCRIPT}</body></html>"
    )
