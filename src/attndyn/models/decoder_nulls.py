"""Null models and intervals for the trained-decoder findings (DESIGN §8: every finding carries a null and an interval).

Contract
--------
* ``bootstrap_interval(values, level=0.95)``: the percentile bootstrap interval of the mean over the
  first axis (prompts), ``B`` resamples from a fixed seed; NaN columns stay NaN. ``paired_difference``:
  the mean and interval of ``a - b`` resampled by pairs (the same prompts under the network and a null);
  with ``rounding`` (:func:`rounding` of the forward's dtype) a pair whose difference is within that
  fraction of the larger magnitude counts as equal: the shuffled-token null at layer 0 holds the same
  vectors in another order, and summation order alone must not read as a difference.
* ``draws_difference(a, b)``: the same for a null with random draws (``b``: ``(prompts, draws, ...)``, the
  shuffles of each prompt or the random-weight models): a two-level bootstrap that resamples the prompts
  and, independently, the draws, so the interval carries the draw-to-draw spread as well as the prompts';
  ``draws_summary(b)``: the null's mean, its interval by the same resampling, and the per-draw means'
  range (``spread``: what one draw alone could have printed).
* ``uniform_causal(mask)``: the attention of a head that attends uniformly to what its mask lets it
  see; ``uniform_leaders(n, top)`` its leaders, exactly ``[0, 1, ..., top - 1]`` for a causal mask (column
  j receives ``(1/n) sum_{i >= j} 1/(i + 1)``, which decreases in j).
* ``random_decoder(decoder, seed, std=INIT_STD)``: the same architecture with weights drawn as its
  configuration's initialiser draws them (``transformers``' ``_init_weights`` for LLaMA, Gemma 3 and GPT-2:
  every linear map and embedding from N(0, std^2), biases 0, norm multipliers 1; Gemma's ``1 + w`` with
  w = 0). ``std`` is the model's published ``initializer_range`` (:func:`initializer_scales`), not the
  configuration class's default 0.02: SmolLM2-135M was configured with 1/sqrt(576) = 0.0417, and at 0.02 its
  null reverses a finding (issue 47).
* ``initializer_scales(decoder)``: ``[(std, source)]``, the scale the model was initialised at: a folder's
  ``config.json`` ``initializer_range``; for a GGUF file (which does not carry it) the published value
  pinned beside the file's SHA-256 in :data:`PUBLISHED_INIT`, with its source. Where neither is known, two
  entries: the family's class default (0.02) and 1/sqrt(width); a finding against random weights is then
  written only where it holds at both.
  ``random_decoder_on(decoder, seed, tokens)``: the same layers with the embedding rows of ``tokens``
  alone (each from its own (seed, token) stream), and the map of a prompt's ids to the model's rows.
* ``uniform_first_share(n)``: token 0's mean attention over the first ``n`` queries of a uniform causal
  head, exactly H_n / n (query i gives it 1/(i + 1)); ``uniform_sink_fixed(lengths, eps)``: the sentence
  saying that uniform causal attention's sink rate is 0 by construction at these lengths (H_n / n < eps
  for every n), or "" where it is not: a comparison with that null is then vacuous and is not made.
* ``shuffled(ids, rng, keep)``: the prompt's tokens in a random order, the first ``keep`` left in place
  (Gemma's beginning-of-sequence token). ``decoder_null_runs.null_values(decoder, ids)``: the three nulls' per-layer values on
  the prompts (the decoder page's study), their forwards in ``NULL_DTYPE`` = float32 by default.
* ``decide(lo, hi)``: the decision rule shared by the findings against a null (issue 47, item 2; the
  interventions' decisions and :func:`comparison_sentence` given replicates use it). ``lo``,
  ``hi``: the interval of the difference network - null from each of R >= ``REPLICATES_MIN`` = 5
  independent replicates (each its own set of permutations or random draws and its own bootstrap seed).
  Each replicate gives three margins, ``lo`` (exceeds when > 0), ``-hi`` (falls below when > 0) and
  ``min(-lo, hi)`` (cannot be told when >= 0); a decision is made only where the mean of its margin over
  the replicates exceeds ``MC_SE_MIN`` = 3 Monte-Carlo standard errors (the replicates' standard deviation
  over sqrt(R)); otherwise, or with fewer than 5 replicates, it is "undetermined (depends on the draw)".
  A :class:`Decision` carries the word, the margin, its standard error and R. ``replicate_differences(a,
  b, sets)``: those R intervals from ``draws_difference`` on disjoint sets of the null's draws, bootstrap
  seeds ``seed + r`` (a null of one draw, uniform causal attention, by the seeds alone). The decoder page
  draws ``RANDOM_DRAWS`` = 5 random-weight models (one a replicate) and ``SHUFFLE_DRAWS`` = 10 shuffles
  of each prompt (two a replicate).
* ``comparison_sentence(metric, null, layers, diff)``: the layers where the interval of the difference
  network - null lies above zero, below zero, or contains zero, written as one sentence, with the pool;
  with replicates (``diff["lo_sets"]``, ``diff["hi_sets"]``: ``(R, layers)``) by :func:`decide`, the
  undetermined layers named as such.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attndyn.models.decoder import Decoder, DecoderLayer, LazyLayers, layer_shapes

BOOTSTRAP = 2000  # resamples of the prompts
LEVEL = 0.95
INIT_STD = 0.02  # the class default initializer_range of LlamaConfig, Gemma3TextConfig and GPT2Config
# GGUF files by SHA-256: the initializer_range of the published config.json of the model they quantise
PUBLISHED_INIT = {
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53": (
        1 / 576**0.5,
        "initializer_range 0.041666666666666664 = 1/sqrt(576) in HuggingFaceTB/SmolLM2-135M's config.json",
    ),
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818": (
        0.02,
        "initializer_range 0.02 in google/gemma-3-270m's config.json (the Gemma 3 configurations' published value)",
    ),
}
RANDOM_DRAWS = 5  # random-weight models drawn (each a whole model, shared by the prompts): one a replicate of the decision rule
SHUFFLE_DRAWS = 10  # permutations of each prompt: two a replicate
NULL_DTYPE = torch.float32  # the nulls' forwards: their spread over draws is far above float32's rounding


def bootstrap_interval(
    values: np.ndarray | list, *, level: float = LEVEL, resamples: int = BOOTSTRAP, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of the mean of ``values`` over axis 0 (prompts): the percentile bootstrap interval."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError(f"bootstrap_interval needs at least one prompt; got shape {x.shape}")
    flat = x.reshape(x.shape[0], -1)
    partial = np.isnan(flat).any(0) & np.isfinite(flat).any(0)
    if partial.any():  # a column some prompts lack (Sink at T = 64 of a shorter prompt): its interval over the prompts that have it
        lo, hi = (
            np.asarray(v, dtype=np.float64).reshape(flat.shape[1])
            for v in bootstrap_interval(np.where(partial, 0.0, flat), level=level, resamples=resamples, seed=seed)
        )
        lo, hi = lo.copy(), hi.copy()
        for j in np.flatnonzero(partial):
            col = flat[np.isfinite(flat[:, j]), j]
            lo[j], hi[j] = bootstrap_interval(col, level=level, resamples=resamples, seed=seed)
        return lo.reshape(x.shape[1:]), hi.reshape(x.shape[1:])
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


def _two_level_means(b: np.ndarray, rng: np.random.Generator, resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap means of ``b`` ``(P, D, ...)`` with the prompts and the draws resampled independently, and
    the prompt indices used (to pair a network's values with the same resampled prompts)."""
    P, D = b.shape[:2]
    ip = rng.integers(0, P, size=(resamples, P))
    idr = rng.integers(0, D, size=(resamples, D))
    means = np.stack([b[ip[r]][:, idr[r]].mean(axis=(0, 1)) for r in range(resamples)])
    return means, ip


def draws_difference(
    a: np.ndarray | list, b: np.ndarray | list, *, rounding: float = 0.0, level: float = LEVEL, resamples: int = BOOTSTRAP, seed: int = 0
) -> dict:
    """The mean of ``a`` (``(P, ...)``, the network) minus the mean of ``b`` (``(P, D, ...)``, D draws of a
    null on the same prompts) and its two-level percentile bootstrap interval: each resample draws P
    prompts with replacement (the same for both) and D of the null's draws with replacement. A draw within
    ``rounding`` of its prompt's value (relative to the larger magnitude) counts as equal to it, as in
    :func:`paired_difference`."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if b.ndim != a.ndim + 1 or b.shape[0] != a.shape[0] or b.shape[2:] != a.shape[1:]:
        raise ValueError(f"draws_difference needs a (P, ...) and b (P, draws, ...) on the same prompts; got {a.shape} and {b.shape}")
    if rounding:
        ab = np.broadcast_to(a[:, None], b.shape)
        with np.errstate(invalid="ignore"):
            b = np.where(np.abs(ab - b) <= rounding * np.maximum(np.abs(ab), np.abs(b)), ab, b)
    rng = np.random.default_rng(seed)
    null_means, ip = _two_level_means(b, rng, resamples)
    means = a[ip].mean(axis=1)
    diffs, mean = means - null_means, a.mean(0) - b.mean(axis=(0, 1))
    if rounding:  # the means of equal values summed in another order differ by rounding alone
        with np.errstate(invalid="ignore"):
            diffs = np.where(np.abs(diffs) <= rounding * np.maximum(np.abs(means), np.abs(null_means)), 0.0, diffs)
            mean = np.where(np.abs(mean) <= rounding * np.abs(a.mean(0)), 0.0, mean)
    q = (1 - level) / 2
    return {"mean": mean, "lo": np.quantile(diffs, q, axis=0), "hi": np.quantile(diffs, 1 - q, axis=0)}


REPLICATES_MIN = 5  # independent sets of permutations / draws and bootstrap seeds a decision needs
MC_SE_MIN = 3.0  # a decision's mean margin over the replicates, in Monte-Carlo standard errors
UNDETERMINED = "undetermined (depends on the draw)"


@dataclasses.dataclass(frozen=True)
class Decision:
    """How the network compares with a null: ``word`` "exceeds", "falls below", "cannot be told" or
    :data:`UNDETERMINED`; ``margin`` and ``mc_se``: the mean over the replicates of the deciding margin
    (for an undetermined one, the largest of the three margins' means) and its Monte-Carlo standard error;
    ``replicates``: R."""

    word: str
    margin: float
    mc_se: float
    replicates: int

    @property
    def decided(self) -> bool:
        return self.word != UNDETERMINED


def decide(lo: np.ndarray | list, hi: np.ndarray | list) -> Decision:
    """The decision rule of every finding (module docstring): ``lo``, ``hi`` ``(R,)`` are the intervals of
    the difference network - null from R independent replicates; NaN intervals are left out."""
    lo, hi = np.asarray(lo, dtype=np.float64).ravel(), np.asarray(hi, dtype=np.float64).ravel()
    if lo.shape != hi.shape:
        raise ValueError(f"decide needs one interval per replicate; got {lo.size} lower and {hi.size} upper ends")
    ok = np.isfinite(lo) & np.isfinite(hi)
    lo, hi = lo[ok], hi[ok]
    if (lo > hi).any():
        raise ValueError(f"decide: an interval's lower end exceeds its upper end ({lo[lo > hi][0]:g} > {hi[lo > hi][0]:g})")
    R = lo.size
    if R < REPLICATES_MIN:
        return Decision(UNDETERMINED, float("nan"), float("nan"), R)
    margins = {"exceeds": lo, "falls below": -hi, "cannot be told": np.minimum(-lo, hi)}
    stats = {w: (float(m.mean()), float(m.std(ddof=1) / np.sqrt(R))) for w, m in margins.items()}
    for word, (mean, se) in stats.items():  # at most one margin's mean is > 0 (lo <= hi), so at most one decides
        if mean > MC_SE_MIN * se or (word == "cannot be told" and mean == 0.0 and se == 0.0):  # [0, 0] every time: no difference
            return Decision(word, mean, se, R)
    mean, se = max(stats.values())
    return Decision(UNDETERMINED, mean, se, R)


def replicate_differences(
    a: np.ndarray | list, b: np.ndarray | list, *, sets: int = REPLICATES_MIN, rounding: float = 0.0, seed: int = 0, **kw: object
) -> dict:
    """:func:`draws_difference` of ``a`` ``(P, ...)`` against ``sets`` disjoint sets of the null's draws
    (``b``: ``(P, D, ...)``, D >= ``sets``; draws ``r, r + sets, ...`` make set r, the rest of D / sets left
    out) with bootstrap seed ``seed + r``: ``{"lo_sets", "hi_sets"}`` ``(sets, ...)`` for :func:`decide`,
    and the difference of the means over all draws (``"mean"``). A null of one draw (uniform causal
    attention, not random) is in every set: its replicates differ by their bootstrap seeds alone."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if b.ndim < 2 or (b.shape[1] < sets and b.shape[1] != 1):
        raise ValueError(
            f"replicate_differences needs at least sets = {sets} draws of the null (or one, a null that is not random); got shape {b.shape}"
        )
    per = b.shape[1] // sets
    subsets = [b[:, r::sets][:, :per] for r in range(sets)] if per else [b] * sets  # one draw: the bootstrap seeds alone differ
    parts = [draws_difference(a, sub, rounding=rounding, seed=seed + r, **kw) for r, sub in enumerate(subsets)]
    return {"mean": a.mean(0) - b.mean(axis=(0, 1)), "lo_sets": np.stack([p["lo"] for p in parts]), "hi_sets": np.stack([p["hi"] for p in parts])}


def draws_summary(b: np.ndarray | list, *, level: float = LEVEL, resamples: int = BOOTSTRAP, seed: int = 0) -> dict:
    """The null's mean over prompts and draws, its two-level bootstrap interval, the per-draw means
    (each the mean over the prompts of one draw) and their range ``spread`` = [min, max]."""
    b = np.asarray(b, dtype=np.float64)
    means, _ = _two_level_means(b, np.random.default_rng(seed), resamples)
    per_draw = b.mean(0)
    q = (1 - level) / 2
    return {
        "mean": b.mean(axis=(0, 1)),
        "lo": np.quantile(means, q, axis=0),
        "hi": np.quantile(means, 1 - q, axis=0),
        "draws": per_draw,
        "spread": (per_draw.min(0), per_draw.max(0)),
    }


def uniform_causal(mask: np.ndarray) -> np.ndarray:
    """The row-stochastic matrix that spreads each row uniformly over the mask's allowed entries."""
    m = np.asarray(mask, dtype=np.float64)
    return m / m.sum(-1, keepdims=True)


def uniform_leaders(n: int, top: int = 3) -> list[int]:
    """The leaders (columns of most mass) of uniform causal attention over n tokens: exactly 0..top-1."""
    return list(range(min(top, n)))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def initializer_scales(decoder: Decoder) -> list[tuple[float, str]]:
    """The standard deviation the model's weights were initialised at, with where it was read (module
    docstring): one entry when known, else the family default and 1/sqrt(width), each with its reason."""
    src = Path(decoder.source)
    config = src / "config.json"
    if src.is_dir() and config.is_file():
        value = json.loads(config.read_text()).get("initializer_range")
        if value is not None:
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")):
                raise ValueError(f"{config}: initializer_range {value!r} is not a positive number")
            return [(float(value), f"initializer_range {value} in {config}")]
    elif src.is_file() and src.suffix == ".gguf":
        known = PUBLISHED_INIT.get(_sha256(src))
        if known is not None:
            return [known]
    width = 1 / decoder.d_model**0.5
    return [
        (INIT_STD, "the family's class default 0.02 (the model's own initializer_range is not known)"),
        (width, f"1/sqrt(width) = 1/sqrt({decoder.d_model}) (the model's own initializer_range is not known)"),
    ]


def uniform_first_share(n: int) -> float:
    """H_n / n: token 0's attention averaged over the first n queries of a uniform causal head."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"uniform_first_share needs n >= 1 queries; got {n!r}")
    return float(sum(1.0 / k for k in range(1, int(n) + 1)) / n)


def uniform_sink_fixed(lengths: list[int], eps: float, *, what: str = "sink rate") -> str:
    """The exact value of uniform causal attention's ``what`` when its threshold cannot be crossed at any of
    ``lengths`` (the queries read per prompt): H_n / n < eps for every n, so the rate is 0 by construction
    and "the network exceeds it" holds of any network with one sink head. "" when some length crosses."""
    shares = {int(n): uniform_first_share(int(n)) for n in lengths}
    if not shares or max(shares.values()) >= eps:
        return ""
    n = min(shares)
    return (
        f"Under uniform causal attention the {what} is 0 by construction: token 0's mean attention over the first n queries is "
        f"H_n / n (query i gives it 1/(i + 1)), at most H_{n}/{n} = {shares[n]:.3f} < eps = {eps} at these prompts' {n}-{max(shares)} "
        "queries, so no head crosses eps; a comparison with it would hold for any network with one sink head and is not made."
    )


AUTO_FLOAT64_PARAMS = 10**9  # the page runs in float64 up to this many parameters, in float32 above (time: a float64 GEMM is 2x)


def auto_dtype(dec: Decoder) -> tuple[torch.dtype, str]:
    """The page's compute dtype by size (``--dtype auto``): float64 up to :data:`AUTO_FLOAT64_PARAMS` parameters,
    float32 above; and the sentence the page says it with."""
    from attndyn.models.decoder import parameters

    n = parameters(dec)
    dtype = torch.float64 if n <= AUTO_FLOAT64_PARAMS else torch.float32
    side = "at most" if dtype == torch.float64 else "more than"
    return dtype, f"chosen by size: {n / 1e6:,.0f} M parameters, {side} {AUTO_FLOAT64_PARAMS / 1e9:g} B (float64 up to it, float32 above)"


def _draw_layer(shapes: dict[str, tuple[int, ...] | None], g: torch.Generator, std: float = INIT_STD) -> DecoderLayer:
    """One layer of the given shapes drawn as the initialiser draws it: the linear maps from N(0, std^2) in the
    order of the fields, norm multipliers 1, biases 0."""
    fields = {}
    for f in dataclasses.fields(DecoderLayer):
        shape = shapes[f.name]
        if shape is None:
            fields[f.name] = None
        elif f.name in ("W_q", "W_k", "W_v", "W_o", "gate", "up", "down"):
            fields[f.name] = torch.randn(shape, generator=g, dtype=torch.float32).mul_(std)
        elif f.name.endswith("norm"):
            fields[f.name] = torch.ones(shape, dtype=torch.float32)
        else:  # biases, LayerNorm biases
            fields[f.name] = torch.zeros(shape, dtype=torch.float32)
    return DecoderLayer(**fields)


def _random_layers(decoder: Decoder, g: torch.Generator, std: float = INIT_STD) -> tuple[DecoderLayer, ...]:
    """Every layer drawn (:func:`_draw_layer`) from one generator, layer after layer."""
    return tuple(_draw_layer(layer_shapes(decoder, k), g, std) for k in range(len(decoder.layers)))


class _LazyDraws:
    """:func:`_random_layers`' layers of a generator, drawn one at a time when asked for (the same numbers):
    the generator's state at the start of each layer is kept once that layer has been reached, so a layer asked
    for in order costs one draw, an earlier one a draw from its kept state, a later one the draws of the layers
    before it. A 1B model's random layers are 4 GiB in float32; this holds one."""

    def __init__(self, decoder: Decoder, g: torch.Generator, std: float):
        self.shapes = [layer_shapes(decoder, k) for k in range(len(decoder.layers))]
        self.std, self.states = std, [g.get_state()]

    def _from(self, k: int) -> tuple[DecoderLayer, torch.Generator]:
        g = torch.Generator()
        g.set_state(self.states[k])
        layer = _draw_layer(self.shapes[k], g, self.std)
        if len(self.states) == k + 1:
            self.states.append(g.get_state())
        return layer, g

    def layer(self, k: int) -> DecoderLayer:
        while len(self.states) <= k:  # the layers before k, drawn to reach k's state and dropped
            self._from(len(self.states) - 1)
        return self._from(k)[0]

    def after(self) -> torch.Generator:
        """The generator as it stands after every layer has been drawn."""
        self.layer(len(self.shapes) - 1)
        g = torch.Generator()
        g.set_state(self.states[-1])
        return g


def _normal(t: torch.Tensor | None, g: torch.Generator, std: float = INIT_STD) -> torch.Tensor | None:
    return None if t is None else torch.randn(t.shape, generator=g, dtype=torch.float32).mul_(std)


def _ones(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else torch.ones(t.shape, dtype=torch.float32)


def _zeros(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else torch.zeros(t.shape, dtype=torch.float32)


def _check_std(std: float) -> float:
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not 0 < std < float("inf"):
        raise ValueError(f"the initialiser scale std must be a positive number; got {std!r}")
    return float(std)


def random_decoder(decoder: Decoder, seed: int = 0, std: float = INIT_STD) -> Decoder:
    """The same architecture, its weights drawn as the configuration's initialiser draws them (module
    docstring): the layers, then the embeddings, the output head (when not tied) and the position
    embeddings, from one generator seeded with ``seed``."""
    std = _check_std(std)
    g = torch.Generator().manual_seed(seed)
    layers = _random_layers(decoder, g, std)
    embed = _normal(decoder.embed, g, std)
    tied = decoder.head is decoder.embed or (decoder.head.shape == decoder.embed.shape and torch.equal(decoder.head, decoder.embed))
    return dataclasses.replace(
        decoder,
        name=f"{decoder.name} (random weights, seed {seed})",
        embed=embed,
        layers=layers,
        norm=_ones(decoder.norm),
        head=embed if tied else _normal(decoder.head, g, std),
        norm_bias=_zeros(decoder.norm_bias),
        pos_embed=_normal(decoder.pos_embed, g, std),
    )


def token_row(seed: int, token: int, d: int, std: float = INIT_STD) -> torch.Tensor:
    """Token ``token``'s embedding row in the random model of ``seed`` drawn on tokens
    (:func:`random_decoder_on`): its own stream, NumPy's SeedSequence of the pair (torch's generator keeps
    only 32 bits of a seed), so a row does not depend on which other tokens are drawn."""
    row = np.random.default_rng([seed, token]).standard_normal(d, dtype=np.float32)
    return torch.from_numpy(row).mul_(std)


def random_decoder_on(decoder: Decoder, seed: int, tokens: list[int], std: float = INIT_STD) -> tuple[Decoder, Callable[[list[int]], list[int]]]:
    """A random-weight model (:func:`random_decoder`'s layers of ``seed``, drawn one at a time when a forward
    asks for them: :class:`_LazyDraws`) whose vocabulary is ``tokens`` alone, and the map from a prompt of those
    tokens to the model's ids.

    Row r of the model's embeddings is :func:`token_row` of the r-th smallest token. A forward without
    logits reads only its prompt's rows, so on the mapped prompts this is the model with every row drawn,
    at a fraction of the cost (Gemma 3's 262,144 x 640 table is most of its weights, and a 670 MB table of
    zeros costs more than the forwards it serves). The model has no tokenizer (its ids are not the
    tokenizer's) and no logits head of the full vocabulary; the map raises ValueError on a token outside
    ``tokens``."""
    vocab, d = decoder.embed.shape
    rows = sorted(set(int(t) for t in tokens))
    if not rows:
        raise ValueError("random_decoder_on: no tokens to draw")
    bad = [t for t in rows if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"random_decoder_on: token {bad[0]} is not in 0..{vocab - 1}")
    std = _check_std(std)
    index = {t: r for r, t in enumerate(rows)}
    draws = _LazyDraws(decoder, torch.Generator().manual_seed(seed), std)
    embed = torch.stack([token_row(seed, t, d, std) for t in rows])
    model = dataclasses.replace(
        decoder,
        name=f"{decoder.name} (random weights, seed {seed}, {len(rows)} tokens)",
        embed=embed,
        layers=LazyLayers(len(draws.shapes), draws.layer, dtype=None, checked=True),  # the layers drawn when asked for
        norm=_ones(decoder.norm),
        head=embed,
        norm_bias=_zeros(decoder.norm_bias),
        pos_embed=None if decoder.pos_embed is None else _normal(decoder.pos_embed, draws.after(), std),
        tokenizer=None,
        bos_id=index.get(decoder.bos_id) if decoder.bos_id is not None else None,
    )

    def ids(prompt: list[int]) -> list[int]:
        if getattr(prompt, "ndim", 1) != 1:
            raise ValueError(f"random_decoder_on: a prompt is one sequence of token ids, got shape {tuple(prompt.shape)}")
        tokens = [_token_id(t) for t in prompt]  # also a tensor's or an array's elements
        missing = [t for t in tokens if t not in index]
        if missing:
            raise ValueError(f"random_decoder_on: token {missing[0]} was not drawn (the model holds {len(rows)} tokens' rows)")
        return [index[t] for t in tokens]

    return model, ids


def _token_id(t) -> int:
    """``t`` as an int, if it is one (a Python, NumPy or 0-d tensor integer, or a float that is a whole
    number); ValueError otherwise, so that 42.7 is never read as token 42."""
    try:
        i = int(t)
        whole = i == t
    except (TypeError, ValueError, OverflowError, RuntimeError):
        whole = False
    if not whole:
        shown = repr(t) if isinstance(t, str) else str(t.item() if hasattr(t, "item") else t)
        raise ValueError(f"random_decoder_on: token id {shown} is not an integer")
    return i


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


LAYER_CONVENTION = (
    "Blocks are numbered from 0 (as --twin-layers and --layer take them); hidden-state measures are read after a block "
    "(row l of the per-layer table is the residual stream after block l - 1, row 0 the embeddings) and attention measures "
    "in a block (row l holds block l - 1's attention, the block that wrote row l's state)."
)


def where(rows: list[int], unit: str = "layer") -> str:
    """Per-layer table rows named by the convention of :data:`LAYER_CONVENTION`: ``unit="hidden"``: "at the
    embeddings and after blocks 2-4"; ``"attention"``: "in blocks 1-3" (row l is block l - 1); ``"layer"``:
    "at layers ..." (the rows themselves, for callers without blocks)."""
    rows = sorted(int(r) for r in rows)
    if unit == "layer":
        return f"at layers {_ranges(rows)}"
    if unit == "attention":
        if any(r < 1 for r in rows):
            raise ValueError(f"where: row 0 holds no attention; got rows {rows}")
        return f"in block{'s' * (len(rows) > 1)} {_ranges([r - 1 for r in rows])}"
    if unit != "hidden":
        raise ValueError(f"where: unit {unit!r} is not 'layer', 'hidden' or 'attention'")
    after = [r - 1 for r in rows if r >= 1]
    parts = (["at the embeddings"] if 0 in rows else []) + ([f"after block{'s' * (len(after) > 1)} {_ranges(after)}"] if after else [])
    return " and ".join(parts)


def comparison_sentence(metric: str, null: str, layers: list[int], diff: dict, *, pool: str, unit: str = "layer", draws: str = "") -> str:
    """One sentence: where ``metric`` of the network exceeds / falls below ``null`` (the interval of the
    difference excludes zero) and where it cannot be told apart from it; ``unit`` names the rows by
    :func:`where`; ``draws`` (e.g. "8 shuffles of each prompt") says what else the interval resampled."""
    layers = list(layers)
    undetermined = []
    if "lo_sets" in diff:  # replicates: the decision rule, and the layers it cannot decide
        lo_sets, hi_sets = np.asarray(diff["lo_sets"], dtype=np.float64), np.asarray(diff["hi_sets"], dtype=np.float64)
        words = {k: decide(lo_sets[:, i], hi_sets[:, i]).word for i, k in enumerate(layers) if np.isfinite(lo_sets[:, i]).any()}
        above, below, same = ([k for k, w in words.items() if w == word] for word in ("exceeds", "falls below", "cannot be told"))
        undetermined = [k for k, w in words.items() if w == UNDETERMINED]
    else:
        above = [k for k, lo in zip(layers, diff["lo"], strict=True) if np.isfinite(lo) and lo > 0]
        below = [k for k, hi in zip(layers, diff["hi"], strict=True) if np.isfinite(hi) and hi < 0]
        same = [k for k, lo, hi in zip(layers, diff["lo"], diff["hi"], strict=True) if np.isfinite(lo) and lo <= 0 <= hi]
    parts = []
    if above:
        parts.append(f"exceeds {null} {where(above, unit)}")
    if below:
        parts.append(f"falls below {null} {where(below, unit)}")
    if same:
        parts.append(f"cannot be told from {null} {where(same, unit)}")
    if undetermined:
        parts.append(f"is {UNDETERMINED} against {null} {where(undetermined, unit)}")
    if not parts:
        return ""
    over = f"{pool} and {draws}" if draws else pool
    rule = (
        f"; decided where the margin exceeds {MC_SE_MIN:g} Monte-Carlo standard errors over {len(diff['lo_sets'])} independent replicates"
        if "lo_sets" in diff
        else ""
    )
    return f"The network's {metric} " + "; ".join(parts) + f" ({int(LEVEL * 100)} % bootstrap interval of the difference over {over}{rule})."
