"""The edit language of a decoder's forward: specs parsed into validated :class:`Edit` data, and the helpers the
layer-major executor (:mod:`attndyn.models.executor`) applies them with. The forms, their nulls and the studies
are described in :mod:`attndyn.models.interventions`, which re-exports every name here.

A leaf below the executor: the executor imports it, and the measurements
(:mod:`attndyn.models.edit_effects`) and the studies (:mod:`attndyn.models.interventions`) import both, so no
module imports another back (``tests/test_layers.py`` fails on any import circle).
"""

from __future__ import annotations

from collections.abc import Sequence
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
            from attndyn.models.families import twin_refusal

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
    edits = tuple(parse(s.strip()) for s in specs)
    _check_together(edits)
    return edits


def _check_together(edits: tuple[Edit, ...]) -> None:
    """Refuse edits that the executor cannot apply together at one block (it would keep one and drop the
    other without a word): two attention replacements, or the particle twin (which replaces the whole
    sublayer by the layer's folded Q, K, V) with a head skipped or a key dropped in that sublayer."""
    for k in sorted({e.blocks[0] for e in edits if e.kind == "attention"}):
        here = [e for e in edits if e.kind == "attention" and e.blocks[0] == k]
        if len(here) > 1:
            raise ValueError(f"edits {here[0].spec!r} and {here[1].spec!r} both replace block {k}'s attention; give one")
        if here[0].with_ in TWINS:
            other = next((e for e in edits if e.blocks[0] == k and ((e.kind == "skip" and e.head is not None) or e.kind == "drop-key")), None)
            if other is not None:
                raise ValueError(
                    f"edits {here[0].spec!r} and {other.spec!r}: the particle twin replaces block {k}'s whole attention sublayer "
                    "(every head, every key), so a head or key edit there has nothing to act on; give them in separate edit sets"
                )


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
