"""Parameters of the dynamics: per-head (Q, K, V) and an optional feed-forward map.

Contract
--------
* ``Weights(Q, K, V, ff=None)``: ``Q`` and ``K`` have shape ``(heads, m, d)`` (a single
  ``(m, d)`` matrix means one head), ``V`` has shape ``(heads, d, d)`` (or ``(d, d)``).
* Score convention, documented once: ``<Q x_i, K x_j> = x_i^T Q^T K x_j`` (the score convention of arXiv 2305.05465). The
  dynamics depend on (Q, K) only through ``Q^T K``; Q and K may be rectangular.
* ``FeedForward(W, sigma, bias=None)`` is the map of arXiv 2305.05465 §12 (eq. mlp.transfo):
  ``u -> W sigma(u + b)``, applied to the attention term.
* Inputs may be NumPy arrays or torch tensors. They are stored as torch tensors with their
  floating dtype; the dynamics cast them to the dtype and device of the state.
* Validation happens at construction: wrong shapes, non-finite entries, integer or complex
  dtypes raise ``ValueError``/``TypeError`` with a sentence naming the value and its shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

SIGMAS = ("relu", "tanh", "identity")


def as_float_tensor(value: np.ndarray | torch.Tensor | list | float, name: str) -> torch.Tensor:
    """Convert an array-like to a floating torch tensor, rejecting integer/complex/non-finite."""
    if isinstance(value, torch.Tensor):
        t = value
    elif isinstance(value, np.ndarray | list | tuple | float | int):
        arr = np.asarray(value)
        if arr.dtype.kind not in "fiub":
            raise TypeError(f"{name} has dtype {arr.dtype}; a real floating array is needed.")
        t = torch.from_numpy(np.ascontiguousarray(arr))
    else:
        raise TypeError(f"{name} must be a NumPy array or a torch tensor, not {type(value).__name__}.")
    if t.is_complex():
        raise TypeError(f"{name} has complex dtype {t.dtype} (shape {tuple(t.shape)}); a real floating dtype is needed.")
    if not t.is_floating_point():
        raise TypeError(f"{name} has dtype {t.dtype} (shape {tuple(t.shape)}); a floating dtype is needed (use float64).")
    if t.dtype not in (torch.float64, torch.float32):
        raise TypeError(
            f"{name} has dtype {t.dtype}: attndyn integrates in float64 or float32 only (its tolerances and checks do not hold at "
            "half precision); convert it with .double()."
        )
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} (shape {tuple(t.shape)}) contains non-finite values.")
    return t


def to_numpy(a: np.ndarray | torch.Tensor | list | float) -> np.ndarray:
    """A host float64 NumPy array from a tensor (any device, gradients detached) or an array-like.

    The one boundary between the torch engine and the NumPy analysis modules.
    """
    if isinstance(a, torch.Tensor):
        return a.detach().to("cpu", torch.float64).numpy()
    return np.asarray(a, dtype=np.float64)


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu")


def _per_head(t: torch.Tensor, name: str) -> torch.Tensor:
    if t.ndim == 2:
        return t.unsqueeze(0)
    if t.ndim == 3:
        return t
    raise ValueError(f"{name} must have shape (m, d) or (heads, m, d); got shape {tuple(t.shape)}.")


@dataclass(frozen=True)
class FeedForward:
    """Feed-forward map ``u -> W sigma(u + b)`` of arXiv 2305.05465 §12 (eq. mlp.transfo).

    Parameters
    ----------
    W : (d, d) array
    sigma : {"relu", "tanh", "identity"}
    bias : (d,) array or None
        Added inside sigma when ``bias_inside`` (default), outside otherwise.
    """

    W: torch.Tensor
    sigma: str = "identity"
    bias: torch.Tensor | None = None
    bias_inside: bool = True

    def __post_init__(self):
        W = as_float_tensor(self.W, "FeedForward W")
        if W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise ValueError(f"FeedForward W must be a square (d, d) matrix; got shape {tuple(W.shape)}.")
        if self.sigma not in SIGMAS:
            raise ValueError(f"FeedForward sigma {self.sigma!r} is unknown; choose one of {SIGMAS}.")
        object.__setattr__(self, "W", _host(W))
        if self.bias is not None:
            b = _host(as_float_tensor(self.bias, "FeedForward bias"))
            if b.shape != (W.shape[0],):
                raise ValueError(f"FeedForward bias must have shape ({W.shape[0]},) to match W; got {tuple(b.shape)}.")
            object.__setattr__(self, "bias", b)

    @property
    def d(self) -> int:
        return self.W.shape[0]


@dataclass(frozen=True)
class Weights:
    """Per-head query, key and value matrices (arXiv 2305.05465 §12, multi-head).

    ``Q``, ``K``: ``(heads, m, d)``; ``V``: ``(heads, d, d)``. One head may be given as 2-D
    matrices. ``ff`` is an optional :class:`FeedForward`. ``V_factors``: optionally ``(A, B)`` with
    ``A`` ``(heads, d, r)`` and ``B`` ``(heads, r, d)``, ``V_h = A_h B_h`` to rounding (checked): a
    trained head's ``W_O,h W_V,h`` of rank r = hd < d. The field then computes each head's values as
    ``A_h (B_h x)``, which costs ``2 r d`` a token instead of ``d^2`` (the same numbers to rounding).
    """

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    ff: FeedForward | None = None
    V_factors: tuple[torch.Tensor, torch.Tensor] | None = None

    def __repr__(self) -> str:
        ff = f", feed-forward {self.ff.sigma}" if self.ff is not None else ""
        return f"Weights({self.heads} head{'s' if self.heads > 1 else ''}, Q/K {self.m} x {self.d}, V {self.d} x {self.d}{ff})"

    def __post_init__(self):
        Q = _per_head(as_float_tensor(self.Q, "Q"), "Q")
        K = _per_head(as_float_tensor(self.K, "K"), "K")
        V = _per_head(as_float_tensor(self.V, "V"), "V")
        if Q.shape != K.shape:
            raise ValueError(f"Q and K must have the same shape (heads, m, d); got Q {tuple(Q.shape)} and K {tuple(K.shape)}.")
        heads, m, d = Q.shape
        if d == 0 or m == 0:
            raise ValueError(f"Q has shape {tuple(Q.shape)}; m and d must be positive.")
        if V.shape != (heads, d, d):
            raise ValueError(f"V must have shape (heads, d, d) = ({heads}, {d}, {d}) to match Q {tuple(Q.shape)}; got {tuple(V.shape)}.")
        if self.ff is not None:
            if not isinstance(self.ff, FeedForward):
                raise TypeError(f"ff must be a FeedForward or None, not {type(self.ff).__name__}.")
            if self.ff.d != d:
                raise ValueError(f"FeedForward W has shape {tuple(self.ff.W.shape)} but the weights have d = {d}.")
        # Parameters live on the host: a Weights (and so a Model) pickles small and device-free;
        # the engine casts them to the state's device once per run (attndyn.core.dynamics.prepare).
        if self.V_factors is not None:
            A = _per_head(as_float_tensor(self.V_factors[0], "V_factors[0]"), "V_factors[0]")
            B = _per_head(as_float_tensor(self.V_factors[1], "V_factors[1]"), "V_factors[1]")
            r = A.shape[-1]
            if A.shape != (heads, d, r) or B.shape != (heads, r, d):
                raise ValueError(f"V_factors must have shapes (heads, d, r), (heads, r, d) with d = {d}; got {tuple(A.shape)}, {tuple(B.shape)}.")
            AB = A.to(V.dtype) @ B.to(V.dtype)
            tol = 1e3 * torch.finfo(V.dtype).eps * max(1.0, float(V.abs().max()), float((A.abs() @ B.abs()).max()))
            if not bool((AB - V).abs().max() <= tol):
                raise ValueError(f"V_factors: A B differs from V by {float((AB - V).abs().max()):.3g}, more than rounding ({tol:.3g}).")
            object.__setattr__(self, "V_factors", (_host(A), _host(B)))
        object.__setattr__(self, "Q", _host(Q))
        object.__setattr__(self, "K", _host(K))
        object.__setattr__(self, "V", _host(V))

    @property
    def heads(self) -> int:
        return self.Q.shape[0]

    @property
    def d(self) -> int:
        return self.Q.shape[2]

    @property
    def m(self) -> int:
        return self.Q.shape[1]

    def bilinear(self) -> torch.Tensor:
        """The matrices ``Q_h^T K_h`` of the score forms, shape ``(heads, d, d)``."""
        return self.Q.transpose(-1, -2) @ self.K

    @classmethod
    def identity(cls, d: int, *, dtype=torch.float64) -> Weights:
        """Q = K = V = I_d (arXiv 2305.05465, eq. e:Idnonresca)."""
        eye = torch.eye(d, dtype=dtype)
        return cls(eye, eye, eye)

    @classmethod
    def from_value(cls, V, *, QK=None) -> Weights:
        """One head with value matrix ``V`` and Q = I, K = QK (default I), so that Q^T K = QK."""
        V = as_float_tensor(V, "V")
        if V.ndim != 2:
            raise ValueError(f"from_value expects a single (d, d) V; got shape {tuple(V.shape)}.")
        eye = torch.eye(V.shape[-1], dtype=V.dtype)
        K = eye if QK is None else as_float_tensor(QK, "QK")
        return cls(eye, K, V)
