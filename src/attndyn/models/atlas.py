"""The cross-family atlas (issue 49 item 5): one protocol on each decoder, per sublayer, with intervals and nulls.

Contract
--------
* ``sublayer_states(decoder, ids)``: one prompt's residual stream ``(2L + 1, n, d)``: the embeddings, then
  after each block's attention sublayer (row 2l + 1) and after its feed-forward sublayer (row 2l + 2, which is
  :func:`~attndyn.models.decoder.forward`'s ``hidden[l + 1]``). Sublayer s = 2l is block l's attention, 2l + 1
  its feed-forward. Parallel-residual decoders (no state between the sublayers) are refused.
* ``measure(decoder, prompts)``: the record of one model, plain data. Layer-major: each layer is widened once
  (:func:`~attndyn.models.decoder.layer_at`) and every sequence runs through it: the prompts, ``shuffles``
  permutations of each (:func:`~attndyn.models.decoder_nulls.shuffled`, a beginning-of-sequence token kept in
  place) and the prompts under uniform causal attention. Nothing of a sequence is kept but its measures and
  one layer's state.
* The rules, stated before running. Sun et al.'s ratio (arXiv 2402.17762): largest |entry| / median |entry|
  of a state (:func:`~attndyn.models.decoder_geometry.massive_activation`). The *step-up* is
  :func:`~attndyn.models.interventions_massive.step_up`'s rule on the 2L sublayer states in order
  (:data:`STEP_UP_RULE`); the *fall* is the first later sublayer at which more than half of the prompts
  that hold staying entries hold none of them above the threshold; the *plateau* the sublayers between.
  The step-up's interval: the percentile bootstrap of the step-up sublayer over resampled prompts.
* Sinks: block l's *sink token* is the key of most attention mass (:func:`~attndyn.models.decoder_geometry.column_mass`);
  its *spike token* the token of the largest |entry| of the block's input (the state its attention reads);
  the block is *coupled* when the two are one token. A *secondary sink* (arXiv 2512.22213) is a token j >= 1
  with at least :data:`MIN_QUERIES` later queries on which one head's attention, averaged over the queries
  i > j, exceeds the sink threshold eps = 0.3, in a middle block (:func:`middle_blocks`); beside it the cosine
  of the feed-forward output that wrote its state (block l - 1's, at token j) with token 0's state there,
  and the median of the same cosine over the other tokens j >= 1.
* Nulls: shuffled tokens (every measure; intervals by :func:`~attndyn.models.decoder_nulls.draws_summary`
  over prompts and draws) and uniform causal attention (the massive-activation curve). Under uniform causal
  attention the sink rate is 0, the sink token is token 0 and no token >= 1 is a secondary sink, all by
  construction: no comparison with it is made there, and the record says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import torch

from attndyn.models import decoder_geometry as geo
from attndyn.models import decoder_nulls as nulls
from attndyn.models.decoder import Decoder, attention_sublayer, feedforward_sublayer, layer_at
from attndyn.models.executor import checked_prompts, layout
from attndyn.models.interventions_massive import massive_mask, window_end

MIN_QUERIES = 8  # later queries a secondary sink's average needs: a token seen by one or two queries is not a sink
STEP_UP_RULE = (
    "the step-up is the first sublayer s (of the 2L, in order: block l's attention is 2l, its feed-forward 2l + 1) at which "
    "more than half of the prompts hold an entry (token, dimension) above 100 x the median magnitude of the state after s "
    "and after every later sublayer up to S - 1 - floor(S / 4), S = 2L (Sun et al.'s rule of the interventions' massive study, "
    "read per sublayer); the fall is the first later sublayer at which more than half of the prompts that hold such entries "
    "hold none of them above the threshold; the plateau the sublayers between"
)
SECONDARY_RULE = (
    f"a token j >= 1 with at least {MIN_QUERIES} later queries on which one head's attention averaged over the queries i > j "
    f"exceeds eps = {geo.SINK_THRESHOLD}, in a middle block"
)
COUPLING_RULE = "a block is coupled when the token of the largest |entry| of its input is the key of most attention mass (heads and queries averaged)"


def sublayer_name(s: int) -> str:
    """``"block l attention"`` or ``"block l feed-forward"`` for sublayer ``s``."""
    return f"block {s // 2} {'attention' if s % 2 == 0 else 'feed-forward'}"


def middle_blocks(layers: int) -> list[int]:
    """The middle blocks: floor(L / 4) .. L - 1 - floor(L / 4) (the first and last quarter left out)."""
    return list(range(layers // 4, window_end(layers) + 1))


def norm_placement(decoder: Decoder) -> str:
    """``"pre-norm"`` (a norm before each sublayer only), ``"sandwich"`` (before and after each) or ``"post-norm"``."""
    post = decoder.layers[0].post_attn_norm is not None
    if decoder.pre_norm:
        return "sandwich" if post else "pre-norm"
    return "post-norm"


class _Sequences:
    """Token sequences run layer by layer: their states, tables and masks, one layer at a time."""

    def __init__(self, decoder: Decoder, seqs: list[list[int]], dtype: torch.dtype):
        if decoder.parallel_residual:
            raise ValueError(f"{decoder.name}: a parallel-residual decoder has no state between its attention and feed-forward sublayers")
        self.ids = checked_prompts(decoder, seqs, dtype, why="the atlas needs at least 2")
        self.decoder, self.dtype = decoder, dtype
        self.bases, self.tables, self.masks, self.x = layout(decoder, self.ids, dtype)

    def cast(self, t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(dtype=self.dtype)

    def block(self, k: int, layer, i: int, uniform: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sequence i through block k: (state after attention, state after the block, the feed-forward output, P)."""
        x, n = self.x[i], self.ids[i].numel()
        tab = self.tables[n].get(self.bases[k]) if self.tables else None
        out, P = attention_sublayer(self.decoder, k, x, tab, self.masks[n][k], self.cast, uniform=uniform, layer=layer)
        a = x + out
        f = feedforward_sublayer(self.decoder, k, a, self.cast, layer=layer)
        self.x[i] = a + f
        return a, self.x[i], f, P


def sublayer_states(decoder: Decoder, ids: list[int], *, dtype: torch.dtype = torch.float32, uniform: bool = False) -> torch.Tensor:
    """One prompt's residual stream after every sublayer, ``(2L + 1, n, d)`` (module docstring)."""
    seq = _Sequences(decoder, [ids], dtype)
    rows = [seq.x[0]]
    for k in range(len(decoder.layers)):
        a, x, _, _ = seq.block(k, layer_at(decoder, k, dtype), 0, uniform)
        rows += [a, x]
    return torch.stack(rows)


def stays(masks: list[set]) -> list[set]:
    """Per sublayer s up to the window's end, the entries massive after s and after every later sublayer up
    to it (``masks``: per sublayer the set of massive (token, dim) entries, S of them)."""
    end = window_end(len(masks))
    out, run = [set()] * (end + 1), None
    for s in range(end, -1, -1):
        run = set(masks[s]) if run is None else run & masks[s]
        out[s] = run
    return out


def step_up_of(has: np.ndarray) -> int | None:
    """The first column at which more than half of the rows of ``has`` ``(prompts, sublayers)`` are True."""
    over = 2 * has.sum(0) > has.shape[0]
    return int(np.argmax(over)) if over.any() else None


def fall_of(masks: list[list[set]], entries: list[set], start: int) -> int | None:
    """The first sublayer after ``start`` at which more than half of the prompts holding ``entries`` hold none
    of them massive; None when it does not come before the last sublayer."""
    holders = [p for p, e in enumerate(entries) if e]
    for s in range(start + 1, len(masks[0])):
        gone = sum(not (entries[p] & masks[p][s]) for p in holders)
        if 2 * gone > len(holders):
            return s
    return None


def secondary_sinks(P: np.ndarray) -> list[tuple[int, float]]:
    """The tokens j >= 1 with at least MIN_QUERIES later queries on which one head's attention, averaged over the
    queries i > j, exceeds eps; each with that largest average."""
    n = P.shape[-1]
    out = []
    for j in range(1, n - MIN_QUERIES):
        share = float(P[:, j + 1 :, j].mean(1).max())
        if share > geo.SINK_THRESHOLD:
            out.append((j, share))
    return out


def uniform_secondary_max(n: int) -> float:
    """The largest average over the queries i > j (j >= 1, at least MIN_QUERIES of them) of uniform causal
    attention on token j: (1/(n-1-j)) sum_{i>j} 1/(i+1), largest at j = 1."""
    if n - 1 - MIN_QUERIES < 1:
        return 0.0
    return max(float(np.mean([1.0 / (i + 1) for i in range(j + 1, n)])) for j in range(1, n - MIN_QUERIES))


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    den = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / den) if den > 0 else float("nan")


def _sequence_measures(L: int, middle: list[int]) -> dict:
    return {"ratio": np.full(2 * L, np.nan), "token": np.zeros(2 * L, int), "dim": np.zeros(2 * L, int), "masks": [set() for _ in range(2 * L)],
            "sink_rate": np.full(L, np.nan), "sink_token": np.zeros(L, int), "spike_token": np.zeros(L, int),
            "secondary": [[] for _ in range(L)], "ordinary_cos": np.full(L, np.nan), "middle": middle}  # fmt: skip


def _measure_block(m: dict, k: int, before: np.ndarray, a: np.ndarray, x: np.ndarray, P: np.ndarray, prev_ffn: np.ndarray | None) -> None:
    """Block k's measures of one sequence: ``before`` its input, ``a`` after attention, ``x`` after the block;
    ``prev_ffn`` block k - 1's feed-forward output (None at block 0)."""
    for s, h in ((2 * k, a), (2 * k + 1, x)):
        m["ratio"][s], m["token"][s], m["dim"][s] = geo.massive_activation(h)
        m["masks"][s] = {(int(t), int(j)) for t, j in torch.nonzero(massive_mask(torch.from_numpy(h)))}
    m["sink_rate"][k] = geo.attention_measures(P)["sink_rate"]
    m["sink_token"][k] = int(np.argmax(geo.column_mass(P)))
    m["spike_token"][k] = geo.massive_activation(before)[1]
    if k not in m["middle"] or prev_ffn is None:
        return
    sinks = secondary_sinks(P)
    m["secondary"][k] = [(j, share, _cos(prev_ffn[j], before[0])) for j, share in sinks]
    others = [_cos(prev_ffn[j], before[0]) for j in range(1, len(before)) if j not in {s for s, _ in sinks}]
    m["ordinary_cos"][k] = float(np.median(others)) if others else float("nan")


def run_sequences(
    decoder: Decoder,
    seqs: list[list[int]],
    uniform: list[bool],
    *,
    dtype: torch.dtype = torch.float32,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """Every sequence through every block, layer-major (module docstring); per sequence its measures:
    ``ratio``/``token``/``dim`` ``(2L,)`` per sublayer, ``masks`` its massive entries per sublayer, and per
    block ``sink_rate``, ``sink_token``, ``spike_token``, ``secondary`` (middle blocks: (token, share,
    cosine)) and ``ordinary_cos``."""
    seq = _Sequences(decoder, seqs, dtype)
    L = len(decoder.layers)
    middle = middle_blocks(L)
    out = [_sequence_measures(L, middle) for _ in seqs]
    prev: list[np.ndarray | None] = [None] * len(seqs)
    tell = progress or (lambda i, n: None)
    tell(0, L)
    for k in range(L):
        layer = layer_at(decoder, k, dtype)
        for i in range(len(seqs)):
            before = seq.x[i].double().numpy()
            a, x, f, P = seq.block(k, layer, i, uniform[i])
            if not bool(torch.isfinite(x).all()):
                raise ValueError(f"{decoder.name}: the residual stream after block {k} is not finite in {dtype}")
            _measure_block(out[i], k, before, a.double().numpy(), x.double().numpy(), P.double().numpy(), prev[i])
            prev[i] = f.double().numpy()
        del layer
        tell(k + 1, L)
    return out


def _interval(values: np.ndarray, seed: int = 0) -> tuple[float, list[float]]:
    """The mean over prompts (axis 0) and its bootstrap interval, NaN-aware as the page's intervals are."""
    v = np.asarray(values, dtype=np.float64)
    lo, hi = nulls.bootstrap_interval(v, seed=seed)
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(v, axis=0) if np.isfinite(v).any() else np.full(v.shape[1:], np.nan)
    return mean, [lo, hi]


def _null(values: np.ndarray) -> dict:
    """(prompts, draws, ...) -> mean and two-level interval."""
    s = nulls.draws_summary(values)
    return {"mean": s["mean"], "lo": s["lo"], "hi": s["hi"]}


def _massive(plain: list[dict], texts: list[list[str]] | None, S: int) -> dict:
    """The step-up, fall, plateau, dims and tokens of the prompts' measures (module docstring)."""
    st = [stays(m["masks"]) for m in plain]
    has = np.array([[bool(e) for e in s] for s in st])
    k = step_up_of(has)
    first = next((s for s in range(S) if any(m["masks"][s] for m in plain)), None)
    out: dict = {"rule": STEP_UP_RULE, "window_end": window_end(S), "first_massive": first, "step_up": k}
    if k is None:
        return out
    rng = np.random.default_rng(0)
    boots = [step_up_of(has[rng.integers(0, len(has), len(has))]) for _ in range(nulls.BOOTSTRAP)]
    boots = np.array([np.nan if b is None else b for b in boots], dtype=float)
    out["step_up_interval"] = [float(np.nanquantile(boots, 0.025)), float(np.nanquantile(boots, 0.975))]
    out["step_up_undefined_share"] = float(np.isnan(boots).mean())
    out["step_up_per_prompt"] = [step_up_of(h[None, :]) for h in has]
    entries = [s[k] for s in st]
    fall = fall_of([m["masks"] for m in plain], entries, k)
    out["fall"] = fall
    stop = S if fall is None else fall
    ratios = np.array([m["ratio"][k:stop] for m in plain])
    mean, ci = _interval(ratios.mean(1))
    out["plateau"] = {"first": k, "last": stop - 1, "ratio": float(mean), "ratio_ci": [float(ci[0]), float(ci[1])]}
    dims = Counter(j for e in entries for _, j in e)
    tokens = Counter(t for e in entries for t, _ in e)
    out["dims"] = [{"dim": j, "prompts": sum(any(jj == j for _, jj in e) for e in entries)} for j, _ in dims.most_common()]
    words = Counter()  # each (position 0, or a later token's text) counted once a prompt
    for p, e in enumerate(entries):
        words.update({(0, None) if t == 0 else (None, texts[p][t] if texts else None) for t, _ in e})
    out["tokens"] = [{"position": t, "text": w, "prompts": c} for (t, w), c in words.most_common()]
    out["positions"] = sorted(tokens)
    return out


def _mode(values) -> int:
    return Counter(int(v) for v in values).most_common(1)[0][0]


def _fraction(rows: list[bool]) -> float:
    return float(np.mean(rows)) if rows else float("nan")


def _coupling(ms: list[dict]) -> np.ndarray:
    """Per sequence, the share of middle blocks that are coupled."""
    return np.array([_fraction([m["spike_token"][k] == m["sink_token"][k] for k in m["middle"]]) for m in ms])


def _secondary(ms: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence, the mean count of secondary sinks over the middle blocks and the median cosine of their writers."""
    count = np.array([np.mean([len(m["secondary"][k]) for k in m["middle"]]) for m in ms])
    cos = np.array([np.median(c) if (c := [s[2] for k in m["middle"] for s in m["secondary"][k]]) else np.nan for m in ms])
    return count, cos


def measure(
    decoder: Decoder,
    prompts: list[list[int]],
    *,
    dtype: torch.dtype = torch.float32,
    shuffles: int = nulls.SHUFFLE_DRAWS,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """One model's atlas record (module docstring): per sublayer Sun's ratio with its interval and nulls, the
    step-up, plateau and fall, per block the sink rate, the coupling of spikes and sinks and the secondary
    sinks, each beside the shuffled-token null; uniform causal attention where it is not fixed by construction."""
    if shuffles < 1:
        raise ValueError(f"shuffles {shuffles} is below 1")
    if not prompts:
        raise ValueError("no prompts to run")
    L, P = len(decoder.layers), len(prompts)
    S = 2 * L
    keep = 1 if decoder.add_bos and decoder.bos_id is not None else 0
    rng = np.random.default_rng(seed)
    mixed = [[nulls.shuffled(p, rng, keep) for p in prompts] for _ in range(shuffles)]
    seqs = list(prompts) + [p for draw in mixed for p in draw] + list(prompts)
    uniform = [False] * (P * (1 + shuffles)) + [True] * P
    ms = run_sequences(decoder, seqs, uniform, dtype=dtype, progress=progress)
    plain, shuf, unif = ms[:P], [ms[P * (1 + d) : P * (2 + d)] for d in range(shuffles)], ms[P * (1 + shuffles) :]
    texts = None
    if decoder.tokenizer is not None:
        texts = [[decoder.decode([t]) for t in p] for p in prompts]

    def by_draw(key: str) -> np.ndarray:  # (prompts, draws, ...)
        return np.stack([np.stack([m[key] for m in draw]) for draw in shuf], axis=1)

    ratio, ratio_ci = _interval(np.array([m["ratio"] for m in plain]))
    uni, uni_ci = _interval(np.array([m["ratio"] for m in unif]))
    sh = _null(by_draw("ratio"))
    sublayers = [
        {"sublayer": s, "block": s // 2, "kind": "attention" if s % 2 == 0 else "feed-forward", "ratio": float(ratio[s]),
         "ratio_ci": [float(ratio_ci[0][s]), float(ratio_ci[1][s])],
         "token": _mode(m["token"][s] for m in plain), "dim": _mode(m["dim"][s] for m in plain),
         "shuffled": float(sh["mean"][s]), "shuffled_ci": [float(sh["lo"][s]), float(sh["hi"][s])],
         "uniform": float(uni[s]), "uniform_ci": [float(uni_ci[0][s]), float(uni_ci[1][s])]}
        for s in range(S)
    ]  # fmt: skip
    rate, rate_ci = _interval(np.array([m["sink_rate"] for m in plain]))
    coupled_blocks = np.array([[float(m["spike_token"][k] == m["sink_token"][k]) for k in range(L)] for m in plain])
    cb, cb_ci = _interval(coupled_blocks)
    shc = _null(np.stack([np.stack([[float(m["spike_token"][k] == m["sink_token"][k]) for k in range(L)] for m in d]) for d in shuf], axis=1))
    count_blocks = np.array([[len(m["secondary"][k]) for k in range(L)] for m in plain], dtype=float)
    cnt, cnt_ci = _interval(count_blocks)
    blocks = [
        {"block": k, "sink_rate": float(rate[k]), "sink_rate_ci": [float(rate_ci[0][k]), float(rate_ci[1][k])],
         "coupled": float(cb[k]), "coupled_ci": [float(cb_ci[0][k]), float(cb_ci[1][k])],
         "coupled_shuffled": float(shc["mean"][k]), "coupled_shuffled_ci": [float(shc["lo"][k]), float(shc["hi"][k])],
         "sink_token": _mode(m["sink_token"][k] for m in plain),
         "spike_token": _mode(m["spike_token"][k] for m in plain),
         "secondary": float(cnt[k]), "secondary_ci": [float(cnt_ci[0][k]), float(cnt_ci[1][k])], "middle": k in plain[0]["middle"]}
        for k in range(L)
    ]  # fmt: skip
    c, c_ci = _interval(_coupling(plain))
    c_sh = _null(np.stack([_coupling(d) for d in shuf], axis=1))
    on_first = _interval(np.array([_fraction([m["spike_token"][k] == 0 for k in m["middle"]]) for m in unif]))
    n_sec, cos = _secondary(plain)
    sec_n, sec_n_ci = _interval(n_sec)
    sec_cos, sec_cos_ci = _interval(cos[:, None]) if np.isfinite(cos).any() else (np.array([np.nan]), [[np.nan], [np.nan]])
    ordinary = np.array(
        [np.nanmedian(m["ordinary_cos"][m["middle"]]) if np.isfinite(m["ordinary_cos"][m["middle"]]).any() else np.nan for m in plain]
    )
    ord_cos, ord_ci = _interval(ordinary[:, None]) if np.isfinite(ordinary).any() else (np.array([np.nan]), [[np.nan], [np.nan]])
    sec_sh = _null(np.stack([_secondary(d)[0] for d in shuf], axis=1))
    sec_words = Counter()
    for p, m in enumerate(plain):  # each text counted once a prompt
        sec_words.update({texts[p][s[0]] if texts else f"position {s[0]}" for k in m["middle"] for s in m["secondary"][k]})
    lengths = [len(p) for p in prompts]
    middle = plain[0]["middle"]
    return {
        "model_name": decoder.name,
        "arch": decoder.arch,
        "norm_placement": norm_placement(decoder),
        "qk_norm": decoder.layers[0].q_norm is not None,
        "layers": L,
        "prompts": P,
        "lengths": lengths,
        "dtype": str(dtype).removeprefix("torch."),
        "shuffles": shuffles,
        "bos_kept": bool(keep),
        "sublayers": sublayers,
        "massive": _massive(plain, texts, S),
        "massive_uniform": _massive(unif, texts, S),
        "massive_shuffled": [_massive(d, None, S)["step_up"] for d in shuf],
        "blocks": blocks,
        "middle": [middle[0], middle[-1]] if middle else None,
        "coupling": {
            "rule": COUPLING_RULE,
            "rate": float(c),
            "ci": [float(c_ci[0]), float(c_ci[1])],
            "shuffled": float(c_sh["mean"]),
            "shuffled_ci": [float(c_sh["lo"]), float(c_sh["hi"])],
            "uniform_spike_on_first": float(on_first[0]),
            "uniform_spike_on_first_ci": [float(on_first[1][0]), float(on_first[1][1])],
        },
        "secondary": {
            "rule": SECONDARY_RULE,
            "per_block": float(sec_n),
            "per_block_ci": [float(sec_n_ci[0]), float(sec_n_ci[1])],
            "prompts_with": int(sum(n > 0 for n in n_sec)),
            "shuffled": float(sec_sh["mean"]),
            "shuffled_ci": [float(sec_sh["lo"]), float(sec_sh["hi"])],
            "cosine": float(sec_cos[0]),
            "cosine_ci": [float(sec_cos_ci[0][0]), float(sec_cos_ci[1][0])],
            "ordinary_cosine": float(ord_cos[0]),
            "ordinary_cosine_ci": [float(ord_ci[0][0]), float(ord_ci[1][0])],
            "tokens": [{"text": w, "prompts": c} for w, c in sec_words.most_common(8)],
        },
        "uniform_fixed": {
            "sink_rate": nulls.uniform_sink_fixed(lengths, geo.SINK_THRESHOLD),
            "sink_token": "Under uniform causal attention the sink token is token 0 by construction (column j receives "
            "(1/n) sum_{i >= j} 1/(i + 1), which decreases in j): the coupling there only says whether the spike sits on token 0.",
            "secondary": (
                f"Under uniform causal attention no token j >= 1 is a secondary sink by construction: its largest average over the "
                f"later queries is {max(uniform_secondary_max(n) for n in lengths):.3f} < eps = {geo.SINK_THRESHOLD} at these lengths."
                if max(uniform_secondary_max(n) for n in lengths) < geo.SINK_THRESHOLD
                else ""
            ),
        },
    }


# --- the findings: sentences written from the record -----------------------------------------------------


def _finite(v: float | None) -> bool:
    return v is not None and bool(np.isfinite(v))  # atlas.json holds a NaN as null


def _ci(v: float | None, ci: list, fmt: str = ".3g") -> str:
    if not _finite(v):
        return "-"
    return f"{v:{fmt}} [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _where(s: int | None) -> str:
    return "none" if s is None else f"{sublayer_name(s)} (sublayer {s})"


def _token_words(tokens: list[dict]) -> str:
    words = [
        ("token 0" if t["position"] == 0 else repr(t["text"]) if t["text"] is not None else "a later token") + f" in {t['prompts']}"
        for t in tokens[:4]
    ]
    return ", ".join(words)


def massive_sentence(rec: dict) -> str:
    """The life cycle of the massive activation, per sublayer, beside its nulls."""
    m, name = rec["massive"], rec["model"]
    if m["step_up"] is None:
        return f"In {name} no entry rises above 100 x the median magnitude and stays there in more than half of the prompts ({m['rule']})."
    lo, hi = (int(round(v)) for v in m["step_up_interval"])
    spread = f"sublayers {lo}-{hi}" if lo != hi else f"sublayer {lo} in every resample"
    before = (
        f"; entries above the threshold occur from {_where(m['first_massive'])} on but do not stay"
        if m["first_massive"] is not None and m["first_massive"] < m["step_up"]
        else ""
    )
    p = m["plateau"]
    fall = f"falls at {_where(m['fall'])}" if m["fall"] is not None else "does not fall before the last sublayer"
    dims = ", ".join(f"{d['dim']} ({d['prompts']} prompts)" for d in m["dims"][:4])
    shuffled = [s for s in rec["massive_shuffled"]]
    sh = ", ".join(str(s) for s in sorted(set(shuffled), key=lambda v: (v is None, v)))
    u = rec["massive_uniform"]
    uni = _where(u["step_up"]) + (f", at {_token_words(u['tokens'])} prompts" if u["step_up"] is not None else "")
    ratio = [r["ratio"] for r in rec["sublayers"]]
    k = m["step_up"]
    jump = f"the mean ratio goes from {ratio[k - 1]:.3g} to {ratio[k]:.3g} there" if k > 0 else f"the mean ratio is {ratio[k]:.3g} there"
    start, end = ratio[p["first"]], ratio[p["last"]]
    drift = f"{start / end:.3g} times lower" if end < start else f"{end / start:.3g} times higher"
    return (
        f"In {name} the massive activation steps up at {_where(k)} ({jump}; 95 % bootstrap interval of the step-up over prompts: "
        f"{spread}){before}; "
        f"it is held by dimension{'s' * (len(m['dims']) > 1)} {dims}, at {_token_words(m['tokens'])} prompts; its entries stay "
        f"to {_where(p['last'])}, where the mean ratio is {end:.3g}, {drift} than at the step-up ({start:.3g}; over the span "
        f"{_ci(p['ratio'], p['ratio_ci'])} on average: not a flat plateau when these differ), and it {fall}. With the tokens shuffled "
        f"({rec['shuffles']} draws) the step-up sublayer is {sh}; under uniform causal attention it is {uni}."
    )


def sink_sentence(rec: dict) -> str:
    """Spikes and sinks in the middle blocks, beside the shuffled-token null; uniform attention's fixed values said as such."""
    c, name = rec["coupling"], rec["model"]
    if rec["middle"] is None:
        return f"{name} has too few blocks for middle blocks."
    a, b = rec["middle"]
    mid = [r for r in rec["blocks"] if r["middle"]]
    rates = [r["sink_rate"] for r in mid if _finite(r["sink_rate"])]
    rate = f"the sink rate averages {np.mean(rates):.3g} there" if rates else f"the sink rate is undefined (prompts shorter than T = {geo.SINK_T})"
    sinks = Counter(r["sink_token"] for r in mid).most_common(1)[0][0]
    compare = "above" if c["ci"][0] > c["shuffled_ci"][1] else "below" if c["ci"][1] < c["shuffled_ci"][0] else "not distinguishable from"
    return (
        f"In {name}'s middle blocks ({a}-{b}) the token holding the spike is the sink token in {_ci(c['rate'], c['ci'], '.2f')} of the blocks "
        f"(shuffled tokens: {_ci(c['shuffled'], c['shuffled_ci'], '.2f')}, so {compare} the null); the usual sink token is "
        f"token {sinks} and {rate}. {rec['uniform_fixed']['sink_token']} (There the spike sits on token 0 in "
        f"{_ci(c['uniform_spike_on_first'], c['uniform_spike_on_first_ci'], '.2f')} of the middle blocks.) {rec['uniform_fixed']['sink_rate']}"
    ).strip()


def secondary_sentence(rec: dict) -> str:
    """Secondary sinks and the cosine of the feed-forward output that wrote them to token 0's state."""
    s, name = rec["secondary"], rec["model"]
    if s["prompts_with"] == 0:
        head = f"{name} has no secondary sink ({s['rule']}) in any prompt"
        return f"{head} (shuffled tokens: {_ci(s['shuffled'], s['shuffled_ci'])} per middle block). {rec['uniform_fixed']['secondary']}".strip()
    words = ", ".join(f"{t['text']!r} in {t['prompts']}" for t in s["tokens"][:5])
    return (
        f"{name} has {_ci(s['per_block'], s['per_block_ci'])} secondary sinks per middle block ({s['rule']}), in {s['prompts_with']} of "
        f"{rec['prompts']} prompts (shuffled tokens: {_ci(s['shuffled'], s['shuffled_ci'])}); mostly the tokens {words} prompts. The "
        f"feed-forward output that wrote them has a median cosine of {_ci(s['cosine'], s['cosine_ci'])} with token 0's state, the "
        f"other tokens' {_ci(s['ordinary_cosine'], s['ordinary_cosine_ci'])}. {rec['uniform_fixed']['secondary']}"
    ).strip()


def _coupling_words(r: dict) -> str:
    s, c = r["massive"]["step_up"], r["coupling"]
    kind = "no" if s is None else "an attention" if s % 2 == 0 else "a feed-forward"
    null = "shuffled_ci" in c and (c["ci"][0] > c["shuffled_ci"][1] or c["ci"][1] < c["shuffled_ci"][0])
    against = "" if "shuffled_ci" not in c else f", {'apart from' if null else 'not distinguishable from'} its shuffled-token null"
    return f"{r['model']} {_ci(c['rate'], c['ci'], '.2f')} (step-up in {kind} sublayer{against})"


PLACEMENT_WORDS = {"pre-norm": "pre-norm", "sandwich": "norms around each sublayer (sandwich)", "post-norm": "post-norm"}


def placement_sentence(records: list[dict]) -> str:
    """Whether the coupling of spikes and sinks differs with norm placement, written from the records; with a
    single sandwich-norm model (QK-norm too) the causes cannot be separated, and the sentence says so."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r["norm_placement"], []).append(r)
    each = "; ".join(f"{PLACEMENT_WORDS[g]}: " + ", ".join(_coupling_words(r) for r in rs) for g, rs in groups.items())
    head = f"Share of middle blocks whose spike token is the sink token, by norm placement: {each}."
    if "pre-norm" not in groups or "sandwich" not in groups:
        return head + " The models measured share one norm placement, so the atlas cannot say whether the coupling differs with it."
    pre, sand = groups["pre-norm"], groups["sandwich"]
    pairs = [(p, s) for p in pre for s in sand]
    apart = [p["coupling"]["ci"][1] < s["coupling"]["ci"][0] or s["coupling"]["ci"][1] < p["coupling"]["ci"][0] for p, s in pairs]
    if all(apart):
        higher = "sandwich-norm" if all(s["coupling"]["rate"] > p["coupling"]["rate"] for p, s in pairs) else "pre-norm"
        verdict = (
            "The coupling differs with norm placement in these models: every pre-norm model's interval lies apart from every "
            f"sandwich-norm model's, higher in the {higher} model{'s' * (len(sand if higher != 'pre-norm' else pre) > 1)}."
        )
    elif not any(apart):
        verdict = (
            "The coupling does not differ with norm placement in these models: every pre-norm model's interval overlaps every sandwich-norm model's."
        )
    else:
        verdict = "The coupling differs between some pre-norm and sandwich-norm models and not others: no difference by norm placement can be read."
    others = "also normalises queries and keys (QK-norm) and " if all(s["qk_norm"] for s in sand) else ""
    caveat = (
        f"With {'one sandwich-norm model' if len(sand) == 1 else f'{len(sand)} sandwich-norm models'}, which {others}differ{'s' * (len(sand) == 1)} "
        "from the others in width, depth, data and training, the atlas cannot separate norm placement from these causes "
        "(arXiv 2603.05498 argues that norm placement should matter)."
    )
    return f"{head} {verdict} {caveat}"


def findings(rec: dict) -> list[str]:
    """The sentences of one model's row."""
    return [massive_sentence(rec), sink_sentence(rec), secondary_sentence(rec)]
