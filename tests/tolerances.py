"""Every tolerance of the test suite, in one place, with the reason for its size."""

# Fixed-step runs on [0, 1]: step sizes chosen so that the global error C*dt^p is small, and the
# tolerance that follows from it (C is O(1) for the O(1)-scaled problems of the tests).
FIXED = {
    "euler": {"dt": 1e-3, "tol": 5e-3},
    "heun": {"dt": 1e-3, "tol": 1e-5},
    "rk4": {"dt": 1e-2, "tol": 1e-8},
    "dopri5": {"dt": 1e-2, "tol": 1e-10},
}
# Adaptive Dopri5 at these tolerances reaches about 1e-9 global error on T = 1.
ADAPTIVE = {"rtol": 1e-10, "atol": 1e-12, "tol": 1e-8}
# scipy DOP853 reference at rtol = atol = 1e-12 (DESIGN §5).
SCIPY_REF = {"rtol": 1e-12, "atol": 1e-12}
# Agreement of our Dopri5 (rtol 1e-10) with the scipy reference, relative to the state scale.
AGAINST_SCIPY = 1e-7
# Convergence order: |fitted slope - order| must be below this (issue 2, DESIGN §5).
ORDER_SLACK = 0.3
# Fused (SDPA) vs dense attention in float64 (issue 2, item 6).
FUSED_VS_DENSE = 1e-12
# Rows of P sum to 1 (SPEC §4.1 M3).
ROW_SUM = 1e-12
# Support-function monotonicity for V = I, relative to the data scale (SPEC §4.3 (a)).
HULL_MONOTONE = 1e-10
# x <-> z equivalence (SPEC §4.1 M1) and discrete rescaling (M2).
X_Z_EQUIV = 1e-7
DISCRETE_RESCALING = 1e-10
# Dopri5 nfev within this fraction of scipy RK45 at the same tolerances (issue 2, item 4).
NFEV_RATIO = 0.15
# beta = 1e3 vs beta = inf on well-separated scores: softmax mass off the argmax is ~e^{-1e3 gap}.
HARDMAX_MATCH = 1e-12
