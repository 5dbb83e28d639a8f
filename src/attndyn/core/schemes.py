"""The layer-normalization schemes on the radius/direction split, in one table (arXiv 2510.22026).

Contract
--------
Write x_j = r_j theta_j and A_j = sum_k w_jk V theta_k (attention at the directions). A scheme is a
speed s_j and a radius law r_j': theta_j' = s_j^{-1} P_{theta_j} A_j. :data:`SCHEME_TABLE` holds, for
every scheme, everything the package needs of it, and is the one list the dynamics
(``dynamics.vector_field``, ``dynamics.unit_sphere_field``), the start check (``simulation.prepare_state``),
the config schema (``workflow.schema.ModelSpec.scheme``) and the normalization claim read:

* ``summary``: the speed and radius law, one line (docs, ``attndyn list``);
* ``velocity(t, A, theta, r, args)``: x' = r' theta + r theta' from A, the directions, the radii and
  the prepared arguments (``scheme_tau``, ``scheme_alpha``);
* ``unit_start``: tokens must start at unit norm (the scheme keeps every radius, so the sphere is
  where its tokens live); the others split any x;
* ``unit_speed(t, args)``: for a scheme whose speed is the same for every token and that keeps the
  radii, the factor c(t) with x' = c(t) P_x A(x) from unit tokens (c times the Post-LN field, which
  ``simulate`` integrates at the cost of a Post-LN evaluation), or ``None`` at times where that form
  does not hold; ``None`` for the other schemes;
* ``compiled``: what the compiled paths (the C field, loop and adaptive step, which compute the Post-LN
  field) take of it: ``"all"`` (its field is Post-LN's), ``"before_tau"`` (Post-LN's until ``scheme_tau``,
  torch after) or ``"none"`` (its radius/direction split runs in torch). The plan reads this column, never
  the scheme's name.

A new scheme is one :class:`SchemeRule` added to the table (docs/guide/extending.md);
``tests/core/test_registries.py`` fails when one lacks any part.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import torch

from attndyn.core.names import Scheme


def _perp(A: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """P_theta A = A - <theta, A> theta (one product, a sum and one addcmul)."""
    return torch.addcmul(A, (A * theta).sum(-1, keepdim=True), theta, value=-1.0)


def _post(t, A, theta, r, args):
    return _perp(A, theta).mul_(r)  # s = 1, r' = 0


def _pre(t, A, theta, r, args):
    return A  # s = r, r' = <theta, A>: r' theta + r (1/r) P A = <theta, A> theta + P A


def _peri(t, A, theta, r, args):
    return A / torch.linalg.vector_norm(A, dim=-1, keepdim=True)  # s = r |A|, r' = <theta, A> / |A|


def _ngpt(t, A, theta, r, args):
    return _perp(A, theta).mul_(r * args.scheme_alpha / torch.linalg.vector_norm(A, dim=-1, keepdim=True))  # s = |A| / alpha


def _sqrt(t, A, theta, r, args):
    return _perp(A, theta).mul_(r).mul_(1.0 / math.sqrt(t + 1.0))  # s = sqrt(t + 1), r' = 0


def _mix(t, A, theta, r, args):
    return _post(t, A, theta, r, args) if t < args.scheme_tau else _pre(t, A, theta, r, args)


@dataclass(frozen=True)
class SchemeRule:
    """One scheme's parts (see the module docstring)."""

    summary: str
    velocity: Callable
    unit_start: bool
    unit_speed: Callable[[float, object], float | None] | None = None
    compiled: str = "none"  # "all", "before_tau" or "none" (module docstring)


SCHEME_TABLE: dict[str, SchemeRule] = {
    "post": SchemeRule("Post-LN: s = 1, r' = 0 (tokens on the unit sphere; the default)", _post, unit_start=True, compiled="all"),
    "pre": SchemeRule("Pre-LN: s = r, r' = <theta, A> (x' = A)", _pre, unit_start=False),
    "mix": SchemeRule(
        "Mix-LN: Post-LN until scheme_tau, then Pre-LN",
        _mix,
        unit_start=True,
        unit_speed=lambda t, args: 1.0 if t < args.scheme_tau else None,
        compiled="before_tau",
    ),
    "peri": SchemeRule("Peri-LN: s = r |A|, r' = <theta, A> / |A| (x' = A / |A|; our reading of a truncated table)", _peri, unit_start=False),
    "ngpt": SchemeRule("nGPT: s = |A| / scheme_alpha, r' = 0 (Loshchilov et al., arXiv 2410.01131)", _ngpt, unit_start=False),
    "sqrt": SchemeRule("sqrt-scaling: s = sqrt(t + 1), r' = 0", _sqrt, unit_start=True, unit_speed=lambda t, args: 1.0 / math.sqrt(t + 1.0)),
}
SCHEMES: tuple[str, ...] = tuple(SCHEME_TABLE)
assert SCHEMES == get_args(Scheme)  # the names the config schema validates against
