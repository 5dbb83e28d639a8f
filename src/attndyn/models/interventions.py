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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from attndyn.models.decoder import Decoder
    from attndyn.models.executor import BranchResult

FORMS = (
    "zero:block=L[,token=T][,dim=J]",
    "mean:block=L[,token=T][,dim=J]",
    "scale:block=L[,token=T][,dim=J],by=S",
    "set:block=L[,token=T][,dim=J],value=V",
    "clip:block=L[,token=T][,dim=J],by=C",
    "skip:block=L | skip:blocks=A-B | skip:block=L,sublayer=attention|feedforward | skip:block=L,head=H",
    "attention:block=L,with=uniform|no-first-key|twin-step|twin[,steps=S]",
    "patch:block=L,token=T,from=K",
)
STATE_KINDS = ("zero", "mean", "scale", "set", "clip", "patch")
KEYS = {
    "zero": {"block", "token", "dim"},
    "mean": {"block", "token", "dim"},
    "scale": {"block", "token", "dim", "by"},
    "set": {"block", "token", "dim", "value"},
    "clip": {"block", "token", "dim", "by"},
    "skip": {"block", "blocks", "sublayer", "head"},
    "attention": {"block", "with", "steps"},
    "patch": {"block", "token", "from"},
}
WITH = ("uniform", "no-first-key", "twin-step", "twin")
TWINS = ("twin-step", "twin")
TWIN_STEPS = 8  # RK4 steps of the twin's flow over unit time: the checkpoint page's twin (dt = 0.125)
SUBLAYERS = ("attention", "feedforward")


@dataclass(frozen=True)
class Edit:
    """One edit (module docstring). ``blocks``: (first, last) inclusive; one block: first == last."""

    kind: str
    blocks: tuple[int, int]
    token: int | None = None
    dim: int | None = None
    by: float | None = None
    value: float | None = None
    sublayer: str | None = None
    head: int | None = None
    with_: str | None = None
    source: int | None = None
    spec: str = ""
    draw: int | None = None  # nulls: the seed that picks a random non-massive dimension or direction at run time
    of: Edit | None = None  # the "perturb" null: the edit whose change it matches in L2 norm, in a random direction
    steps: int | None = None  # with=twin: RK4 steps of the flow over unit time (None: TWIN_STEPS)

    def first_block(self) -> int:
        return self.blocks[0]

    def check(self, decoder, lengths: list[int], own: int | None = None) -> None:
        """ValueError naming the value when the edit does not fit ``decoder`` and prompts of ``lengths``;
        ``own``: the length of the one prompt the edit acts on (None: it acts on every prompt)."""
        L = len(decoder.layers)
        a, b = self.blocks
        if not 0 <= a <= b < L:
            raise ValueError(f"{self.spec or self.kind}: block {a if a == b else f'{a}-{b}'} is not in 0..{L - 1}")
        if self.dim is not None and not 0 <= self.dim < decoder.d_model:
            raise ValueError(f"{self.spec}: dim {self.dim} is not in 0..{decoder.d_model - 1}")
        if self.head is not None and not 0 <= self.head < decoder.heads:
            raise ValueError(f"{self.spec}: head {self.head} is not in 0..{decoder.heads - 1}")
        if self.token is not None and own is None and self.token >= min(lengths):
            raise ValueError(f"{self.spec}: token {self.token} is past the end of the shortest prompt ({min(lengths)} tokens)")
        if self.token is not None and own is not None and self.token >= own:
            raise ValueError(f"{self.spec}: token {self.token} is past the end of its prompt ({own} tokens)")
        if self.source is not None and not 0 <= self.source < len(lengths):
            raise ValueError(f"{self.spec}: from={self.source} is not a prompt of the set (0..{len(lengths) - 1})")
        if self.source is not None and self.token is not None and self.token >= lengths[self.source]:
            raise ValueError(f"{self.spec}: token {self.token} is past the end of prompt {self.source} ({lengths[self.source]} tokens)")
        if self.with_ in TWINS:
            from attndyn.models.architectures import twin_refusal

            why = twin_refusal(decoder)
            if why:
                raise ValueError(f"{self.spec or self.kind}: the particle twin is not offered for {decoder.name}: {why}")


def _int(spec: str, key: str, v: str, lo: int = 0) -> int:
    try:
        out = int(v)
    except ValueError:
        raise ValueError(f"{spec!r}: {key}={v!r} is not an integer") from None
    if out < lo:
        raise ValueError(f"{spec!r}: {key}={out} is below {lo}")
    return out


def _float(spec: str, key: str, v: str) -> float:
    try:
        out = float(v)
    except ValueError:
        raise ValueError(f"{spec!r}: {key}={v!r} is not a number") from None
    if not np.isfinite(out):
        raise ValueError(f"{spec!r}: {key}={v!r} is not finite")
    return out


def parse(spec: str) -> Edit:
    """The :class:`Edit` a spec string names; ValueError with the accepted forms for a malformed one."""
    forms = "; ".join(FORMS)
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"edit {spec!r} is not KIND:key=value,...; accepted forms: {forms}")
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in KEYS:
        raise ValueError(f"edit {spec!r}: kind {kind!r} is not one of {', '.join(KEYS)}; accepted forms: {forms}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, v = part.partition("=")
        key, v = key.strip(), v.strip()
        if not eq or not key or not v:
            raise ValueError(f"edit {spec!r}: {part!r} is not key=value; accepted forms: {forms}")
        if key not in KEYS[kind]:
            raise ValueError(f"edit {spec!r}: {kind} takes {', '.join(sorted(KEYS[kind]))}, not {key!r}; accepted forms: {forms}")
        if key in fields:
            raise ValueError(f"edit {spec!r}: {key} given twice")
        fields[key] = v
    if ("block" in fields) == ("blocks" in fields):
        raise ValueError(f"edit {spec!r}: give exactly one of block=L or blocks=A-B; accepted forms: {forms}")
    if "blocks" in fields:
        a, dash, b = fields["blocks"].partition("-")
        if not dash:
            raise ValueError(f"edit {spec!r}: blocks={fields['blocks']!r} is not A-B")
        blocks = (_int(spec, "blocks", a), _int(spec, "blocks", b))
        if blocks[1] < blocks[0]:
            raise ValueError(f"edit {spec!r}: blocks={fields['blocks']} runs backwards")
        if len(fields) > 1:
            raise ValueError(f"edit {spec!r}: a span of blocks is skipped whole (no sublayer or head)")
    else:
        blocks = (_int(spec, "block", fields["block"]),) * 2
    kw: dict = {"spec": spec}
    if "token" in fields:
        kw["token"] = _int(spec, "token", fields["token"])
    if "dim" in fields:
        kw["dim"] = _int(spec, "dim", fields["dim"])
    if "head" in fields:
        kw["head"] = _int(spec, "head", fields["head"])
    if "from" in fields:
        kw["source"] = _int(spec, "from", fields["from"])
    if "by" in fields:
        kw["by"] = _float(spec, "by", fields["by"])
    if "value" in fields:
        kw["value"] = _float(spec, "value", fields["value"])
    if "sublayer" in fields:
        if fields["sublayer"] not in SUBLAYERS:
            raise ValueError(f"edit {spec!r}: sublayer={fields['sublayer']!r} is not one of {', '.join(SUBLAYERS)}")
        kw["sublayer"] = fields["sublayer"]
    if "with" in fields:
        if fields["with"] not in WITH:
            raise ValueError(f"edit {spec!r}: with={fields['with']!r} is not one of {', '.join(WITH)}; accepted forms: {forms}")
        kw["with_"] = fields["with"]
    if "steps" in fields:
        if fields.get("with") != "twin":
            raise ValueError(f"edit {spec!r}: steps= goes with with=twin only (the flow's RK4 steps)")
        kw["steps"] = _int(spec, "steps", fields["steps"], lo=1)
    need = {"scale": ("by",), "clip": ("by",), "set": ("value",), "attention": ("with",), "patch": ("token", "from")}.get(kind, ())
    for key in need:
        if key not in fields:
            raise ValueError(f"edit {spec!r}: {kind} needs {key}=; accepted forms: {forms}")
    if kind == "skip" and "sublayer" in fields and "head" in fields:
        raise ValueError(f"edit {spec!r}: skip a sublayer or a head, not both")
    if kind == "clip" and kw["by"] < 0:
        raise ValueError(f"edit {spec!r}: clip by={kw['by']} is negative")
    return Edit(kind, blocks, **kw)


def parse_all(specs: str | Sequence[str]) -> tuple[Edit, ...]:
    """Several edits at once: a list of specs, or one string with edits separated by ';'."""
    if isinstance(specs, str):
        specs = [s for s in specs.split(";") if s.strip()]
    return tuple(parse(s.strip()) for s in specs)


# the executor's questions about a branch's edits at block k
def block_action(edits: tuple, k: int) -> str | None:
    """'skip' (the whole block), 'attention' or 'feedforward' (that sublayer), or None."""
    for e in edits:
        if e.kind == "skip" and e.head is None and e.blocks[0] <= k <= e.blocks[1]:
            return e.sublayer or "skip"
    return None


def heads_skipped(edits: tuple, k: int) -> set[int]:
    return {e.head for e in edits if e.kind == "skip" and e.head is not None and e.blocks[0] == k}


def attention_edit(edits: tuple, k: int) -> Edit | None:
    """The branch's attention replacement at block k (the first one given), or None."""
    return next((e for e in edits if e.kind == "attention" and e.blocks[0] == k), None)


def keys_dropped(edits: tuple, k: int) -> list[int]:
    return [e.token for e in edits if e.kind == "drop-key" and e.blocks[0] == k]


MASSIVE = 100.0  # an entry is massive when its magnitude exceeds 100 x the median magnitude (Sun et al.)


def massive_dims(plain: list[torch.Tensor], token: int | None) -> set[int]:
    """The dimensions holding a massive entry (|x| > MASSIVE x the median |x| of the prompts' states) at
    ``token`` (None: any token) in any prompt."""
    out: set[int] = set()
    for p in plain:
        a = p.abs() if token is None else p[token : token + 1].abs()
        out |= {int(j) for j in torch.nonzero((a > MASSIVE * p.abs().median()).any(0)).flatten()}
    return out


def null_dim(e: Edit, plain: list[torch.Tensor], d: int) -> int:
    """The random non-massive dimension of draw ``e.draw`` (the same for every prompt: it depends on the
    plain states only), never the edited one."""
    avoid = massive_dims(plain, e.token) | ({e.of.dim} if e.of is not None and e.of.dim is not None else set())
    choices = [j for j in range(d) if j not in avoid]
    return int(np.random.default_rng(e.draw).choice(choices))


def apply_state_edits(edits: tuple, k: int, x: torch.Tensor, prompt: int, plain: list[torch.Tensor]) -> torch.Tensor:
    """The state after block k of prompt ``prompt`` with the branch's state edits at block k applied;
    ``plain``: every prompt's plain state after block k (for ``mean``, ``patch`` and the nulls' choices)."""
    from dataclasses import replace

    mine = [e for e in edits if (e.kind in STATE_KINDS or e.kind == "perturb") and e.blocks[0] == k]
    if not mine:
        return x
    x = x.clone()
    for e in mine:
        if e.kind == "perturb":  # the edit's change, same L2 norm per token, in a random direction
            changed = apply_state_edits((e.of,), k, x, prompt, plain)
            delta = (changed - x).norm(dim=-1, keepdim=True)
            u = torch.from_numpy(np.random.default_rng(e.draw).standard_normal(x.shape[-1])).to(x.dtype)
            x = x + delta * (u / u.norm())
            continue
        if e.draw is not None and e.dim is None:
            e = replace(e, dim=null_dim(e, plain, x.shape[-1]))
        rows = slice(None) if e.token is None else e.token
        cols = slice(None) if e.dim is None else e.dim
        if e.kind == "zero":
            x[rows, cols] = 0
        elif e.kind == "scale":
            x[rows, cols] = x[rows, cols] * e.by
        elif e.kind == "set":
            x[rows, cols] = e.value
        elif e.kind == "clip":
            x[rows, cols] = x[rows, cols].clamp(-e.by, e.by)
        elif e.kind == "mean":
            if e.token is None:  # over every token of every prompt
                x[:, cols] = torch.cat([p[:, cols].reshape(p.shape[0], -1) for p in plain]).mean(0).reshape(x[0, cols].shape)
            else:
                x[rows, cols] = torch.stack([p[e.token, cols] for p in plain]).mean(0)
        elif e.kind == "patch":
            x[e.token] = plain[e.source][e.token]
    return x


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
) -> dict:
    """Every spec (one string; several edits joined by ';' act at once) on every prompt, beside ``draws``
    draws of its null, in one layer-major run (``progress``: the executor's, :func:`attndyn.models.executor.run`).
    The record :func:`attndyn.app.commands.intervene` writes
    as interventions.json: the unedited ``nll``; per spec ``edit``, ``nll``, ``ppl_ratio``, ``kl`` each
    with its ``_interval``, its ``null`` (the same, pooled over the draws' branches, with each draw's
    perplexity ratio), the second null ``null_l2`` for entry edits, and the ``decision`` of the edit
    against its null by the findings' rule (the paired interval of NLL_edit - NLL_null per draw)."""
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
    return evaluate(decoder, all_prompts, n, plans, draws=draws, dtype=dtype, seed=seed, resamples=resamples, progress=progress)


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
    plain, edited, counts = run(decoder, prompts, branches, dtype=dtype, progress=progress)
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
) -> dict:
    """Each layer's attention (default: the checkpoint page's twin layers) replaced by the twin's step, the
    twin's flow and uniform causal attention, in one executor run. Per layer: the pooled losses, the
    differences plain -> twin-step -> twin -> uniform with paired bootstrap intervals (the same resamples of
    the prompts for every branch), the gap NLL_uniform - NLL_plain ("mask alone" against the network) and
    the share of it the flow closes, (NLL_uniform - NLL_twin) / (NLL_uniform - NLL_plain), with its
    interval, given only where the gap's interval excludes zero (else ``share`` is None and ``share_status``
    says why). No random null: the replacements are compared with each other."""
    import time

    from attndyn.models.architectures import default_twin_layers, twin_refusal
    from attndyn.models.executor import run

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
    plain, edited, counts = run(decoder, prompts, branches, dtype=dtype, progress=progress)
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
    progress: Callable[[str, int, int], None] | None = None,
) -> dict:  # fmt: skip
    """One of :data:`STUDIES` (the guide states each protocol and rule). The plain states come from one
    recorded executor run; the edits of the study then run in one more, each edit starting at its block
    (``theory``: :func:`theory_study`, one run with its plain branches). ``progress(stage, i, n)``: each
    run's steps done (:func:`attndyn.models.executor.run`), ``stage`` naming the study and the run."""
    from attndyn.models.executor import run

    if study not in STUDIES:
        raise ValueError(f"study {study!r} is not one of {', '.join(STUDIES)}")
    step = progress or (lambda stage, i, n: None)
    if study == "theory":
        stage = f"study theory: the plain prompts and {len(THEORY)} replacements of each twin layer's attention"
        return theory_study(decoder, prompts, dtype=dtype, seed=seed, progress=lambda i, n: step(stage, i, n))
    t0, c0 = __import__("time").perf_counter(), __import__("time").process_time()
    plain, _, counts0 = run(decoder, prompts, dtype=dtype, record=True, progress=lambda i, n: step(f"study {study}: the plain prompts", i, n))
    hidden = [r.hidden for r in plain]
    L = len(decoder.layers)
    out: dict = {"study": study}
    edited = f"study {study}: its edits beside {draws} draws of their nulls"
    if study == "massive":
        from attndyn.models.interventions_massive import massive_study

        out |= massive_study(decoder, prompts, hidden, draws=draws, dtype=dtype, seed=seed)
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
        rec = intervene(decoder, prompts, specs, draws=draws, dtype=dtype, seed=seed, progress=lambda i, n: step(edited, i, n))
        out["distances"] = dist
        out["spans"] = spans
        out["edits"] = rec["edits"]
        counts = rec["counts"]
    else:  # sinks: the first key removed at a spread of layers
        step = max(1, L // 6)
        specs = [f"attention:block={k},with=no-first-key" for k in range(0, L, step)]
        rec = intervene(decoder, prompts, specs, draws=draws, dtype=dtype, seed=seed, progress=lambda i, n: step(edited, i, n))
        out["edits"] = rec["edits"]
        out["layers"] = list(range(0, L, step))
        counts = rec["counts"]
    out["forwards"] = counts0["forwards"] + counts["forwards"]
    out["seconds"] = __import__("time").perf_counter() - t0
    out["cpu_seconds"] = __import__("time").process_time() - c0  # this process's CPU time (all its threads)
    return out
