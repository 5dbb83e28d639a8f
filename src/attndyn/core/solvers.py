"""Explicit Runge-Kutta solvers driven by Butcher tableaux, with fixed and adaptive steps.

Contract
--------
* ``Euler()``, ``Heun()``, ``RK4()``, ``Dopri5()`` return a :class:`Tableau`. Every stage
  evaluates ``f(t + c_s dt, x + dt sum a_sr k_r)``: the vector field (attention included) is
  recomputed at each stage time and state. Freezing it across stages is the bug of the authors'
  scripts and would make RK4 first order.
* ``FixedStep(dt)`` and ``AdaptiveStep(rtol=..., atol=...)`` say how steps are chosen.
* ``rk_step(f, t, x, dt, tableau)`` is one step and ``integrate(f, x0, ts, args, solver=...,
  controller=...)`` a whole run of any vector field ``f(t, x, args)`` (the diffrax convention:
  ``args`` is an immutable value prepared once); neither knows anything about attention.
* Tableaux are validated at construction: row sums of ``a`` equal ``c``, and the order conditions
  hold up to the stated order (and, for an embedded pair, up to order - 1 for ``b - b_err``).
* Host synchronisation: fixed steps never read the state on the host inside the step loop; the
  state is checked for finiteness at each save time. Adaptive steps read one scalar (the error
  norm) per step, which step control needs.
* Adaptive control (Dopri5): error norm ``max over batch of RMS(err / (atol + rtol max(|x|, |x_new|)))``
  (so a batch shares one step and every member meets its tolerance), Hairer's initial step
  selection, and a PI controller (``pi_beta=0`` gives the classic I controller), all in one
  :class:`StepController` (``init``, ``adapt``; the constants :data:`SAFETY`, :data:`MIN_FACTOR`,
  :data:`MAX_FACTOR`, :data:`ERROR_FLOOR`), which ``integrate`` and ``longtime.simulate_long`` share.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_args

import numpy as np
import torch

from attndyn.core.names import SolverName

TABLEAU_TOL = 1e-13


def _rooted_trees(order: int) -> list[tuple]:
    """Rooted trees with ``order`` nodes, each as a sorted tuple of its children's subtrees."""
    if order == 1:
        return [()]
    out = set()

    # children: a multiset of subtrees whose sizes sum to order - 1
    def forests(total, max_size):
        if total == 0:
            yield ()
            return
        for size in range(min(total, max_size), 0, -1):
            for tree in _rooted_trees(size):
                for rest in forests(total - size, size):
                    yield (tree, *rest)

    for forest in forests(order - 1, order - 1):
        out.add(tuple(sorted(forest)))
    return sorted(out)


def _tree_size(tree: tuple) -> int:
    return 1 + sum(_tree_size(c) for c in tree)


def _tree_density(tree: tuple) -> int:
    """gamma(t) = |t| times the product of the children's densities (Butcher)."""
    out = _tree_size(tree)
    for c in tree:
        out *= _tree_density(c)
    return out


def order_conditions_failed(c: tuple[float, ...], a: tuple[tuple[float, ...], ...], b: tuple[float, ...], order: int) -> list[str]:
    """The Butcher order conditions ``b . Phi(t) = 1/gamma(t)`` violated for trees up to ``order``.

    Each failed tree is named by its size and index; an empty list means every condition holds.
    """
    s = len(b)
    A = np.zeros((s, s))
    for k, row in enumerate(a):
        A[k, : len(row)] = row

    def phi(tree):  # stage weights Phi_i(t): product over children of A Phi(child)
        v = np.ones(s)
        for child in tree:
            v = v * (A @ phi(child))
        return v

    failed = []
    for p in range(1, order + 1):
        for k, tree in enumerate(_rooted_trees(p)):
            if abs(float(np.dot(b, phi(tree))) - 1.0 / _tree_density(tree)) > TABLEAU_TOL * 10:
                failed.append(f"order {p} tree {k}")
    return failed


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

    def __post_init__(self):
        s = len(self.b)
        if len(self.c) != s or len(self.a) != s or any(len(row) != k for k, row in enumerate(self.a)):
            raise ValueError(f"tableau {self.name!r}: c, a and b must describe {s} explicit stages (row k of a has k entries).")
        if self.b_err is not None and len(self.b_err) != s:
            raise ValueError(f"tableau {self.name!r}: b_err has {len(self.b_err)} entries, expected {s}.")
        for k, row in enumerate(self.a):
            if abs(sum(row) - self.c[k]) > TABLEAU_TOL:
                raise ValueError(f"tableau {self.name!r}: row {k} of a sums to {sum(row)!r}, not c[{k}] = {self.c[k]!r}.")
        failed = order_conditions_failed(self.c, self.a, self.b, self.order)
        if failed:
            raise ValueError(f"tableau {self.name!r} claims order {self.order} but fails the order conditions {failed}.")
        if self.b_err is not None:
            b_hat = tuple(x - e for x, e in zip(self.b, self.b_err, strict=True))
            failed = order_conditions_failed(self.c, self.a, b_hat, self.order - 1)
            if failed:
                raise ValueError(f"tableau {self.name!r}: the embedded weights fail the order-{self.order - 1} conditions {failed}.")

    @property
    def stages(self) -> int:
        return len(self.b)

    @property
    def adaptive(self) -> bool:
        return self.b_err is not None


# The tableaux are immutable (frozen) values, validated against their order conditions once, when
# this module is imported; the functions below return them (building one runs the order-condition
# checks over every rooted tree, which a sweep building a config per grid point would pay each time).

_EULER = Tableau("euler", 1, (0.0,), ((),), (1.0,))
_HEUN = Tableau("heun", 2, (0.0, 1.0), ((), (1.0,)), (0.5, 0.5))
_RK4 = Tableau(
    "rk4",
    4,
    (0.0, 0.5, 0.5, 1.0),
    ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
    (1 / 6, 1 / 3, 1 / 3, 1 / 6),
)
_B5 = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_B4 = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
_DOPRI5 = Tableau(
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
        _B5[:6],  # FSAL: the last stage is evaluated at the new point (b[6] = 0)
    ),
    _B5,
    tuple(x - y for x, y in zip(_B5, _B4, strict=True)),
    fsal=True,
)


def Euler() -> Tableau:
    """Forward Euler, order 1."""
    return _EULER


def Heun() -> Tableau:
    """Heun's method (explicit trapezoid), order 2."""
    return _HEUN


def RK4() -> Tableau:
    """The classical fourth-order Runge-Kutta method."""
    return _RK4


def Dopri5() -> Tableau:
    """Dormand-Prince 5(4) with FSAL and an embedded 4th-order error estimate (Hairer-Norsett-Wanner I, Table 5.2)."""
    return _DOPRI5


# The one solver list (its names in attndyn.core.names, without torch): drives the config schema and the tests.
SOLVERS: dict[str, Callable[[], Tableau]] = {"euler": Euler, "heun": Heun, "rk4": RK4, "dopri5": Dopri5}
assert tuple(SOLVERS) == get_args(SolverName)


@dataclass(frozen=True)
class FixedStep:
    """Constant step ``dt`` > 0; save times must lie on the ``dt`` grid."""

    dt: float

    def __post_init__(self):
        dt = float(self.dt)
        if not math.isfinite(dt) or dt <= 0:
            raise ValueError(f"FixedStep dt={self.dt!r} must be a finite number > 0.")
        object.__setattr__(self, "dt", dt)


# The step controller's constants (the names are scipy's, solve_ivp's RK45 uses the same roles).
# The next step aims at SAFETY times the step the error estimate predicts would just meet the
# tolerance: the estimate is asymptotic and the next step's error may be larger, and a margin
# costs fewer rejected steps than it costs steps.
SAFETY = 0.9
# A step shrinks by at most this factor at once: one bad error estimate (a kink in the field, a
# save time landing) must not collapse the step, and a non-finite trial step shrinks by exactly this.
MIN_FACTOR = 0.2
# A step grows by at most this factor at once: far from the current step the error model
# err ~ h^(order) is no guide, and a large jump would be rejected and redone.
MAX_FACTOR = 10.0
# An accepted step's error norm below this counts as this: an estimate of zero (a field that
# vanishes, a step that rounds to nothing) would otherwise ask for an infinite step.
ERROR_FLOOR = 1e-10


@dataclass(frozen=True)
class AdaptiveStep:
    """Error-controlled steps: ``rtol``, ``atol`` > 0 (required), optional first step ``dt0``.

    ``safety``, ``min_factor``, ``max_factor`` bound the step change (defaults :data:`SAFETY`,
    :data:`MIN_FACTOR`, :data:`MAX_FACTOR`); ``pi_beta`` is the PI controller's memory term (0.04
    as in Hairer's DOPRI5; 0 for a pure I controller). :class:`StepController` applies them.
    """

    rtol: float
    atol: float
    dt0: float | None = None
    safety: float = SAFETY
    min_factor: float = MIN_FACTOR
    max_factor: float = MAX_FACTOR
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


@dataclass(frozen=True)
class StepController:
    """The adaptive step controller (diffrax's ``init`` / ``adapt_step_size`` split), shared by
    :func:`integrate` (the torch stages and the C stages of ``attndyn.core.compiled.stepper`` alike)
    and :func:`attndyn.core.longtime.simulate_long`.

    ``order`` is the solver's order (the error estimate is of order ``order - 1``, and the step
    factor is ``safety * err^(-1/order)``, with the PI term ``err^(0.75 pi_beta) prev^(pi_beta)``
    on accepted steps). Its state is the previous accepted error norm (1.0 at the start).
    """

    order: int
    rtol: float
    atol: float
    dt0: float | None = None
    safety: float = SAFETY
    min_factor: float = MIN_FACTOR
    max_factor: float = MAX_FACTOR
    pi_beta: float = 0.0

    @classmethod
    def of(cls, step: AdaptiveStep, solver: Tableau) -> StepController:
        return cls(solver.order, step.rtol, step.atol, step.dt0, step.safety, step.min_factor, step.max_factor, step.pi_beta)

    def init(self, f: Field, t: float, x: torch.Tensor, k1: torch.Tensor, nbatch_dims: int, max_step: float) -> tuple[float, int, float]:
        """The first step (``dt0``, else Hairer's heuristic, :func:`initial_step`), the field
        evaluations that cost, and the controller's state."""
        if self.dt0 is not None:
            return self.dt0, 0, 1.0
        dt, nfev = initial_step(f, t, x, k1, self.order - 1, self.rtol, self.atol, nbatch_dims, max_step=max_step)
        return dt, nfev, 1.0

    def adapt(self, h: float, en: float, state: float, planned: float | None = None) -> tuple[bool, float, float]:
        """After a trial step of size ``h`` with error norm ``en`` (``inf`` when non-finite):
        ``(accepted, next step, state)``. ``planned``: the controller's step when ``h`` was shortened
        to land on a save time; the next step grows from the larger of the two, so that landing does
        not shrink the steps after it."""
        exponent = 1.0 / self.order
        if en <= 1.0:
            en = max(en, ERROR_FLOOR)
            factor = self.safety * en ** (-exponent + 0.75 * self.pi_beta) * state**self.pi_beta
            factor = min(self.max_factor, max(self.min_factor, factor))
            return True, (h if planned is None else max(planned, h)) * factor, en
        factor = self.min_factor if math.isinf(en) else max(self.min_factor, self.safety * en ** (-exponent))
        return False, h * min(1.0, factor), state


Field = Callable[[float, torch.Tensor], torch.Tensor]
ArgsField = Callable[[float, torch.Tensor, Any], torch.Tensor]


def rk_step(
    f: Field, t: float, x: torch.Tensor, dt: float, tableau: Tableau, k1: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, int]:
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
        xs = _combine(x, tableau.a[s], ks, dt)
        ks.append(f(t + tableau.c[s] * dt, xs))
        nfev += 1
    x_new = xs if tableau.fsal else _combine(x, tableau.b, ks, dt)
    err = None
    if tableau.b_err is not None:
        err = _combine(None, tableau.b_err, ks, dt)
    return x_new, err, ks[-1], nfev


def _classical_rk4(f: Callable, args: object, dt: float) -> Callable[[float, torch.Tensor], torch.Tensor]:
    """One classical RK4 step ``step(t, x)`` of ``f(t, x, args)`` at a fixed ``dt``: the same torch ops
    and coefficients as ``rk_step`` with the RK4 tableau (so the same bits), without its per-stage
    loops and wrapper frames: the eager path of small systems is bound by Python per call."""
    (a21,), (_, a32), (_, _, a43) = _RK4.a[1:]
    c2, c3, c4 = (c * dt for c in _RK4.c[1:])
    h21, h32, h43 = a21 * dt, a32 * dt, a43 * dt
    w1, w2, w3, w4 = (w * dt for w in _RK4.b)

    def step(t: float, x: torch.Tensor) -> torch.Tensor:
        k1 = f(t, x, args)
        k2 = f(t + c2, torch.add(x, k1, alpha=h21), args)
        k3 = f(t + c3, torch.add(x, k2, alpha=h32), args)
        k4 = f(t + c4, torch.add(x, k3, alpha=h43), args)
        out = torch.add(x, k1, alpha=w1)
        out.add_(k2, alpha=w2)
        out.add_(k3, alpha=w3)
        return out.add_(k4, alpha=w4)

    return step


def _combine(x: torch.Tensor | None, weights: tuple[float, ...], ks: list[torch.Tensor], dt: float) -> torch.Tensor:
    """``x + dt * sum_s w_s k_s`` (``x = None``: the sum alone), skipping zero weights. The first term
    makes a new tensor and the others accumulate into it in place, so ``x`` and the stages are
    never written; the result is complete before anything sees it."""
    out = x
    fresh = False
    for w, k in zip(weights, ks, strict=False):
        if w == 0.0:
            continue
        if fresh:
            out.add_(k, alpha=dt * w)
        elif out is None:
            out, fresh = torch.mul(k, dt * w), True
        else:
            out, fresh = torch.add(out, k, alpha=dt * w), True
    if out is None:  # every weight zero: no contribution
        return torch.zeros_like(ks[0])
    return out


def error_norm(err: torch.Tensor, x: torch.Tensor, x_new: torch.Tensor, rtol: float, atol: float, nbatch_dims: int) -> float:
    """Max over batch members of the RMS of the scaled error (the shared-step criterion)."""
    scale = atol + rtol * torch.maximum(x.abs(), x_new.abs())
    r = (err / scale) ** 2
    if nbatch_dims == 0:
        return float(r.mean().sqrt())
    r = r.reshape(*r.shape[:nbatch_dims], -1)
    return float(r.mean(-1).sqrt().max())


def initial_step(
    f: Field, t: float, x: torch.Tensor, k1: torch.Tensor, order: int, rtol: float, atol: float, nbatch_dims: int, max_step: float = math.inf
) -> tuple[float, int]:
    """Hairer, Norsett, Wanner I, §II.4 starting-step heuristic, at most ``max_step`` (the first
    save interval: a nearly still state must not send the trial stage past where the field is
    defined, e.g. where e^{tV} overflows). Returns ``(dt, nfev)``."""
    zero = torch.zeros_like(x)
    d0 = error_norm(x, zero, x, rtol, atol, nbatch_dims)
    d1 = error_norm(k1, zero, x, rtol, atol, nbatch_dims)
    h0 = min(1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1, max_step)
    if not (math.isfinite(d1) and h0 > 0):
        raise FloatingPointError(f"the field at t={t:.6g} is too large to take any step (scaled norm {d1:.3g}): the dynamics overflow.")
    k2 = f(t + h0, x + h0 * k1)
    d2 = error_norm(k2 - k1, zero, x, rtol, atol, nbatch_dims) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / (order + 1))
    return min(100 * h0, h1, max_step), 1


# Relative tolerance for "this save time lies on the dt grid".
GRID_RTOL = 1e-9


@dataclass(frozen=True)
class Solution:
    """What :func:`integrate` returns: save times ``ts`` (list of float), states ``xs``
    ``(T, *x0.shape)``, ``stats`` (``nfev``, ``steps``, ``rejected``) and the stacked ``observed``
    values (or ``None``)."""

    ts: list[float]
    xs: torch.Tensor
    stats: dict = field(default_factory=dict)
    observed: torch.Tensor | None = None


def save_times(ts: np.ndarray | torch.Tensor | list[float]) -> list[float]:
    """Validate save times: a non-empty, finite, strictly increasing 1-D sequence."""
    arr = np.asarray(ts.detach().cpu() if isinstance(ts, torch.Tensor) else ts, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"ts must be a non-empty 1-D array of save times; got shape {arr.shape}.")
    if not np.isfinite(arr).all():
        raise ValueError("ts contains non-finite values.")
    if arr.size > 1 and not (np.diff(arr) > 0).all():
        raise ValueError(f"ts must be strictly increasing; got {arr.tolist()[:8]}{' ...' if arr.size > 8 else ''}.")
    return arr.tolist()


def step_counts(times: list[float], dt: float) -> list[int]:
    """The number of fixed steps of ``dt`` between consecutive save ``times``; ``ValueError`` when a save time is off the grid."""
    counts = []
    for a, b in zip(times[:-1], times[1:], strict=True):
        k = (b - a) / dt
        if abs(k - round(k)) > GRID_RTOL * max(1.0, k):
            raise ValueError(f"save time {b:g} is not on the dt={dt:g} grid from {a:g}; use save times that are multiples of dt.")
        counts.append(round(k))
    return counts


def _is_finite(x: torch.Tensor) -> bool:
    return math.isfinite(float(x.sum()))


def integrate(
    f: ArgsField,
    x0: torch.Tensor,
    ts: np.ndarray | torch.Tensor | list[float],
    args: Any = None,
    *,
    solver: Tableau,
    controller: FixedStep | AdaptiveStep,
    batch_dims: int = 0,
    observe: Callable[[float, torch.Tensor], torch.Tensor] | None = None,
    max_steps: int = 100_000,
    progress: Callable[[float], None] | None = None,
    stepper: Callable[[float, torch.Tensor, float, torch.Tensor], tuple[torch.Tensor, float, torch.Tensor]] | None = None,
) -> Solution:
    """Integrate ``x' = f(t, x, args)`` from ``x0`` at ``ts[0]``, saving the state at every ``ts``.

    Parameters
    ----------
    f : vector field ``f(t, x, args) -> tensor`` shaped like ``x``.
    x0 : tensor; its leading ``batch_dims`` dimensions are independent members (adaptive steps use
        the maximum of the members' error norms, so the batch shares one step sequence).
    ts : increasing save times; ``ts[0]`` is the initial time.
    args : anything ``f`` needs (passed through unchanged).
    solver : Tableau; controller : FixedStep (save times on its grid) or AdaptiveStep (lands
        exactly on each save time; needs an embedded error estimate).
    observe : optional ``observe(t, x) -> tensor`` recorded at each save time.
    max_steps : cap on accepted + rejected steps; progress : ``progress(t)`` after each accepted step.
    stepper : optional ``stepper(t, x, h, k1) -> (x_new, error_norm, k_last)`` that does the adaptive
        steps' stages and error norm in one call (the C step of ``attndyn.core.compiled``: the same
        arithmetic as ``rk_step`` and ``error_norm`` with ``f``); the controller is the same.

    Raises
    ------
    FloatingPointError
        When a saved state is non-finite (checked at save times only) or the step size underflows.
    RuntimeError
        At the step cap.
    ValueError
        For bad inputs.
    """
    if not isinstance(solver, Tableau):
        raise TypeError(f"solver must be a Tableau such as RK4(), not {type(solver).__name__}.")
    if not isinstance(max_steps, int) or max_steps <= 0:
        raise ValueError(f"max_steps={max_steps!r} must be a positive integer.")
    times = save_times(ts)
    run = _Run(times, observe, max_steps, progress, x0)
    if isinstance(controller, FixedStep):
        _fixed_steps(run, f, x0, args, solver, controller.dt)
    elif isinstance(controller, AdaptiveStep):
        if not solver.adaptive:
            raise ValueError(f"AdaptiveStep needs a solver with an error estimate (Dopri5); {solver.name} has none.")
        _adaptive_steps(run, f, x0, args, solver, StepController.of(controller, solver), batch_dims, stepper)
    else:
        raise TypeError(f"step must be FixedStep or AdaptiveStep, not {type(controller).__name__}.")
    obs = run.observed
    return Solution(
        ts=times,
        xs=torch.stack(run.saved),
        stats=run.stats,
        observed=torch.stack([torch.as_tensor(o) for o in obs]) if obs is not None else None,
    )


class _Run:
    """What a run of :func:`integrate` records: the saves (checked finite), the observations, the
    statistics, and the step cap."""

    def __init__(self, times: list[float], observe: Callable | None, max_steps: int, progress: Callable | None, x0: torch.Tensor):
        self.times, self.observe, self.max_steps, self.progress = times, observe, max_steps, progress
        self.stats = {"nfev": 0, "steps": 0, "rejected": 0}
        self.saved = [x0]
        self.observed = [observe(times[0], x0)] if observe is not None else None
        self.last_finite = times[0]

    def save(self, t: float, y: torch.Tensor) -> None:
        if not _is_finite(y):
            raise FloatingPointError(
                f"the state became non-finite at t={t:.6g} (checked at save times; the last finite save was t={self.last_finite:.6g})."
            )
        self.last_finite = t
        self.saved.append(y)
        if self.observe is not None:
            self.observed.append(self.observe(t, y))

    def count_step(self, t: float) -> None:
        if self.stats["steps"] + self.stats["rejected"] >= self.max_steps:
            raise RuntimeError(f"max_steps={self.max_steps} reached at t={t:.6g} before the last save time {self.times[-1]:g}.")


def _fixed_steps(run: _Run, f: ArgsField, x: torch.Tensor, args: Any, solver: Tableau, dt: float) -> None:
    """Fixed steps of ``dt`` through every save time (on the grid, checked); never rejected."""
    times, stats = run.times, run.stats
    counts = step_counts(times, dt)
    t = base = times[0]
    done = 0
    step_fixed = _classical_rk4(f, args, dt) if solver == _RK4 else None

    def g(t, y):
        return f(t, y, args)

    for target, count in zip(times[1:], counts, strict=True):
        for _ in range(count):
            if done >= run.max_steps:
                run.count_step(t)
            if step_fixed is not None:
                x = step_fixed(t, x)
                nf = 4
            else:
                x, _, _, nf = rk_step(g, t, x, dt, solver)
            done += 1
            t = base + done * dt  # t from the step count, so rounding does not drift over many steps
            stats["nfev"] += nf
            stats["steps"] += 1
            if run.progress is not None:
                run.progress(t)
        t = target
        run.save(t, x)


def _adaptive_steps(
    run: _Run, f: ArgsField, x: torch.Tensor, args: Any, solver: Tableau, control: StepController, batch_dims: int, stepper: Callable | None
) -> None:
    """Error-controlled steps that land exactly on each save time; ``control`` accepts or rejects each
    trial step and sizes the next, for the torch stages (``rk_step``) and the C ones (``stepper``) alike."""
    times, stats = run.times, run.stats

    def g(t, y):
        return f(t, y, args)

    t = times[0]
    k1 = g(t, x)
    stats["nfev"] += 1
    dt, nf, state = control.init(g, t, x, k1, batch_dims, max_step=times[1] - times[0] if len(times) > 1 else math.inf)
    stats["nfev"] += nf
    for target in times[1:]:
        while t < target:
            run.count_step(t)
            landing = t + dt >= target * (1 - 1e-14) if target > 0 else t + dt >= target
            h = target - t if landing else dt
            if stepper is not None:
                x_new, en, k_last = stepper(t, x, h, k1)
                stats["nfev"] += solver.stages - 1
            else:
                x_new, err, k_last, nf = rk_step(g, t, x, h, solver, k1=k1)
                stats["nfev"] += nf
                en = error_norm(err, x, x_new, control.rtol, control.atol, batch_dims)
            accepted, dt, state = control.adapt(h, en if math.isfinite(en) else math.inf, state, planned=dt if landing else None)
            if not accepted:
                stats["rejected"] += 1
                if t + dt == t:
                    raise FloatingPointError(f"the step size underflowed at t={t:.6g}: the state is non-finite or the problem is too stiff.")
                continue
            t = target if landing else t + h
            x = x_new
            k1 = k_last if solver.fsal else None
            if k1 is None:
                k1 = g(t, x)
                stats["nfev"] += 1
            stats["steps"] += 1
            if run.progress is not None:
                run.progress(t)
        run.save(t, x)
