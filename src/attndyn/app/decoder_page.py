"""``attndyn checkpoint smollm2|FILE.gguf|LLAMA_FOLDER``: token geometry of a trained decoder across
depth, its heads, and the particle twin of chosen layers (edge: files and figures).

Contract
--------
``decoder_report(name_or_path, prompts=..., out=...)`` runs the real network on every prompt
(:mod:`attndyn.models.decoder`), and writes into ``out`` (an attndyn ``checkpoint`` folder, see
:mod:`attndyn.workflow.ownership`): ``decoder.json`` (the per-layer table, the per-head table, the
twin), ``layers.csv``, ``heads.csv``, figures (token geometry against depth; an attention map of a
chosen head; the heads' spectra) and ``index.html``, the page last. Returns the JSON record.

Every per-layer value carries its bootstrap interval over the prompts and the value of three nulls
(:mod:`attndyn.models.decoder_nulls`): uniform causal attention (the same network, every head
attending uniformly to what its mask lets it see), the same architecture with random weights drawn
as its configuration's initialiser draws them, and the prompts' tokens shuffled. The sentences of
``findings`` (:func:`findings_text`) are written from the record: a difference to a null is stated
only where the interval of the paired difference excludes zero. The study runs on two prompt sets,
the shipped prompts and a held-out set (:data:`attndyn.models.prompts.HELD_OUT`).
"""

from __future__ import annotations

import csv
import html
import io
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attndyn import __version__
from attndyn.app.tables import TABLE_SCRIPT, sortable_table
from attndyn.claims.trained_decoder import depth_figures
from attndyn.core.parallel import pmap
from attndyn.models import decoder_geometry as geo
from attndyn.models import decoder_nulls as nulls
from attndyn.models import decoder_regimes as regimes
from attndyn.models.architectures import default_twin_layers, twin_refusal
from attndyn.models.bert import CheckpointError
from attndyn.models.decoder import Decoder, forward, with_dtype
from attndyn.models.decoder_files import load_decoder
from attndyn.workflow import ownership
from attndyn.workflow.files import atomic_write_text, write_json

TWIN_PROMPTS = 4  # the twin runs on the first prompts (one RK4 flow of a layer costs about a second)
NULLS = ("uniform", "random", "shuffled")
NULL_NAMES = {"uniform": "uniform causal attention", "random": "random weights", "shuffled": "shuffled tokens"}
QUANT = re.compile(r"(?i)(?<![a-z0-9])(iq\d\w*|q\d_k_[sml]|q\d_k|q\d_\d|q\d|bf16|f16|f32)(?![a-z0-9])")


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    keys = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def describe_file(name: str, source: str) -> dict:
    """The file, its quantisation and whether it is an instruction-tuned model, from the file's name
    (and the model's internal name): ``{"file", "quantisation", "tuning"}``."""
    from attndyn.models.file_checks import display_name

    file = display_name(Path(source).name)  # a file name can carry controls and bidirectional overrides too
    m = QUANT.search(file) or QUANT.search(name)
    text = f"{file} {name}".lower()
    tuned = "instruct" in text or re.search(r"(?<![a-z])it(?![a-z])", text) is not None
    quant = m.group(1).upper() if m else ("safetensors" if Path(source).is_dir() or file.endswith(".safetensors") else "unknown")
    return {"file": file, "quantisation": quant, "tuning": "instruct" if tuned else "base"}


def _null_forwards(dec, ids: list[list[int]], dtype, seed: int = 0, random_dec: Decoder | None = None) -> dict:
    """The three nulls' forward passes (no logits: the geometry does not read them). ``random_dec``: the
    random-weights decoder of ``seed`` when the caller drew it already (it is the same for every prompt set)."""
    rng = np.random.default_rng(seed)
    keep = 1 if dec.add_bos and dec.bos_id is not None else 0
    random_dec = with_dtype(nulls.random_decoder(dec, seed), dtype) if random_dec is None else random_dec
    shuffled = [nulls.shuffled(i, rng, keep) for i in ids]  # drawn here, in order: the same whatever the workers
    runs = forwards([(dec, i, "uniform") for i in ids] + [(random_dec, i, "softmax") for i in ids] + [(dec, i, "softmax") for i in shuffled], dtype)
    n = len(ids)
    return {"uniform": runs[:n], "random": runs[n : 2 * n], "shuffled": runs[2 * n :]}


def forwards(jobs: list[tuple[Decoder, list[int], str]], dtype: torch.dtype) -> list:
    """The forward passes (no logits) of ``(decoder, ids, attention)`` jobs, in order, over the worker
    processes (:func:`attndyn.core.parallel.pmap`): each job is one whole forward, so the numbers do not
    depend on the worker count."""
    return pmap(lambda k: forward(jobs[k][0], jobs[k][1], dtype=dtype, attention=jobs[k][2], logits=False), len(jobs))


def layer_values(fws: list, *, clusters: bool) -> dict[str, np.ndarray]:
    """:func:`~attndyn.models.decoder_geometry.layer_values` of the forwards, one prompt a job over the
    worker processes (each prompt's values depend on the others only through the pooled statistics,
    which every job computes from all ``fws`` in the same order: the same numbers)."""
    parts = pmap(lambda p: geo.layer_values([fws[p]], clusters=clusters, pool=fws), len(fws))
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def prompt_set_study(
    dec: Decoder, texts: list[str], *, dtype: torch.dtype, clusters: bool, pool: str, cut: bool = False, random_dec: Decoder | None = None
) -> tuple[list, dict, dict]:
    """The network and its three nulls on one prompt set: the forwards, the per-layer table (with
    intervals and nulls) and the set's summary (Sink_1^eps, the sentences). With ``cut`` (the shipped
    prompts, a default that must fit the model read) a prompt longer than the context is cut to it; a
    prompt the user gave is refused instead (``forward``'s PromptError names the context). ``random_dec``:
    the random-weights null's decoder (seed 0), drawn here when not given."""
    context = dec.context or (dec.pos_embed.shape[0] if dec.pos_embed is not None else None)
    ids = [dec.encode(t)[:context] if cut else dec.encode(t) for t in texts]
    fws = forwards([(dec, i, "softmax") for i in ids], dtype)
    values = layer_values(fws, clusters=clusters)
    rows = geo.layer_table(fws, values=values)
    null_values = {k: layer_values(v, clusters=False) for k, v in _null_forwards(dec, ids, dtype, random_dec=random_dec).items()}
    layers = list(range(len(rows)))
    sentences, diffs = [], {}
    for key in geo.NULL_KEYS:
        for name in NULLS:
            nv = null_values[name][key]
            d = nulls.paired_difference(values[key], nv, rounding=nulls.rounding(dtype))
            diffs[f"{key}:{name}"] = {k: [float(x) for x in v] for k, v in d.items()}
            mean = _column_means(nv)
            for layer in layers:
                rows[layer][f"{key}_null_{name}"] = float(mean[layer])
                rows[layer][f"{key}_diff_{name}_ci"] = [float(d["lo"][layer]), float(d["hi"][layer])]
            sel = [k for k in layers if np.isfinite(d["lo"][k])]
            text = nulls.comparison_sentence(
                METRIC_NAMES.get(key, key), NULL_NAMES[name], sel, {k: [d[k][j] for j in sel] for k in ("lo", "hi")}, pool=pool
            )
            if text:
                sentences.append(text)
    s1 = geo.sink_1(values)
    lo, hi = nulls.bootstrap_interval(s1)
    summary = {
        "pool": pool,
        "prompts": len(texts),
        "tokens": [len(i) for i in ids],
        "sink_1": {"value": float(s1.mean()), "ci": [float(lo), float(hi)], **{f"null_{n}": float(geo.sink_1(null_values[n]).mean()) for n in NULLS}},
        "sentences": sentences,
        "differences": diffs,
    }
    return fws, rows, summary


def _column_means(a: np.ndarray) -> np.ndarray:
    """Means over the prompts, NaN for a column without values (the attention measures at layer 0)."""
    ok = np.isfinite(a)
    return np.where(ok.any(0), np.where(ok, a, 0).sum(0) / np.maximum(ok.sum(0), 1), np.nan)


METRIC_NAMES = {
    "mean_cosine": "mean pairwise cosine",
    "mean_cosine_without_first": "mean pairwise cosine without token 0",
    "effective_rank": "effective rank",
    "norm_ratio": "norm ratio |h_0| / median |h_i|",
    "massive_activation_ratio": "massive-activation ratio (Sun et al.)",
    "sink_rate": "sink rate (Gu et al., eps = 0.3)",
    "attention_on_first": "attention on token 0",
    "first_token_sole_leader": "share of heads with token 0 as sole leader",
}


def twin_summary(twins: list[dict], layers: tuple[int, ...]) -> tuple[list[dict], dict]:
    """Per twin layer the means over prompts; and the leaders' agreement of the twin against uniform
    causal attention over all (layer, prompt) pairs, with the interval of the paired difference."""
    summary = []
    keys = ("identity", "one_step", "flow", "best_one_step", "leader_overlap", "top_leader_agrees", "uniform_leader_overlap",
            "uniform_top_leader_agrees", "twin_clusters", "network_clusters_next", "network_clusters_last",
            "attention_share_first", "attention_share_last", "attention_share_shapley", "ffn_share_first", "ffn_share_last",
            "ffn_share_shapley", *(f"{kind}_{name}" for name, _, _ in geo.VARIANTS for kind in ("one_step", "flow")))  # fmt: skip
    for k in layers:
        rows = [t for t in twins if t["layer"] == k]
        summary.append({key: float(np.mean([t[key] for t in rows])) for key in keys} | {"layer": k})
    if not twins:
        return summary, {}
    tw = np.array([t["top_leader_agrees"] for t in twins], dtype=float)
    un = np.array([t["uniform_top_leader_agrees"] for t in twins], dtype=float)
    ov = np.array([t["leader_overlap"] for t in twins])
    uo = np.array([t["uniform_leader_overlap"] for t in twins])
    d_top, d_ov = nulls.paired_difference(tw, un), nulls.paired_difference(ov, uo)
    leaders = {
        "pairs": len(twins),
        "twin_top_agrees": int(tw.sum()),
        "uniform_top_agrees": int(un.sum()),
        "twin_overlap": float(ov.mean()),
        "uniform_overlap": float(uo.mean()),
        "top_difference_ci": [float(d_top["lo"]), float(d_top["hi"])],
        "overlap_difference_ci": [float(d_ov["lo"]), float(d_ov["hi"])],
    }
    return summary, leaders


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
    held_out: list[str] | None = None,
    prompt_set: str | None = None,
) -> dict:
    """The study (module docstring). ``held_out``: a second prompt set reported beside the first (default:
    :data:`~attndyn.models.prompts.HELD_OUT` when ``prompts`` are the shipped prompts, none otherwise)."""
    from attndyn.models.prompts import HELD_OUT, PROMPTS
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
    shipped = list(prompts) == list(PROMPTS)
    held = (list(HELD_OUT) if shipped else []) if held_out is None else held_out
    prompt_set = prompt_set or ("the shipped prompts" if shipped else "the given prompts")
    step(f"forward passes and token geometry of {len(prompts)} prompts and their three nulls")
    pool = f"{prompt_set} ({len(prompts)})"
    # the weights held in the run's dtype once (forward casts each weight on each call otherwise): the same numbers
    run, random_dec = with_dtype(dec, dtype), with_dtype(nulls.random_decoder(dec, 0), dtype)
    fws, layers, study = prompt_set_study(run, prompts, dtype=dtype, clusters=True, pool=pool, cut=shipped, random_dec=random_dec)
    held_study = None
    if held:
        step(f"the held-out set: {len(held)} prompts and their nulls")
        _, held_layers, held_study = prompt_set_study(
            run, held, dtype=dtype, clusters=False, pool=f"the held-out prompts ({len(held)})", cut=shipped, random_dec=random_dec
        )
        held_study["per_layer"] = [{k: v for k, v in r.items() if "_null_" not in k and "_diff_" not in k} for r in held_layers]
    step(f"spectra of every head, the paper's regime of {len(regime_layers) * dec.heads} heads with their margins, and the particle twins")
    heads, head_regimes, twins = _heads_and_twins(dec, run, fws[:TWIN_PROMPTS], tuple(regime_layers), twin_layers)
    by_key = {(r["layer"], r["head"]): r for r in head_regimes}
    for h in heads:
        h.update(by_key.get((h["layer"], h["head"]), {}))
    summary, leaders = twin_summary(twins, twin_layers)
    step("figures and the page")
    about = describe_file(dec.name, dec.source)
    title = f"{about['file']} ({about['tuning']}, {about['quantisation']}, run in {str(dtype).removeprefix('torch.')})"
    depth = np.arange(L + 1)
    col = lambda key: np.array([r.get(key, np.nan) for r in layers])  # noqa: E731
    P = fws[0].attentions[lay, head].double().numpy()
    figures = {
        **depth_figures(about["file"], {key: col(key) for key in layers[-1] if key != "layer"}, prompts=len(prompts)),
        "ranks": plots.curves(
            depth,
            {"effective rank": col("effective_rank"), "stable rank": col("stable_rank")},
            xlabel="layer",
            ylabel="rank of the token matrix",
            title=f"{about['file']}: ranks across depth",
        ),
        "norms": plots.curves(
            depth,
            {
                "massive-activation ratio max|h_ij| / median|h_ij| (Sun et al.)": col("massive_activation_ratio"),
                "norm ratio |h_0| / median |h_i|": col("norm_ratio"),
                "median |h|": col("median_norm"),
            },
            xlabel="layer",
            ylabel="ratio, norm",
            title=f"{about['file']}: massive activations and residual growth",
            logy=True,
        ),
        "heads": plots.curves(
            np.array([h["effective_beta_folded"] for h in heads if "effective_beta_folded" in h]),
            {},
            xlabel=r"$\beta \|Q_h^\top K_h\|$ at the tokens' norm (RMSNorm gain folded in)",
            ylabel=r"$\mathrm{Re}\,\lambda_1 / |\lambda_1|$, $\lambda_1$ of largest modulus",
            title=f"{about['file']}: {len(by_key)} heads",
            points={
                "heads": (
                    np.array([h["effective_beta_folded"] for h in heads if "effective_beta_folded" in h]),
                    np.array([h["lambda1_real"] for h in heads if "lambda1_real" in h]),
                )
            },
        ),
        f"attention_L{lay}_H{head}": attention_figure(P, lay, head, about["file"]),
    }
    names = []
    for name, fig in figures.items():
        plots.save(fig, out / "figures" / f"{name}.png")
        names.append(f"figures/{name}.png")
    owner.add(*names, *(str(Path(n).with_suffix(".svg")) for n in names))
    labelled = [h for h in heads if "regime" in h]
    record = {
        "version": __version__,
        "model": dec.name,
        **about,
        "title": title,
        "source": dec.source,
        "layers": L,
        "heads": dec.heads,
        "kv_heads": dec.kv_heads,
        "head_dim": dec.head_dim,
        "d_model": dec.d_model,
        "prompts": len(prompts),
        "prompt_set": prompt_set,
        "tokens": [len(f.ids) for f in fws],
        "dtype": str(dtype).removeprefix("torch."),
        "heatmap": {"layer": lay, "head": head, "rank": int(np.linalg.matrix_rank(P, tol=1e-4)), "size": int(P.shape[0])},
        "per_layer": layers,
        "study": study,
        "held_out": held_study,
        "per_head": heads,
        "twin": summary,
        "leaders": leaders,
        "twin_per_prompt": twins,
        "regime_counts": dict(Counter(h["regime"] for h in labelled).most_common()),
        "regime_undetermined": dict(Counter(h["regime"] for h in labelled if not h["determined"]).most_common()),
        "regime_hypotheses": regimes.HYPOTHESES,
        "figures": names,
        "seconds": round(time.perf_counter() - start, 2),
    }
    record["findings"] = findings_text(record)
    write_json(out / "findings.json", findings_record(record))
    atomic_write_text(out / "layers.csv", _csv([{k: v for k, v in r.items() if not k.endswith("_ci")} for r in layers]))
    atomic_write_text(out / "heads.csv", _csv(heads))
    write_json(out / "decoder.json", record)
    atomic_write_text(out / "findings.md", record["findings"])
    owner.add("layers.csv", "heads.csv", "decoder.json", "findings.md", "findings.json")
    atomic_write_text(out / "index.html", render(record))
    owner.add("index.html")
    return record


def _heads_and_twins(dec: Decoder, run: Decoder, fws: list, regime_layers: tuple[int, ...], twin_layers: tuple[int, ...]) -> tuple[list, list, list]:
    """The head table, the heads' regimes and the particle twins, as one list of independent jobs over the
    worker processes (the regimes, the longest, first; then the table; then one job a twin's layer and
    prompt): each job runs whole in one process, so the numbers do not depend on the worker count."""
    jobs = [lambda: regimes.head_regimes(dec, regime_layers), lambda: geo.head_table(dec), *geo.twin_jobs(run, fws, twin_layers)]
    out = pmap(lambda k: jobs[k](), len(jobs))
    return out[1], out[0], out[2:]


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


def _layer_list(rows: list[dict], key: str, test) -> str:
    return nulls._ranges([r["layer"] for r in rows if _finite(r.get(key)) and test(r[key])])


def _finite(v) -> bool:
    """A number that is not NaN (the JSON record writes NaN as null)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))


def findings_text(r: dict) -> str:
    """The trained-model findings as Markdown sentences written from the record (README and docs take
    theirs from here): every number is the record's, every difference to a null is stated only where the
    interval of the paired difference excludes zero."""
    rows, study = r["per_layer"], r["study"]
    pool = study["pool"]
    lines = [f"Findings for {r['file']} ({r['tuning']}, {r['quantisation']}, run in {r['dtype']}) on {pool} of "
             f"{min(r['tokens'])}-{max(r['tokens'])} tokens; intervals are 95 % bootstrap intervals over the prompts."]  # fmt: skip
    s1 = study["sink_1"]
    onset = next((x["layer"] for x in rows[1:] if x["sink_rate"] >= 0.8), None)
    lines.append(
        f"- Attention sinks (Gu et al., arXiv 2410.10781, eps = 0.3): Sink_1^eps = {_fmt(s1['value'])} {_ci(s1['ci'])} "
        f"(uniform causal attention {_fmt(s1['null_uniform'])}, random weights {_fmt(s1['null_random'])}, shuffled tokens "
        f"{_fmt(s1['null_shuffled'])}); the per-layer rate is at least 0.5 at layers {_layer_list(rows, 'sink_rate', lambda v: v >= 0.5) or 'none'}"
        f" and 0 at layers {_layer_list(rows[1:], 'sink_rate', lambda v: v == 0) or 'none'}; the first layer with a rate of at least 0.8 is "
        f"{onset if onset is not None else 'none'}."
    )
    big = max(rows, key=lambda x: x["massive_activation_ratio"] if _finite(x.get("massive_activation_ratio")) else -1)
    nr = max(rows, key=lambda x: x["norm_ratio"] if _finite(x.get("norm_ratio")) else -1)
    lines.append(
        f"- Massive activations (Sun et al., arXiv 2402.17762: the largest entry magnitude over the median entry magnitude): "
        f"largest at layer {big['layer']}, {_fmt(big['massive_activation_ratio'])} {_ci(big['massive_activation_ratio_ci'])}, "
        f"token {big['massive_token']}, dimension {big['massive_dim']} (random weights {_fmt(big['massive_activation_ratio_null_random'])}). "
        f"The norm ratio |h_0| / median |h_i| peaks at {_fmt(nr['norm_ratio'])} {_ci(nr['norm_ratio_ci'])} at layer {nr['layer']}."
    )
    last = rows[-1]
    lines.append(
        f"- Token geometry at the last layer: mean pairwise cosine {_fmt(last['mean_cosine'])} {_ci(last['mean_cosine_ci'])}, "
        f"standardised with the statistics of {pool} {_fmt(last['standardized_cosine'])} {_ci(last['standardized_cosine_ci'])} "
        "(the standardised value depends on the pool: it is defined for this pool only)."
    )
    shown = ("sink rate", "massive-activation ratio", "mean pairwise cosine cannot", "mean pairwise cosine exceeds", "mean pairwise cosine falls")
    lines += [f"- {s}" for s in study["sentences"] if s.startswith(tuple(f"The network's {m}" for m in shown))]
    lead = r.get("leaders") or {}
    if lead:
        lo, hi = lead["top_difference_ci"]
        verdict = (
            "the twin agrees more often than the null"
            if lo > 0
            else "the twin agrees less often than the null"
            if hi < 0
            else "the two cannot be told apart"
        )
        lines.append(
            f"- Leaders: the particle twin's top leader agrees with the network's in {lead['twin_top_agrees']} of {lead['pairs']} "
            f"(layer, prompt) pairs; uniform causal attention, from the mask alone (its leaders are tokens 0, 1, 2 exactly), in "
            f"{lead['uniform_top_agrees']} of {lead['pairs']}; top-3 overlap {_fmt(lead['twin_overlap'])} against "
            f"{_fmt(lead['uniform_overlap'])}. The difference's interval {_ci(lead['top_difference_ci'])}: {verdict}."
        )
    if r["twin"]:
        a = [t["attention_share_first"] for t in r["twin"]]
        b = [t["attention_share_last"] for t in r["twin"]]
        c = [t["attention_share_shapley"] for t in r["twin"]]
        lines.append(
            f"- Attribution (sublayer ablation, layers {', '.join(str(t['layer']) for t in r['twin'])}): the attention sublayer's share of "
            f"a layer's change of direction is {_fmt(min(a), 2)}-{_fmt(max(a), 2)} added first, {_fmt(min(b), 2)}-{_fmt(max(b), 2)} "
            f"removed last, and {_fmt(min(c), 2)}-{_fmt(max(c), 2)} by the Shapley average of the two orders."
        )
    counts, und = r.get("regime_counts") or {}, r.get("regime_undetermined") or {}
    if counts:
        parts = ", ".join(f"{k} {v} ({und.get(k, 0)} undetermined)" for k, v in counts.items())
        lines.append(
            f"- Regimes of the {sum(counts.values())} heads, each alone with the RMSNorm gain folded in (formal: the theorems' "
            f"hypotheses do not hold): {parts}; undetermined means a deciding quantity is within what a quantisation-step "
            "perturbation of the weights moves it."
        )
    held = r.get("held_out")
    if held:
        h1 = held["sink_1"]
        hl = held["per_layer"][-1]
        lines.append(
            f"- Held out ({held['pool']}): Sink_1^eps = {_fmt(h1['value'])} {_ci(h1['ci'])}; last-layer mean pairwise cosine "
            f"{_fmt(hl['mean_cosine'])} {_ci(hl['mean_cosine_ci'])}."
        )
    return "\n".join(lines) + "\n"


FINDINGS_LAYER_KEYS = ("layer", "sink_rate", "massive_activation_ratio", "massive_activation_ratio_ci", "massive_token", "massive_dim",
                      "massive_activation_ratio_null_random", "norm_ratio", "norm_ratio_ci", "mean_cosine", "mean_cosine_ci",
                      "standardized_cosine", "standardized_cosine_ci")  # fmt: skip


def findings_record(r: dict) -> dict:
    """The part of the record that :func:`findings_text` reads (``findings.json``; the docs' copies live in
    ``docs/data/findings-*.json`` and the docs' marked sections are generated from them)."""
    keep = ("file", "tuning", "quantisation", "dtype", "tokens", "leaders", "regime_counts", "regime_undetermined")
    out = {k: r.get(k) for k in keep}
    out["per_layer"] = [{k: row[k] for k in FINDINGS_LAYER_KEYS if k in row} for row in r["per_layer"]]
    out["study"] = {k: r["study"][k] for k in ("pool", "sink_1", "sentences")}
    out["twin"] = [{k: t[k] for k in ("layer", "attention_share_first", "attention_share_last", "attention_share_shapley")} for t in r["twin"]]
    held = r.get("held_out")
    out["held_out"] = None if not held else {"pool": held["pool"], "sink_1": held["sink_1"], "per_layer": [held["per_layer"][-1]]}
    return out


MARK = "<!-- findings:{name} (generated by attndyn.app.decoder_page.findings_text from docs/data/findings-{name}.json) -->"
END = "<!-- /findings:{name} -->"


def docs_section(text: str, name: str, findings: dict) -> str:
    """``text`` with the marked section of ``name`` replaced by :func:`findings_text` of ``findings``."""
    start, end = MARK.format(name=name), END.format(name=name)
    a, b = text.find(start), text.find(end)
    if a < 0 or b < a:
        raise ValueError(f"the docs have no section marked {start!r} ... {end!r}")
    return text[: a + len(start)] + "\n\n" + findings_text(findings) + "\n" + text[b:]


def _num(v) -> str:
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else (f"{v:.4g}" if isinstance(v, float) else html.escape(str(v)))


LAYER_KEYS = ["mean_cosine", "mean_cosine_without_first", "standardized_cosine", "clusters", "effective_rank", "stable_rank",
              "norm_ratio", "massive_activation_ratio", "massive_token", "massive_dim", "norm_growth", "sink_rate", "attention_on_first",
              "first_token_sole_leader", "attention_entropy", "boolean_distance"]  # fmt: skip


def varying(rows: list[dict], keys: list[str]) -> list[str]:
    """The keys whose column is not constant over the rows (a constant column says nothing per layer)."""
    out = []
    for k in keys:
        vals = {round(float(r[k]), 12) for r in rows if k in r and isinstance(r[k], (int, float)) and np.isfinite(r[k])}
        if len(vals) > 1:
            out.append(k)
    return out


def _cell(row: dict, key: str) -> str:
    v = _num(row.get(key))
    if f"{key}_ci" in row:
        v += f"<br><small>[{_num(row[f'{key}_ci'][0])}, {_num(row[f'{key}_ci'][1])}]</small>"
    nul = [f"{_num(row[f'{key}_null_{n}'])}" for n in NULLS if f"{key}_null_{n}" in row]
    if nul:
        v += f"<br><small>null: {' / '.join(nul)}</small>"
    return v


def render(r: dict) -> str:
    keys = varying(r["per_layer"], LAYER_KEYS)
    constant = [k for k in LAYER_KEYS if k not in keys and any(k in row for row in r["per_layer"])]
    head = "<th>layer</th>" + "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    rows = "".join(f"<tr><td>{row['layer']}</td>" + "".join(f"<td>{_cell(row, k)}</td>" for k in keys) + "</tr>" for row in r["per_layer"])
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
    figs = "".join(f'<figure><img src="{html.escape(f)}" alt="{html.escape(f)}"></figure>' for f in r["figures"])
    findings = "".join(f"<li>{html.escape(line[2:])}</li>" for line in r["findings"].splitlines() if line.startswith("- "))
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(r['title'])}: token geometry</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1400px;margin:auto;padding:1em}table{border-collapse:collapse;font-size:.75em}"
        "td,th{border:1px solid #ccc;padding:2px 6px}figure{display:inline-block;margin:4px}img{max-width:620px}</style></head><body>"
        f"<h1>{html.escape(r['title'])}</h1><p>{html.escape(r['model'])} (the file's own name); {r['layers']} layers, {r['heads']} query heads "
        f"sharing {r['kv_heads']} key/value heads, head dimension {r['head_dim']}, width {r['d_model']}; {html.escape(r['study']['pool'])} of "
        f"{min(r['tokens'])}-{max(r['tokens'])} tokens, {html.escape(r['dtype'])}, attndyn {html.escape(r['version'])}.</p>"
        f"<h2>Findings</h2><ul>{findings}</ul>"
        f"<div>{figs}</div><h2>Per layer</h2><p>Each cell: the mean over the prompts, its 95 % bootstrap interval, and the nulls "
        "(uniform causal attention / random weights / shuffled tokens) where they apply. Sink rate: Gu et al. (arXiv 2410.10781), the "
        "share of heads whose attention on token 0, averaged over the queries, exceeds 0.3. Massive-activation ratio: Sun et al. "
        "(arXiv 2402.17762), the largest entry magnitude over the median entry magnitude, at the token and dimension given. Norm ratio: "
        "|h_0| / median |h_i|. Sole leader: a head whose rows put more than 0.5 on token 0 in at least 90 % of its rows. "
        f"Columns constant over the layers are left out: {html.escape(', '.join(constant) or 'none')}.</p>"
        f"<table><tr>{head}</tr>{rows}</table>"
        "<h2>Sublayer ablation and particle twin</h2><p>Mean 1 - cos over tokens between the real layer l + 1 and: the layer's input "
        "(nothing moves), one residual step of the particle model with layer l's own attention (pre-norm, causal, grouped heads, no "
        "RoPE, no feed-forward): that step is exactly the attention sublayer without RoPE, so these columns are a sublayer ablation; "
        "its flow over unit time (the particle model's test), and the one step at the best multiple of beta. The shares: the attention "
        "sublayer's share of the layer's change of direction added first, removed last, and their average (Shapley over the two "
        "sublayers), and the feed-forward block's Shapley share.</p>"
        "<p>Leaders: the three tokens that receive the most attention in the real layer, against the twin's attention after its flow "
        "to t = 8 and against uniform causal attention (the null from the mask alone: tokens 0, 1, 2).</p>"
        "<table><tr><th>layer</th><th>identity</th><th>one step</th><th>flow</th><th>best beta</th>"
        "<th>step + RoPE</th><th>flow + RoPE</th><th>step + FFN</th><th>flow + FFN</th><th>step + both</th><th>flow + both</th>"
        "<th>attention share, first</th><th>attention share, last</th><th>attention share, Shapley</th><th>FFN share, Shapley</th>"
        "<th>leader overlap, twin</th><th>leader overlap, uniform</th><th>top leader agrees, twin</th><th>top leader agrees, uniform</th>"
        "<th>twin clusters (t = 8)</th><th>network clusters, next layer</th>"
        f"<th>network clusters, last layer</th></tr>{twin}</table>"
        f"<h2>Per head ({len(r['per_head'])} heads)</h2>{_regime_sentence(r)}{heads_table}"
        f"{TABLE_SCRIPT}</body></html>"
    )


def _regime_sentence(r: dict) -> str:
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
        f"<p>{html.escape(r.get('regime_hypotheses', ''))}</p>"
    )


def prompts_from(path: Path | None) -> list[str]:
    from attndyn.core.reading import read_bytes
    from attndyn.models.prompts import PROMPTS, read_prompts

    if path is not None:  # a regular file of at most 64 MiB: a FIFO or /dev/zero is refused by name, never opened
        read_bytes(path, "--prompts file")
    return list(PROMPTS) if path is None else read_prompts(path)


def side_by_side(folders: list[Path], out: Path) -> Path:
    """One page with several decoders' studies side by side (``compare.html`` in ``out``, an attndyn
    ``checkpoint`` folder): their sink rate, massive-activation ratio and mean cosine against relative
    depth (layer / L), each with its bootstrap band, and their findings. ``folders``: checkpoint pages
    written by :func:`decoder_report`."""
    import json

    from attndyn.workflow import plots

    records = [json.loads((Path(f) / "decoder.json").read_text(encoding="utf-8")) for f in folders]
    owner = ownership.claim(out, "checkpoint", "attndyn checkpoint (side by side)")
    ownership.clear(owner)
    out = owner.folder
    (out / "figures").mkdir(exist_ok=True)
    names = []
    for key, label, logy in (
        ("sink_rate", "sink rate (Gu et al., eps = 0.3)", False),
        ("massive_activation_ratio", "massive-activation ratio (Sun et al.)", True),
        ("mean_cosine", "mean pairwise cosine", False),
    ):
        series = {}
        for r in records:
            rows = [row for row in r["per_layer"] if np.isfinite(row.get(key, np.nan))]
            depth = np.array([row["layer"] / r["layers"] for row in rows])
            series[r["file"]] = (depth, np.array([row[key] for row in rows]))
            series[f"{r['file']}: 95 % interval (low)"] = (depth, np.array([row[f"{key}_ci"][0] for row in rows]))
            series[f"{r['file']}: 95 % interval (high)"] = (depth, np.array([row[f"{key}_ci"][1] for row in rows]))
        fig = plots.curves(np.array([0.0, 1.0]), series, xlabel="relative depth (layer / L)", ylabel=label, title=label, logy=logy)
        plots.save(fig, out / "figures" / f"compare_{key}.png")
        names.append(f"figures/compare_{key}.png")
    owner.add(*names, *(str(Path(n).with_suffix(".svg")) for n in names))
    cols = "".join(
        f"<div style='flex:1;min-width:420px'><h2>{html.escape(r['title'])}</h2><ul>"
        + "".join(f"<li>{html.escape(line[2:])}</li>" for line in r["findings"].splitlines() if line.startswith("- "))
        + "</ul></div>"
        for r in records
    )
    figs = "".join(f'<figure><img src="{html.escape(n)}" alt="{html.escape(n)}"></figure>' for n in names)
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Trained decoders side by side</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1500px;margin:auto;padding:1em}img{max-width:480px}"
        "figure{display:inline-block;margin:4px}</style></head><body><h1>Trained decoders side by side</h1>"
        f"<div>{figs}</div><div style='display:flex;gap:2em;flex-wrap:wrap'>{cols}</div></body></html>"
    )
    atomic_write_text(out / "compare.html", page)
    owner.add("compare.html")
    return out / "compare.html"
