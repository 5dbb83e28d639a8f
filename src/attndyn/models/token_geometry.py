"""Token geometry of hidden states: how clustered, how low-rank, which tokens lead.

Contract
--------
Pure functions of NumPy arrays (a token matrix ``(n, d)`` or an attention matrix ``(n, n)``), no
I/O: ``mean_cosine`` (mean pairwise cosine similarity), ``effective_rank`` (the exponential of the
entropy of the normalised singular values), ``most_attended`` (the tokens whose columns receive the most
attention, a proxy for the paper's leaders of Theorem 2.1 of arXiv 2305.05465, which
``attndyn.analysis.lowrank.leaders`` computes exactly from the Boolean part of P). The first two divide
each token by its norm: ``zero_norm_rows`` names the tokens for which they are undefined, which the
pages refuse before computing them.
"""

from __future__ import annotations

import numpy as np


def zero_norm_rows(x: np.ndarray) -> list[int]:
    """The rows of ``x`` ``(n, d)`` whose norm is zero: a zero vector has no direction, so its cosine with
    any token (and the unit-normalised matrix of :func:`effective_rank`) is undefined."""
    return [int(k) for k in np.flatnonzero(np.linalg.norm(x, axis=-1) == 0)]


def mean_cosine(x: np.ndarray) -> float:
    u = x / np.linalg.norm(x, axis=-1, keepdims=True)
    G = u @ u.T
    n = len(G)
    return float((G.sum() - np.trace(G)) / (n * (n - 1))) if n > 1 else 1.0


def effective_rank(x: np.ndarray) -> float:
    """exp of the entropy of the normalized singular values of the unit-normalized (uncentred) tokens."""
    u = x / np.linalg.norm(x, axis=-1, keepdims=True)
    s = np.linalg.svd(u, compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def most_attended(P: np.ndarray, tokens: list[str], k: int = 3) -> list[str]:
    """The k tokens receiving the most attention (column sums of P averaged over heads)."""
    col = P.reshape(-1, P.shape[-2], P.shape[-1]).mean(0).sum(0)
    return [f"{tokens[j]}#{j}" for j in np.argsort(-col)[:k]]
