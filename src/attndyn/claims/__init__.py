"""One module per claim of the paper (and of its follow-ups), the runner and the common checks.

Layer contract
--------------
``EXPERIMENTS`` is a plain dict from claim id to module name (imported on demand with
``load``). Each module keeps the claim module contract written in ``common.CONTRACT``
(``CLAIM``, ``Config``, ``QUICK``, ``run``, ``judge``, ``figures``; optionally ``available`` and
``movies``, ``common.OPTIONAL``); ``runner`` runs a claim into its run folder and judges saved folders. A claim's checks
are pure functions of its saved arrays. Imports every layer below :mod:`attndyn.app`
(core, analysis, theory, models, workflow); nothing below imports it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXPERIMENTS = {
    "model-equivalence": "model_equivalence",
    "boolean-1d": "boolean_1d",
    "leaders": "leaders",
    "polytope": "polytope",
    "polytope-relaxed": "polytope_relaxed",
    "collapse": "collapse",
    "hyperplanes": "hyperplanes",
    "hyperplanes-negative-control": "hyperplanes_negative_control",
    "codimension": "codimension",
    "polytope-subspace": "polytope_subspace",
    "feedforward": "feedforward",
    "multihead": "multihead",
    "high-dimensional": "high_dimensional",
    "sphere": "sphere",
    "sphere-metastability": "sphere_metastability",
    "causal": "causal",
    "hardmax": "hardmax",
    "long-context": "long_context",
    "mode-selection": "mode_selection",
    "kuramoto-closed-form": "kuramoto_closed_form",
    "mean-field-limit": "mean_field_limit",
    "phase-diagram": "phase_diagram",
    "normalization": "normalization",
    "noisy": "noisy",
    "metastability": "metastability",
    "trained-spectra": "trained_spectra",
    "trained-decoder": "trained_decoder",
    "trained-interventions": "trained_interventions",
    "gaussian-mean-field": "gaussian_mean_field",
    "causal-position-bias": "causal_position_bias",
    "rank-collapse": "rank_collapse",
    "sinks": "sinks",
    "noisy-transition": "noisy_transition",
    "random-attention-entropy": "random_attention_entropy",
    "common-noise": "common_noise",
}


def load(claim_id: str) -> ModuleType:
    """The module of a claim id (raises KeyError for an unknown id)."""
    return importlib.import_module(f"{__name__}.{EXPERIMENTS[claim_id]}")
