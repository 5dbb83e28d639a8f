"""Edits of a decoder's forward, as validated data, applied by the layer-major executor
(:mod:`attndyn.models.executor`), and their effects with bootstrap intervals over prompts and a null each.

A spec reads ``KIND:key=value,...``; "block=l" is the residual stream after 0-based block l:

- ``zero:block=l[,token=t][,dim=j]``, ``mean:...`` (the mean over the prompts of the same entries),
  ``scale:...,by=s``, ``set:...,value=v``, ``clip:...,by=c`` (to [-c, c]): an entry, a token's vector or a
  whole dimension of the state after block l;
- ``skip:block=l`` or ``skip:blocks=a-b`` (the residual passes through), ``skip:block=l,sublayer=attention|feedforward``,
  ``skip:block=l,head=h``;
- ``attention:block=l,with=uniform|no-first-key``: the layer's attention replaced by uniform causal
  attention, or with the first token's key removed for every query but query 0 (the rest renormalised);
  ``attention:block=l,with=twin-step|twin[,steps=s]``: the attention sublayer's output replaced by the
  particle twin of that layer (its folded Q, K, V: :func:`attndyn.models.decoder_geometry.twin_update`),
  its one Euler step over unit time (the velocity) or its flow over unit time (RK4, ``steps`` steps,
  default :data:`TWIN_STEPS`; the output x(1) - x(0)); refused for a family without a twin;
- ``patch:block=l,token=t,from=k``: token t's state after block l taken from prompt k of the set.

Several edits at once: a tuple of :class:`Edit`. The nulls (:func:`null_edits`): zero/mean/scale/set/clip of
an entry -> the same operation on a random non-massive dimension of the same token; skip of a block or span
-> a random block or span of the same length; head skip -> a random head of the same layer; no-first-key ->
a random non-first key removed; patch -> the same patch from a prompt with its tokens shuffled (the caller
supplies it); uniform attention and the twin replacements have no random place: they are compared with
the plain layer and with each other (the ``theory`` study, :func:`theory_study`).

Three modules, each importing only those below it: the language (:class:`Edit`, :func:`parse`, what the executor
applies) in :mod:`attndyn.models.edits`, the measurements (:func:`intervene`, :func:`evaluate`, the nulls and
intervals) in :mod:`attndyn.models.edit_effects`, the studies (:func:`run_study`) here; every name of the first two
is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

# the edit language and the measurements, re-exported: ``interventions`` is the one name its importers use
from attndyn.models.edit_effects import (  # noqa: F401
    _clean,
    _interval,
    _pooled,
    decide,
    effects,
    evaluate,
    intervene,
    null_edits,
    perturb_null,
    plain_effect,
    pooled_bootstrap,
)
from attndyn.models.edits import (  # noqa: F401
    FORMS,
    KEYS,
    MASSIVE,
    STATE_KINDS,
    SUBLAYERS,
    TWIN_STEPS,
    TWINS,
    WITH,
    Edit,
    apply_state_edits,
    attention_edit,
    block_action,
    heads_skipped,
    keys_dropped,
    massive_dims,
    null_dim,
    parse,
    parse_all,
)

if TYPE_CHECKING:
    from attndyn.models.decoder import Decoder

STUDIES = ("massive", "depth", "sinks", "theory")
THEORY = ("twin-step", "twin", "uniform")  # the replacements of the theory study, after the plain layer


def plain_record(
    decoder: Decoder, prompts: list[list[int]], *, dtype: torch.dtype = torch.float64, resamples: int = 2000,
    progress: Callable[[int, int], None] | None = None,
) -> dict:  # fmt: skip
    from attndyn.models.executor import run

    plain, _, counts = run(decoder, prompts, dtype=dtype, progress=progress)
    base, draws = _pooled(plain, resamples, 0)
    return {"nll": base, "nll_interval": _interval(draws), "counts": counts}


GEOMETRY = ("mean_cosine", "massive_activation_ratio", "norm_ratio", "attention_on_first", "sink_rate")


def geometry_after(
    decoder: Decoder, prompts: list[list[int]], specs: Sequence[str], *, dtype: torch.dtype = torch.float64,
    progress: Callable[[int, int], None] | None = None,
) -> dict:  # fmt: skip
    """The per-layer geometry of the plain prompts and after each spec, as the findings measure it, from one
    executor run that records every state and every block's attention (:func:`attndyn.models.executor.run`).

    Per :data:`GEOMETRY` key a list over ``after_block`` = -1 .. L - 1 (entry s: the stream after block s - 1,
    and the attention of block s - 1, the block that made it; None where undefined), averaged over prompts:
    the mean pairwise cosine, Sun et al.'s entry ratio and the first token's norm ratio of the residual
    stream (:func:`attndyn.models.decoder_geometry.massive_activation`, :func:`~attndyn.models.decoder_geometry.norm_ratio`);
    the mean attention on the first token and Gu et al.'s sink rate (NaN below 64 tokens) of the attention
    the branch used (:func:`~attndyn.models.decoder_geometry.attention_measures`; a skipped block, a skipped
    attention sublayer or the twin in its place has none). Returns ``{"after_block", "plain", "edits": [{"edit",
    key: list, ...}], "forwards"}``; a state of all zeros (a token's vector zeroed) has no cosine: that
    prompt is left out of the mean at that block."""
    import warnings

    from attndyn.models.decoder_geometry import massive_activation, norm_ratio
    from attndyn.models.executor import run
    from attndyn.models.token_geometry import mean_cosine

    parsed = [parse_all(s) for s in specs]
    branches = [(i, e) for e in parsed for i in range(len(prompts))]
    plain, edited, counts = run(decoder, prompts, branches, dtype=dtype, record=True, attention=True, progress=progress)

    def cosine(h):
        keep = np.linalg.norm(h, axis=1) > 0
        return mean_cosine(h[keep]) if keep.sum() > 1 else np.nan

    def measures(rows) -> dict:
        per = {k: [] for k in GEOMETRY}
        for r in rows:
            hs = r.hidden.double().numpy()
            per["mean_cosine"].append([cosine(h) for h in hs])
            per["massive_activation_ratio"].append([massive_activation(h)[0] if np.abs(h).any() else np.nan for h in hs])
            per["norm_ratio"].append([norm_ratio(h) for h in hs])
            for key in ("attention_on_first", "sink_rate"):
                per[key].append([np.nan] + [np.nan if a is None else a[key] for a in r.attention])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a block where every prompt is undefined: NaN
            return {k: [None if not np.isfinite(v) else float(v) for v in np.nanmean(np.array(per[k], dtype=float), 0)] for k in GEOMETRY}

    n = len(prompts)
    return {
        "after_block": list(range(-1, len(decoder.layers))),
        "plain": measures(plain),
        "edits": [{"edit": s, **measures(edited[j * n : (j + 1) * n])} for j, s in enumerate(specs)],
        "forwards": counts["forwards"],
    }


def angular_distances(hidden: list[torch.Tensor]) -> np.ndarray:
    """d(h_l, h_{l+n}) = arccos(cos)/pi of the last token, h_l the input of block l, averaged over the
    prompts: a ``(L, L + 1)`` array with NaN where l + n > L (row l, column n)."""
    L = hidden[0].shape[0] - 1
    out = np.full((L, L + 1), np.nan)
    for first in range(L):
        for n in range(1, L - first + 1):
            vals = []
            for h in hidden:
                a, b = h[first, -1].double(), h[first + n, -1].double()
                c = float((a @ b) / (a.norm() * b.norm()))
                vals.append(np.arccos(np.clip(c, -1.0, 1.0)) / np.pi)
            out[first, n] = float(np.mean(vals))
    return out


def gap_share(nll: dict, draws: dict) -> dict:
    """The gap ``nll["uniform"] - nll["plain"]`` and the share of it the flow closes,
    (uniform - twin) / (uniform - plain), each with its percentile interval over the paired bootstrap
    ``draws`` (the same resamples for every key); the share only where the gap's interval excludes zero."""
    gap, gap_draws = nll["uniform"] - nll["plain"], draws["uniform"] - draws["plain"]
    out = {"gap": gap, "gap_interval": _interval(gap_draws)}
    lo, hi = out["gap_interval"]
    if lo > 0 or hi < 0:
        share = (nll["uniform"] - nll["twin"]) / gap
        return {**out, "share": share, "share_interval": _interval((draws["uniform"] - draws["twin"]) / gap_draws), "share_status": "determined"}
    return {**out, "share": None, "share_interval": None, "share_status": f"undetermined: the gap's interval [{lo:.3g}, {hi:.3g}] includes zero"}


def theory_study(
    decoder: Decoder,
    prompts: list[list[int]],
    *,
    layers: Sequence[int] | None = None,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    resamples: int = 2000,
    progress: Callable[[int, int], None] | None = None,
    runner: Callable | None = None,
) -> dict:
    """Each layer's attention (default: the checkpoint page's twin layers) replaced by the twin's step, the
    twin's flow and uniform causal attention, in one executor run. Per layer: the pooled losses, the
    differences plain -> twin-step -> twin -> uniform with paired bootstrap intervals (the same resamples of
    the prompts for every branch), the gap NLL_uniform - NLL_plain ("mask alone" against the network) and
    the share of it the flow closes, (NLL_uniform - NLL_twin) / (NLL_uniform - NLL_plain), with its
    interval, given only where the gap's interval excludes zero (else ``share`` is None and ``share_status``
    says why). No random null: the replacements are compared with each other. ``runner``: what runs the branches
    (the executor's ``run`` by default)."""
    import time

    from attndyn.models.executor import run
    from attndyn.models.families import default_twin_layers, twin_refusal

    why = twin_refusal(decoder)
    if why:
        raise ValueError(f"study theory: the particle twin is not offered for {decoder.name}: {why}")
    t0 = time.perf_counter()
    L = len(decoder.layers)
    layers = list(default_twin_layers(L) if layers is None else layers)
    if not layers:
        raise ValueError(f"study theory: {decoder.name} has no twin layer ({L} layers)")
    for k in layers:
        if not 0 <= k < L:
            raise ValueError(f"study theory: layer {k} is not in 0..{L - 1}")
    specs = [f"attention:block={k},with={w}" for k in layers for w in THEORY]
    n = len(prompts)
    branches = [(i, (parse(s),)) for s in specs for i in range(n)]
    plain, edited, counts = (runner or run)(decoder, prompts, branches, dtype=dtype, progress=progress)
    base, base_draws = _pooled(plain, resamples, seed)
    entries, per_layer = [], []
    for a, k in enumerate(layers):
        nll, draws = {"plain": base}, {"plain": base_draws}
        for b, w in enumerate(THEORY):
            j = (a * len(THEORY) + b) * n
            mine = edited[j : j + n]
            entries.append({"edit": specs[j // n], **_clean(effects(plain, mine, resamples=resamples, seed=seed)), "null": None,
                            "decision": "no random place: compared with the other replacements"})  # fmt: skip
            nll[w], draws[w] = _pooled(mine, resamples, seed)
        chain = ["plain", *THEORY]
        steps = [
            {"from": u, "to": v, "nll": nll[v] - nll[u], "nll_interval": _interval(draws[v] - draws[u])}
            for u, v in zip(chain, chain[1:], strict=False)
        ]
        plain_to = {w: _interval(draws[w] - draws["plain"]) for w in THEORY}
        per_layer.append({"layer": k, "nll": nll, "differences": steps, "plain_to": plain_to, **gap_share(nll, draws)})
    return {
        "study": "theory",
        "layers": layers,
        "twin_steps": TWIN_STEPS,
        "rule": "share of the gap = (NLL_uniform - NLL_twin) / (NLL_uniform - NLL_plain), "
        "given only where the gap's paired 95 % interval excludes zero",
        "nll": base,
        "nll_interval": _interval(base_draws),
        "edits": entries,
        "per_layer": per_layer,
        "counts": counts,
        "forwards": counts["forwards"],
        "seconds": time.perf_counter() - t0,
    }


def run_study(
    decoder: Decoder, prompts: list[list[int]], study: str, *, draws: int = 5, dtype: torch.dtype = torch.float64, seed: int = 0,
    layers: Sequence[int] | None = None, progress: Callable[[str, int, int], None] | None = None, runner: Callable | None = None,
) -> dict:  # fmt: skip
    """One of :data:`STUDIES` (the guide states each protocol and rule). The plain states come from one
    recorded executor run; the edits of the study then run in one more, each edit starting at its block
    (``theory``: :func:`theory_study`, one run with its plain branches). ``progress(stage, i, n)``: each
    run's steps done (:func:`attndyn.models.executor.run`), ``stage`` naming the study and the run.
    ``layers``: the theory study's layers (default: the twin layers); the other studies choose their own.
    ``runner``: what runs the edits of every study (:func:`intervene`'s; tasks on Dask with ``attndyn intervene
    --workers``); the plain recorded run and the ``sinks`` study's geometry run here."""
    from attndyn.models.executor import run

    if study not in STUDIES:
        raise ValueError(f"study {study!r} is not one of {', '.join(STUDIES)}")
    step = progress or (lambda stage, i, n: None)
    if study == "theory":
        which = "each twin layer's" if layers is None else f"{len(layers)} layers'"
        stage = f"study theory: the plain prompts and {len(THEORY)} replacements of {which} attention"
        return theory_study(decoder, prompts, layers=layers, dtype=dtype, seed=seed, progress=lambda i, n: step(stage, i, n), runner=runner)
    t0, c0 = __import__("time").perf_counter(), __import__("time").process_time()
    plain, _, counts0 = run(decoder, prompts, dtype=dtype, record=True, progress=lambda i, n: step(f"study {study}: the plain prompts", i, n))
    hidden = [r.hidden for r in plain]
    L = len(decoder.layers)
    out: dict = {"study": study}
    edited = f"study {study}: its edits beside {draws} draws of their nulls"
    if study == "massive":
        from attndyn.models.interventions_massive import massive_study

        out |= massive_study(decoder, prompts, hidden, draws=draws, dtype=dtype, seed=seed, runner=runner, progress=lambda i, n: step(edited, i, n))
        if not out["edits"]:
            return out
        counts = out.pop("counts")
    elif study == "depth":
        dist = angular_distances(hidden)
        spans, specs = [], []
        for n in sorted({1, 2, 4, max(1, L // 4), max(1, L // 2)}):
            if n >= L:
                continue
            row = np.array([dist[a, n] for a in range(L - n + 1)])
            best = int(np.nanargmin(row))
            spans.append({"n": n, "first": best, "last": best + n - 1, "distance": float(row[best])})
            specs.append(f"skip:block={best}" if n == 1 else f"skip:blocks={best}-{best + n - 1}")
        rec = intervene(decoder, prompts, specs, draws=draws, dtype=dtype, seed=seed, progress=lambda i, n: step(edited, i, n), runner=runner)
        out["distances"] = dist
        out["spans"] = spans
        out["edits"] = rec["edits"]
        counts = rec["counts"]
    else:  # sinks: the first key removed at a spread of layers
        layers = list(range(0, L, max(1, L // 6)))
        specs = [f"attention:block={k},with=no-first-key" for k in layers]
        rec = intervene(decoder, prompts, specs, draws=draws, dtype=dtype, seed=seed, progress=lambda i, n: step(edited, i, n), runner=runner)
        out["edits"] = rec["edits"]
        out["layers"] = layers
        # the sink rate and the attention on the first token after each removal, at every block (one more run)
        out["geometry"] = geometry_after(
            decoder, prompts, specs, dtype=dtype, progress=lambda i, n: step(f"study sinks: the attention after {len(specs)} removals", i, n)
        )
        counts = {"forwards": rec["counts"]["forwards"] + out["geometry"]["forwards"]}
    out["forwards"] = counts0["forwards"] + counts["forwards"]
    out["seconds"] = __import__("time").perf_counter() - t0
    out["cpu_seconds"] = __import__("time").process_time() - c0  # this process's CPU time (all its threads)
    return out
