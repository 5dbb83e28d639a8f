"""Null models and intervals for the trained-decoder findings (DESIGN §8: every finding carries a null and an interval).

Contract
--------
* ``bootstrap_interval(values, level=0.95)``: the percentile bootstrap interval of the mean over the
  first axis (prompts), ``B`` resamples from a fixed seed; NaN columns stay NaN. ``paired_difference``:
  the mean and interval of ``a - b`` resampled by pairs (the same prompts under the network and a null);
  with ``rounding`` (:func:`rounding` of the forward's dtype) a pair whose difference is within that
  fraction of the larger magnitude counts as equal: the shuffled-token null at layer 0 holds the same
  vectors in another order, and summation order alone must not read as a difference.
* ``uniform_causal(mask)``: the attention of a head that attends uniformly to what its mask lets it
  see; ``uniform_leaders(n, top)`` its leaders, exactly ``[0, 1, ..., top - 1]`` for a causal mask (column
  j receives ``(1/n) sum_{i >= j} 1/(i + 1)``, which decreases in j).
* ``random_decoder(decoder, seed)``: the same architecture with weights drawn as its configuration's
  initialiser draws them (``transformers``' ``_init_weights`` for LLaMA, Gemma 3 and GPT-2: every linear
  map and embedding from N(0, 0.02^2), biases 0, norm multipliers 1; Gemma's ``1 + w`` with w = 0).
* ``shuffled(ids, rng, keep)``: the prompt's tokens in a random order, the first ``keep`` left in place
  (Gemma's beginning-of-sequence token).
* ``comparison_sentence(metric, null, layers, diff)``: the layers where the interval of the difference
  network - null lies above zero, below zero, or contains zero, written as one sentence, with the pool.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from attndyn.models.decoder import Decoder, DecoderLayer

BOOTSTRAP = 2000  # resamples of the prompts
LEVEL = 0.95
INIT_STD = 0.02  # initializer_range of LlamaConfig, Gemma3TextConfig and GPT2Config


def bootstrap_interval(
    values: np.ndarray | list, *, level: float = LEVEL, resamples: int = BOOTSTRAP, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of the mean of ``values`` over axis 0 (prompts): the percentile bootstrap interval."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError(f"bootstrap_interval needs at least one prompt; got shape {x.shape}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.shape[0], size=(resamples, x.shape[0]))
    means = x[idx].mean(axis=1)
    a = (1 - level) / 2
    return np.quantile(means, a, axis=0), np.quantile(means, 1 - a, axis=0)


ROUNDING_ULPS = 128  # a layer's measure is a reduction over ~100 tokens: n eps bounds a sum of n terms' rounding


def rounding(dtype: torch.dtype) -> float:
    """The relative difference two computations of one measure in ``dtype`` can show by rounding alone."""
    return ROUNDING_ULPS * float(torch.finfo(dtype).eps)


def paired_difference(a: np.ndarray | list, b: np.ndarray | list, *, rounding: float = 0.0, **kw: object) -> dict:
    """The mean of ``a - b`` over prompts (axis 0) and its bootstrap interval (pairs resampled together);
    differences within ``rounding`` of the larger magnitude are zero (module docstring)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    diff = a - b
    with np.errstate(invalid="ignore"):
        diff = np.where(np.abs(diff) <= rounding * np.maximum(np.abs(a), np.abs(b)), 0.0, diff)
    lo, hi = bootstrap_interval(diff, **kw)
    return {"mean": diff.mean(0), "lo": lo, "hi": hi}


def uniform_causal(mask: np.ndarray) -> np.ndarray:
    """The row-stochastic matrix that spreads each row uniformly over the mask's allowed entries."""
    m = np.asarray(mask, dtype=np.float64)
    return m / m.sum(-1, keepdims=True)


def uniform_leaders(n: int, top: int = 3) -> list[int]:
    """The leaders (columns of most mass) of uniform causal attention over n tokens: exactly 0..top-1."""
    return list(range(min(top, n)))


def random_decoder(decoder: Decoder, seed: int = 0) -> Decoder:
    """The same architecture, its weights drawn as the configuration's initialiser draws them (module docstring)."""
    g = torch.Generator().manual_seed(seed)

    def normal(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else torch.randn(t.shape, generator=g, dtype=torch.float32) * INIT_STD

    def ones(t):
        return None if t is None else torch.ones(t.shape, dtype=torch.float32)

    def zeros(t):
        return None if t is None else torch.zeros(t.shape, dtype=torch.float32)

    layers = []
    for L in decoder.layers:
        fields = {}
        for f in dataclasses.fields(DecoderLayer):
            t = getattr(L, f.name)
            if f.name in ("W_q", "W_k", "W_v", "W_o", "gate", "up", "down"):
                fields[f.name] = normal(t)
            elif f.name.endswith("norm"):
                fields[f.name] = ones(t)
            else:  # biases, LayerNorm biases
                fields[f.name] = zeros(t)
        layers.append(DecoderLayer(**fields))
    embed = normal(decoder.embed)
    tied = decoder.head is decoder.embed or (decoder.head.shape == decoder.embed.shape and torch.equal(decoder.head, decoder.embed))
    return dataclasses.replace(
        decoder,
        name=f"{decoder.name} (random weights, seed {seed})",
        embed=embed,
        layers=tuple(layers),
        norm=ones(decoder.norm),
        head=embed if tied else normal(decoder.head),
        norm_bias=zeros(decoder.norm_bias),
        pos_embed=normal(decoder.pos_embed),
    )


def shuffled(ids: list[int], rng: np.random.Generator, keep: int = 0) -> list[int]:
    """``ids`` with all but the first ``keep`` tokens in a random order."""
    rest = list(ids[keep:])
    return list(ids[:keep]) + [rest[i] for i in rng.permutation(len(rest))]


def _ranges(layers: list[int]) -> str:
    out, start = [], None
    for k, v in enumerate(layers):
        if start is None:
            start = v
        if k + 1 == len(layers) or layers[k + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)


def comparison_sentence(metric: str, null: str, layers: list[int], diff: dict, *, pool: str) -> str:
    """One sentence: at which layers ``metric`` of the network exceeds / falls below ``null`` (the interval
    of the paired difference excludes zero) and where it cannot be told apart from it."""
    layers = list(layers)
    above = [k for k, lo in zip(layers, diff["lo"], strict=True) if np.isfinite(lo) and lo > 0]
    below = [k for k, hi in zip(layers, diff["hi"], strict=True) if np.isfinite(hi) and hi < 0]
    same = [k for k, lo, hi in zip(layers, diff["lo"], diff["hi"], strict=True) if np.isfinite(lo) and lo <= 0 <= hi]
    parts = []
    if above:
        parts.append(f"exceeds {null} at layers {_ranges(above)}")
    if below:
        parts.append(f"falls below {null} at layers {_ranges(below)}")
    if same:
        parts.append(f"cannot be told from {null} at layers {_ranges(same)}")
    if not parts:
        return ""
    return f"The network's {metric} " + "; ".join(parts) + f" ({int(LEVEL * 100)} % bootstrap interval of the difference over {pool})."
