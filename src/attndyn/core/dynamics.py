"""The vector fields: ``Model`` holds the options, ``prepare`` resolves them once, ``vector_field``
evaluates them.

Contract
--------
Each ``Model`` option is one orthogonal mathematical change of the model (arXiv 2305.05465 and its successors):

* default: ``x_i' = sum_h sum_j P^h_ij V_h x_j`` with ``P^h = softmax_j(beta <Q_h x_i, K_h x_j>)``
  (eq. eq:trans_dyn; multi-head as in §1.7);
* ``rescaled=True``: ``z_i' = sum_j P_ij V (z_j - z_i)`` with P evaluated at ``x = e^{tV} z``
  (eq. e:Rres). ``e^{tV}`` uses the closed form ``e^{lambda t}`` when V = lambda I;
* ``weights.ff``: ``W sigma(attention term + b)`` (eq. mlp.transfo, §1.7);
* ``mask="causal"``: token i attends to j <= i (§5.2); ``mask="window"`` with ``window=w``: token i
  attends to i - w < j <= i, a causal sliding window (§9.3; w >= n is the causal mask);
* ``beta=math.inf``: hardmax, uniform over the argmax set (§5.3);
* ``sink_bias=b``: every query's logit for the first token gets ``+ b`` (a key bias: the first token
  becomes an attention sink, §9.4); 0 is the plain model;
* ``normalization="unnormalized"``: USA, ``(1/n) sum_j e^{beta<.,.>} V x_j`` (§5.1);
* ``normalization="linear"``: linear attention, ``(1/n) sum_j beta<Q x_i, K x_j> V x_j`` (§9.1);
* ``geometry="sphere"``: tangent projection ``y -> y - <x_i, y> x_i`` (§5.1, eq. SA), taken at the
  direction ``x_i / |x_i|`` (``y - <x_i, y> x_i / |x_i|^2``): the same field on the sphere, and off it
  every radius is constant, so a rounding or truncation error of the radius does not grow (with
  ``y - <x_i, y> x_i`` the radius obeys ``d|x_i|^2/dt = 2 <x_i, y> (1 - |x_i|^2)``, and the sphere
  repels wherever ``<x_i, y> < 0``, as for V = -I: ``|x| - 1`` reached 5e-4 at t = 30 from a polygon);
* ``scheme`` (with ``geometry="sphere"``): the layer-normalization schemes of arXiv 2510.22026 on the split
  x_j = r_j theta_j, with A_j = sum_k w_jk V theta_k evaluated at the directions and
  theta_j' = s_j^{-1} P_{theta_j} A_j: ``post`` (s = 1, r' = 0: the default, tokens on the unit
  sphere), ``pre`` (s = r, r' = <theta, A>: x' = A), ``mix`` (post until ``scheme_tau``, then pre),
  ``peri`` (s = r |A|, r' = <theta, A> / |A|: x' = A / |A|), ``ngpt`` (s = |A| / ``scheme_alpha``,
  r' = 0: nGPT normalises the attention output before its step, theta' = alpha P_theta A / |A|,
  Loshchilov et al., arXiv 2410.01131) and ``sqrt``
  (s = sqrt(t + 1), r' = 0). The Peri-LN row follows our reading of arXiv 2510.22026's table, which marks it as read from a
  truncated source. From unit tokens the schemes whose speed is the same for every token
  (sqrt, Mix-LN before its switch) move like Post-LN at speed c(t): ``unit_sphere_field`` is that
  form, which ``simulate`` integrates.

Combinations the mathematics does not define are rejected at construction. A ``Model`` holds
parameters only: it has no cache, pickles small and carries no device tensors of its own.
``prepare(model, like)`` builds the immutable :class:`Prepared` arguments once per run (weights
cast to ``like``'s dtype and device, ``Q^T K`` when cheaper, the scalar lambda when V = lambda I,
the plain-softmax fast path, identity factors to skip, and the C field where :func:`native_reason`
allows it: like the dense or fused kernel of :func:`resolve_kernel`, a property of the model and the
state, which :mod:`attndyn.core.plan` reads); ``vector_field(t, x, args)`` is the ``f(t, x, args)`` the solvers
integrate. ``velocity(t, x, model)`` is the one-off convenience: it accepts NumPy arrays or
tensors and returns the same kind.
"""

from __future__ import annotations

import math
import os
from dataclasses import KW_ONLY, dataclass
from typing import get_args

import numpy as np
import torch

from attndyn.core import compiled
from attndyn.core.attention import Weighting, causal_mask, dense_attention, fused_attention, resolve_beta, weights_from_scores, with_sink_bias
from attndyn.core.attention import scores as _scores
from attndyn.core.names import Geometry, Kernel, Mask, Normalization, Scheme
from attndyn.core.schemes import SCHEME_TABLE, SCHEMES
from attndyn.core.weights import Weights, as_float_tensor

# Model options: defined once in attndyn.core.names (without torch), reused by the config schema
MASKS: tuple[str, ...] = get_args(Mask)
GEOMETRIES: tuple[str, ...] = get_args(Geometry)
ATTENTIONS: tuple[str, ...] = get_args(Kernel)
NORMALIZATIONS: tuple[str, ...] = get_args(Normalization)


def _choice(value, allowed, name):
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not an option; choose one of {allowed}.")


@dataclass(frozen=True, eq=False)
class Model:
    """Self-attention dynamics with its options (see the module docstring).

    Derive variants with ``dataclasses.replace(model, ...)``, which keeps every other option.
    """

    weights: Weights
    _: KW_ONLY
    beta: float = 1.0
    mask: Mask = "full"
    geometry: Geometry = "euclidean"
    rescaled: bool = False
    attention: Kernel = "auto"
    normalization: Normalization = "softmax"
    scheme: Scheme = "post"
    scheme_tau: float = 1.0
    scheme_alpha: float = 1.0
    window: int | None = None
    sink_bias: float = 0.0

    def __post_init__(self):
        if not isinstance(self.weights, Weights):
            raise TypeError(f"weights must be an attndyn.Weights, not {type(self.weights).__name__}.")
        _choice(self.mask, MASKS, "mask")
        if self.mask == "window":
            if isinstance(self.window, bool) or not isinstance(self.window, int | np.integer) or self.window < 1:
                raise ValueError(f"mask='window' needs window = an integer >= 1 (the tokens each one attends to); got window={self.window!r}.")
            object.__setattr__(self, "window", int(self.window))
        elif self.window is not None:
            raise ValueError(f"window={self.window!r} applies to mask='window' only; this model has mask={self.mask!r}.")
        _choice(self.geometry, GEOMETRIES, "geometry")
        _choice(self.attention, ATTENTIONS, "attention")
        _choice(self.normalization, NORMALIZATIONS, "normalization")
        _choice(self.scheme, SCHEMES, "scheme")
        if self.scheme != "post" and self.geometry != "sphere":
            raise ValueError(f"scheme={self.scheme!r} is a layer-normalization scheme on the radius/direction split; it needs geometry='sphere'.")
        for name in ("scheme_tau", "scheme_alpha"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be a finite number > 0.")
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
        hard = resolve_beta(beta)[1]
        if isinstance(self.sink_bias, bool) or not (isinstance(self.sink_bias, int | float) and math.isfinite(self.sink_bias)):
            raise ValueError(f"sink_bias={self.sink_bias!r} must be a finite number (0 for no sink).")
        object.__setattr__(self, "sink_bias", float(self.sink_bias))
        if hard and self.sink_bias:
            raise ValueError("sink_bias with beta=inf is not defined: the hardmax compares unscaled scores, to which a bias cannot be added.")
        if hard and self.normalization == "unnormalized":
            raise ValueError("beta=inf with normalization='unnormalized' is not defined: exp(inf * score) has no limit.")
        if hard and self.normalization == "linear":
            raise ValueError("beta=inf with normalization='linear' is not defined: linear attention has no hardmax limit.")
        if self.attention == "fused" and hard:
            raise ValueError("attention='fused' computes a softmax and has no hardmax; use attention='dense' for beta=inf.")
        if self.attention == "fused" and self.normalization in ("unnormalized", "linear"):
            raise ValueError(f"attention='fused' always normalizes rows (a softmax); use attention='dense' for normalization={self.normalization!r}.")

    @property
    def hard(self) -> bool:
        return resolve_beta(self.beta)[1]

    @property
    def weighting(self) -> Weighting:
        """How scores become weights: ``softmax``, ``hardmax`` (beta = inf), ``unnormalized`` (USA) or ``linear``."""
        if self.hard:
            return "hardmax"
        return self.normalization


@dataclass(frozen=True, eq=False)
class Prepared:
    """The resolved, device-resident arguments of :func:`vector_field` (built by :func:`prepare`).

    Weights are ``(H, m, d)``/``(H, d, d)`` tensors in the state's dtype and device; ``M = Q^T K``
    when ``m >= d`` (cheaper scores), else ``None``; ``lam`` is lambda when V = lambda I (one head),
    else ``None``; ``scale`` is beta (1 for hardmax); ``fast`` marks the one-head dense softmax path
    with ``M`` (fewest torch calls, for small systems). ``check`` makes every evaluation verify
    ``e^{tV}`` and the logits eagerly (a host synchronisation; the one-off ``velocity`` sets it,
    the solvers do not and check the state at save times instead).
    """

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    VT: torch.Tensor
    VT_cat: torch.Tensor
    M: torch.Tensor | None
    W_T: torch.Tensor | None
    b: torch.Tensor | None
    sigma: str | None
    bias_inside: bool
    lam: float | None
    eig: tuple | None  # V = S diag(w) S^-1 on the host (NumPy complex), for e^{tV} without matrix_exp
    scale: float
    weighting: Weighting
    causal: bool
    window: int | None
    sink_bias: float
    kernel: Kernel
    rescaled: bool
    sphere: bool
    scheme: str
    scheme_tau: float
    scheme_alpha: float
    fast: bool
    check: bool
    mask: torch.Tensor | None
    M_identity: bool
    V_identity: bool
    zero: torch.Tensor
    native: compiled.Native | None = None  # the field in C (attndyn.core.compiled), when it covers the model
    # V_h = A_h B_h (Weights.V_factors): all heads' B^T side by side (d, H r) and A^T stacked (H r, d)
    VB_cat: torch.Tensor | None = None
    VA_cat: torch.Tensor | None = None

    @property
    def heads(self) -> int:
        return self.V.shape[0]


# attention="auto" takes the fused kernel from this many attention entries per evaluation (batch x n^2),
# or from this n: fused (SDPA, O(n) memory) wins from about 2^20 entries (one system of 1024 tokens,
# 64 systems of 128) and loses to dense below about 2^18 (benchmarks/kernels.py)
AUTO_FUSED_ENTRIES = 2**20
AUTO_FUSED_N = 512


def resolve_kernel(model: Model, batch: int, n: int) -> str:
    """The kernel ``attention="auto"`` runs for ``batch`` systems of ``n`` tokens: fused (O(n) memory,
    SDPA) for large plain-softmax states, dense otherwise; an explicit ``dense``/``fused`` is kept."""
    if model.attention != "auto":
        return model.attention
    plain = model.weighting == "softmax" and model.mask in ("full", "causal") and not model.sink_bias
    large = batch * n * n >= AUTO_FUSED_ENTRIES or n >= AUTO_FUSED_N
    return "fused" if plain and large else "dense"


# The C field (one evaluation in C, one thread, for any solver) is used for d <= NATIVE_MAX_D when torch
# runs one thread; when it runs two, for d <= NATIVE_TWO_THREAD_D, or d <= NATIVE_MAX_D for a batch of 4
# or more systems; with more threads torch keeps the field. The crossovers are where one C thread stops
# beating torch's kernels (benchmarks/threads.py and benchmarks/solvers.py measure them): the C field's
# advantage is its vectorised exponential and the absence of per-call overhead, both of which shrink
# as d grows and as torch spreads a large evaluation over threads.
NATIVE_MAX_D = 8
NATIVE_TWO_THREAD_D = 4


def native_reason(model: Model, like: torch.Tensor) -> str | None:
    """Why the field of ``model`` at states like ``like`` is not evaluated in C (``None`` when it is)."""
    w = model.weights
    d = like.shape[-1]
    batch = math.prod(like.shape[:-2])
    threads = torch.get_num_threads()
    checks = [
        (os.environ.get("ATTNDYN_COMPILED", "1") != "0", "ATTNDYN_COMPILED=0"),
        (like.dtype == torch.float64 and like.device.type == "cpu", "not float64 on the CPU"),
        (w.heads == 1 and w.ff is None, "several heads or a feed-forward layer"),
        (
            model.mask == "full" and model.normalization in ("softmax", "unnormalized") and model.sink_bias == 0.0,
            "a mask, a sink or another normalization",
        ),
        (math.isfinite(model.beta), "hardmax"),
        (d <= NATIVE_MAX_D, f"d > {NATIVE_MAX_D}"),
        (threads == 1 or (threads == 2 and (d <= NATIVE_TWO_THREAD_D or batch >= 4)), f"torch runs {threads} threads, which beat one C thread here"),
        (not (w.Q.requires_grad or w.K.requires_grad or w.V.requires_grad), "weights that require gradients"),
        (not (model.rescaled and model.geometry == "sphere"), "the rescaled model on the sphere"),
    ]
    for ok, why in checks:
        if not ok:
            return why
    if compiled.library() is None:
        return compiled.STATUS["reason"]
    return None


def scalar_V(model: Model) -> bool:
    """Whether the (one) value matrix is lambda I."""
    V = model.weights.V[0]
    return bool(torch.equal(V, V[0, 0] * torch.eye(model.weights.d, dtype=V.dtype)))


def native_field(model: Model, like: torch.Tensor) -> compiled.Native | None:
    """The C field of ``model`` for states like ``like`` (what ``dynamics.prepare`` stores), or ``None``
    (see :func:`native_reason`)."""
    if native_reason(model, like) is not None:
        return None
    w = model.weights
    M = (w.Q[0].transpose(0, 1) @ w.K[0]).detach().double().numpy()
    V = w.V[0].detach().double().numpy()
    if model.rescaled:
        form = "rescaled, V = lambda I" if scalar_V(model) else "rescaled, any V"
    else:
        form = "sphere, Post-LN" if model.geometry == "sphere" else "plain"
    return compiled.native_spec(M, V, form, model.beta, usa=model.normalization == "unnormalized")


def prepare(model: Model, like: torch.Tensor, *, check: bool = False) -> Prepared:
    """Resolve ``model`` for states shaped and typed like ``like`` ``(*batch, n, d)``."""
    if not isinstance(model, Model):
        raise TypeError(f"model must be an attndyn.Model, not {type(model).__name__}.")
    _check_state(like, model)
    w = model.weights
    dtype, device = like.dtype, like.device

    def cast(t):
        return t.to(dtype=dtype, device=device)

    Q, K, V = cast(w.Q), cast(w.K), cast(w.V)
    VT = V.transpose(-1, -2).contiguous()
    # all heads' V^T side by side, (d, H d): one GEMM for every head's values
    VT_cat = VT.permute(1, 0, 2).reshape(w.d, w.heads * w.d).contiguous()
    # (x Q^T K) x^T costs less than (x Q^T)(x K^T)^T when m >= d.
    M = (Q.transpose(-1, -2) @ K).contiguous() if w.m >= w.d else None
    scale, hard = resolve_beta(model.beta)
    V0 = w.V[0]
    lam = float(V0[0, 0])
    is_scalar = w.heads == 1 and bool(torch.equal(V0, lam * torch.eye(w.d, dtype=V0.dtype)))
    ff = w.ff
    n = like.shape[-2]
    kernel = resolve_kernel(model, math.prod(like.shape[:-2]), n)
    return Prepared(
        Q=Q,
        K=K,
        V=V,
        VT=VT,
        VT_cat=VT_cat,
        M=M,
        W_T=None if ff is None else cast(ff.W).transpose(-1, -2).contiguous(),
        b=None if ff is None or ff.bias is None else cast(ff.bias),
        sigma=None if ff is None else ff.sigma,
        bias_inside=True if ff is None else ff.bias_inside,
        lam=lam if is_scalar else None,
        eig=_eigen_factors(w.V[0]) if model.rescaled and w.heads == 1 and not is_scalar else None,
        scale=scale,
        weighting=model.weighting,
        causal=model.mask != "full",
        window=model.window,
        sink_bias=model.sink_bias,
        kernel=kernel,
        rescaled=model.rescaled,
        sphere=model.geometry == "sphere",
        scheme=model.scheme,
        scheme_tau=float(model.scheme_tau),
        scheme_alpha=float(model.scheme_alpha),
        fast=w.heads == 1 and M is not None and kernel == "dense" and model.weighting == "softmax",
        check=check,
        mask=causal_mask(n, device, model.window) if model.mask != "full" else None,
        M_identity=M is not None and w.heads == 1 and bool(torch.equal(M[0], torch.eye(w.d, dtype=dtype, device=device))),
        V_identity=is_scalar and lam == 1.0,
        zero=torch.zeros((), dtype=dtype, device=device),
        native=None if check else native_field(model, like),
        VB_cat=None if w.V_factors is None else cast(w.V_factors[1]).transpose(-1, -2).permute(1, 0, 2).reshape(w.d, -1).contiguous(),
        VA_cat=None if w.V_factors is None else cast(w.V_factors[0]).transpose(-1, -2).reshape(-1, w.d).contiguous(),
    )


# e^{tV} from V = S diag(w) S^-1 when the eigenvectors are this well conditioned (else matrix_exp)
EIG_COND_MAX = 1e6


def _eigen_factors(V: torch.Tensor) -> tuple | None:
    """``(S, w, S^-1)`` of a diagonalisable V with well-conditioned eigenvectors, or None.

    ``e^{tV} = S e^{t w} S^-1`` then costs d exponentials and one d x d product per evaluation instead
    of a ``torch.linalg.matrix_exp`` (which costs more than the rest of a small system's field).
    A defective or nearly defective V (Jordan blocks, condition number above ``EIG_COND_MAX``) keeps
    matrix_exp.
    """
    A = V.detach().cpu().double().numpy()
    w, S = np.linalg.eig(A)
    cond = np.linalg.cond(S)
    if not np.isfinite(cond) or cond > EIG_COND_MAX:
        return None
    return S, w, np.linalg.inv(S)


def _expm_from_eigen(eig: tuple, t: float) -> np.ndarray:
    S, w, S_inv = eig
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow gives inf, which the callers report
        E = (S * np.exp(t * w)) @ S_inv
    return E.real if np.iscomplexobj(E) else E


def _check_state(x: torch.Tensor, model: Model) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch tensor, not {type(x).__name__}.")
    if x.ndim < 2 or x.shape[-1] != model.weights.d:
        raise ValueError(f"x must have shape (*batch, n, d) with d = {model.weights.d}; got shape {tuple(x.shape)}.")


def score_inputs(t: float, x: torch.Tensor, args: Prepared) -> tuple[torch.Tensor, float]:
    """Positions at which attention is evaluated, and the score scale.

    For the rescaled form, attention is evaluated at ``e^{tV} z`` (the rescaled variables z = e^{-tV} x of arXiv 2305.05465). With V = lambda I the
    factor ``e^{2 lambda t}`` is folded into the scale (a Python float, so its overflow is a clear
    error at no device cost).
    """
    scale = args.scale
    if not args.rescaled or t == 0:
        return x, scale
    lam = args.lam
    if lam is not None:
        try:
            scale = scale * math.exp(2.0 * lam * t)
        except OverflowError:
            scale = math.inf
        if not math.isfinite(scale):
            raise FloatingPointError(f"e^(tV) overflows at t={t:g} (V = {lam:g} I): the logits beta*e^(2 lambda t) exceed float range.")
        return x, scale
    if args.eig is not None:
        E = torch.from_numpy(_expm_from_eigen(args.eig, t)).to(dtype=x.dtype, device=x.device)
    else:
        E = torch.linalg.matrix_exp(t * args.V[0])
    if args.check and not bool(torch.isfinite(E).all()):
        raise FloatingPointError(f"e^(tV) overflows at t={t:g}: the rescaled dynamics cannot be evaluated further.")
    return x @ E.transpose(-1, -2), scale


def _mask_for(args: Prepared, n: int, device) -> torch.Tensor:
    m = args.mask
    return m if m is not None and m.shape[-1] == n else causal_mask(n, device, args.window)


def _softmax_rows(L: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis of fresh logits ``L`` (which it may overwrite), always with the
    row maximum subtracted.

    Many short rows (a batch of small systems, rows of at most 32) go through four plain passes,
    which run faster than ``torch.softmax``'s kernel on such shapes (benchmarks/kernels.py); every
    other shape uses ``torch.softmax``. Overflowing logits give NaN either way.
    """
    if L.ndim == 3 and L.shape[0] >= 16 and L.shape[-1] <= 32 and L.device.type == "cpu":
        P = L.sub_(L.amax(-1, keepdim=True)).exp_()  # in place: the caller's fresh logits
        return P.mul_(P.sum(-1, keepdim=True).reciprocal_())
    return torch.softmax(L, dim=-1)


def _fast_term(xq: torch.Tensor, xb: torch.Tensor, args: Prepared, scale: float, subtract_own: bool) -> torch.Tensor:
    """One head, dense softmax, ``m >= d``, states ``(n, d)`` or ``(B, n, d)``: the fewest torch calls.

    Small systems are dominated by per-call overhead (a few microseconds a call), so the scale is
    folded into a GEMM (``alpha``), ``P v - v`` is one ``addmm``/``baddbmm``, and identity factors
    (``Q^T K = I``, ``V = I``) are skipped. Overflowing logits give NaN here, caught at the
    solvers' save times.
    """
    batched = xb.ndim == 3
    values = xb if args.V_identity else xb @ args.VT[0]
    left = xq if args.M_identity else xq @ args.M[0]
    right = xq.transpose(-1, -2)
    if batched:
        L = torch.baddbmm(args.zero, left, right, beta=0.0, alpha=scale)
    else:
        L = torch.addmm(args.zero, left, right, beta=0.0, alpha=scale)
    if args.sink_bias:
        L[..., 0] += args.sink_bias  # fresh logits: in place
    if args.causal:
        L = L.masked_fill_(_mask_for(args, L.shape[-1], L.device), -math.inf)
    P = _softmax_rows(L)
    if subtract_own:
        return torch.baddbmm(values, P, values, beta=-1.0) if batched else torch.addmm(values, P, values, beta=-1.0)
    return P @ values


def attention_term(xq: torch.Tensor, xb: torch.Tensor, args: Prepared, scale: float, *, subtract_own: bool) -> torch.Tensor:
    """``sum_h sum_j A^h_ij V_h x_j`` with scores at ``xq`` and values at ``xb`` (``(*batch, n, d)``).

    With ``subtract_own`` the own value ``V_0 x_i`` is subtracted (the rescaled form, one head).
    """
    if args.fast and xb.ndim <= 3:
        return _fast_term(xq, xb, args, scale, subtract_own)
    shape = xb.shape
    n, d = shape[-2:]
    xq = xq.reshape(-1, n, d)
    xb = xb.reshape(-1, n, d)
    heads = args.heads
    factored = args.VB_cat is not None and not subtract_own
    if factored:  # V_h = A_h B_h of rank r: attend over B_h x (r numbers a token), then apply A_h
        values = (xb @ args.VB_cat).reshape(xb.shape[0], n, heads, -1).transpose(1, 2)
    elif heads == 1:
        values = (xb @ args.VT[0]).unsqueeze(1)
    else:
        values = (xb @ args.VT_cat).reshape(xb.shape[0], n, heads, d).transpose(1, 2)
    if args.kernel == "fused":
        out = fused_attention(xq, values, args.Q, args.K, scale=scale, causal=args.causal, window=args.window, sink_bias=args.sink_bias)
    else:
        out = dense_attention(
            xq,
            values,
            args.Q,
            args.K,
            scale=scale,
            weighting=args.weighting,
            causal=args.causal,
            M=args.M,
            check=args.check,
            window=args.window,
            sink_bias=args.sink_bias,
        )
    if factored:
        out = out.transpose(1, 2).reshape(xb.shape[0], n, -1) @ args.VA_cat
    else:
        out = out[:, 0] if heads == 1 else out.sum(1)
    if subtract_own:
        out = out - values[:, 0]
    return out.reshape(shape)


def vector_field(t: float, x: torch.Tensor, args: Prepared) -> torch.Tensor:
    """The vector field at time ``t`` and state ``x`` ``(*batch, n, d)``, with prepared ``args``.

    See the module docstring for the equation of each option.
    """
    # attention at the directions theta = x / r (Karagodin, Ge, Polyanskiy, Rigollet, arXiv 2510.22026)
    if args.sphere and SCHEME_TABLE[args.scheme].compiled != "all":
        r = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        theta = x / r
        xq, scale = score_inputs(t, theta, args)
        out = _feed_forward(attention_term(xq, theta, args, scale, subtract_own=False), args)
        return SCHEME_TABLE[args.scheme].velocity(t, out, theta, r, args)
    return _plain_field(t, x, args)


def _plain_field(t: float, x: torch.Tensor, args: Prepared) -> torch.Tensor:
    """The field without a normalization scheme (on the sphere: Post-LN, the tangent projection at x)."""
    if args.native is not None and not x.requires_grad:
        if args.native.form == "rescaled, any V":  # rescaled, V not a multiple of I: <E z_i, M E z_j> = <z_i, E^T M E z_j>, E = e^{tV}
            E = _expm_from_eigen(args.eig, t) if args.eig is not None else torch.linalg.matrix_exp(t * args.V[0]).numpy()
            return compiled.field(args.native, x, args.scale, E.T @ args.native.M @ E)
        _, scale = score_inputs(t, x, args)
        return compiled.field(args.native, x, scale)
    xq, scale = score_inputs(t, x, args)
    out = _feed_forward(attention_term(xq, x, args, scale, subtract_own=args.rescaled), args)
    if args.sphere:  # the tangent projection at x / |x| (radii constant; see the module docstring)
        coef = torch.linalg.vecdot(out, x).div_(torch.linalg.vecdot(x, x))
        out = torch.addcmul(out, coef.unsqueeze(-1), x, value=-1.0)
    return out


def _feed_forward(out: torch.Tensor, args: Prepared) -> torch.Tensor:
    """``W sigma(out + b)`` (or ``W sigma(out) + b``) when the model has a feed-forward layer."""
    if args.sigma is None:
        return out
    b = args.b
    if b is not None and args.bias_inside:
        out = out + b
    if args.sigma == "relu":
        out = torch.relu(out)
    elif args.sigma == "tanh":
        out = torch.tanh(out)
    out = out @ args.W_T
    if b is not None and not args.bias_inside:
        out = out + b
    return out


def unit_sphere_field(t: float, x: torch.Tensor, args: Prepared) -> torch.Tensor:
    """The field :func:`attndyn.core.simulation.simulate` integrates on the sphere, where tokens start at
    unit norm, for a scheme with a ``unit_speed`` (:mod:`attndyn.core.schemes`).

    Under sqrt-scaling and Mix-LN before ``scheme_tau`` every radius is constant and the speed
    s(t) is the same for all tokens, so tokens that start on the unit sphere stay there and
    x' = c(t) P_x A(x) with c = 1 / sqrt(t + 1) and 1: c(t) times the Post-LN field. The two
    fields differ off the sphere only, so their solutions from unit tokens are the same, and this
    one costs a Post-LN evaluation (the radius/direction split adds three small torch calls, a
    large share of a small system's step). Where the scheme has no such form (Mix-LN from
    ``scheme_tau`` on), :func:`vector_field`.
    """
    speed = SCHEME_TABLE[args.scheme].unit_speed
    c = None if speed is None else speed(t, args)
    if c is None:
        return vector_field(t, x, args)
    out = _plain_field(t, x, args)
    return out if c == 1.0 else out.mul_(c)


def velocity(t: float, x: np.ndarray | torch.Tensor, model: Model) -> np.ndarray | torch.Tensor:
    """The vector field of ``model`` at time ``t`` and state ``x`` of shape ``(*batch, n, d)``.

    ``x`` may be a NumPy array (the result is then a NumPy array) or a tensor (a tensor of the
    same dtype and device). The convenience for one-off evaluations: it prepares the model on
    every call, and checks ``e^{tV}`` and the logits eagerly. See the module docstring for the
    equation of each option.
    """
    is_numpy = not isinstance(x, torch.Tensor)
    xt = as_float_tensor(x, "x") if is_numpy else x
    args = prepare(model, xt, check=True)
    out = vector_field(float(t), xt, args)
    return out.numpy() if is_numpy else out


def _raw_scores(model: Model, x, t: float) -> tuple[torch.Tensor, tuple]:
    """Unmasked scaled scores ``(B, H, n, n)`` at state ``x`` (z for a rescaled model) and time ``t``, and x's shape."""
    x = as_float_tensor(x, "x")
    _check_state(x, model)
    n, d = x.shape[-2:]
    xb = x.reshape(-1, n, d)
    args = prepare(model, xb, check=True)
    xq, scale = score_inputs(float(t), xb, args)
    return _scores(xq, args.Q, args.K, scale, args.M), tuple(x.shape)


def attention_matrix(model: Model, x: np.ndarray | torch.Tensor, t: float = 0.0) -> torch.Tensor:
    """The attention matrix ``P`` of shape ``(*batch, heads, n, n)`` at state ``x`` and time ``t``.

    For a rescaled model ``x`` is z and P is evaluated at ``e^{tV} z`` (the rescaled variables z = e^{-tV} x of arXiv 2305.05465). Always dense.
    """
    L, shape = _raw_scores(model, x, t)
    A = weights_from_scores(L, weighting=model.weighting, causal=model.mask != "full", check=True, window=model.window, sink_bias=model.sink_bias)
    n = shape[-2]
    return A.reshape(*shape[:-2], model.weights.heads, n, n)


def attention_logits(model: Model, x: np.ndarray | torch.Tensor, t: float = 0.0) -> torch.Tensor:
    """The scaled scores ``beta <Q x_i, K x_j>`` of shape ``(*batch, heads, n, n)`` (``-inf`` where masked).

    For log-domain rates (1 - P underflows long before the logits lose precision).
    With ``beta = inf`` the unscaled scores are returned.
    """
    L, shape = _raw_scores(model, x, t)
    n = shape[-2]
    if model.sink_bias and not model.hard:
        L = with_sink_bias(L, model.sink_bias)
    if model.mask != "full":
        L = L.masked_fill(causal_mask(n, L.device, model.window), -torch.inf)
    return L.reshape(*shape[:-2], model.weights.heads, n, n)
