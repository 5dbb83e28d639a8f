"""The decoder page's study: a trained decoder measured across depth against three nulls (data only).

Contract
--------
``plan(name_or_path, ...)`` reads the model and checks every option before anything runs; ``run_study(plan,
prompts=...)`` runs the network on every prompt and returns the record (plain data: per-layer, per-head,
twin and held-out tables) and the chosen head's attention map. No sentences, no decisions, no files:
:mod:`attndyn.models.decoder_findings` decides and writes from the record, ``attndyn.app`` draws it.
Every per-layer value carries its bootstrap interval over the prompts and three nulls
(:mod:`attndyn.models.decoder_nulls`): uniform causal attention, random weights drawn as the model's
initialiser draws them, and shuffled tokens; each difference to a null carries its interval and, under
``study["comparisons"]``, its independent replicates' intervals. A held-out prompt set runs beside the
shipped prompts (:data:`attndyn.models.prompts.HELD_OUT`).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attndyn import __version__
from attndyn.analysis.clusters import tally
from attndyn.core.parallel import pmap
from attndyn.models import decoder_geometry as geo
from attndyn.models import decoder_null_runs as null_runs
from attndyn.models import decoder_nulls as nulls
from attndyn.models import decoder_regimes as regimes
from attndyn.models.bert import CheckpointError
from attndyn.models.decoder import Decoder, in_dtype, parameters
from attndyn.models.executor import forwards as forward_many
from attndyn.models.executor import pooled_forwards
from attndyn.models.families import default_twin_layers, twin_refusal

TWIN_PROMPTS = 4  # the twin runs on the first prompts (one RK4 flow of a layer costs about a second)
NULLS = ("uniform", "random", "shuffled")
SINK_KEYS = ("sink_rate", "sink_rate_all_queries")
CLUSTER_KEYS = ("twin_clusters", "network_clusters_next", "network_clusters_last")
SHARE_KEYS = ("attention_share_first", "attention_share_last", "attention_share_shapley", "ffn_share_shapley")
QUANT = re.compile(r"(?i)(?<![a-z0-9])(iq\d\w*|q\d_k_[sml]|q\d_k|q\d_\d|q\d|bf16|f16|f32)(?![a-z0-9])")


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


def forwards(jobs: list[tuple[Decoder, list[int], str]], dtype: torch.dtype, progress: Callable[[int, int], None] | None = None) -> list:
    """The forward passes (no logits) of ``(decoder, ids, attention)`` jobs, in order: one layer-major run a
    worker process (:func:`attndyn.models.executor.pooled_forwards`)."""
    return pooled_forwards(jobs, dtype=dtype, progress=progress)


def layer_values(fws: list, *, clusters: bool, progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """:func:`~attndyn.models.decoder_geometry.layer_values` of the forwards, one prompt a job over the worker
    processes (the pooled statistics come from all ``fws`` in the same order in every job: the same numbers)."""
    parts = pmap(lambda p: geo.layer_values([fws[p]], clusters=clusters, pool=fws), len(fws), progress=progress)
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def prompt_ids(dec: Decoder, texts: list[str], *, cut: bool = False) -> list[list[int]]:
    """The prompts' token ids; with ``cut`` a prompt longer than the model's context is cut to it, without it
    refused here (PromptError naming ``dec``: the user's model, before the nulls' models meet the prompt). A prompt
    with a token whose input vector is zero (an all-zero embedding row, such as the padding token a word-level
    tokenizer gives every word it does not know) is refused naming the prompt and the token: a zero vector has no
    direction, so the page's cosines and effective rank are undefined for it."""
    from attndyn.models.decoder import PromptError

    context = dec.context or (dec.pos_embed.shape[0] if dec.pos_embed is not None else None)
    ids = [dec.encode(t)[:context] if cut else dec.encode(t) for t in texts]
    for k, i in enumerate(ids):
        start = " ".join(texts[k].split())[:40]
        if context is not None and len(i) > context:
            raise PromptError(f"prompt {k + 1} ({start!r}...) has {len(i)} tokens, more than {dec.name}'s context of {context}; shorten it")
        zero = _zero_input_tokens(dec, i)
        if zero:
            j = zero[0]
            row = "its embedding row is all zeros" if not bool(dec.embed[i[j]].any()) else f"its embedding row plus position {j}'s is zero"
            token = dec.tokenizer.id_to_token(i[j]) if hasattr(dec.tokenizer, "id_to_token") else dec.decode([i[j]])
            raise PromptError(
                f"prompt {k + 1} ({start!r}...): {len(zero)} of its {len(i)} tokens have a zero input vector in {dec.name}, the first "
                f"token {j} {token!r} (id {i[j]}: {row}), so their cosines and the effective rank are undefined; "
                + ("give prompts its tokenizer knows with --prompts" if cut else "remove them from the prompt")
                + " (a word the tokenizer does not know may map to this token)"
            )
    return ids


def _zero_input_tokens(dec: Decoder, ids: list[int]) -> list[int]:
    """The positions of ``ids`` whose input vector (embedding row x scale, plus the learned position where the
    model has them, as :func:`~attndyn.models.decoder.forward` starts) is zero."""
    from attndyn.models.token_geometry import zero_norm_rows

    if not ids or not all(0 <= t < dec.embed.shape[0] for t in ids):
        return []  # no tokens, or ids the forward pass refuses itself
    x = dec.embed[torch.as_tensor(ids)].to(device="cpu", dtype=torch.float64) * dec.embed_scale
    if dec.positions == "learned" and dec.pos_embed is not None:
        x = x + dec.pos_embed[: len(ids)].to(device="cpu", dtype=torch.float64)
    return zero_norm_rows(x.numpy())


def check_prompts(p: Plan, prompts: list[str], held_out: list[str] | None = None) -> None:
    """:func:`prompt_ids`' refusals of the study's prompts, before any folder is claimed."""
    from attndyn.models.prompts import HELD_OUT, PROMPTS

    shipped = list(prompts) == list(PROMPTS)
    held = (list(HELD_OUT) if shipped else []) if held_out is None else held_out
    prompt_ids(p.decoder, list(prompts) + list(held), cut=shipped)


def prompt_set_study(dec: Decoder, texts: list[str], *, dtype: torch.dtype, clusters: bool, pool: str, cut: bool = False,
                     random_draws: int = nulls.RANDOM_DRAWS, shuffle_draws: int = nulls.SHUFFLE_DRAWS,
                     null_dtype: torch.dtype = nulls.NULL_DTYPE, null: tuple[dict, dict] | None = None,
                     stds: tuple[float, ...] = (nulls.INIT_STD,),
                     progress: Callable[[int, int], None] | None = None) -> tuple[list, dict, dict]:  # fmt: skip
    """The network and its three nulls on one prompt set: the forwards, the per-layer table (intervals, the nulls'
    means over prompts and draws, their spread over draws, the interval of the difference by the two-level
    bootstrap, ``KEY_diff_NULL_ci``) and the set's summary (Sink_1^eps at T = 64, the differences, and
    ``comparisons``: per measure and null the intervals of :func:`~attndyn.models.decoder_nulls.replicate_differences`,
    from which :func:`attndyn.models.decoder_findings.decided` decides). With ``cut`` (the shipped prompts) a
    prompt longer than the context is cut to it, else refused. ``null``: :func:`~attndyn.models.decoder_null_runs.null_values` of these prompts
    (in ``null_dtype``) when the caller ran them. With two ``stds`` (the model's scale is not known) the
    intervals are the hull of both scales'. ``progress(i, n)``: ``i`` of the 2 x prompts jobs done (0 first)."""
    ids = prompt_ids(dec, texts, cut=cut)
    tell = progress or (lambda i, n: None)
    P = len(ids)
    tell(0, 2 * P)
    fws = forwards([(dec, i, "softmax") for i in ids], dtype, progress=lambda i, n: tell(i, 2 * P))
    values = layer_values(fws, clusters=clusters, progress=lambda i, n: tell(P + i, 2 * P))
    rows = geo.layer_table(fws, values=values)
    nv, draws = (
        null if null is not None else null_runs.null_values(dec, ids, null_dtype, random_draws=random_draws, shuffle_draws=shuffle_draws, stds=stds)
    )
    # a difference within the rounding of the coarser of the two runs is no difference (layer 0 of the shuffled null)
    tol = max(nulls.rounding(dtype), nulls.rounding(null_dtype))
    layers = list(range(len(rows)))
    comparisons, diffs = [], {}
    for key in geo.NULL_KEYS:
        for name in NULLS:
            a, b = _complete(values[key], nv[name][key])
            d, rep = nulls.draws_difference(a, b, rounding=tol), nulls.replicate_differences(a, b, rounding=tol)
            if name == "random" and "random_2" in nv:  # the scale is not known: the hull of both scales' intervals
                a2, b2 = _complete(values[key], nv["random_2"][key])
                d2, rep2 = nulls.draws_difference(a2, b2, rounding=tol), nulls.replicate_differences(a2, b2, rounding=tol)
                d = d | {"lo": np.fmin(d["lo"], d2["lo"]), "hi": np.fmax(d["hi"], d2["hi"])}
                rep = {"lo_sets": np.fmin(rep["lo_sets"], rep2["lo_sets"]), "hi_sets": np.fmax(rep["hi_sets"], rep2["hi_sets"])}
            diffs[f"{key}:{name}"] = {k: [float(x) for x in v] for k, v in d.items()}
            ns = nulls.draws_summary(b)
            mean = _column_means(b.reshape(b.shape[0] * b.shape[1], -1))
            for layer in layers:
                rows[layer][f"{key}_null_{name}"] = float(mean[layer])
                if draws[name] > 1:
                    rows[layer][f"{key}_null_{name}_spread"] = [float(ns["spread"][0][layer]), float(ns["spread"][1][layer])]
                rows[layer][f"{key}_diff_{name}_ci"] = [float(d["lo"][layer]), float(d["hi"][layer])]
            comparisons.append({
                "key": key, "null": name, "draws": draws[name], "stds": list(stds), "defined": [k for k in layers if np.isfinite(d["lo"][k])],
                "lo_sets": rep["lo_sets"], "hi_sets": rep["hi_sets"],
                # the queries a head's share of token 0 is averaged over: uniform attention's sink rate is fixed by them
                "queries": [min(n, geo.SINK_T) if key == "sink_rate" else n for n in map(len, ids)] if key in SINK_KEYS else None,
            })  # fmt: skip
    lengths = [len(i) for i in ids]
    summary = {
        "pool": pool, "prompts": len(texts), "tokens": lengths, "null_draws": draws, "replicates": nulls.REPLICATES_MIN,
        "sink_1": _sink_1_summary(values, nv, "sink_rate") | {"T": geo.SINK_T, "shorter_than_T": sum(n < geo.SINK_T for n in lengths)},
        "sink_1_all_queries": _sink_1_summary(values, nv, "sink_rate_all_queries"), "differences": diffs, "comparisons": comparisons,
    }  # fmt: skip
    return fws, rows, summary


def _complete(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prompts that have every value of ``a`` that any prompt has (a prompt shorter than T = 64 has no sink
    rate), with their null draws, so the paired resampling compares the same prompts."""
    keep = np.isfinite(a[:, np.isfinite(a).any(0)]).all(1)
    return (a[keep], b[keep]) if keep.any() else (a, b)


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


def twin_summary(twins: list[dict], layers: tuple[int, ...]) -> tuple[list[dict], dict]:
    """Per twin layer the means over prompts (the sublayer shares with their interval over the prompts, ``KEY_ci``,
    and the random-weights null's mean, ``KEY_null_random``); and the twin's leaders against uniform causal attention
    (whose top answer is token 0): how often the network's top leader is token 0 (the comparison's power), the
    interval of the paired difference resampled by prompt, and its replicates by bootstrap seed."""
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
    tw, un = (np.array([t[k] for t in twins], dtype=float) for k in ("top_leader_agrees", "uniform_top_leader_agrees"))
    ov, uo = (np.array([t[k] for t in twins]) for k in ("leader_overlap", "uniform_leader_overlap"))

    def per_prompt(x: np.ndarray) -> np.ndarray:  # the mean over a prompt's layers: the unit the bootstrap resamples
        return np.array([x[of == p].mean() for p in prompts])

    d_top = nulls.paired_difference(per_prompt(tw), per_prompt(un))
    # the decision's replicates: both sides are deterministic, so they differ by the bootstrap seed alone
    top_sets = [nulls.paired_difference(per_prompt(tw), per_prompt(un), seed=r) for r in range(nulls.REPLICATES_MIN)]
    d_ov = nulls.paired_difference(per_prompt(ov), per_prompt(uo))
    mask = list(range(geo.LEADERS_TOP))
    return summary, {
        "pairs": len(twins), "prompts": len(prompts), "layers": list(layers), "twin_top_agrees": int(tw.sum()), "uniform_top_agrees": int(un.sum()),
        "network_top_is_token_0": sum(int(t["real_leaders"][0] == 0) for t in twins if "real_leaders" in t),
        "twin_top3_is_mask": sum(int(sorted(t["twin_leaders"]) == mask) for t in twins if "twin_leaders" in t),
        "twin_overlap": float(ov.mean()), "uniform_overlap": float(uo.mean()), "top_difference_ci": [float(d_top["lo"]), float(d_top["hi"])],
        "top_difference_sets": [[float(d["lo"]), float(d["hi"])] for d in top_sets],
        "overlap_difference_ci": [float(d_ov["lo"]), float(d_ov["hi"])], "resampled": "prompts",
    }  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Plan:
    """What :func:`run_study` runs, every option checked (:func:`plan`)."""

    decoder: Decoder
    twin_layers: tuple[int, ...]
    regime_layers: tuple[int, ...]
    heatmap: tuple[int, int]  # (layer, head) of the attention map shown
    twin_refused: str  # why the family has no particle twin, "" when it has one


def plan(name_or_path: str, *, twin_layers: tuple[int, ...] | None = None, regime_layers: tuple[int, ...] | str = "all",
         heatmap: tuple[int, int] | None = None) -> Plan:  # fmt: skip
    """The model read and the options checked (CheckpointError naming the option), before the page claims its folder:
    the twin layers (none where the family has none), the regime layers and the attention map's layer and head."""
    from attndyn.models.decoder_files import load_decoder

    dec = load_decoder(name_or_path)
    if dec.tokenizer is None:
        raise CheckpointError(f"{dec.name} carries no tokenizer: a tokenizer.json is needed beside its weights")
    L = len(dec.layers)
    no_twin = twin_refusal(dec)
    if no_twin and twin_layers:
        raise CheckpointError(f"--twin-layers: the particle twin is not offered for {dec.name}: {no_twin}")
    twin_layers = () if no_twin else tuple(twin_layers) if twin_layers is not None else default_twin_layers(L)
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
    return Plan(dec, twin_layers, tuple(regime_layers), (lay, head), no_twin or "")


def run_study(p: Plan, *, prompts: list[str], dtype: torch.dtype | None = torch.float32, held_out: list[str] | None = None,
              prompt_set: str | None = None, progress: Callable[[str, int, int], None] | None = None) -> tuple[dict, np.ndarray]:  # fmt: skip
    """The study (module docstring): the record and the chosen head's attention map on prompt 0. ``held_out``: a second
    prompt set (default: HELD_OUT beside the shipped prompts). ``progress(stage, i, n)``: ``i`` of the ``n`` jobs
    of ``stage`` (a sentence) done, each stage from 0 to n in turn. ``dtype`` None: :func:`~attndyn.models.decoder_nulls.auto_dtype`."""
    from attndyn.models.prompts import HELD_OUT, PROMPTS

    step = progress or (lambda stage, i, n: None)
    dec, L = p.decoder, len(p.decoder.layers)
    dtype, dtype_rule = nulls.auto_dtype(dec) if dtype is None else (dtype, "as asked")
    shipped = list(prompts) == list(PROMPTS)
    held = (list(HELD_OUT) if shipped else []) if held_out is None else held_out
    prompt_set = prompt_set or ("the shipped prompts" if shipped else "the given prompts")
    # the layers read in the run's dtype, each built when a run of prompts reaches it (no copy of the model): the same numbers
    run = in_dtype(dec, dtype)
    ids = prompt_ids(run, list(prompts) + list(held), cut=shipped)
    step("reading the model", 1, 1)
    stage = f"the three nulls of {len(ids)} prompts (in {str(nulls.NULL_DTYPE).removeprefix('torch.')}), forward passes"
    init = nulls.initializer_scales(dec)
    stds = tuple(s for s, _ in init)
    # both sets in one pool (each random-weight model drawn once); dec: cast from the file's tensors
    nv, draws = null_runs.null_values(dec, ids, stds=stds, progress=lambda i, n, stage=stage: step(stage, i, n))
    split = lambda a, b: ({name: {k: v[a:b] for k, v in by.items()} for name, by in nv.items()}, draws)  # noqa: E731 (a prompt's values are its own)
    P = len(prompts)
    stage = f"forward passes and token geometry of {P} prompts"
    fws, layers, study = prompt_set_study(
        run, prompts, dtype=dtype, clusters=True, pool=f"{prompt_set} ({P})", cut=shipped, null=split(0, P), stds=stds,
        progress=lambda i, n, stage=stage: step(stage, i, n),
    )  # fmt: skip
    study["null_init"] = [{"std": s, "source": why} for s, why in init]
    held_study = None
    if held:
        stage = f"the held-out set: {len(held)} prompts"
        _, held_layers, held_study = prompt_set_study(
            run, held, dtype=dtype, clusters=False, pool=f"the held-out prompts ({len(held)})", cut=shipped,
            null=split(P, len(ids)), stds=stds, progress=lambda i, n, stage=stage: step(stage, i, n),
        )  # fmt: skip
        held_study["per_layer"] = [{k: v for k, v in r.items() if "_null_" not in k and "_diff_" not in k} for r in held_layers]
    stage = (f"spectra of every head, the paper's regime of {len(p.regime_layers) * dec.heads} heads with their margins, the particle "
             "twins, and the random-weights null of the regimes and the sublayer shares")  # fmt: skip
    jobs = [
        lambda: regimes.head_regimes(dec, p.regime_layers),
        lambda: geo.head_table(dec),
        lambda: _random_null(dec, fws[:TWIN_PROMPTS], p.regime_layers, p.twin_layers, dtype, stds[0]),
        *geo.twin_jobs(run, fws[:TWIN_PROMPTS], p.twin_layers),
    ]  # the regimes, the longest, first; each job runs whole in one process: the numbers do not depend on the worker count
    step(stage, 0, len(jobs))
    head_regimes, heads, (null_regimes, null_shares), *per_layer = pmap(lambda k: jobs[k](), len(jobs), progress=lambda i, n: step(stage, i, n))
    twins = [t for part in per_layer for t in part]
    by_key = {(r["layer"], r["head"]): r for r in head_regimes}
    for h in heads:
        h.update(by_key.get((h["layer"], h["head"]), {}))
    for t in twins:
        t.update({f"{key}_null_random": null_shares[t["layer"], t["prompt"]][key] for key in SHARE_KEYS})
    summary, leaders = twin_summary(twins, p.twin_layers)
    about = describe_file(dec.name, dec.source)
    lay, head = p.heatmap
    A = fws[0].attentions[lay, head].double().numpy()
    labelled = [h for h in heads if "regime" in h]
    groups = range(len(labelled[0]["determined_groups"]) if labelled else 0)
    record = {
        "version": __version__, "model": dec.name, **about,
        "title": f"{about['file']} ({about['tuning']}, {about['quantisation']}, run in {str(dtype).removeprefix('torch.')})",
        "source": dec.source, "layers": L, "heads": dec.heads, "kv_heads": dec.kv_heads, "head_dim": dec.head_dim, "d_model": dec.d_model,
        "prompts": len(prompts), "prompt_set": prompt_set, "tokens": [len(f.ids) for f in fws],
        "dtype": str(dtype).removeprefix("torch."), "dtype_rule": dtype_rule,
        "parameters": parameters(dec), "null_dtype": str(nulls.NULL_DTYPE).removeprefix("torch."),
        "heatmap": {"layer": lay, "head": head, "rank": int(np.linalg.matrix_rank(A, tol=1e-4)), "size": int(A.shape[0])},
        "per_layer": layers, "study": study, "held_out": held_study, "per_head": heads, "twin": summary,
        "twin_refused": p.twin_refused or None,  # why this family has no particle twin (issue 48 item 7), None when it has one
        "leaders": leaders, "twin_per_prompt": twins,
        "regime_counts": dict(Counter(h["regime"] for h in labelled).most_common()),
        "regime_undetermined": dict(Counter(h["regime"] for h in labelled if not h["determined"]).most_common()),
        "regime_draws": {"draws": labelled[0]["perturbation_draws"] if labelled else 0,
                         "groups": [sum(not h["determined_groups"][g] for h in labelled) for g in groups]},
        "regime_counts_null_random": dict(Counter(h["regime"] for h in null_regimes).most_common()),
        "regime_hypotheses": regimes.HYPOTHESES,
    }  # fmt: skip
    return record, A


def _random_null(
    dec: Decoder, fws: list, regime_layers: tuple[int, ...], twin_layers: tuple[int, ...], dtype: torch.dtype, std: float = nulls.INIT_STD
) -> tuple[list, dict]:
    """The first random-weights draw (gain 1, folded as the network's): its heads' regimes, and its sublayer
    shares at each twin layer on each twin prompt, ``{(layer, prompt): shares}``."""
    random_dec, rows = nulls.random_decoder_on(dec, 0, sorted({t for f in fws for t in f.ids}), std)
    null_regimes = regimes.head_regimes(random_dec, regime_layers, draws=0)
    model = in_dtype(random_dec, dtype)
    shares = {}
    rfs = forward_many(model, [(rows(f.ids), "softmax") for f in fws], dtype=dtype) if twin_layers else []
    for k in twin_layers:  # layer by layer: each random layer drawn once for every prompt
        for p, rf in enumerate(rfs):
            shares[k, p] = geo.sublayer_shares(model, rf.hidden[k], rf.hidden[k + 1].double().numpy(), k)
    return null_regimes, shares
