"""Spectra of random attention matrices (arXiv 2405.18781, 2410.07799).

* :func:`quarter_circle_moments` - singular values of sqrt(n) A for row-softmax A of i.i.d.
  N(0, sigma^2) logits (the top one excluded) follow the quarter-circle law on [0, 2s] with
  s^2 = e^{sigma^2} - 1: E[s_k^2] = s^2, E[s_k^4] = 2 s^4.
"""

from __future__ import annotations

import math


def quarter_circle_moments(sigma: float) -> tuple[float, float]:
    """``(E[s^2], E[s^4])`` of the quarter-circle law with s^2 = e^{sigma^2} - 1."""
    s2 = math.expm1(sigma * sigma)
    return s2, 2.0 * s2 * s2
