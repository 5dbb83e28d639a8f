"""Causal attention at beta = 0 and its depth rollout (arXiv 2502.01951).

* :func:`cesaro` - the causal softmax at beta = 0 (C_ij = 1/i for j <= i, 1-based), and
  :func:`causal_flow` its exact flow e^{tC} x0;
* :func:`rollout_weights` - row n of (a I + (1 - a) C)^H, the exact depth-H influence on the last token,
  and :func:`primacy_tail` the logarithmic-tail approximation (accurate for j >~ 10).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import expm


def cesaro(n: int) -> np.ndarray:
    """The causal softmax at beta = 0: C_ij = 1/i for j <= i (rows 1-based)."""
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def causal_flow(x0: np.ndarray, t: float) -> np.ndarray:
    """The exact beta = 0 causal flow with V = I: ``e^{tC} x0`` (matrix exponential, SciPy)."""
    return expm(t * cesaro(x0.shape[-2])) @ x0


def rollout_weights(n: int, H: int, a: float) -> np.ndarray:
    """Row n of ``(a I + (1 - a) C)^H``: the weight of token j on the last token after H layers."""
    M = a * np.eye(n) + (1.0 - a) * cesaro(n)
    row = np.zeros(n)
    row[-1] = 1.0
    for _ in range(H):
        row = row @ M
    return row


def primacy_tail(j: np.ndarray, n: int, H: int, a: float) -> np.ndarray:
    """(1/n) sum_{k=1}^H binom(H, k) a^{H-k} (1-a)^k (ln(n/j))^{k-1} / (k-1)!, for tokens j < n (arXiv 2502.01951, 2603.10123)."""
    L = np.log(n / np.asarray(j, dtype=np.float64))
    return sum(math.comb(H, k) * a ** (H - k) * (1 - a) ** k * L ** (k - 1) / math.factorial(k - 1) for k in range(1, H + 1)) / n
