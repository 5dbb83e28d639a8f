"""The vector fields: ``Model`` holds the options, ``velocity(t, x, model)`` evaluates them.

Contract
--------
Each ``Model`` option is one orthogonal mathematical change of SPEC §1 / §5:

* default: ``x_i' = sum_h sum_j P^h_ij V_h x_j`` with ``P^h = softmax_j(beta <Q_h x_i, K_h x_j>)``
  (eq. eq:trans_dyn; multi-head as in §1.7);
* ``rescaled=True``: ``z_i' = sum_j P_ij V (z_j - z_i)`` with P evaluated at ``x = e^{tV} z``
  (eq. e:Rres). ``e^{tV}`` uses the closed form ``e^{lambda t}`` when V = lambda I;
* ``weights.ff``: ``W sigma(attention term + b)`` (eq. mlp.transfo, §1.7);
* ``mask="causal"``: token i attends to j <= i (§5.2);
* ``beta=math.inf``: hardmax, uniform over the argmax set (§5.3);
* ``normalization="unnormalized"``: USA, ``(1/n) sum_j e^{beta<.,.>} V x_j`` (§5.1);
* ``geometry="sphere"``: tangent projection ``y -> y - <x_i, y> x_i`` (§5.1, eq. SA).

Combinations the mathematics does not define are rejected at construction. ``velocity`` takes
``x`` of shape ``(*batch, n, d)``; the weights are cast to its dtype and device (cached).
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass, field

import torch

from .attention import causal_mask, mix, weights_from_scores
from .attention import scores as _scores
from .weights import Weights, as_float_tensor

MASKS = ("full", "causal")
GEOMETRIES = ("euclidean", "sphere")
ATTENTIONS = ("dense", "fused")
NORMALIZATIONS = ("softmax", "unnormalized")


def _choice(value, allowed, name):
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not an option; choose one of {allowed}.")


@dataclass(frozen=True, eq=False)
class Model:
    """Self-attention dynamics with its options (see the module docstring and SPEC §1, §5)."""

    weights: Weights
    _: KW_ONLY
    beta: float = 1.0
    mask: str = "full"
    geometry: str = "euclidean"
    rescaled: bool = False
    attention: str = "dense"
    normalization: str = "softmax"
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.weights, Weights):
            raise TypeError(f"weights must be an attndyn.Weights, not {type(self.weights).__name__}.")
        _choice(self.mask, MASKS, "mask")
        _choice(self.geometry, GEOMETRIES, "geometry")
        _choice(self.attention, ATTENTIONS, "attention")
        _choice(self.normalization, NORMALIZATIONS, "normalization")
        if not isinstance(self.rescaled, bool):
            raise TypeError(f"rescaled must be a bool, not {self.rescaled!r}.")
        try:
            beta = float(self.beta)
        except (TypeError, ValueError):
            raise TypeError(f"beta must be a real number, not {self.beta!r}.") from None
        if math.isnan(beta) or beta < 0:
            raise ValueError(f"beta={self.beta!r} is invalid; it must be >= 0 (math.inf for hardmax).")
        object.__setattr__(self, "beta", beta)
        if self.rescaled and self.geometry == "sphere":
            raise ValueError("rescaled=True with geometry='sphere' is not defined: z = e^{-tV} x does not stay on the sphere.")
        if self.rescaled and self.weights.heads > 1:
            raise ValueError(
                f"rescaled=True needs one value matrix V to factor out as e^{{tV}}, but the weights have "
                f"{self.weights.heads} heads with separate V_h."
            )
        if math.isinf(beta) and self.normalization == "unnormalized":
            raise ValueError("beta=inf with normalization='unnormalized' is not defined: exp(inf * score) has no limit.")
        if self.attention == "fused" and math.isinf(beta):
            raise ValueError("attention='fused' computes a softmax and has no hardmax; use attention='dense' for beta=inf.")
        if self.attention == "fused" and self.normalization == "unnormalized":
            raise ValueError("attention='fused' always normalizes rows; use attention='dense' for normalization='unnormalized'.")

    @property
    def hard(self) -> bool:
        return math.isinf(self.beta)

    def cast(self, like: torch.Tensor) -> dict:
        """The weights cast to ``like``'s dtype and device (cached per dtype/device)."""
        key = (like.dtype, like.device)
        if key not in self._cache:
            w = self.weights
            c = {
                "Q": w.Q.to(dtype=like.dtype, device=like.device),
                "K": w.K.to(dtype=like.dtype, device=like.device),
                "V": w.V.to(dtype=like.dtype, device=like.device),
            }
            c["VT"] = c["V"].transpose(-1, -2)
            # all heads' V^T side by side, (d, H d): one GEMM for every head's values
            c["VT_cat"] = c["VT"].permute(1, 0, 2).reshape(w.d, w.heads * w.d).contiguous()
            # (x Q^T K) x^T costs less than (x Q^T)(x K^T)^T when m >= d.
            c["M"] = c["Q"].transpose(-1, -2) @ c["K"] if w.m >= w.d else None
            if w.ff is not None:
                c["W"] = w.ff.W.to(dtype=like.dtype, device=like.device)
                c["b"] = None if w.ff.bias is None else w.ff.bias.to(dtype=like.dtype, device=like.device)
            c["fast"] = w.heads == 1 and c["M"] is not None and model_is_plain_softmax(self)
            c["causal"] = causal_mask
            c["zero"] = torch.zeros((), dtype=like.dtype, device=like.device)
            V0 = w.V[0]
            lam = float(V0[0, 0])
            is_scalar = w.heads == 1 and bool(torch.equal(V0, lam * torch.eye(w.d, dtype=V0.dtype)))
            c["lambda"] = lam if is_scalar else None
            self._cache[key] = c
        return self._cache[key]


def model_is_plain_softmax(model: Model) -> bool:
    return model.attention == "dense" and model.normalization == "softmax" and not model.hard


def _check_state(x: torch.Tensor, model: Model) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch tensor, not {type(x).__name__}.")
    if x.ndim < 2 or x.shape[-1] != model.weights.d:
        raise ValueError(f"x must have shape (*batch, n, d) with d = {model.weights.d}; got shape {tuple(x.shape)}.")


def score_inputs(t: float, x: torch.Tensor, model: Model, c: dict) -> tuple[torch.Tensor, float]:
    """Positions at which attention is evaluated, and the score scale.

    For the rescaled form, attention is evaluated at ``e^{tV} z`` (SPEC §1.3). With V = lambda I the
    factor ``e^{2 lambda t}`` is folded into the scale so that it overflows as a clear error.
    """
    beta = 1.0 if model.hard else model.beta
    if not model.rescaled or t == 0:
        return x, beta
    lam = c["lambda"]
    if lam is not None:
        try:
            scale = beta * math.exp(2.0 * lam * t)
        except OverflowError:
            scale = math.inf
        if not math.isfinite(scale):
            raise FloatingPointError(f"e^(tV) overflows at t={t:g} (V = {lam:g} I): the logits beta*e^(2 lambda t) exceed float range.")
        return x, scale
    E = torch.linalg.matrix_exp(t * c["V"][0])
    if not bool(torch.isfinite(E).all()):
        raise FloatingPointError(f"e^(tV) overflows at t={t:g}: the rescaled dynamics cannot be evaluated further.")
    return x @ E.transpose(-1, -2), beta


def _attention_term(xq: torch.Tensor, xb: torch.Tensor, model: Model, c: dict, scale: float):
    """``sum_h sum_j A^h_ij V_h x_j`` with scores at ``xq`` and values at ``xb``; also ``x V_0^T``."""
    heads = c["V"].shape[0]
    if c["fast"]:
        # One head, dense softmax, m >= d: the fewest torch calls (small systems are dominated by
        # per-call overhead). Overflowing logits give NaN here, caught by the callers' checks.
        values = xb @ c["VT"][0]
        L = torch.baddbmm(c["zero"], xq @ c["M"][0], xq.transpose(-1, -2), beta=0.0, alpha=scale)
        if model.mask == "causal":
            L = L.masked_fill(c["causal"](L.shape[-1], L.device), -torch.inf)
        return torch.softmax(L, dim=-1) @ values, values
    if heads == 1:
        values = (xb @ c["VT"][0]).unsqueeze(1)
    else:
        B, n, d = xb.shape
        values = (xb @ c["VT_cat"]).reshape(B, n, heads, d).transpose(1, 2)
    out = mix(
        xq,
        values,
        c["Q"],
        c["K"],
        scale=scale,
        hard=model.hard,
        causal=model.mask == "causal",
        unnormalized=model.normalization == "unnormalized",
        fused=model.attention == "fused",
        M=c["M"],
    )
    return (out[:, 0] if heads == 1 else out.sum(1)), values[:, 0]


def attention_update(model: Model, xq: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``sum_j A_ij V (z_j - z_i)`` with the attention evaluated at positions ``xq`` (one head).

    The building block of the discrete rescaling (SPEC §1.4); shapes ``(*batch, n, d)``.
    """
    n, d = z.shape[-2:]
    c = model.cast(z)
    beta = 1.0 if model.hard else model.beta
    term, own = _attention_term(xq.reshape(-1, n, d), z.reshape(-1, n, d), model, c, beta)
    return (term - own).reshape(z.shape)


def velocity(t: float, x: torch.Tensor, model: Model) -> torch.Tensor:
    """The vector field of ``model`` at time ``t`` and state ``x`` of shape ``(*batch, n, d)``.

    See the module docstring for the equation of each option (SPEC §1.2, §1.3, §1.7, §5).
    """
    _check_state(x, model)
    shape = x.shape
    n, d = shape[-2:]
    xb = x.reshape(-1, n, d)
    c = model.cast(xb)
    xq, scale = score_inputs(t, xb, model, c)
    out, own = _attention_term(xq, xb, model, c, scale)
    if model.rescaled:
        # Overflowing logits (scale finite, scores not) surface as NaN, named by simulate's check.
        out = out - own
    if "W" in c:
        ff = model.weights.ff
        if c["b"] is not None and ff.bias_inside:
            out = out + c["b"]
        if ff.sigma == "relu":
            out = torch.relu(out)
        elif ff.sigma == "tanh":
            out = torch.tanh(out)
        out = out @ c["W"].transpose(-1, -2)
        if c["b"] is not None and not ff.bias_inside:
            out = out + c["b"]
    if model.geometry == "sphere":
        out = out - (out * xb).sum(-1, keepdim=True) * xb
    return out.reshape(shape)


def _raw_scores(model: Model, x, t: float) -> tuple[torch.Tensor, tuple]:
    """Unmasked scaled scores ``(B, H, n, n)`` at state ``x`` (z for a rescaled model) and time ``t``, and x's shape."""
    x = as_float_tensor(x, "x")
    _check_state(x, model)
    n, d = x.shape[-2:]
    xb = x.reshape(-1, n, d)
    c = model.cast(xb)
    xq, scale = score_inputs(float(t), xb, model, c)
    return _scores(xq, c["Q"], c["K"], scale, c["M"]), tuple(x.shape)


def attention_matrix(model: Model, x, t: float = 0.0) -> torch.Tensor:
    """The attention matrix ``P`` of shape ``(*batch, heads, n, n)`` at state ``x`` and time ``t``.

    For a rescaled model ``x`` is z and P is evaluated at ``e^{tV} z`` (SPEC §1.3). Always dense.
    """
    L, shape = _raw_scores(model, x, t)
    A = weights_from_scores(L, hard=model.hard, causal=model.mask == "causal", unnormalized=model.normalization == "unnormalized")
    n = shape[-2]
    return A.reshape(*shape[:-2], model.weights.heads, n, n)


def attention_logits(model: Model, x, t: float = 0.0) -> torch.Tensor:
    """The scaled scores ``beta <Q x_i, K x_j>`` of shape ``(*batch, heads, n, n)`` (``-inf`` where masked).

    For log-domain rates (1 - P underflows long before the logits lose precision, SPEC §4.2(f)).
    With ``beta = inf`` the unscaled scores are returned.
    """
    L, shape = _raw_scores(model, x, t)
    n = shape[-2]
    if model.mask == "causal":
        L = L.masked_fill(causal_mask(n, L.device), -torch.inf)
    return L.reshape(*shape[:-2], model.weights.heads, n, n)
