"""Attention kernels: scores, softmax/hardmax/unnormalized weights, masks; dense and fused.

Contract
--------
``dense_attention`` and ``fused_attention`` return ``sum_j A_ij values_j`` for every head, where
``A = weights(scale * <Q x_i, K x_j>)`` (arXiv 2305.05465, eq. eq:P) and the weighting is

* softmax: row-softmax, computed with row-max subtraction (never ``exp(L)/sum exp(L)``);
* hardmax (the limit beta = inf, resolved by ``resolve_beta``; arXiv 2508.09628): uniform over the argmax set of each
  row; scores within a few ulps of the row maximum count as ties and share the weight;
* unnormalized (USA; GLPR, arXiv 2312.10794): ``exp(L_ij) / n``;
* linear: ``L_ij / n`` (masked entries 0, and the row divided by its number of keys under a mask):
  linear attention, whose covariance obeys an exact finite-n identity (Castin, Ablin, Carrillo, Peyre, arXiv 2501.18322).

Two sibling implementations: ``dense_attention`` builds the n x n scores explicitly (the readable
reference, any weighting); ``fused_attention`` (softmax only) calls ``torch.nn.functional.scaled_dot_product_attention`` with 4-D
inputs so that torch picks its flash kernel (O(n) extra memory). Shapes: ``x`` is
``(B, n, d)``, ``values`` is ``(B, H, n, dv)``, ``Q``/``K`` are ``(H, m, d)``; the result is
``(B, H, n, dv)``. Masks: ``causal`` (j <= i) and, with it, a sliding ``window`` of width w
(i - w < j <= i), the local attention of arXiv 2405.18781.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
import torch.nn.functional as F

# How scores become weights: row softmax, hardmax (beta = inf), unnormalized exp / n (USA) or linear L / n.
Weighting = Literal["softmax", "hardmax", "unnormalized", "linear"]
WEIGHTINGS: tuple[str, ...] = get_args(Weighting)

# Scores closer than this many ulps (relative to the row's largest |score|) to the row maximum
# are ties for the hardmax: the argmax set must not depend on rounding in the last bits.
HARDMAX_TIE_ULPS = 16.0


def project(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``x W_h^T`` for every head: ``x`` ``(B, n, d)``, ``W`` ``(H, m, d)`` -> ``(B, H, n, m)``.

    One GEMM against the heads concatenated; broadcasting ``(B, 1, n, d) @ (H, d, m)`` would copy the
    weights of every head on every call.
    """
    H, m, d = W.shape
    if H == 1:
        return (x @ W[0].transpose(-1, -2)).unsqueeze(1)
    cat = W.transpose(-1, -2).permute(1, 0, 2).reshape(d, H * m)
    B, n = x.shape[0], x.shape[1]
    return (x @ cat).reshape(B, n, H, m).transpose(1, 2)


def scores(x: torch.Tensor, Q: torch.Tensor, K: torch.Tensor, scale: float, M: torch.Tensor | None = None) -> torch.Tensor:
    """``scale * (x Q^T)(x K^T)^T`` per head: shape ``(B, H, n, n)``.

    ``M = Q^T K`` (``(H, d, d)``) may be passed to compute ``(x M) x^T`` instead, which is cheaper
    when ``m >= d``; a single head then runs on 3-D tensors.
    """
    if M is not None:
        if M.shape[0] == 1:
            L = ((x @ M[0]) @ x.transpose(-1, -2)).unsqueeze(1)
        else:
            xh = x.unsqueeze(1)
            L = (xh @ M) @ xh.transpose(-1, -2)
    else:
        L = project(x, Q) @ project(x, K).transpose(-1, -2)
    return L if scale == 1.0 else L * scale


def causal_mask(n: int, device: torch.device | str, window: int | None = None) -> torch.Tensor:
    """Boolean ``(n, n)`` mask, True where token i may NOT attend to j: j > i and, with a sliding
    ``window`` of width w, also j <= i - w (token i sees itself and the w - 1 tokens before it)."""
    ones = torch.ones(n, n, dtype=torch.bool, device=device)
    blocked = ones.triu(1)
    if window is not None:
        blocked |= ones.tril(-int(window))
    return blocked


def resolve_beta(beta: float) -> tuple[float, bool]:
    """The one rule for the inverse temperature: ``(score scale, hard)``.

    ``beta = inf`` is the hardmax limit (arXiv 2508.09628): scores are used unscaled and only their
    argmax set matters; any finite ``beta >= 0`` scales the scores.
    """
    if math.isinf(beta):
        return 1.0, True
    return float(beta), False


def all_finite(t: torch.Tensor) -> bool:
    """True when every entry is finite (one reduction; a sum overflowing to inf counts as not finite)."""
    return math.isfinite(float(t.sum()))


def with_sink_bias(L: torch.Tensor, sink_bias: float) -> torch.Tensor:
    """``L`` with ``sink_bias`` added to every query's logit for the first token (a key bias; arXiv 2410.10781)."""
    if not sink_bias:
        return L
    bias = torch.zeros(L.shape[-1], dtype=L.dtype, device=L.device)
    bias[0] = sink_bias
    return L + bias


def weights_from_scores(
    L: torch.Tensor, *, weighting: Weighting, causal: bool, check: bool = True, window: int | None = None, sink_bias: float = 0.0
) -> torch.Tensor:
    """Attention weights ``A`` from scores ``L`` (last two dims ``n x n``); ``causal`` masks j > i,
    and ``window`` (with ``causal``) also j <= i - window; ``sink_bias`` is added to the logits of
    the first token (column 0) before the weighting.

    ``check`` verifies the scores (and USA weights) are finite, a host synchronisation; the
    solvers' step loop passes ``False`` and checks the state at save times instead.
    """
    if check and not all_finite(L):
        raise FloatingPointError("attention scores overflowed (non-finite logits); the state or the scale beta*e^{2tV} is too large.")
    n = L.shape[-1]
    L = with_sink_bias(L, sink_bias)
    if weighting == "linear":
        if not causal:
            return L / n
        blocked = causal_mask(n, L.device, window)
        keys = (~blocked).sum(-1, keepdim=True).to(L.dtype)
        return L.masked_fill(blocked, 0.0) / keys
    if causal:
        L = L.masked_fill(causal_mask(n, L.device, window), -torch.inf)
    if weighting == "hardmax":
        rowmax = L.amax(-1, keepdim=True)
        finite = torch.where(torch.isfinite(L), L.abs(), torch.zeros_like(L))
        tol = HARDMAX_TIE_ULPS * torch.finfo(L.dtype).eps * finite.amax(-1, keepdim=True)
        sel = (L >= rowmax - tol).to(L.dtype)
        return sel / sel.sum(-1, keepdim=True)
    if weighting == "unnormalized":
        A = torch.exp(L) / n
        if check and not bool(torch.isfinite(A).all()):
            raise FloatingPointError("unnormalized attention overflowed: exp(beta <Qx_i, Kx_j>) is not finite.")
        return A
    if weighting != "softmax":
        raise ValueError(f"weighting={weighting!r} is not one of {WEIGHTINGS}.")
    return torch.softmax(L, dim=-1)


def dense_attention(
    x: torch.Tensor,
    values: torch.Tensor,
    Q: torch.Tensor,
    K: torch.Tensor,
    *,
    scale: float,
    weighting: Weighting = "softmax",
    causal: bool = False,
    M: torch.Tensor | None = None,
    check: bool = True,
    window: int | None = None,
    sink_bias: float = 0.0,
) -> torch.Tensor:
    """``sum_j A_ij values_j`` per head with the ``n x n`` weights built explicitly: ``(B, H, n, dv)``.

    The readable reference; ``M = Q^T K`` may be given (see :func:`scores`). Any weighting.
    """
    A = weights_from_scores(scores(x, Q, K, scale, M), weighting=weighting, causal=causal, check=check, window=window, sink_bias=sink_bias)
    return A @ values


def fused_attention(
    x: torch.Tensor,
    values: torch.Tensor,
    Q: torch.Tensor,
    K: torch.Tensor,
    *,
    scale: float,
    causal: bool = False,
    window: int | None = None,
    sink_bias: float = 0.0,
) -> torch.Tensor:
    """``sum_j softmax_j(scale <Q x_i, K x_j>) values_j`` through SDPA: ``(B, H, n, dv)``, O(n) memory.

    Softmax only. Called with 4-D inputs so that torch picks its flash kernel on the CPU. A sliding
    ``window`` is passed to SDPA as a Boolean mask, and a ``sink_bias`` as an additive float mask
    (an ``n x n`` tensor either way, no longer the flash kernel).
    """
    q = project(x, Q)
    k = project(x, K)
    if scale == 0.0:
        # SDPA treats a falsy scale as "use 1/sqrt(m)"; beta = 0 is uniform attention.
        q = torch.zeros_like(q)
        scale = 1.0
    B, H = values.shape[:2]
    q = q.expand(B, H, *q.shape[2:])
    k = k.expand(B, H, *k.shape[2:])
    if sink_bias:
        n = x.shape[-2]
        bias = with_sink_bias(torch.zeros(n, n, dtype=values.dtype, device=values.device), sink_bias)
        if causal:
            bias = bias.masked_fill(causal_mask(n, x.device, window), -torch.inf)
        return F.scaled_dot_product_attention(q, k, values, attn_mask=bias, scale=scale)
    if causal and window is not None:
        allowed = ~causal_mask(x.shape[-2], x.device, window)
        return F.scaled_dot_product_attention(q, k, values, attn_mask=allowed, scale=scale)
    return F.scaled_dot_product_attention(q, k, values, scale=scale, is_causal=causal)
