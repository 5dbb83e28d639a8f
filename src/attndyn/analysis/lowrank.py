"""The attention matrix as a (near-)Boolean, low-rank matrix: Thm 2.1's objects (arXiv 2305.05465 §2).

Contract
--------
Pure functions on host arrays. ``P`` is a row-stochastic ``(n, n)`` matrix (or a stack
``(..., n, n)``); every function validates it (finite, non-negative, rows summing to 1 within
``ROW_SUM_TOL``) and raises ``ValueError`` otherwise. Tolerances are always explicit keywords.

* ``boolean_distance(P)`` = max_ij min(P_ij, 1 - P_ij); ``nearest_boolean(P)`` rounds entries;
* ``numerical_rank(P, tol=...)``: singular values above ``tol``;
* ``leaders(P, tol=...)``: the non-zero columns of P's Boolean part (some row puts more than
  1 - tol on them); ``support_columns(P, tol=...)``: columns with any entry above ``tol``;
* ``exceptional_rows(P, tol=...)``: rows farther than ``tol`` from a Boolean vector (Thm 2.1
  allows at most one);
* ``leader_log_gap(L)``: -log(1 - P_{i, lead(i)}) from the logits with log-sum-exp, since 1 - P
  underflows below 1e-16 long before the rate can be read.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

ROW_SUM_TOL = 1e-8


def as_stochastic(P: np.ndarray, name: str = "P") -> np.ndarray:
    a = np.asarray(P.detach().cpu() if hasattr(P, "detach") else P, dtype=np.float64)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.shape[-1] == 0:
        raise ValueError(f"{name} must be a square (n, n) matrix or a stack of them; got shape {a.shape}.")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} (shape {a.shape}) contains non-finite values.")
    if (a < 0).any():
        raise ValueError(f"{name} (shape {a.shape}) has negative entries (min {a.min():.3g}); it must be row-stochastic.")
    dev = np.abs(a.sum(-1) - 1).max()
    if dev > ROW_SUM_TOL:
        raise ValueError(f"rows of {name} (shape {a.shape}) do not sum to 1 (largest deviation {dev:.3g}).")
    return a


def _tol(tol) -> float:
    tol = float(tol)
    if not np.isfinite(tol) or tol <= 0:
        raise ValueError(f"tol={tol!r} must be a finite number > 0.")
    return tol


def boolean_distance(P: np.ndarray) -> float:
    a = as_stochastic(P)
    return float(np.minimum(a, 1 - a).max())


def nearest_boolean(P: np.ndarray) -> np.ndarray:
    return (as_stochastic(P) > 0.5).astype(np.float64)


def numerical_rank(P: np.ndarray, *, tol: float) -> int:
    a = as_stochastic(P)
    if a.ndim != 2:
        raise ValueError(f"numerical_rank takes one (n, n) matrix; got shape {a.shape}.")
    return int((np.linalg.svd(a, compute_uv=False) > _tol(tol)).sum())


def leaders(P: np.ndarray, *, tol: float) -> np.ndarray:
    """The non-zero columns of P's Boolean part: columns j with P_ij > 1 - tol for some row i."""
    a = as_stochastic(P)
    if a.ndim != 2:
        raise ValueError(f"leaders takes one (n, n) matrix; got shape {a.shape}.")
    return np.flatnonzero((a > 1 - _tol(tol)).any(axis=0))


def support_columns(P: np.ndarray, *, tol: float) -> np.ndarray:
    """Columns with some entry above ``tol`` (the authors' "non-zero columns", threshold 1e-4 in F-leaders)."""
    a = as_stochastic(P)
    if a.ndim != 2:
        raise ValueError(f"support_columns takes one (n, n) matrix; got shape {a.shape}.")
    return np.flatnonzero(a.max(axis=0) > _tol(tol))


def exceptional_rows(P: np.ndarray, *, tol: float) -> np.ndarray:
    a = as_stochastic(P)
    if a.ndim != 2:
        raise ValueError(f"exceptional_rows takes one (n, n) matrix; got shape {a.shape}.")
    return np.flatnonzero(np.minimum(a, 1 - a).max(axis=-1) > _tol(tol))


def leader_log_gap(L: np.ndarray) -> np.ndarray:
    """``-log(1 - P_{i, lead(i)})`` per row from logits ``L`` (``(..., n, n)``, ``-inf`` allowed where masked).

    ``lead(i)`` is the argmax of row i. Computed as logsumexp(L_i) - logsumexp(L_i without lead).
    Rows whose only finite logit is the leader give ``inf``.
    """
    L = np.asarray(L.detach().cpu() if hasattr(L, "detach") else L, dtype=np.float64)
    if L.ndim < 2 or L.shape[-1] != L.shape[-2]:
        raise ValueError(f"L must be an (n, n) matrix of logits or a stack of them; got shape {L.shape}.")
    if np.isnan(L).any() or np.isposinf(L).any():
        raise ValueError("L contains NaN or +inf logits.")
    lead = L.argmax(-1)
    rest = L.copy()
    np.put_along_axis(rest, lead[..., None], -np.inf, axis=-1)
    with np.errstate(divide="ignore"):
        return logsumexp(L, axis=-1) - logsumexp(rest, axis=-1)
