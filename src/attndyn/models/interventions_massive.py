"""Sun et al.'s massive-activation study (arXiv 2402.17762) on a decoder: find the block where the massive
activations appear and stay, set them to zero or to their mean there, beside nulls.

The rules, stated before running:

- An entry (token t, dimension j) of a prompt's state after block l is *massive* when its magnitude exceeds
  :data:`~attndyn.models.edits.MASSIVE` (100) times the median magnitude of that prompt's state
  after block l.
- Sun et al. see massive activations appear abruptly at one early layer, stay roughly constant through the
  middle layers and fade in the last few. An entry of a prompt *appears and stays* at block l when it is
  massive after block l and after every later block of the window, blocks l .. L - 1 - floor(L / 4) (the last
  quarter of the blocks, where they may fade, is not asked). The *step-up* block is the first block l at
  which more than half of the prompts hold such an entry (:func:`step_up`); an entry massive after some block
  that is not massive after every later block of the window (a transient one) does not count.
- The edits act on the state after the step-up block, in each prompt on the entries that appear and stay
  there in that prompt: ``zero`` sets them to 0; ``mean`` sets each to the mean of the massive entries of
  its (token role, dimension) over the prompts (:func:`role_means`), the role being the first token (t = 0)
  or a later token (t >= 1). Token 0's entry at dimension j is set to the mean over prompts of token 0's
  entry at j; a later token's massive entry at dimension j (a delimiter, say, at a position that differs
  between prompts) to the mean of the later tokens' massive entries at j over all prompts, never to a mean
  over a position that holds an ordinary value in another prompt.
- The null of each: per draw, each (role, dimension) group is mapped to a distinct random dimension that
  holds no massive entry at any token of any prompt after that block, and the same operation is made at the
  same (prompt, token) places on that dimension (``mean``: its mean over those places); the second null,
  each entry's change (its L2 norm per token) in a random direction.
- "zero matters" when the perplexity ratio's 95 % interval lies above the null's and above 10x; "mean is
  harmless" when the mean edit's ratio interval lies within 1 % (inside [0.99, 1.01]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from attndyn.models import edit_effects, edits

if TYPE_CHECKING:
    from collections.abc import Callable

    from attndyn.models.decoder import Decoder

RULE = "zero matters: the ratio's interval above the null's and above 10x; mean is harmless: its interval within 1 %"
STEP_UP_RULE = (
    "the step-up block is the first block l at which more than half of the prompts hold an entry (token, dimension) "
    "massive (> 100 x the median magnitude of the prompt's state) after block l and after every later block up to "
    "L - 1 - floor(L / 4) (the last quarter, where massive activations may fade, is not asked)"
)
MEAN_RULE = (
    "each edited entry set to the mean of the massive entries of its (token role, dimension) over the prompts; roles: the first token, a later token"
)


def massive_mask(x: torch.Tensor) -> torch.Tensor:
    """``(n, d)`` booleans: the entries of one prompt's state ``x`` above MASSIVE x its median magnitude."""
    a = x.abs()
    return a > edits.MASSIVE * a.median()


def window_end(layers: int) -> int:
    """The last block an entry must stay massive after: L - 1 - floor(L / 4)."""
    return layers - 1 - layers // 4


def step_up(hidden: list[torch.Tensor]) -> tuple[int | None, list[list[tuple[int, int]]]]:
    """The step-up block (module docstring) and, per prompt, the (token, dim) entries that appear there and
    stay; (None, empty lists) when no block qualifies. ``hidden``: per prompt ``(L + 1, n, d)``, row l + 1 the
    state after block l."""
    L = hidden[0].shape[0] - 1
    end = window_end(L)
    masks = [torch.stack([massive_mask(h[k + 1]) for k in range(end + 1)]) for h in hidden]
    for k in range(end + 1):
        entries = [[(int(t), int(j)) for t, j in torch.nonzero(m[k:].all(0))] for m in masks]
        if 2 * sum(bool(e) for e in entries) > len(hidden):
            return k, entries
    return None, [[] for _ in hidden]


def first_massive(hidden: list[torch.Tensor]) -> int | None:
    """The first block after which any prompt holds a massive entry, staying or not (for comparison)."""
    L = hidden[0].shape[0] - 1
    return next((k for k in range(L) if any(bool(massive_mask(h[k + 1]).any()) for h in hidden)), None)


def role(token: int) -> str:
    return "first" if token == 0 else "later"


def groups(entries: list[list[tuple[int, int]]]) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(role, dim) -> the (prompt, token) places of its massive entries, in prompt order."""
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for i, ents in enumerate(entries):
        for t, j in ents:
            out.setdefault((role(t), j), []).append((i, t))
    return dict(sorted(out.items()))


def role_means(states: list[torch.Tensor], entries: list[list[tuple[int, int]]]) -> dict[tuple[str, int], float]:
    """(role, dim) -> the mean of its massive entries over the prompts; ``states``: per prompt ``(n, d)``,
    the state after the step-up block."""
    return {(r, j): float(np.mean([float(states[i][t, j]) for i, t in places])) for (r, j), places in groups(entries).items()}


def massive_plans(states: list[torch.Tensor], entries: list[list[tuple[int, int]]], block: int, draws: int, seed: int) -> list[dict]:
    """The zero and mean edits per prompt (module docstring) with ``draws`` draws of each null, as
    :func:`attndyn.models.edit_effects.evaluate` takes them."""
    from attndyn.models.edits import Edit

    k = (block, block)
    g = groups(entries)
    means = role_means(states, entries)
    taken = set().union(*(set(torch.nonzero(massive_mask(x).any(0)).flatten().tolist()) for x in states))
    free = [j for j in range(states[0].shape[1]) if j not in taken]
    if not free:
        raise ValueError(f"study massive: every dimension holds a massive entry after block {block}: no dimension is left for the null")
    rng = np.random.default_rng(seed)

    def zero(t: int, j: int) -> Edit:
        return Edit("zero", k, token=t, dim=j, spec=f"zero:block={block},token={t},dim={j}")

    def put(t: int, j: int, v: float) -> Edit:
        return Edit("set", k, token=t, dim=j, value=v, spec=f"set:block={block},token={t},dim={j},value={v:.6g}")

    edit = {
        "zero": [tuple(zero(t, j) for t, j in ents) for ents in entries],
        "mean": [tuple(put(t, j, means[(role(t), j)]) for t, j in ents) for ents in entries],
    }
    plans = {name: {"edit": f"{name}: the massive entries after block {block}", "branches": b, "null": [], "null_l2": [], "labels": []}
             for name, b in edit.items()}  # fmt: skip
    for _ in range(draws):
        picks = rng.choice(free, size=len(g), replace=len(free) < len(g))
        to = {key: int(j) for key, j in zip(g, picks, strict=True)}
        null_mean = {key: float(np.mean([float(states[i][t, to[key]]) for i, t in places])) for key, places in g.items()}
        label = ", ".join(f"{r} token dim {j} -> {to[(r, j)]}" for r, j in g)
        plans["zero"]["null"].append([tuple(zero(t, to[(role(t), j)]) for t, j in ents) for ents in entries])
        plans["mean"]["null"].append([tuple(put(t, to[(role(t), j)], null_mean[(role(t), j)]) for t, j in ents) for ents in entries])
        for name in plans:
            plans[name]["labels"].append(f"null of {name}: {label}")
            seeds = {key: int(rng.integers(2**31)) for key in g}
            plans[name]["null_l2"].append([
                tuple(Edit("perturb", k, token=e.token, draw=seeds[(role(e.token), e.dim)], of=e, spec=f"equal-L2 random direction of {e.spec}")
                      for e in per)
                for per in edit[name]
            ])  # fmt: skip
    return [plans["zero"], plans["mean"]]


def massive_study(
    decoder: Decoder,
    prompts: list[list[int]],
    hidden: list[torch.Tensor],
    *,
    draws: int = 5,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    runner: Callable | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """The study's record (module docstring): the step-up block, the entries per prompt, the role means,
    the zero and mean edits beside their nulls, and which of Sun et al.'s rules holds. ``hidden``: the
    prompts' plain states (``(L + 1, n, d)`` each); ``runner``: what runs the edits (the executor's ``run``
    by default; tasks on Dask with ``attndyn intervene --workers``); ``progress(i, n)``: the edits' run."""
    k, entries = step_up(hidden)
    out: dict = {
        "threshold": f"{edits.MASSIVE:g} x the median magnitude",
        "step_up_rule": STEP_UP_RULE,
        "window_end": window_end(len(decoder.layers)),
        "first_massive_block": first_massive(hidden),
        "block": k,
    }
    if k is None:
        return out | {"entries": [], "edits": [], "finding": "no entry appears and stays above the threshold"}
    states = [h[k + 1] for h in hidden]
    out["entries"] = [list(p) for p in sorted({(t, j) for ents in entries for t, j in ents})]
    out["entries_per_prompt"] = [[list(p) for p in ents] for ents in entries]
    out["massive_per_prompt"] = [int(massive_mask(x).sum()) for x in states]
    out["mean_rule"] = MEAN_RULE
    out["means"] = [{"role": r, "dim": j, "mean": m, "count": len(groups(entries)[(r, j)])} for (r, j), m in role_means(states, entries).items()]
    plans = massive_plans(states, entries, k, draws, seed)
    rec = edit_effects.evaluate(decoder, prompts, len(prompts), plans, draws=draws, dtype=dtype, seed=seed, runner=runner, progress=progress)
    z, m = rec["edits"]
    z_lo = z["ppl_ratio_interval"][0]
    out["edits"] = rec["edits"]
    out["rule"] = RULE
    out["zero_matters"] = bool(z_lo > 10 and z_lo > z["null"]["ppl_ratio_interval"][1])
    out["mean_harmless"] = bool(0.99 <= m["ppl_ratio_interval"][0] and m["ppl_ratio_interval"][1] <= 1.01)
    out["counts"] = rec["counts"]
    return out
