"""Explicit Runge-Kutta solvers driven by Butcher tableaux, with fixed and adaptive steps.

Contract
--------
* ``Euler()``, ``Heun()``, ``RK4()``, ``Dopri5()`` return a :class:`Tableau`. Every stage
  evaluates ``f(t + c_s dt, x + dt sum a_sr k_r)``: the vector field (attention included) is
  recomputed at each stage time and state. Freezing it across stages is the bug of the authors'
  scripts (SPEC §6.1) and would make RK4 first order.
* ``FixedStep(dt)`` and ``AdaptiveStep(rtol=..., atol=...)`` say how steps are chosen.
* ``rk_step(f, t, x, dt, tableau)`` is one step; it knows nothing about attention.
* Adaptive control (Dopri5): error norm ``max over batch of RMS(err / (atol + rtol max(|x|, |x_new|)))``
  (so a batch shares one step and every member meets its tolerance), Hairer's initial step
  selection, and a PI controller (``pi_beta=0`` gives the classic I controller).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tableau:
    """An explicit Runge-Kutta scheme: nodes ``c``, matrix ``a`` (lower-triangular rows),
    weights ``b``; ``b_err`` = b - b_hat for an embedded error estimate; ``fsal`` when the last
    stage is evaluated at the new point."""

    name: str
    order: int
    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    b_err: tuple[float, ...] | None = None
    fsal: bool = False

    @property
    def stages(self) -> int:
        return len(self.b)

    @property
    def adaptive(self) -> bool:
        return self.b_err is not None


def Euler() -> Tableau:
    """Forward Euler, order 1."""
    return Tableau("euler", 1, (0.0,), ((),), (1.0,))


def Heun() -> Tableau:
    """Heun's method (explicit trapezoid), order 2."""
    return Tableau("heun", 2, (0.0, 1.0), ((), (1.0,)), (0.5, 0.5))


def RK4() -> Tableau:
    """The classical fourth-order Runge-Kutta method."""
    return Tableau(
        "rk4",
        4,
        (0.0, 0.5, 0.5, 1.0),
        ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
        (1 / 6, 1 / 3, 1 / 3, 1 / 6),
    )


def Dopri5() -> Tableau:
    """Dormand-Prince 5(4) with FSAL and an embedded 4th-order error estimate (Hairer-Norsett-Wanner I, Table 5.2)."""
    b = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
    b_hat = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
    return Tableau(
        "dopri5",
        5,
        (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0),
        (
            (),
            (1 / 5,),
            (3 / 40, 9 / 40),
            (44 / 45, -56 / 15, 32 / 9),
            (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
            (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
            b,
        ),
        b,
        tuple(x - y for x, y in zip(b, b_hat, strict=True)),
        fsal=True,
    )


SOLVERS = {"euler": Euler, "heun": Heun, "rk4": RK4, "dopri5": Dopri5}


@dataclass(frozen=True)
class FixedStep:
    """Constant step ``dt`` > 0; save times must lie on the ``dt`` grid."""

    dt: float

    def __post_init__(self):
        dt = float(self.dt)
        if not math.isfinite(dt) or dt <= 0:
            raise ValueError(f"FixedStep dt={self.dt!r} must be a finite number > 0.")
        object.__setattr__(self, "dt", dt)


@dataclass(frozen=True)
class AdaptiveStep:
    """Error-controlled steps: ``rtol``, ``atol`` > 0 (required), optional first step ``dt0``.

    ``safety``, ``min_factor``, ``max_factor`` bound the step change; ``pi_beta`` is the PI
    controller's memory term (0.04 as in Hairer's DOPRI5; 0 for a pure I controller).
    """

    rtol: float
    atol: float
    dt0: float | None = None
    safety: float = 0.9
    min_factor: float = 0.2
    max_factor: float = 10.0
    pi_beta: float = 0.0

    def __post_init__(self):
        for name in ("rtol", "atol"):
            v = float(getattr(self, name))
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"AdaptiveStep {name}={getattr(self, name)!r} must be a finite number > 0.")
            object.__setattr__(self, name, v)
        if self.dt0 is not None and not (math.isfinite(self.dt0) and self.dt0 > 0):
            raise ValueError(f"AdaptiveStep dt0={self.dt0!r} must be a finite number > 0.")
        if not (0 < self.safety <= 1 and 0 < self.min_factor < 1 < self.max_factor and 0 <= self.pi_beta < 0.2):
            raise ValueError(
                f"AdaptiveStep controller settings are inconsistent: safety={self.safety}, "
                f"min_factor={self.min_factor}, max_factor={self.max_factor}, pi_beta={self.pi_beta}."
            )


Field = Callable[[float, torch.Tensor], torch.Tensor]


def rk_step(f: Field, t: float, x: torch.Tensor, dt: float, tableau: Tableau, k1: torch.Tensor | None = None):
    """One explicit RK step. Returns ``(x_new, err, k_last, nfev)``.

    ``err`` is the embedded error estimate (``None`` without one); ``k_last`` is the last stage
    (the derivative at ``x_new`` for FSAL tableaux); ``k1`` may be passed in to reuse it.
    """
    nfev = 0
    if k1 is None:
        k1 = f(t, x)
        nfev += 1
    ks = [k1]
    for s in range(1, tableau.stages):
        xs = x
        for a_sr, k in zip(tableau.a[s], ks, strict=False):
            if a_sr != 0.0:
                xs = torch.add(xs, k, alpha=dt * a_sr)
        ks.append(f(t + tableau.c[s] * dt, xs))
        nfev += 1
    if tableau.fsal:
        x_new = xs
    else:
        x_new = x
        for b_s, k in zip(tableau.b, ks, strict=True):
            if b_s != 0.0:
                x_new = torch.add(x_new, k, alpha=dt * b_s)
    err = None
    if tableau.b_err is not None:
        err = sum((dt * e) * k for e, k in zip(tableau.b_err, ks, strict=True) if e != 0.0)
    return x_new, err, ks[-1], nfev


def error_norm(err: torch.Tensor, x: torch.Tensor, x_new: torch.Tensor, rtol: float, atol: float, nbatch_dims: int) -> float:
    """Max over batch members of the RMS of the scaled error (the shared-step criterion)."""
    scale = atol + rtol * torch.maximum(x.abs(), x_new.abs())
    r = (err / scale) ** 2
    if nbatch_dims == 0:
        return float(r.mean().sqrt())
    r = r.reshape(*r.shape[:nbatch_dims], -1)
    return float(r.mean(-1).sqrt().max())


def initial_step(f: Field, t: float, x: torch.Tensor, k1: torch.Tensor, order: int, rtol: float, atol: float, nbatch_dims: int) -> tuple[float, int]:
    """Hairer, Norsett, Wanner I, §II.4 starting-step heuristic. Returns ``(dt, nfev)``."""
    zero = torch.zeros_like(x)
    d0 = error_norm(x, zero, x, rtol, atol, nbatch_dims)
    d1 = error_norm(k1, zero, x, rtol, atol, nbatch_dims)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    k2 = f(t + h0, x + h0 * k1)
    d2 = error_norm(k2 - k1, zero, x, rtol, atol, nbatch_dims) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / (order + 1))
    return min(100 * h0, h1), 1
