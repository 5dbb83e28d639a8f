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
- ``patch:block=l,token=t,from=k``: token t's state after block l taken from prompt k of the set.

Several edits at once: a tuple of :class:`Edit`. The nulls (:func:`null_edits`): zero/mean/scale/set/clip of
an entry -> the same operation on a random non-massive dimension of the same token; skip of a block or span
-> a random block or span of the same length; head skip -> a random head of the same layer; no-first-key ->
a random non-first key removed; patch -> the same patch from a prompt with its tokens shuffled (the caller
supplies it); uniform attention has no random place: it is compared with the plain layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

FORMS = (
    "zero:block=L[,token=T][,dim=J]",
    "mean:block=L[,token=T][,dim=J]",
    "scale:block=L[,token=T][,dim=J],by=S",
    "set:block=L[,token=T][,dim=J],value=V",
    "clip:block=L[,token=T][,dim=J],by=C",
    "skip:block=L | skip:blocks=A-B | skip:block=L,sublayer=attention|feedforward | skip:block=L,head=H",
    "attention:block=L,with=uniform|no-first-key",
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
    "attention": {"block", "with"},
    "patch": {"block", "token", "from"},
}
WITH = ("uniform", "no-first-key")
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

    def first_block(self) -> int:
        return self.blocks[0]

    def check(self, decoder, lengths: list[int]) -> None:
        """ValueError naming the value when the edit does not fit ``decoder`` and prompts of ``lengths``."""
        L = len(decoder.layers)
        a, b = self.blocks
        if not 0 <= a <= b < L:
            raise ValueError(f"{self.spec or self.kind}: block {a if a == b else f'{a}-{b}'} is not in 0..{L - 1}")
        if self.dim is not None and not 0 <= self.dim < decoder.d_model:
            raise ValueError(f"{self.spec}: dim {self.dim} is not in 0..{decoder.d_model - 1}")
        if self.head is not None and not 0 <= self.head < decoder.heads:
            raise ValueError(f"{self.spec}: head {self.head} is not in 0..{decoder.heads - 1}")
        if self.token is not None and self.token >= min(lengths):
            raise ValueError(f"{self.spec}: token {self.token} is past the end of the shortest prompt ({min(lengths)} tokens)")
        if self.source is not None and not 0 <= self.source < len(lengths):
            raise ValueError(f"{self.spec}: from={self.source} is not a prompt of the set (0..{len(lengths) - 1})")


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
            raise ValueError(f"edit {spec!r}: with={fields['with']!r} is not one of {', '.join(WITH)} (the twin replacements are not built yet)")
        kw["with_"] = fields["with"]
    need = {"scale": ("by",), "clip": ("by",), "set": ("value",), "attention": ("with",), "patch": ("token", "from")}.get(kind, ())
    for key in need:
        if key not in fields:
            raise ValueError(f"edit {spec!r}: {kind} needs {key}=; accepted forms: {forms}")
    if kind == "skip" and "sublayer" in fields and "head" in fields:
        raise ValueError(f"edit {spec!r}: skip a sublayer or a head, not both")
    if kind == "clip" and kw["by"] < 0:
        raise ValueError(f"edit {spec!r}: clip by={kw['by']} is negative")
    return Edit(kind, blocks, **kw)


def parse_all(specs) -> tuple[Edit, ...]:
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


def attention_replacement(edits: tuple, k: int) -> str | None:
    for e in edits:
        if e.kind == "attention" and e.blocks[0] == k:
            return e.with_
    return None


def keys_dropped(edits: tuple, k: int) -> list[int]:
    return [e.token for e in edits if e.kind == "drop-key" and e.blocks[0] == k]


def twin_attention(decoder, k, x, layer, with_, cast):  # pragma: no cover - refused at parse time
    raise ValueError(f"attention with={with_} is not built yet")


def apply_state_edits(edits: tuple, k: int, x: torch.Tensor, prompt: int, plain: list[torch.Tensor]) -> torch.Tensor:
    """The state after block k of prompt ``prompt`` with the branch's state edits at block k applied;
    ``plain``: every prompt's plain state after block k (for ``mean`` and ``patch``)."""
    mine = [e for e in edits if e.kind in STATE_KINDS and e.blocks[0] == k]
    if not mine:
        return x
    x = x.clone()
    for e in mine:
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
def pooled_bootstrap(nll_sum: np.ndarray, count: np.ndarray, *, resamples: int = 2000, seed: int = 0, level: float = 0.95):
    """Resampled pooled means sum(nll_sum[idx]) / sum(count[idx]) over prompts: the draws, for intervals of
    any function of the pooled loss (paired across branches by the same ``seed``)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(count), size=(resamples, len(count)))
    return nll_sum[idx].sum(1) / count[idx].sum(1)


def _interval(draws: np.ndarray, level: float = 0.95) -> list[float]:
    a = (1 - level) / 2
    return [float(np.quantile(draws, a)), float(np.quantile(draws, 1 - a))]


def effects(plain, edited, *, resamples: int = 2000, seed: int = 0) -> dict:
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


def plain_effect(plain, *, resamples: int = 2000, seed: int = 0) -> dict:
    count = np.array([len(r.nll) for r in plain], dtype=np.float64)
    p_sum = np.array([float(r.nll.sum()) for r in plain])
    return {"nll": float(p_sum.sum() / count.sum()), "nll_interval": _interval(pooled_bootstrap(p_sum, count, resamples=resamples, seed=seed))}


# nulls
def null_edits(edit: Edit, decoder, lengths: list[int], rng: np.random.Generator, *, massive: set[int] | None = None) -> Edit | None:
    """One draw of ``edit``'s null (module docstring), or None where the kind has no random place (attention
    replacements other than no-first-key, patches: the caller shuffles the source prompt)."""
    from dataclasses import replace

    L, d = len(decoder.layers), decoder.d_model
    if edit.kind in ("zero", "mean", "scale", "set", "clip") and edit.dim is not None:
        avoid = set(massive or ()) | {edit.dim}
        choices = [j for j in range(d) if j not in avoid]
        return replace(edit, dim=int(rng.choice(choices)), spec=f"null of {edit.spec}")
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
    """The findings' rule on the difference edit - null over >= 5 independent null draws: 'exceeds' or
    'falls below' where every draw's difference interval excludes zero on the same side and the mean margin
    exceeds 3 Monte-Carlo standard errors of the draws; 'undetermined (depends on the draw)' where draws
    disagree; 'cannot be told' otherwise. ``lo``/``hi``: per null draw, the interval of the difference edit - null."""
    lows = np.asarray(lo, dtype=float)
    highs = np.asarray(hi, dtype=float)
    if lows.size < 5:
        return "cannot be told"
    above, below = lows > 0, highs < 0
    mid = (lows + highs) / 2
    mc = mid.std(ddof=1) / np.sqrt(mid.size) if mid.size > 1 else np.inf
    if above.all() and mid.mean() > 3 * mc:
        return "exceeds"
    if below.all() and -mid.mean() > 3 * mc:
        return "falls below"
    if above.any() or below.any():
        return "undetermined (depends on the draw)"
    return "cannot be told"
