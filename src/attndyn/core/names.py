"""The engine's option names, defined once without torch: the config schema
(:mod:`attndyn.workflow.schema`) validates against them and the light commands (``sweep status``,
``judge``, ``report``) read configs without loading the engine. :mod:`attndyn.core.dynamics`,
:mod:`attndyn.core.schemes` and :mod:`attndyn.core.solvers` check their tables against these lists.
"""

from __future__ import annotations

from typing import Literal

Mask = Literal["full", "causal", "window"]
Geometry = Literal["euclidean", "sphere"]
Kernel = Literal["auto", "dense", "fused"]
Normalization = Literal["softmax", "unnormalized", "linear"]
Scheme = Literal["post", "pre", "mix", "peri", "ngpt", "sqrt"]  # the order of attndyn.core.schemes' table
SolverName = Literal["euler", "heun", "rk4", "dopri5"]
