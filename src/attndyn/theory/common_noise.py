"""Two tokens under common noise (derived here; arXiv 2601.21942 states a phase transition in (interaction, d)
whose text was not at hand, so the boundary below is ours and is reported, not judged).

For dX_i = P_{X_i}(sum_j A_ij X_j) dt + sigma P_{X_i}(o dB X_i) (softmax attention A over two tokens, Q = K = V = I,
B a d x d matrix Brownian motion with i.i.d. standard entries, sigma^2 = 2 / kappa), the cosine rho = <X_1, X_2>
solves the one-dimensional Ito equation (the d-dependence cancels)

    d rho = (1 - rho^2) (2 a(rho) - sigma^2 rho) dt + sqrt 2 sigma (1 - rho^2) dW,   a(rho) = e^{beta rho} / (e^beta + e^{beta rho}).

Near rho = -1, s = 1 + rho is a geometric Brownian motion with Lyapunov exponent 4 a(-1) - 2 sigma^2, near rho = +1
1 - rho has -4 a(1) - 2 sigma^2 < 0: synchronisation always attracts, and antipodal pairs attract with positive
probability exactly when 2 a(-1) < sigma^2. With value-matrix entries of variance 1 / d (kappa = 2 d) and
a(-1) = 1 / (1 + e^{2 beta}) this reads beta > beta_c(d) = (1/2) ln(2 d - 1).
"""

from __future__ import annotations

import math


def antipodal_exponent(beta: float, kappa: float) -> float:
    """The Lyapunov exponent of 1 + rho at rho = -1 for two softmax tokens: 4 / (1 + e^{2 beta}) - 4 / kappa."""
    if not (math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"kappa = {kappa!r} must be a finite number > 0.")
    return 4.0 / (1.0 + math.exp(2.0 * beta)) - 4.0 / kappa


def antipodal_beta(d: float) -> float:
    """beta_c(d) = ln(2 d - 1) / 2: above it antipodal pairs attract when kappa = 2 d (value entries of variance 1 / d)."""
    if not (math.isfinite(d) and d >= 2):
        raise ValueError(f"d = {d!r} must be a finite number >= 2.")
    return 0.5 * math.log(2.0 * d - 1.0)
