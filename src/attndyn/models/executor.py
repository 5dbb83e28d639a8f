"""A layer-major executor: each layer is widened once and every branch (the plain prompts, then every edited
branch) runs through it before the next layer is read.

A *branch* is one prompt with a tuple of edits (:mod:`attndyn.models.edits`); the empty tuple is the
plain forward. The plain branches run first at every layer, so that an edit that needs the plain states of
the same layer (``mean``: the mean over the prompts; ``patch``: another prompt's state) finds them there.
An edited branch starts from its prompt's plain state at the input of the first block its edits touch:
the blocks before it are not run again (an edit at block l costs (L - l)/L of a forward).

The weights stay as the decoder holds them (a lazily read decoder: its stored dtype, in the file's map);
one layer at a time is widened to the compute dtype by :func:`attndyn.models.decoder.layer_at`. Peak memory:

    M_peak ~ M_held + M_layer(dtype) + item * (sum_b n_b d  +  max_b (2 H n_b^2 + 3 n_b f + 4 n_b d))  +  n V (item + 6 * 8)

with M_held the decoder's resident tensors (embeddings, head, and for an eagerly read decoder every layer),
M_layer one widened layer, ``item`` the compute dtype's bytes, n_b each branch's length, f the feed-forward
width, V the vocabulary and n the longest prompt: the branches' residual streams live together, one
branch's attention and feed-forward intermediates at a time, and the logits of one prompt and one of its
branches at the end, with their float64 log-probabilities, the plain one's probabilities and the divergence's
two temporaries (six float64 (n, V) arrays; only the per-token losses and divergences are kept, never every
branch's logits). Measured on SmolLM2 (12 shipped prompts of 81-93 tokens, float32, peak RSS over the
process after loading, on 2 shared cores): the formula gives 0.24 GiB above the held weights (a bound: it
counts the six float64 arrays as alive at once) against 0.188 GiB measured for the executor and 0.072 GiB
for 12 plain :func:`forward` calls (which keep only float32 logits); the executor's extra is the loss and
divergence's float64 work on the vocabulary.

An ``attention:block=k,with=twin-step|twin`` edit puts layer k's particle twin in place of its attention
sublayer (:func:`attndyn.models.decoder_geometry.twin_update`); the twin is built once a layer, from the
layer's float64 weights, for every branch that asks for it.

With no edits, a branch computes exactly what :func:`attndyn.models.decoder.forward` computes, operation for
operation (bit-identical: tested).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attndyn.models.decoder import (
    Decoder,
    Forward,
    PromptError,
    _norm,
    attention_sublayer,
    check_length,
    feedforward_sublayer,
    layer_at,
    layer_masks,
    rope_tables,
)
from attndyn.models.file_checks import ModelFileError


@dataclass
class BranchResult:
    """One branch's per-position next-token loss ``nll`` (n - 1,) and, for an edited branch, its divergence
    ``kl`` (n - 1,) from the plain branch of its prompt, D(p_plain || p_edit); ``hidden`` ``(L + 1, n, d)``
    when asked for (``record=True``), and ``logits`` when ``keep_logits``. ``attention``, when asked for
    (``attention=True``): per block, :func:`attndyn.models.decoder_geometry.attention_measures` of the
    softmax attention the branch used there (the heads a head skip removed left out), or None where the block
    ran none (skipped, its attention sublayer skipped or replaced by the twin)."""

    prompt: int
    edits: tuple
    nll: torch.Tensor
    kl: torch.Tensor | None
    hidden: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    attention: list[dict | None] | None = None


def _first_block(edits: tuple) -> int:
    return min((e.first_block() for e in edits), default=0)


def _head_dropped(decoder: Decoder, layer, heads: set[int]):
    """The layer with the output map's columns of ``heads`` zeroed: those heads' contributions removed."""
    hd = decoder.head_dim
    W_o = layer.W_o.clone()
    for h in heads:
        W_o[:, h * hd : (h + 1) * hd] = 0
    return dataclasses.replace(layer, W_o=W_o)


def checked_prompts(
    decoder: Decoder, prompts: list[list[int]], dtype: torch.dtype, *, least: int = 2, why: str = "a loss needs at least 2"
) -> list[torch.Tensor]:
    """The prompts as token tensors, refused before any work (:class:`PromptError`, naming the prompt) when one
    has fewer than ``least`` tokens (``why`` says what needs them), an id past the vocabulary or a length
    :func:`~attndyn.models.decoder.check_length` refuses; TypeError for a dtype not float64 or float32."""
    if dtype not in (torch.float64, torch.float32):
        raise TypeError(f"dtype {dtype} is not float64 or float32")
    if not prompts:
        raise ValueError("no prompts to run")
    vocab = decoder.embed.shape[0]
    ids = []
    for i, p in enumerate(prompts):
        t = torch.as_tensor(p, dtype=torch.long)
        if t.ndim != 1 or t.numel() < least:
            raise PromptError(f"prompt {i} has {t.numel()} tokens; {why}")
        if int(t.min()) < 0 or int(t.max()) >= vocab:
            raise PromptError(f"prompt {i}: token ids must lie in [0, {vocab}); got {int(t.min())}..{int(t.max())}")
        check_length(decoder, t.numel(), dtype)
        ids.append(t)
    return ids


def layout(decoder: Decoder, ids: list[torch.Tensor], dtype: torch.dtype) -> tuple[tuple, dict, dict, list[torch.Tensor]]:
    """What a layer-major run of the token tensors ``ids`` needs, as :func:`~attndyn.models.decoder.forward` makes
    it: each layer's RoPE base, the RoPE tables ``{length: {base: (cos, sin)}}`` (empty for learned positions),
    the masks ``{length: per layer}`` and each sequence's input (its embeddings x scale, plus the learned
    positions)."""
    L, hd = len(decoder.layers), decoder.head_dim
    rope = decoder.positions == "rope"
    bases = decoder.rope_bases or (decoder.rope_base,) * L
    lengths = sorted({t.numel() for t in ids})
    tables = {n: {b: rope_tables(n, decoder.rotary_dim or hd, b, dtype=dtype, device="cpu") for b in set(bases)} for n in lengths} if rope else {}
    masks = {n: layer_masks(decoder, n) for n in lengths}
    inputs = []
    for t in ids:
        x = decoder.embed[t].to(dtype=dtype)
        if decoder.embed_scale != 1.0:
            x = x * torch.tensor(decoder.embed_scale, dtype=dtype)
        if not rope:
            x = x + decoder.pos_embed.to(dtype=dtype)[: t.numel()]
        inputs.append(x)
    return bases, tables, masks, inputs


def run(
    decoder: Decoder,
    prompts: list[list[int]],
    branches: list[tuple[int, tuple]] | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    record: bool = False,
    keep_logits: bool = False,
    attention: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[BranchResult], list[BranchResult], dict]:
    """Every prompt plain, then every ``(prompt index, edits)`` branch, layer by layer. Returns the plain
    results (one per prompt), the branch results (in order) and counts: ``layers_built`` (each layer once),
    ``block_runs`` (blocks run over all branches) and ``forwards`` (block_runs / L). ``progress(i, n)``:
    ``i`` of ``n`` = L + prompts steps done (0 first; each layer through every branch, then each prompt's
    losses)."""
    from attndyn.models import edits as iv
    from attndyn.models.decoder_geometry import _twin_model, attention_measures, twin_update

    branches = list(branches or [])
    ids = checked_prompts(decoder, prompts, dtype)
    L = len(decoder.layers)
    for b, (i, edits) in enumerate(branches):
        if not 0 <= i < len(prompts):
            raise ValueError(f"branch {b}: prompt {i} is not in 0..{len(prompts) - 1}")
        for e in edits:  # a branch edits its own prompt only
            e.check(decoder, [len(t) for t in ids], own=len(ids[i]))
    cast = lambda t: None if t is None else t.to(dtype=dtype)  # noqa: E731
    rope = decoder.positions == "rope"
    bases, tables, masks, plain_x = layout(decoder, ids, dtype)
    plain_hidden = [[x] for x in plain_x] if record else None
    plain_att: list[list] = [[] for _ in ids]
    branch_att: list[list] = [[] for _ in branches]
    start = [_first_block(edits) for _, edits in branches]
    branch_x: list[torch.Tensor | None] = [None] * len(branches)
    branch_hidden: list[list | None] = [None] * len(branches)
    block_runs = 0
    twin_models: dict = {}  # layer -> its particle twin, built once for every branch that asks for it
    tell = progress or (lambda i, n: None)
    steps = L + len(ids)
    tell(0, steps)

    def block(k, layer, x, n, edits=(), att=None):
        drop = iv.block_action(edits, k)
        if drop == "skip":
            return x
        measured = None
        mask = masks[n][k]
        heads = iv.heads_skipped(edits, k)
        lay = _head_dropped(decoder, layer, heads) if heads else layer
        replace = iv.attention_edit(edits, k)
        with_ = None if replace is None else replace.with_
        if with_ == "no-first-key":
            mask = mask.clone()
            mask[1:, 0] = False  # query 0 sees only key 0 and keeps it
        for j in iv.keys_dropped(edits, k):  # the null of no-first-key: key j removed for the queries after it
            mask = mask.clone()
            mask[j + 1 :, j] = False
        tab = tables[n].get(bases[k]) if rope else None
        if with_ in iv.TWINS:  # the particle twin of layer k in place of its attention sublayer
            if k not in twin_models:
                twin_models[k] = _twin_model(decoder, k)
            out = twin_update(twin_models[k], x, None if with_ == "twin-step" else replace.steps or iv.TWIN_STEPS)
        else:
            out, P = attention_sublayer(decoder, k, x, tab, mask, cast, uniform=with_ == "uniform", layer=lay)
            if att is not None and drop != "attention":
                kept = [h for h in range(P.shape[0]) if h not in heads]
                measured = attention_measures(P[kept].double().numpy()) if kept else None
        if att is not None:
            att[-1] = measured
        if drop == "attention":
            out = torch.zeros_like(out)
        if decoder.parallel_residual:
            ff = feedforward_sublayer(decoder, k, x, cast, layer=lay)
            return x + out + (torch.zeros_like(ff) if drop == "feedforward" else ff)
        x = x + out
        if drop == "feedforward":
            return x
        return x + feedforward_sublayer(decoder, k, x, cast, layer=lay)

    for k in range(L):
        layer = layer_at(decoder, k, dtype)
        for b in range(len(branches)):  # branches that start here take their prompt's plain input of block k
            if start[b] == k:
                i = branches[b][0]
                branch_x[b] = plain_x[i]
                if record:
                    branch_hidden[b] = [h for h in plain_hidden[i]]
                if attention:
                    branch_att[b] = list(plain_att[i])
        for i in range(len(ids)):
            if attention:
                plain_att[i].append(None)
            plain_x[i] = block(k, layer, plain_x[i], ids[i].numel(), att=plain_att[i] if attention else None)
            block_runs += 1
            if record:
                plain_hidden[i].append(plain_x[i])
        for b, (i, edits) in enumerate(branches):
            if branch_x[b] is None:
                continue
            if attention:
                branch_att[b].append(None)
            x = block(k, layer, branch_x[b], ids[i].numel(), edits, att=branch_att[b] if attention else None)
            block_runs += 1
            branch_x[b] = iv.apply_state_edits(edits, k, x, i, plain_x)
            if record:
                branch_hidden[b].append(branch_x[b])
        del layer
        twin_models.clear()
        tell(k + 1, steps)

    def logits_of(x):
        out = _norm(decoder, x, cast(decoder.norm), cast(decoder.norm_bias)) @ cast(decoder.head).T
        if decoder.final_softcap is not None:
            out = torch.tanh(out / decoder.final_softcap) * decoder.final_softcap
        return out

    plain, edited = [], [None] * len(branches)
    by_prompt: dict[int, list[int]] = {}
    for b, (i, _) in enumerate(branches):
        by_prompt.setdefault(i, []).append(b)
    for i, t in enumerate(ids):
        lg = logits_of(plain_x[i])
        lp = torch.log_softmax(lg.double()[:-1], dim=-1)
        target = t[1:]
        nll = -lp.gather(1, target[:, None])[:, 0]
        plain.append(
            BranchResult(
                i, (), nll, None, torch.stack(plain_hidden[i]) if record else None, lg if keep_logits else None, plain_att[i] if attention else None
            )
        )
        for b in by_prompt.get(i, []):
            lg_b = logits_of(branch_x[b])
            lq = torch.log_softmax(lg_b.double()[:-1], dim=-1)
            nll_b = -lq.gather(1, target[:, None])[:, 0]
            kl = (lp.exp() * (lp - lq)).sum(-1)
            edited[b] = BranchResult(
                i,
                branches[b][1],
                nll_b,
                kl,
                torch.stack(branch_hidden[b]) if record else None,
                lg_b if keep_logits else None,
                branch_att[b] if attention else None,
            )
            branch_x[b] = None
        plain_x[i] = None
        tell(L + i + 1, steps)
    counts = {"layers_built": L, "block_runs": block_runs, "forwards": block_runs / L, "layers": L}
    return plain, edited, counts


def forwards(
    decoder: Decoder,
    jobs: list[tuple[list[int], str]],
    *,
    dtype: torch.dtype = torch.float64,
    progress: Callable[[int, int], None] | None = None,
) -> list[Forward]:
    """:func:`attndyn.models.decoder.forward` (without logits) of every ``(ids, attention)`` job, layer-major:
    each layer is widened once to ``dtype`` and every job runs through it before the next layer is read (for a
    lazily read decoder, ``len(jobs)`` forwards widen ``L`` layers, not ``len(jobs) * L``; no copy of the model
    is made). The same operations as ``forward``'s, in the same order: the same numbers bit for bit (tested).
    Memory: one widened layer and every job's states and attention maps (what the caller keeps anyway); a
    caller with many jobs runs them in chunks. ``progress(k, L)``: ``k`` of the ``L`` layers done (0 first)."""
    if not jobs:
        return []
    for j, (_, how) in enumerate(jobs):
        if how not in ("softmax", "uniform"):
            raise ValueError(f"job {j}: attention {how!r} is not 'softmax' or 'uniform'")
    ids = checked_prompts(decoder, [p for p, _ in jobs], dtype, least=1, why="a forward pass needs at least 1")
    cast = lambda t: None if t is None else t.to(device="cpu", dtype=dtype)  # noqa: E731
    L, rope = len(decoder.layers), decoder.positions == "rope"
    bases, tables, masks, inputs = layout(decoder, ids, dtype)
    hidden, attentions = [[x] for x in inputs], [[] for _ in ids]
    tell = progress or (lambda i, n: None)
    tell(0, L)
    for k in range(L):
        layer = layer_at(decoder, k, dtype)
        for j, t in enumerate(ids):
            n, x = t.numel(), hidden[j][-1]
            out, P = attention_sublayer(
                decoder, k, x, tables[n].get(bases[k]) if rope else None, masks[n][k], cast, uniform=jobs[j][1] == "uniform", layer=layer
            )
            attentions[j].append(P)
            if decoder.parallel_residual:
                x = x + out + feedforward_sublayer(decoder, k, x, cast, layer=layer)
            else:
                x = x + out
                x = x + feedforward_sublayer(decoder, k, x, cast, layer=layer)
            if not bool(torch.isfinite(x).all()):
                raise ModelFileError(f"{decoder.name}: the residual stream after layer {k} is not finite in {dtype} (job {j})")
            hidden[j].append(x)
        del layer
        tell(k + 1, L)
    return [Forward(t.tolist(), torch.stack(h), torch.stack(a), None) for t, h, a in zip(ids, hidden, attentions, strict=True)]


def pooled_forwards(
    jobs: list[tuple[Decoder, list[int], str]], *, dtype: torch.dtype = torch.float64, progress: Callable[[int, int], None] | None = None
) -> list[Forward]:
    """:func:`forwards` of ``(decoder, ids, attention)`` jobs, in order, over the worker processes: the consecutive
    jobs of one decoder split into one layer-major run a worker (interleaved, so the runs are as long as each
    other; each layer built once a run, no copy of the model). The same numbers as
    :func:`~attndyn.models.decoder.forward` of each job, whatever the worker count. ``progress(i, n)``: ``i`` of the
    ``n`` jobs done (a run's at its end)."""
    from attndyn.core.parallel import pmap
    from attndyn.core.threads import workers

    runs: list[list[int]] = []
    for k, job in enumerate(jobs):
        if runs and jobs[runs[-1][0]][0] is job[0]:
            runs[-1].append(k)
        else:
            runs.append([k])
    split = []
    for run in runs:
        parts = workers(len(run))
        split += [run[i::parts] for i in range(parts)]

    def one(s: int) -> list[Forward]:
        return forwards(jobs[split[s][0]][0], [(jobs[k][1], jobs[k][2]) for k in split[s]], dtype=dtype)

    out = pmap(one, len(split), progress=progress, cost=[len(part) for part in split])
    by_job: dict[int, Forward] = {}
    for part, fws in zip(split, out, strict=True):
        by_job.update(zip(part, fws, strict=True))
    return [by_job[k] for k in range(len(jobs))]


def peak_formula(decoder: Decoder, lengths: list[int], n_branches: int, dtype: torch.dtype = torch.float32) -> dict:
    """The terms of the module docstring's peak-memory formula, in bytes, for ``lengths`` (one per branch)."""
    item = torch.finfo(dtype).bits // 8
    d, H, V = decoder.d_model, decoder.heads, decoder.embed.shape[0]
    lay = layer_at(decoder, 0, dtype)
    f = lay.up.shape[0]
    m_layer = sum(t.numel() * item for t in (getattr(lay, f.name) for f in dataclasses.fields(lay)) if t is not None)
    del lay
    held = sum(t.numel() * t.element_size() for t in {id(x): x for x in (decoder.embed, decoder.head, decoder.norm)}.values())
    if not hasattr(decoder.layers, "at"):
        held += sum(
            t.numel() * t.element_size() for L in decoder.layers for t in (getattr(L, f.name) for f in dataclasses.fields(L)) if t is not None
        )
    n = max(lengths)
    states = item * d * sum(lengths)
    transient = item * max(2 * H * m * m + 3 * m * f + 4 * m * d for m in lengths)
    logits = n * V * (item + 6 * 8)  # the logits, then six float64 (n, V) arrays for the loss and the divergence
    total = held + m_layer + states + transient + logits
    return {"held": held, "layer": m_layer, "states": states, "transient": transient, "logits": logits, "total": total, "branches": n_branches}


__all__ = ["BranchResult", "checked_prompts", "run", "forwards", "pooled_forwards", "peak_formula"]
