"""Theory: closed forms, reduced ODEs, the mean-field density solver and the named matrices.

Layer contract
--------------
What particle runs are compared with: the closed forms and reduced ODEs of the paper's successors
(``closed_forms``, re-exported here, so ``attndyn.theory.growth_rates`` works as before), the
Gaussian mean-field flow (``gaussian_mean_field``: ``gaussian_moments``, ``gaussian_field``,
``gaussian_identity_covariance``, ``gaussian_blowup_time``), causal attention at beta = 0 and its
depth rollout (``causal_attention``: ``cesaro``, ``causal_flow``, ``rollout_weights``,
``primacy_tail``), the spectra of random attention matrices (``random_attention``:
``quarter_circle_moments``), the noisy USA transition (``noisy_transition``: ``noisy_critical_beta``,
``kappa_lin``, ``landau_coefficient``, ``kappa_sn``), two tokens under common noise (``common_noise``:
``antipodal_exponent``, ``antipodal_beta``), all re-exported here, the continuity equation on the circle
(``meanfield``) and for zonal densities on S^2 (``meanfield_sphere``), and the matrices the paper's
theorems name (``matrices``). Independent of the particle engine's state; imports :mod:`attndyn.core` at most
(the mean-field solver reuses its Runge-Kutta tableaux).
"""

from attndyn.theory.causal_attention import causal_flow, cesaro, primacy_tail, rollout_weights
from attndyn.theory.closed_forms import (
    ODE_TOL,
    equiangular,
    equiangular_beta0,
    equiangular_rhs,
    fastest_mode,
    growth_rates,
    k_point,
    k_point_rhs,
    kernel_coefficient,
    kuramoto_order,
    one_layer_cosine,
    one_layer_cosine_limit,
    pair_cosine_exact,
    pair_log_time,
    pairing_cosine,
    staircase_levels,
    wendel,
)
from attndyn.theory.common_noise import antipodal_beta, antipodal_exponent
from attndyn.theory.gaussian_mean_field import gaussian_blowup_time, gaussian_field, gaussian_identity_covariance, gaussian_moments
from attndyn.theory.noisy_transition import kappa_lin, kappa_sn, landau_coefficient, noisy_critical_beta
from attndyn.theory.random_attention import quarter_circle_moments

__all__ = [
    "ODE_TOL",
    "antipodal_beta",
    "antipodal_exponent",
    "causal_flow",
    "cesaro",
    "gaussian_blowup_time",
    "gaussian_field",
    "gaussian_identity_covariance",
    "gaussian_moments",
    "primacy_tail",
    "kappa_lin",
    "kappa_sn",
    "landau_coefficient",
    "noisy_critical_beta",
    "quarter_circle_moments",
    "rollout_weights",
    "equiangular",
    "equiangular_beta0",
    "equiangular_rhs",
    "fastest_mode",
    "growth_rates",
    "k_point",
    "k_point_rhs",
    "kernel_coefficient",
    "kuramoto_order",
    "one_layer_cosine",
    "one_layer_cosine_limit",
    "pair_cosine_exact",
    "pair_log_time",
    "pairing_cosine",
    "staircase_levels",
    "wendel",
]
