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
from attndyn.analysis.clusters import tally
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


NULL_DTYPE = torch.float32  # the nulls' forwards (module docstring): their draw spread is far above float32's rounding


def null_values(dec: Decoder, ids: list[list[int]], dtype: torch.dtype = NULL_DTYPE, *, random_draws: int = nulls.RANDOM_DRAWS,
                shuffle_draws: int = nulls.SHUFFLE_DRAWS, seed: int = 0,
                stds: tuple[float, ...] = (nulls.INIT_STD,),
                progress: Callable[[int, int], None] | None = None) -> tuple[dict, dict]:  # fmt: skip
    """The three nulls' per-layer values (:data:`~attndyn.models.decoder_geometry.NULL_KEYS`) on the prompts
    ``ids``, their forwards run in ``dtype``: ``{null: {key: (prompts, draws, L + 1)}}`` for uniform causal
    attention (one draw: it is not random), ``random_draws`` random-weight models (each drawn from seed + k
    and run on every prompt) and ``shuffle_draws`` permutations of each prompt. Also returns the number of
    draws of each null.

    One pool of jobs over the worker processes: a random-weight model a job (drawn in the worker, which
    then runs it on every prompt: one model a worker in memory), then a forward a job for the uniform and
    shuffled nulls. Each job reduces its forwards to their values before it returns, so nothing larger
    than a prompt's table comes back; each job depends on its index alone (the permutations are drawn here,
    in order), so the numbers do not depend on the worker count.

    ``stds``: the initialiser scales of the random-weight null (:func:`~attndyn.models.decoder_nulls.initializer_scales`);
    with a second one (the model's own is not known) the same draws are made at it as well, returned as
    the null ``random_2``. ``progress(i, n)``: ``i`` of the ``n`` forward passes done (0 first; a
    random-weight model's come together, as its job ends)."""
    keep = 1 if dec.add_bos and dec.bos_id is not None else 0
    rng = np.random.default_rng(seed)
    shuffles = [[nulls.shuffled(i, rng, keep) for i in ids] for _ in range(shuffle_draws)]
    run = with_dtype(dec, dtype)  # the network's weights cast once, shared by the workers

    def values(model: Decoder, i: list[int], attention: str) -> dict:
        fw = forward(model, i, dtype=dtype, attention=attention, logits=False)
        v = geo.layer_values([fw], clusters=False, keys=geo.NULL_KEYS)
        return {key: v[key][0] for key in geo.NULL_KEYS}

    tokens = sorted({t for i in ids for t in i})  # a shuffle permutes a prompt's tokens: no other rows are read

    def random_job(k: int, std: float) -> list[dict]:
        model, rows = nulls.random_decoder_on(dec, seed + k, tokens, std)  # drawn in float32, the prompts' rows alone
        model = model if dtype == torch.float32 else with_dtype(model, dtype)
        return [values(model, rows(i), "softmax") for i in ids]

    P = len(ids)
    R = random_draws * len(stds)
    jobs: list[Callable[[], object]] = [lambda k=k, s=s: random_job(k, s) for s in stds for k in range(random_draws)]  # the longest first
    jobs += [lambda i=i: values(run, i, "uniform") for i in ids]
    jobs += [lambda i=i: values(run, i, "softmax") for draw in shuffles for i in draw]
    cost = [P] * R + [1] * (len(jobs) - R)  # forward passes: a random-weight model runs every prompt
    if progress is not None:
        progress(0, sum(cost))
    out = pmap(lambda j: jobs[j](), len(jobs), progress=progress, cost=cost)
    runs = {
        "uniform": [out[R : R + P]],
        "random": out[:random_draws],
        "shuffled": [out[R + P * (1 + s) : R + P * (2 + s)] for s in range(shuffle_draws)],
    }
    if len(stds) > 1:
        runs["random_2"] = out[random_draws : 2 * random_draws]
    stacked = {
        name: {key: np.stack([np.stack([v[key] for v in draw]) for draw in draws], axis=1) for key in geo.NULL_KEYS} for name, draws in runs.items()
    }
    return stacked, {name: len(draws) for name, draws in runs.items()}


def forwards(jobs: list[tuple[Decoder, list[int], str]], dtype: torch.dtype, progress: Callable[[int, int], None] | None = None) -> list:
    """The forward passes (no logits) of ``(decoder, ids, attention)`` jobs, in order, over the worker
    processes (:func:`attndyn.core.parallel.pmap`): each job is one whole forward, so the numbers do not
    depend on the worker count."""
    return pmap(lambda k: forward(jobs[k][0], jobs[k][1], dtype=dtype, attention=jobs[k][2], logits=False), len(jobs), progress=progress)


def layer_values(fws: list, *, clusters: bool, progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """:func:`~attndyn.models.decoder_geometry.layer_values` of the forwards, one prompt a job over the
    worker processes (each prompt's values depend on the others only through the pooled statistics,
    which every job computes from all ``fws`` in the same order: the same numbers)."""
    parts = pmap(lambda p: geo.layer_values([fws[p]], clusters=clusters, pool=fws), len(fws), progress=progress)
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def prompt_ids(dec: Decoder, texts: list[str], *, cut: bool = False) -> list[list[int]]:
    """The prompts' token ids; with ``cut`` a prompt longer than the model's context is cut to it,
    without it refused here (PromptError naming ``dec``: the user's model, before the nulls' random-weight
    models meet the prompt and name themselves)."""
    from attndyn.models.decoder import PromptError

    context = dec.context or (dec.pos_embed.shape[0] if dec.pos_embed is not None else None)
    ids = [dec.encode(t)[:context] if cut else dec.encode(t) for t in texts]
    for k, i in enumerate(ids):
        if context is not None and len(i) > context:
            start = " ".join(texts[k].split())[:40]
            raise PromptError(f"prompt {k + 1} ({start!r}...) has {len(i)} tokens, more than {dec.name}'s context of {context}; shorten it")
    return ids


def split_nulls(null: tuple[dict, dict], start: int, stop: int) -> tuple[dict, dict]:
    """:func:`null_values`' output for the prompts ``start:stop`` (each prompt's values depend on it alone)."""
    nv, draws = null
    return {name: {key: v[start:stop] for key, v in by_key.items()} for name, by_key in nv.items()}, draws


def prompt_set_study(dec: Decoder, texts: list[str], *, dtype: torch.dtype, clusters: bool, pool: str, cut: bool = False,
                     random_draws: int = nulls.RANDOM_DRAWS, shuffle_draws: int = nulls.SHUFFLE_DRAWS,
                     null_dtype: torch.dtype = NULL_DTYPE, null: tuple[dict, dict] | None = None,
                     stds: tuple[float, ...] = (nulls.INIT_STD,),
                     progress: Callable[[int, int], None] | None = None) -> tuple[list, dict, dict]:  # fmt: skip
    """The network and its three nulls on one prompt set: the forwards, the per-layer table (with
    intervals, the nulls' means over prompts and draws, their spread over draws, and the interval of the
    difference by the two-level bootstrap over prompts and draws) and the set's summary (Sink_1^eps at
    T = 64, the sentences). With ``cut`` (the shipped prompts, a default that must fit the model read) a
    prompt longer than the context is cut to it; a prompt the user gave is refused instead (``forward``'s
    PromptError names the context). ``null``: :func:`null_values` of these prompts (in ``null_dtype``) when
    the caller ran them already (the page runs the nulls of both prompt sets in one pool). ``stds``: the
    random-weight null's initialiser scales; with two (the model's own is not known), a block counts as
    above or below random weights only where it is at both scales (the hull of the two intervals). Each
    block's decision against a null is :func:`~attndyn.models.decoder_nulls.decide` over the replicates of
    :func:`~attndyn.models.decoder_nulls.replicate_differences` (``KEY_diff_NULL_decision``; the interval
    ``KEY_diff_NULL_ci`` is over all draws): a null needs at least 5 draws, or one (uniform causal attention).
    ``progress(i, n)``: ``i`` of the ``n`` = 2 x prompts jobs done (each prompt's forward, then its values; 0 first)."""
    ids = prompt_ids(dec, texts, cut=cut)
    tell = progress or (lambda i, n: None)
    P = len(ids)
    tell(0, 2 * P)
    fws = forwards([(dec, i, "softmax") for i in ids], dtype, progress=lambda i, n: tell(i, 2 * P))
    values = layer_values(fws, clusters=clusters, progress=lambda i, n: tell(P + i, 2 * P))
    rows = geo.layer_table(fws, values=values)
    nv, draws = null if null is not None else null_values(dec, ids, null_dtype, random_draws=random_draws, shuffle_draws=shuffle_draws, stds=stds)
    # a difference within the rounding of the coarser of the two runs is no difference (layer 0 of the shuffled null)
    tol = max(nulls.rounding(dtype), nulls.rounding(null_dtype))
    layers = list(range(len(rows)))
    sentences, diffs = [], {}
    for key in geo.NULL_KEYS:
        unit = "attention" if key in geo.ATTENTION_KEYS else "hidden"
        for name in NULLS:
            fixed = ""
            if name == "uniform" and key in SINK_KEYS:  # fixed by construction: the exact value instead of a comparison
                queries = [min(n, geo.SINK_T) if key == "sink_rate" else n for n in (len(i) for i in ids)]
                fixed = nulls.uniform_sink_fixed(queries, geo.SINK_THRESHOLD, what=METRIC_NAMES[key])
            a, b = _complete(values[key], nv[name][key])
            d, rep = nulls.draws_difference(a, b, rounding=tol), nulls.replicate_differences(a, b, rounding=tol)
            if name == "random" and "random_2" in nv:  # the scale is not known: a decision must hold at both
                a2, b2 = _complete(values[key], nv["random_2"][key])
                d2, rep2 = nulls.draws_difference(a2, b2, rounding=tol), nulls.replicate_differences(a2, b2, rounding=tol)
                d = d | {"lo": np.fmin(d["lo"], d2["lo"]), "hi": np.fmax(d["hi"], d2["hi"])}
                rep = {"lo_sets": np.fmin(rep["lo_sets"], rep2["lo_sets"]), "hi_sets": np.fmax(rep["hi_sets"], rep2["hi_sets"])}
            decisions = [nulls.decide(rep["lo_sets"][:, k], rep["hi_sets"][:, k]).word if np.isfinite(d["lo"][k]) else None for k in layers]
            diffs[f"{key}:{name}"] = {k: [float(x) for x in v] for k, v in d.items()} | {"decision": decisions}
            ns = nulls.draws_summary(b)
            mean = _column_means(b.reshape(b.shape[0] * b.shape[1], -1))
            for layer in layers:
                rows[layer][f"{key}_null_{name}"] = float(mean[layer])
                if draws[name] > 1:
                    rows[layer][f"{key}_null_{name}_spread"] = [float(ns["spread"][0][layer]), float(ns["spread"][1][layer])]
                rows[layer][f"{key}_diff_{name}_ci"] = [float(d["lo"][layer]), float(d["hi"][layer])]
                if decisions[layer] is not None:
                    rows[layer][f"{key}_diff_{name}_decision"] = decisions[layer]
            if fixed:
                sentences.append(fixed)
                continue
            sel = [k for k in layers if np.isfinite(d["lo"][k])]
            text = nulls.comparison_sentence(
                METRIC_NAMES.get(key, key),
                random_name(stds) if name == "random" else NULL_NAMES[name],
                sel,
                {k: rep[k][:, sel] for k in ("lo_sets", "hi_sets")},
                pool=pool,
                unit=unit,
                draws=DRAW_NAMES[name].format(n=draws[name]) if draws[name] > 1 else "",
            )
            if text:
                sentences.append(text)
    lengths = [len(i) for i in ids]
    summary = {
        "pool": pool,
        "prompts": len(texts),
        "tokens": lengths,
        "null_draws": draws,
        "replicates": nulls.REPLICATES_MIN,
        "sink_1": _sink_1_summary(values, nv, "sink_rate") | {"T": geo.SINK_T, "shorter_than_T": sum(n < geo.SINK_T for n in lengths)},
        "sink_1_all_queries": _sink_1_summary(values, nv, "sink_rate_all_queries"),
        "sentences": sentences,
        "differences": diffs,
    }
    return fws, rows, summary


def _complete(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prompts that have every value of ``a`` that any prompt has (a prompt shorter than T = 64 has no sink
    rate), with their null draws, so the paired resampling compares the same prompts."""
    keep = np.isfinite(a[:, np.isfinite(a).any(0)]).all(1)
    return (a[keep], b[keep]) if keep.any() else (a, b)


def random_name(stds: tuple[float, ...]) -> str:
    """The random-weight null named with the initialiser scale(s) it was drawn at."""
    if len(stds) == 1:
        return f"random weights (drawn at the model's initialiser scale, N(0, {stds[0]:.3g}^2))"
    at = " and ".join(f"N(0, {s:.3g}^2)" for s in stds)
    return f"random weights (the model's initialiser scale is not known: the block counts only where it holds at both {at})"


SINK_KEYS = ("sink_rate", "sink_rate_all_queries")
DRAW_NAMES = {"random": "{n} random-weight draws", "shuffled": "{n} shuffles of each prompt"}


def _sink_1_summary(values: dict, nv: dict, key: str) -> dict:
    """Sink_1^eps of the network (mean over the prompts that have it, interval over them) and of each null
    (mean over prompts and draws, the two-level interval and the per-draw range)."""
    s1 = geo.sink_1(values, key)
    ok = np.isfinite(s1)
    out: dict = {"value": float(s1[ok].mean()) if ok.any() else float("nan"), "ci": [float("nan")] * 2, "prompts": int(ok.sum())}
    if not ok.any():
        return out
    lo, hi = nulls.bootstrap_interval(s1[ok])
    out["ci"] = [float(lo), float(hi)]
    for name in NULLS:
        b = np.stack([geo.sink_1({key: nv[name][key][:, k]}, key) for k in range(nv[name][key].shape[1])], axis=1)[ok]
        ns = nulls.draws_summary(b)
        out[f"null_{name}"] = float(ns["mean"])
        out[f"null_{name}_ci"] = [float(ns["lo"]), float(ns["hi"])]
        out[f"null_{name}_spread"] = [float(ns["spread"][0]), float(ns["spread"][1])]
        out[f"null_{name}_draws"] = int(b.shape[1])
    return out


def _column_means(a: np.ndarray) -> np.ndarray:
    """Means over the prompts, NaN for a column without values (the attention measures at layer 0)."""
    ok = np.isfinite(a)
    return np.where(ok.any(0), np.where(ok, a, 0).sum(0) / np.maximum(ok.sum(0), 1), np.nan)


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


CLUSTER_KEYS = ("twin_clusters", "network_clusters_next", "network_clusters_last")
SHARE_KEYS = ("attention_share_first", "attention_share_last", "attention_share_shapley", "ffn_share_shapley")


def twin_summary(twins: list[dict], layers: tuple[int, ...]) -> tuple[list[dict], dict]:
    """Per twin layer the means over prompts (the sublayer shares with their bootstrap interval over the
    prompts, ``KEY_ci``, and the random-weights null's mean where the twins carry it, ``KEY_null_random``);
    and the leaders' agreement of the twin against uniform causal attention, with its power (how often the
    network's top leader is token 0, the answer of a rule that always says token 0, which is uniform causal
    attention's answer) and the interval of the paired difference resampled by prompt (a prompt's layers
    are not independent of each other)."""
    summary = []
    keys = ("identity", "one_step", "flow", "best_one_step", "leader_overlap", "top_leader_agrees", "uniform_leader_overlap",
            "uniform_top_leader_agrees", "attention_share_first", "attention_share_last", "attention_share_shapley", "ffn_share_first",
            "ffn_share_last", "ffn_share_shapley", *(f"{kind}_{name}" for name, _, _ in geo.VARIANTS for kind in ("one_step", "flow")))  # fmt: skip
    for k in layers:
        rows = [t for t in twins if t["layer"] == k]
        row = {key: float(np.mean([t[key] for t in rows])) for key in keys} | {"layer": k, "prompts": len(rows)}
        row |= {key: tally([t[key] for t in rows]) for key in CLUSTER_KEYS}  # each verdict's share, never a mean of counts
        for key in SHARE_KEYS:
            lo, hi = nulls.bootstrap_interval([t[key] for t in rows])
            row[f"{key}_ci"] = [float(lo), float(hi)]
            if all(f"{key}_null_random" in t for t in rows):
                row[f"{key}_null_random"] = float(np.mean([t[f"{key}_null_random"] for t in rows]))
        summary.append(row)
    if not twins:
        return summary, {}
    prompts = sorted({t["prompt"] for t in twins})
    of = np.array([t["prompt"] for t in twins])
    tw = np.array([t["top_leader_agrees"] for t in twins], dtype=float)
    un = np.array([t["uniform_top_leader_agrees"] for t in twins], dtype=float)
    ov = np.array([t["leader_overlap"] for t in twins])
    uo = np.array([t["uniform_leader_overlap"] for t in twins])

    def per_prompt(x: np.ndarray) -> np.ndarray:  # the mean over a prompt's layers: the unit the bootstrap resamples
        return np.array([x[of == p].mean() for p in prompts])

    d_top = nulls.paired_difference(per_prompt(tw), per_prompt(un))
    # the decision's replicates: both sides are deterministic, so they differ by the bootstrap seed alone
    top_sets = [nulls.paired_difference(per_prompt(tw), per_prompt(un), seed=r) for r in range(nulls.REPLICATES_MIN)]
    d_ov = nulls.paired_difference(per_prompt(ov), per_prompt(uo))
    token0 = sum(int(t["real_leaders"][0] == 0) for t in twins if "real_leaders" in t)
    leaders = {
        "pairs": len(twins),
        "prompts": len(prompts),
        "layers": list(layers),
        "twin_top_agrees": int(tw.sum()),
        "uniform_top_agrees": int(un.sum()),
        "network_top_is_token_0": token0,
        "twin_top3_is_mask": sum(int(sorted(t["twin_leaders"]) == list(range(geo.LEADERS_TOP))) for t in twins if "twin_leaders" in t),
        "twin_overlap": float(ov.mean()),
        "uniform_overlap": float(uo.mean()),
        "top_difference_ci": [float(d_top["lo"]), float(d_top["hi"])],
        "top_difference_sets": [[float(d["lo"]), float(d["hi"])] for d in top_sets],
        "overlap_difference_ci": [float(d_ov["lo"]), float(d_ov["hi"])],
        "resampled": "prompts",
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
    progress: Callable[[str, int, int], None] | None = None,
    held_out: list[str] | None = None,
    prompt_set: str | None = None,
) -> dict:
    """The study (module docstring). ``held_out``: a second prompt set reported beside the first (default:
    :data:`~attndyn.models.prompts.HELD_OUT` when ``prompts`` are the shipped prompts, none otherwise).
    ``progress(stage, i, n)``: ``i`` of the ``n`` jobs of ``stage`` (a sentence) done, for each stage in
    turn from ``i = 0`` to ``i = n`` (the nulls' draws and forwards, the prompts' forwards, the held-out set,
    the regimes with the head table, the null of the regimes and the twins, the figures and the page)."""
    from attndyn.models.prompts import HELD_OUT, PROMPTS
    from attndyn.workflow import plots

    step = progress or (lambda stage, i, n: None)
    step("reading the model", 0, 1)
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
    pool = f"{prompt_set} ({len(prompts)})"
    # the weights held in the run's dtype once (forward casts each weight on each call otherwise): the same numbers
    run = with_dtype(dec, dtype)
    ids = prompt_ids(run, list(prompts) + list(held), cut=shipped)
    step("reading the model", 1, 1)
    stage = f"the three nulls of {len(ids)} prompts (in {str(NULL_DTYPE).removeprefix('torch.')}), forward passes"
    init = nulls.initializer_scales(dec)
    stds = tuple(s for s, _ in init)
    # both sets in one pool (each random-weight model drawn once); dec: cast from the file's tensors
    null = null_values(dec, ids, stds=stds, progress=lambda i, n, stage=stage: step(stage, i, n))
    P = len(prompts)
    stage = f"forward passes and token geometry of {P} prompts"
    fws, layers, study = prompt_set_study(
        run, prompts, dtype=dtype, clusters=True, pool=pool, cut=shipped, null=split_nulls(null, 0, P), stds=stds,
        progress=lambda i, n, stage=stage: step(stage, i, n),
    )  # fmt: skip
    study["null_init"] = [{"std": s, "source": why} for s, why in init]
    held_study = None
    if held:
        stage = f"the held-out set: {len(held)} prompts"
        _, held_layers, held_study = prompt_set_study(
            run, held, dtype=dtype, clusters=False, pool=f"the held-out prompts ({len(held)})", cut=shipped,
            null=split_nulls(null, P, len(ids)), stds=stds, progress=lambda i, n, stage=stage: step(stage, i, n),
        )  # fmt: skip
        held_study["per_layer"] = [{k: v for k, v in r.items() if "_null_" not in k and "_diff_" not in k} for r in held_layers]
    stage = (
        f"spectra of every head, the paper's regime of {len(regime_layers) * dec.heads} heads with their margins, the particle twins, "
        "and the random-weights null of the regimes and the sublayer shares"
    )
    heads, head_regimes, twins, (null_regimes, null_shares) = _heads_and_twins(
        dec, run, fws[:TWIN_PROMPTS], tuple(regime_layers), twin_layers, dtype, stds[0], progress=lambda i, n, stage=stage: step(stage, i, n)
    )
    by_key = {(r["layer"], r["head"]): r for r in head_regimes}
    for h in heads:
        h.update(by_key.get((h["layer"], h["head"]), {}))
    for t in twins:
        t.update({f"{key}_null_random": null_shares[t["layer"], t["prompt"]][key] for key in SHARE_KEYS})
    summary, leaders = twin_summary(twins, twin_layers)
    step("figures and the page", 0, 1)
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
        "null_dtype": str(NULL_DTYPE).removeprefix("torch."),
        "heatmap": {"layer": lay, "head": head, "rank": int(np.linalg.matrix_rank(P, tol=1e-4)), "size": int(P.shape[0])},
        "per_layer": layers,
        "study": study,
        "held_out": held_study,
        "per_head": heads,
        "twin": summary,
        "twin_refused": no_twin or None,  # why this family has no particle twin (issue 48 item 7), None when it has one
        "leaders": leaders,
        "twin_per_prompt": twins,
        "regime_counts": dict(Counter(h["regime"] for h in labelled).most_common()),
        "regime_undetermined": dict(Counter(h["regime"] for h in labelled if not h["determined"]).most_common()),
        "regime_draws": {
            "draws": labelled[0]["perturbation_draws"] if labelled else 0,
            "groups": [sum(not h["determined_groups"][g] for h in labelled) for g in range(len(labelled[0]["determined_groups"]))]
            if labelled
            else [],
        },
        "regime_counts_null_random": dict(Counter(h["regime"] for h in null_regimes).most_common()),
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
    step("figures and the page", 1, 1)
    return record


def _heads_and_twins(
    dec: Decoder, run: Decoder, fws: list, regime_layers: tuple[int, ...], twin_layers: tuple[int, ...], dtype: torch.dtype,
    std: float = nulls.INIT_STD, progress: Callable[[int, int], None] | None = None,
) -> tuple[list, list, list, tuple[list, dict]]:  # fmt: skip
    """The head table, the heads' regimes, the particle twins and the random-weights null of the regimes and
    of the sublayer shares, as one list of independent jobs over the worker processes (the regimes, the
    longest, first; then the table and the null; then one job a twin's layer and prompt): each job runs
    whole in one process, so the numbers do not depend on the worker count. ``progress(i, n)``: ``i`` of
    the ``n`` jobs done (0 first)."""
    jobs = [
        lambda: regimes.head_regimes(dec, regime_layers),
        lambda: geo.head_table(dec),
        lambda: _random_null(dec, fws, regime_layers, twin_layers, dtype, std),
        *geo.twin_jobs(run, fws, twin_layers),
    ]
    if progress is not None:
        progress(0, len(jobs))
    out = pmap(lambda k: jobs[k](), len(jobs), progress=progress)
    return out[1], out[0], out[3:], out[2]


def _random_null(
    dec: Decoder, fws: list, regime_layers: tuple[int, ...], twin_layers: tuple[int, ...], dtype: torch.dtype, std: float = nulls.INIT_STD
) -> tuple[list, dict]:
    """The first random-weights draw (gain 1, folded as the network's): its heads' regimes, and its sublayer
    shares at each twin layer on each twin prompt, ``{(layer, prompt): shares}``."""
    random_dec, rows = nulls.random_decoder_on(dec, 0, sorted({t for f in fws for t in f.ids}), std)
    null_regimes = regimes.head_regimes(random_dec, regime_layers, draws=0)
    model = with_dtype(random_dec, dtype)
    shares = {}
    for p, f in enumerate(fws if twin_layers else []):
        rf = forward(model, rows(f.ids), dtype=dtype, logits=False)
        for k in twin_layers:
            shares[k, p] = geo.sublayer_shares(model, rf.hidden[k], rf.hidden[k + 1].double().numpy(), k)
    return null_regimes, shares


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
    onset = most["above"][0] - 1 if most["above"] else None
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


def leaders_sentence(lead: dict) -> str:
    """The leaders' comparison with its power: the baseline "always token 0" (uniform causal attention's top answer) beside
    the twin's score, and the interval of the difference resampled by prompt."""
    n, k = lead["pairs"], lead.get("network_top_is_token_0")
    lo, hi = lead["top_difference_ci"]
    sets = lead.get("top_difference_sets")
    if sets:  # the decision over replicates (bootstrap seeds: both sides are deterministic)
        word = nulls.decide([x[0] for x in sets], [x[1] for x in sets]).word
    else:
        word = "exceeds" if lo > 0 else "falls below" if hi < 0 else "cannot be told"
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


FINDINGS_LAYER_KEYS = ("layer", "sink_rate", "sink_rate_ci", "massive_activation_ratio", "massive_activation_ratio_ci", "massive_token",
                      "massive_dim", "norm_ratio", "norm_ratio_ci", "mean_cosine", "mean_cosine_ci",
                      "standardized_cosine", "standardized_cosine_ci") + tuple(
    f"{key}_{part}" for key in ("massive_activation_ratio", "norm_ratio", "mean_cosine") for name in NULLS
    for part in (f"null_{name}", f"null_{name}_spread", f"diff_{name}_ci", f"diff_{name}_decision")
)  # fmt: skip


def findings_record(r: dict) -> dict:
    """The part of the record that :func:`findings_text` reads (``findings.json``; the docs' copies live in
    ``docs/data/findings-*.json`` and the docs' marked sections are generated from them)."""
    keep = ("file", "tuning", "quantisation", "dtype", "null_dtype", "tokens", "leaders", "regime_counts", "regime_undetermined", "regime_draws",
            "regime_counts_null_random")  # fmt: skip
    out = {k: r.get(k) for k in keep}
    out["per_layer"] = [{k: row[k] for k in FINDINGS_LAYER_KEYS if k in row} for row in r["per_layer"]]
    out["study"] = {
        k: r["study"][k] for k in ("pool", "sink_1", "sink_1_all_queries", "null_draws", "replicates", "null_init", "sentences") if k in r["study"]
    }
    twin_keys = (
        "layer",
        "prompts",
        "ffn_share_shapley",
        *SHARE_KEYS[:3],
        *(f"{k}_ci" for k in SHARE_KEYS[:3]),
        "attention_share_shapley_null_random",
    )
    out["twin"] = [{k: t[k] for k in twin_keys if k in t} for t in r["twin"]]
    held = r.get("held_out")
    out["held_out"] = None if not held else {"pool": held["pool"], "sink_1": held["sink_1"], "per_layer": [held["per_layer"][-1]]}
    return out


MARK = "<!-- findings:{name} (generated by attndyn.app.decoder_page.findings_text from docs/data/findings-{name}.json) -->"
END = "<!-- /findings:{name} -->"


def marked_section(text: str, start: str, end: str, body: str) -> str:
    """``text`` with what lies between the marks ``start`` and ``end`` replaced by ``body``."""
    a, b = text.find(start), text.find(end)
    if a < 0 or b < a:
        raise ValueError(f"the docs have no section marked {start!r} ... {end!r}")
    return text[: a + len(start)] + "\n\n" + body + "\n" + text[b:]


def docs_section(text: str, name: str, findings: dict) -> str:
    """``text`` with the marked section of ``name`` replaced by :func:`findings_text` of ``findings``."""
    return marked_section(text, MARK.format(name=name), END.format(name=name), findings_text(findings))


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
        f"{min(r['tokens'])}-{max(r['tokens'])} tokens, {html.escape(r['dtype'])} (the nulls' forwards in "
        f"{html.escape(str(r.get('null_dtype', r['dtype'])))}), attndyn {html.escape(r['version'])}.</p>"
        f"<h2>Findings</h2><ul>{findings}</ul>"
        f"<div>{figs}</div><h2>Per layer</h2><p>{html.escape(nulls.LAYER_CONVENTION)} Each cell: the mean over the prompts, its 95 % "
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
        f"<h2>Per head ({len(r['per_head'])} heads)</h2>{_regime_sentence(r)}{heads_table}"
        f"{TABLE_SCRIPT}</body></html>"
    )


def _no_twin_note(r: dict) -> str:
    """Where the family has no particle twin, the reason (the family row's), in place of an empty table's silence."""
    why = r.get("twin_refused")
    return f"<p class='no-twin'>No particle twin for this model: {html.escape(why)}.</p>" if why else ""


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
        f"<p>{html.escape(regime_sentence(r).removeprefix('- '))}</p>"
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
