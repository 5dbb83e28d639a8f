"""Token geometry across the depth of a trained decoder, its heads' spectra, and a particle twin.

Contract
--------
* ``layer_values(forwards)``: per prompt and layer (0 = the embeddings): the mean pairwise cosine of
  the tokens (raw; without the first token; after per-dimension standardisation with the statistics of
  a named pool of prompts, since one to three "rogue" dimensions dominate raw cosines in trained
  models, and the value depends on the pool), the cluster count of the unit tokens
  (:func:`attndyn.analysis.clusters.stable_cluster_count`) with its stability in decades, the effective
  and stable rank, Sun et al.'s massive-activation ratio (arXiv 2402.17762: the largest entry magnitude
  over the median entry magnitude, with its token and dimension), the norm ratio ``|h_0| / median_i |h_i|``,
  the median norm; and for each layer's attention: Gu et al.'s sink rate (arXiv 2410.10781 §3: the share of
  heads whose attention on token 0, averaged over the first T = 64 queries, exceeds eps = 0.3; NaN for a
  prompt shorter than 64; ``sink_1`` averages it over the layers, their Sink_1^eps at their T), the same
  rate over all queries (``sink_rate_all_queries``, not Gu et al.'s T), the mean row entropy, the median Boolean distance
  ``max_ij min(P_ij, 1 - P_ij)`` (Theorem 2.1 of arXiv 2305.05465), and the share of heads whose nearest
  Boolean matrix is ``1 e_0^T`` in at least 90 % of their rows (the first token as the only leader).
  ``layer_table`` gives their means over prompts with a bootstrap interval (``KEY_ci``) and the residual
  growth ``median |h^l| / median |h^(l-1)|``.
* ``head_table(decoder)``: per layer and head, the spectrum of the value-output map
  ``W_O,h W_V,h`` and the norm of the position-free kernel ``Q_h^T K_h`` (RoPE left out: it rotates
  pairs of coordinates by position and is not a property of the weights alone) as an effective
  beta, and for chosen layers the regime of the paper that applies to the head alone
  (:func:`attndyn.analysis.spectra.regime`). Beside it, the kernel with RoPE averaged over the
  relative offsets 0..N-1 of a key behind its query (:func:`rope_averaged_core`): the head's mean
  bilinear form ``Q^T Rbar K`` over a window of N positions, its norm as an effective beta, and
  for both kernels the share of the symmetric part's spectrum that is positive (1 for the PSD
  kernels of Theorem 3.1; Gemma's per-head query/key norm weights are folded into Q and K).
* ``twin(decoder, forward, layer)``: the particle model with layer ``layer``'s own attention
  (pre-norm as the sphere's Pre-LN scheme with RMSNorm's weights folded into Q, K, V; causal;
  every head, with its key/value group; no RoPE, no feed-forward), started from the real hidden
  state at that layer: one residual step (dt = 1) and the continuous flow over unit time, each
  compared with the real next layer by the mean of ``1 - cos`` over tokens, beside the identity
  (nothing moves) and the best multiple of the layer's beta for the one-step twin; and the leaders
  (the three columns that receive the most attention, :func:`column_mass`) that the twin's flow
  predicts after t = 8 against the real layer's, as their overlap and whether the top one agrees,
  and the cluster count of the twin's tokens then against the network's at the next and last layers;
  beside them the leaders of uniform causal attention (the null from the mask alone), and
  ``sublayer_shares``: the attention and feed-forward shares of the layer's change by both ablation
  orders and their Shapley average. The twin's one step is the attention sublayer without RoPE: its
  table is a sublayer ablation; only the flow tests the particle model.
  Beside the particle twin, ``layer_twins`` runs the layer's own maps with RoPE on and/or the
  feed-forward block on (one residual step and the flow over unit time): with both on, the step is the
  real layer (its discrepancy is rounding), which separates what the attention alone explains from what
  the positions and the feed-forward block add.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch

from attndyn.analysis.clusters import reading_of, stable_cluster_count, tally
from attndyn.core.dynamics import Model, attention_matrix, prepare, vector_field, velocity
from attndyn.core.simulation import simulate
from attndyn.core.solvers import RK4, FixedStep, integrate
from attndyn.core.weights import Weights
from attndyn.models.decoder import Decoder, Forward, attention_sublayer, feedforward_sublayer, head_weights, layer_masks, rope_tables
from attndyn.models.decoder_nulls import uniform_causal
from attndyn.models.token_geometry import effective_rank, mean_cosine

SINK_THRESHOLD = 0.3  # Gu et al.: mean attention on the first token above this marks a sink head
SINK_T = 64  # Gu et al.'s sequence length T: their Sink_k^eps reads sequences of 64 tokens (arXiv 2410.10781, §3)


def standardized_cosine(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> float:
    """Mean pairwise cosine after per-dimension standardisation with corpus statistics (the mean and
    standard deviation of each dimension over every prompt's tokens at that layer; standardising
    with one prompt's own statistics would centre its tokens and force the answer to ~ -1/(n-1))."""
    return mean_cosine((x - mean) / np.maximum(std, 1e-12))


def stable_rank(x: np.ndarray) -> float:
    s = np.linalg.svd(x, compute_uv=False)
    return float((s**2).sum() / s[0] ** 2)


SOLE_LEADER_ROWS = 0.9  # a head's only leader is token 0 when at least this share of its rows put > 0.5 on it


def attention_measures(P: np.ndarray, *, T: int = SINK_T) -> dict:
    """Measures of one layer's attention ``(H, n, n)`` (causal rows).

    ``sink_rate``: Gu et al.'s per-layer rate (arXiv 2410.10781, §3) at their sequence length T = 64: the
    share of heads whose attention on the first token, averaged over the first T queries, exceeds eps = 0.3
    (the causal rows 0..T-1 of a longer prompt are exactly those of its first T tokens); NaN when n < T
    (the definition needs T tokens). ``sink_rate_all_queries``: the same share averaged over all n queries (not
    Gu et al.'s T). ``first_token_sole_leader``: the share of heads whose nearest Boolean matrix is
    ``1 e_0^T`` in at least ``SOLE_LEADER_ROWS`` of their rows (an all-rows criterion is broken by one row)."""
    on_first = P[:, :, 0].mean(1)
    at_T = P[:, :T, 0].mean(1) if P.shape[1] >= T else None
    rows = np.clip(P, 1e-300, 1.0)
    entropy = float(-(P * np.log(rows)).sum(-1).mean())
    boolean = np.minimum(P, 1 - P).max(axis=(1, 2))
    first_leader = (P[:, :, 0] > 0.5).mean(1) >= SOLE_LEADER_ROWS
    return {
        "sink_rate": float((at_T > SINK_THRESHOLD).mean()) if at_T is not None else float("nan"),
        "sink_rate_all_queries": float((on_first > SINK_THRESHOLD).mean()),
        "attention_on_first": float(on_first.mean()),
        "attention_entropy": entropy,
        "boolean_distance": float(np.median(boolean)),
        "first_token_sole_leader": float(first_leader.mean()),
    }


def massive_activation(h: np.ndarray) -> tuple[float, int, int]:
    """Sun et al.'s massive-activation ratio (arXiv 2402.17762, §2): the largest magnitude of a single
    entry of the hidden state ``(n, d)`` over the median entry magnitude, with the entry's token and dimension."""
    a = np.abs(h)
    i, j = np.unravel_index(int(np.argmax(a)), a.shape)
    return float(a[i, j] / np.median(a)), int(i), int(j)


def norm_ratio(h: np.ndarray) -> float:
    """``|h_0| / median_{i >= 1} |h_i|`` (the median over the tokens i >= 1): how much longer the first token is than the others (a norm ratio,
    not Sun et al.'s entry ratio)."""
    norms = np.linalg.norm(h, axis=1)
    return float(norms[0] / np.median(norms[1:])) if len(h) > 1 else float("nan")


NULL_KEYS = ("mean_cosine", "mean_cosine_without_first", "effective_rank", "norm_ratio", "massive_activation_ratio", "sink_rate",
             "sink_rate_all_queries", "attention_on_first", "first_token_sole_leader")  # fmt: skip
ATTENTION_KEYS = ("sink_rate", "sink_rate_all_queries", "attention_on_first", "attention_entropy", "boolean_distance", "first_token_sole_leader")


def layer_values(
    forwards: list[Forward], *, clusters: bool = True, pool: list[Forward] | None = None, keys: tuple[str, ...] | None = None
) -> dict[str, np.ndarray]:
    """Per prompt and layer, ``(prompts, L + 1)`` arrays of every measure (NaN where undefined: the
    attention measures at layer 0). The standardised cosine uses the statistics of ``pool`` (default:
    ``forwards``) at each layer, the first tokens left out. ``keys``: the measures the caller needs; the
    pooled standardised cosine and the stable rank (an SVD a layer) are left out unless they are among them
    (the others cost little and are always there). The nulls need :data:`NULL_KEYS` alone, which need no pool."""
    if not forwards:
        raise ValueError("layer_values needs at least one forward pass")
    pool = forwards if pool is None else pool
    L = forwards[0].hidden.shape[0] - 1
    out: dict[str, np.ndarray] = {}

    def put(key, p, layer, value):
        out.setdefault(key, np.full((len(forwards), L + 1), np.nan))[p, layer] = value

    want = (lambda key: True) if keys is None else (lambda key: key in keys)  # noqa: E731
    standardized = want("standardized_cosine")

    for layer in range(L + 1):
        if standardized:
            pooled = np.concatenate([fw.hidden[layer, 1:].double().numpy() for fw in pool])
            mean, std = pooled.mean(0), pooled.std(0)
        for p, fw in enumerate(forwards):
            h = fw.hidden[layer].double().numpy()
            norms = np.linalg.norm(h, axis=1)
            ratio, tok, dim = massive_activation(h)
            put("mean_cosine", p, layer, mean_cosine(h))
            put("mean_cosine_without_first", p, layer, mean_cosine(h[1:]) if len(h) > 2 else np.nan)
            if standardized:
                put("standardized_cosine", p, layer, standardized_cosine(h[1:], mean, std) if len(h) > 2 else np.nan)
            if clusters:
                count = stable_cluster_count(h / norms[:, None], scale=2.0, rel_min=1e-3)
                put("clusters", p, layer, count.count if count.verdict != "no structure" else np.nan)  # NaN: no structure
                put("cluster_decades", p, layer, count.decades)
            put("effective_rank", p, layer, effective_rank(h))
            if want("stable_rank"):
                put("stable_rank", p, layer, stable_rank(h))
            put("norm_ratio", p, layer, norm_ratio(h))
            put("massive_activation_ratio", p, layer, ratio)
            put("massive_token", p, layer, tok)
            put("massive_dim", p, layer, dim)
            put("median_norm", p, layer, float(np.median(norms)))
            if layer > 0:
                for key, v in attention_measures(fw.attentions[layer - 1].double().numpy()).items():
                    put(key, p, layer, v)
    return out


def _mode(column: np.ndarray) -> int:
    vals, counts = np.unique(column[np.isfinite(column)].astype(int), return_counts=True)
    return int(vals[np.argmax(counts)]) if len(vals) else -1


def sink_1(values: dict[str, np.ndarray], key: str = "sink_rate") -> np.ndarray:
    """Gu et al.'s model-level Sink_1^eps per prompt: the per-layer sink rate at T = 64 averaged over the
    layers (NaN for a prompt shorter than T); ``key="sink_rate_all_queries"``: the same over all queries."""
    rates = values[key][:, 1:]
    ok = np.isfinite(rates).all(1)
    return np.where(ok, np.where(np.isfinite(rates), rates, 0).mean(1), np.nan)


def layer_table(forwards: list[Forward], *, values: dict[str, np.ndarray] | None = None, clusters: bool = True) -> list[dict]:
    """Per-layer token geometry, the mean over prompts with its bootstrap interval (``KEY_ci``: [lo, hi])
    (see the module docstring). The token and dimension of the massive activation are the most common over prompts."""
    from attndyn.models.decoder_nulls import bootstrap_interval

    v = layer_values(forwards, clusters=clusters) if values is None else values
    L = next(iter(v.values())).shape[1] - 1
    rows = [{"layer": layer} for layer in range(L + 1)]
    for key, arr in v.items():
        if key == "clusters":  # the share of each verdict over the prompts, never a mean of counts and "no structure"
            for layer in range(L + 1):
                rows[layer][key] = tally([reading_of(c) for c in arr[:, layer]])
            continue
        if key in ("massive_token", "massive_dim"):
            for layer in range(L + 1):
                rows[layer][key] = _mode(arr[:, layer])
            continue
        ok = np.isfinite(arr)
        mean = np.where(ok.any(0), np.where(ok, arr, 0).sum(0) / np.maximum(ok.sum(0), 1), np.nan)
        lo, hi = bootstrap_interval(arr)
        for layer in range(L + 1):
            rows[layer][key] = float(mean[layer])
            if key not in ("cluster_decades", "median_norm"):
                rows[layer][f"{key}_ci"] = [float(lo[layer]), float(hi[layer])]
    for k in range(1, len(rows)):
        rows[k]["norm_growth"] = rows[k]["median_norm"] / rows[k - 1]["median_norm"]
    rows[0]["norm_growth"] = float("nan")
    return rows


ROPE_WINDOW = 64  # relative offsets averaged over: the prompts of the sink protocol are >= 64 tokens


def rope_averaged_core(head_dim: int, base: float, window: int) -> torch.Tensor:
    """``Rbar = (1/N) sum_{D=0}^{N-1} R(-D)`` (hd x hd, float64): RoPE rotates the pairs
    ``(i, i + hd/2)`` of a query at position p and a key at position p - D so that their product is
    ``q^T R(-D) k``, with ``R(D) = [[C, -S], [S, C]]``, C and S the cosines and sines of D theta_i,
    theta_i = base^(-2i/hd)."""
    half = head_dim // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2 / head_dim)
    D = torch.arange(window, dtype=torch.float64)[:, None]
    c, s = torch.cos(D * theta).mean(0), torch.sin(D * theta).mean(0)
    R = torch.zeros(head_dim, head_dim, dtype=torch.float64)
    idx = torch.arange(half)
    R[idx, idx] = c
    R[idx + half, idx + half] = c
    R[idx, idx + half] = s  # R(-D): the sine terms change sign
    R[idx + half, idx] = -s
    return R


def spectral_norm(A: torch.Tensor) -> float:
    """``|A|_2`` of a wide ``A`` (m <= n) from the m x m Gram matrix: sqrt of the largest eigenvalue of
    ``A A^T``, which carries a relative error of a few eps (the largest eigenvalue of a symmetric matrix is
    well conditioned), at a fraction of an SVD's cost."""
    peak = float(A.abs().max()) if A.numel() else 0.0
    if not peak > 0:  # zero (or empty); a non-finite entry is the caller's: the SVD would fail on it too
        return 0.0 if peak == 0 or A.numel() == 0 else float("nan")
    A = A / peak  # squaring 1e170 overflows, 1e-170 underflows: the Gram matrix of the scaled matrix
    G = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
    return peak * math.sqrt(max(float(torch.linalg.eigvalsh((G + G.T) / 2)[-1]), 0.0))


def _positive_share(Q: torch.Tensor, core: torch.Tensor, K: torch.Tensor, R: torch.Tensor | None = None) -> float:
    """The share sum(lambda+) / sum |lambda| of the symmetric part of ``Q^T core K`` (d x d), from a
    symmetric problem of size at most 2hd: that part is B^T C B, with B = [Q; K] and C = [[0, core/2],
    [core^T/2, 0]], and with B^T = U R (thin QR) its non-zero eigenvalues are those of R C R^T. ``R``: that
    factor, when the caller has it (it does not depend on ``core``)."""
    hd = Q.shape[0]
    B = torch.cat([Q, K])
    C = torch.zeros(2 * hd, 2 * hd, dtype=torch.float64)
    C[:hd, hd:] = core / 2
    C[hd:, :hd] = core.T / 2
    R = torch.linalg.qr(B.T, mode="reduced").R if R is None else R
    S = R @ C @ R.T
    lam = torch.linalg.eigvalsh((S + S.T) / 2)
    total = float(lam.abs().sum())
    return float(lam.clamp(min=0).sum()) / total if total > 0 else float("nan")


def head_table(decoder: Decoder, *, regime_layers: tuple[int, ...] = (), rope_window: int = ROPE_WINDOW) -> list[dict]:
    """Per layer and head: the spectra of the position-free head, its effective beta, and (for the
    layers in ``regime_layers``) the paper's regime of the head alone.

    V = W_O,h W_V,h has rank hd: its non-zero eigenvalues are those of the hd x hd matrix
    W_V,h W_O,h, and ||Q^T K||_2 = ||R K||_2 with Q^T = U R (thin QR), so the table costs hd-sized
    decompositions, not d-sized ones (a full d x d one a head costs far more at d = 576)."""
    from attndyn.analysis.spectra import regime

    beta = 1.0 / math.sqrt(decoder.head_dim)
    hd = decoder.head_dim
    bases = decoder.rope_bases or (decoder.rope_base,) * len(decoder.layers)
    if decoder.positions == "rope":
        r = decoder.rotary_dim or hd  # partial rotary: the last hd - r coordinates do not turn
        cores = {b: torch.block_diag(rope_averaged_core(r, b, rope_window), torch.eye(hd - r, dtype=torch.float64)) for b in set(bases)}
    else:  # learned absolute positions (GPT-2) enter through the input, not the kernel
        cores = dict.fromkeys(set(bases), torch.eye(hd, dtype=torch.float64))
    eye = torch.eye(hd, dtype=torch.float64)
    out = []
    for layer in range(len(decoder.layers)):
        L = decoder.layers[layer]
        for head in range(decoder.heads):
            g = head // decoder.group
            Q = L.W_q[head * hd : (head + 1) * hd].double()
            K = L.W_k[g * hd : (g + 1) * hd].double()
            if L.q_norm is not None:  # Gemma: RMSNorm of each head, whose weights scale Q and K (OLMo-2: the head's slice)
                Q = (L.q_norm[head * hd : (head + 1) * hd] if decoder.qk_norm_full else L.q_norm).double()[:, None] * Q
            if L.k_norm is not None:
                K = (L.k_norm[g * hd : (g + 1) * hd] if decoder.qk_norm_full else L.k_norm).double()[:, None] * K
            small = L.W_v[g * hd : (g + 1) * hd].double() @ L.W_o[:, head * hd : (head + 1) * hd].double()
            eig_V = torch.linalg.eigvals(small).numpy()
            RB = torch.linalg.qr(torch.cat([Q, K]).T, mode="reduced").R  # the [Q; K] factor of both positive shares
            R = RB[:hd, :hd]  # Q^T = U R: the first hd columns' factor is the leading block
            norm_QK = spectral_norm(R @ K)
            core = cores[bases[layer]]
            norm_rope = spectral_norm(R @ core @ K)
            top = eig_V[np.argmax(np.abs(eig_V))]  # Def. 4.1: the eigenvalue of largest modulus
            row = {
                "layer": layer,
                "head": head,
                "kv_group": g,
                "effective_beta": beta * norm_QK,
                "effective_beta_rope": beta * norm_rope,
                "positive_share_QK": _positive_share(Q, eye, K, RB),
                "positive_share_rope": _positive_share(Q, core, K, RB),
                "top_eig_V_real": float(top.real),
                "top_eig_V_imag": float(top.imag),
                "top_eig_V_abs": float(np.max(np.abs(eig_V))),
                "top_real_positive": bool(top.real > 0 and abs(top.imag) <= 1e-9 * abs(top)),  # of the largest modulus
            }
            if layer in regime_layers:
                row["regime"] = regime(head_weights(decoder, layer, head), beta=beta).name
            out.append(row)
    return out


def _twin_weights(decoder: Decoder, layer: int) -> Weights:
    """Layer ``layer``'s heads with RMSNorm's weights folded in (the particle twin's Q, K, V)."""
    L, d = decoder.layers[layer], decoder.d_model
    fold = torch.diag(L.attn_norm.double()) * math.sqrt(d)  # RMSNorm(x) = sqrt(d) (x / |x|) * w
    Qs, Ks, Vs, As, Bs = [], [], [], [], []
    hd = decoder.head_dim
    for head in range(decoder.heads):
        W = head_weights(decoder, layer, head)
        g = head // decoder.group
        Qs.append(W.Q[0] @ fold)
        Ks.append(W.K[0] @ fold)
        Vs.append(W.V[0] @ fold)
        # V = W_o,h (W_v,h fold), rank hd: the field applies the two factors (2 hd d a token, not d^2)
        As.append(L.W_o[:, head * hd : (head + 1) * hd].double())
        Bs.append(L.W_v[g * hd : (g + 1) * hd].double() @ fold)
    return Weights(torch.stack(Qs), torch.stack(Ks), torch.stack(Vs), V_factors=(torch.stack(As), torch.stack(Bs)))


def _twin_model(decoder: Decoder, layer: int, scale: float = 1.0, weights: Weights | None = None) -> Model:
    """Layer ``layer``'s attention as a particle model on the sphere under Pre-LN (see the module docstring);
    ``weights``: the layer's :func:`_twin_weights`, when the caller has them (they do not depend on ``scale``)."""
    weights = _twin_weights(decoder, layer) if weights is None else weights
    return Model(weights, beta=scale / math.sqrt(decoder.head_dim), mask="causal", geometry="sphere", scheme="pre")


def twin_update(model: Model, x: torch.Tensor, steps: int | None = None) -> torch.Tensor:
    """What the particle twin ``model`` (:func:`_twin_model`) adds to the residual stream ``x`` ``(n, d)`` in
    unit time, in x's dtype: its velocity at ``x`` (``steps=None``: the one Euler step, dt = 1), or x(1) - x(0)
    of its flow (RK4, ``steps`` fixed steps). The edits ``attention:block=l,with=twin-step|twin`` put it in
    place of the attention sublayer's output."""
    args = prepare(model, x)
    if steps is None:
        return vector_field(0.0, x, args)
    flow = integrate(lambda t, y, _: vector_field(t, y, args), x, [0.0, 1.0], None, solver=RK4(), controller=FixedStep(1.0 / steps))
    return flow.xs[-1] - x


VARIANTS = (("rope", True, False), ("ffn", False, True), ("rope_ffn", True, True))


def layer_twins(decoder: Decoder, x: torch.Tensor, layer: int, *, rope: bool, ffn: bool, steps: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """The layer's own maps (RoPE on or off, the feed-forward block on or off) from the hidden state ``x``:
    one residual step (attention, then the feed-forward block on its result, as in the network) and the
    continuous flow x' = attn(x) (+ ffn(x)) over unit time (RK4, ``steps`` steps). With both on, the
    step is the real layer itself."""
    x = x.double()
    n, cast = x.shape[0], (lambda t: None if t is None else t.to(dtype=torch.float64))
    mask = layer_masks(decoder, n)[layer]
    tables = None
    if rope and decoder.positions == "rope":
        base = (decoder.rope_bases or (decoder.rope_base,) * len(decoder.layers))[layer]
        tables = rope_tables(n, decoder.rotary_dim or decoder.head_dim, base, dtype=torch.float64, device="cpu")

    def attn(y: torch.Tensor) -> torch.Tensor:
        return attention_sublayer(decoder, layer, y, tables, mask, cast)[0]

    def field(y: torch.Tensor) -> torch.Tensor:
        return attn(y) + (feedforward_sublayer(decoder, layer, y, cast) if ffn else 0.0)

    step = x + attn(x)
    if ffn:
        step = step + feedforward_sublayer(decoder, layer, step, cast)
    flow = integrate(lambda t, y, _: field(y), x, [0.0, 1.0], None, solver=RK4(), controller=FixedStep(1.0 / steps))
    return step.numpy(), flow.xs[-1].numpy()


def _discrepancy(pred: np.ndarray, real: np.ndarray) -> float:
    cos = (pred * real).sum(1) / (np.linalg.norm(pred, axis=1) * np.linalg.norm(real, axis=1))
    return float(np.mean(1 - cos))


LEADERS_TOP = 3  # leaders compared: the columns with the most attention
LEADERS_T = 8.0  # the twin's flow runs this long before its leaders are read


def column_mass(P: np.ndarray) -> np.ndarray:
    """The share of all queries' attention that key j receives, (1/n) sum_i P_ij, heads averaged:
    ``(n,)``. (Gu et al.'s alpha_j averages over the queries i >= j only, which inflates the last
    columns, seen by few queries, each attending to itself.)"""
    A = P.mean(0) if P.ndim == 3 else P
    return A.sum(-2) / A.shape[-2]


def leaders_of(P: np.ndarray, top: int = LEADERS_TOP) -> list[int]:
    """The ``top`` columns of largest mass: the paper's leaders, where the rows' weight goes."""
    return [int(j) for j in np.argsort(-column_mass(P))[:top]]


def twins(decoder: Decoder, forwards: list[Forward], layers: tuple[int, ...], *, workers: int | None = None, **kw) -> list[dict]:
    """:func:`twin` of every layer in ``layers`` on every forward pass (layer-major, each with its ``prompt``
    index), the layer's twin weights built once for all its prompts and scales; one layer a job over ``workers``
    processes (:func:`attndyn.core.parallel.pmap`: the same numbers for any count)."""
    from attndyn.core.parallel import pmap

    jobs = twin_jobs(decoder, forwards, layers, **kw)
    return [t for part in pmap(lambda k: jobs[k](), len(jobs), workers=workers) for t in part]


def twin_jobs(decoder: Decoder, forwards: list[Forward], layers: tuple[int, ...], **kw) -> list[Callable[[], list[dict]]]:
    """:func:`twins`' jobs, one a layer, each a call without arguments that builds the layer's twin weights (a
    layer's Q, K and V of every head in float64: 0.27 GiB for a 0.5B model's, built in the job and dropped with
    it, never all layers' at once) and returns its prompts' twins in order, for a caller that runs them beside
    other jobs."""
    return [functools.partial(_twins_of_layer, decoder, forwards, layer, kw) for layer in layers]


def _twins_of_layer(decoder: Decoder, forwards: list[Forward], layer: int, kw: dict) -> list[dict]:
    weights = _twin_weights(decoder, layer) if decoder.norm_kind == "rms" else None
    return [{**twin(decoder, fw, layer, weights=weights, **kw), "prompt": i} for i, fw in enumerate(forwards)]


def twin(
    decoder: Decoder, fw: Forward, layer: int, *, scales: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0), weights: Weights | None = None
) -> dict:
    """The particle twin of one layer against the real next layer (see the module docstring), and
    the leaders the twin's flow predicts (its attention after ``LEADERS_T``) against the real layer's.
    ``weights``: the layer's :func:`_twin_weights` when the caller has them (:func:`twins`)."""
    if decoder.norm_kind != "rms":
        raise ValueError(
            f"{decoder.name}: the particle twin is Pre-LN on the sphere (RMSNorm); its LayerNorm removes the mean and adds a bias, "
            "which is not a projection on the sphere"
        )
    x = fw.hidden[layer].double().numpy()
    real = fw.hidden[layer + 1].double().numpy()
    weights = _twin_weights(decoder, layer) if weights is None else weights
    model = _twin_model(decoder, layer, weights=weights)
    step = x + velocity(0.0, x, model)
    flow = simulate(model, x, [0.0, 1.0], solver=RK4(), step=FixedStep(0.125)).numpy()[1][-1]
    late = simulate(model, x, [0.0, LEADERS_T], solver=RK4(), step=FixedStep(0.5)).numpy()[1][-1]  # leaders need no fine steps
    theta = late / np.linalg.norm(late, axis=-1, keepdims=True)  # Pre-LN attends at the directions
    twin_leaders = leaders_of(attention_matrix(model, theta).numpy())
    last = fw.hidden[-1].double().numpy()
    counts = {  # clusters of the unit tokens: the twin's late state against the network's next and last layers
        "twin_clusters": stable_cluster_count(theta, scale=2.0, rel_min=1e-3).reading(),
        "network_clusters_next": stable_cluster_count(real / np.linalg.norm(real, axis=-1, keepdims=True), scale=2.0, rel_min=1e-3).reading(),
        "network_clusters_last": stable_cluster_count(last / np.linalg.norm(last, axis=-1, keepdims=True), scale=2.0, rel_min=1e-3).reading(),
    }
    real_leaders = leaders_of(fw.attentions[layer].double().numpy())
    by_scale = {s: _discrepancy(x + velocity(0.0, x, _twin_model(decoder, layer, s, weights)), real) for s in scales}
    best = min(by_scale, key=by_scale.get)
    variants = {}
    for name, rope, ffn in VARIANTS:
        v_step, v_flow = layer_twins(decoder, fw.hidden[layer], layer, rope=rope, ffn=ffn)
        variants[f"one_step_{name}"] = _discrepancy(v_step, real)
        variants[f"flow_{name}"] = _discrepancy(v_flow, real)
    # the null with no weights: uniform attention over what the mask lets each query see
    uniform = leaders_of(uniform_causal(layer_masks(decoder, x.shape[0])[layer].numpy())[None])
    return {
        "layer": layer,
        "identity": _discrepancy(x, real),
        "one_step": _discrepancy(step, real),
        "flow": _discrepancy(flow, real),
        **variants,
        "best_beta_multiple": float(best),
        "best_one_step": by_scale[best],
        "real_leaders": real_leaders,
        "twin_leaders": twin_leaders,
        **counts,
        "leader_overlap": len(set(real_leaders) & set(twin_leaders)) / LEADERS_TOP,
        "top_leader_agrees": bool(real_leaders[0] == twin_leaders[0]),
        "uniform_leaders": uniform,
        "uniform_leader_overlap": len(set(real_leaders) & set(uniform)) / LEADERS_TOP,
        "uniform_top_leader_agrees": bool(real_leaders[0] == uniform[0]),
        **sublayer_shares(decoder, fw.hidden[layer], real, layer),
    }


def sublayer_shares(decoder: Decoder, x: torch.Tensor, real: np.ndarray, layer: int) -> dict:
    """The attention and feed-forward shares of the layer's change of direction, by both ablation orders.

    With v(S) = d(identity) - d(layer with only the sublayers S), d the mean 1 - cos to the real next
    layer: attention first is v({a}) - v({}), attention last is v({a, f}) - v({f}), and the Shapley share
    is their average (the two orders over two players); shares are over d(identity), so the two Shapley
    shares add up to v({a, f}) / d(identity) = 1 - d(full layer) / d(identity), one to rounding."""
    x = x.double()
    n, cast = x.shape[0], (lambda t: None if t is None else t.to(dtype=torch.float64))
    mask = layer_masks(decoder, n)[layer]
    tables = None
    if decoder.positions == "rope":
        base = (decoder.rope_bases or (decoder.rope_base,) * len(decoder.layers))[layer]
        tables = rope_tables(n, decoder.rotary_dim or decoder.head_dim, base, dtype=torch.float64, device="cpu")
    a = x + attention_sublayer(decoder, layer, x, tables, mask, cast)[0]
    both = a + feedforward_sublayer(decoder, layer, a, cast)
    f = x + feedforward_sublayer(decoder, layer, x, cast)
    d0 = _discrepancy(x.numpy(), real)
    v_a, v_f, v_af = d0 - _discrepancy(a.numpy(), real), d0 - _discrepancy(f.numpy(), real), d0 - _discrepancy(both.numpy(), real)
    scale = d0 if d0 > 0 else float("nan")
    out = {
        "attention_share_first": v_a / scale,
        "attention_share_last": (v_af - v_f) / scale,
        "ffn_share_first": v_f / scale,
        "ffn_share_last": (v_af - v_a) / scale,
    }
    out["attention_share_shapley"] = (out["attention_share_first"] + out["attention_share_last"]) / 2
    out["ffn_share_shapley"] = (out["ffn_share_first"] + out["ffn_share_last"]) / 2
    return out
