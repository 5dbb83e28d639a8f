"""Numerical-validity diagnostics: is a value still decided by the dynamics, or by rounding?

Contract
--------
* ``finite_json(obj)``: a copy JSON can hold (NumPy scalars to Python, non-finite floats to the
  strings ``"inf"``, ``"-inf"``, ``"nan"``), so that a reported value is never silently dropped.
* ``precision_horizon(model, x0, ts, ...)``: where float64 rounding starts to decide a run, found
  by integrating two perturbation sizes of ``x0`` and seeing when their deviations become
  comparable. ``horizon_estimate(V, spread)``: the same from the spectrum alone.

No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: finite_json serves the light commands (`judge`, `report`) without torch
    from attndyn.core.dynamics import Model
    from attndyn.core.solvers import AdaptiveStep, FixedStep, Tableau


def finite_json(obj: object) -> object:
    """A copy of ``obj`` that JSON can hold: NumPy scalars to Python, non-finite floats to strings."""
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite_json(obj.tolist())
    if isinstance(obj, float | np.floating):
        v = float(obj)
        return v if np.isfinite(v) else str(v)
    if isinstance(obj, np.integer | np.bool_):
        return obj.item()
    return obj


@dataclass(frozen=True)
class Horizon:
    """Where float64 rounding starts to decide a run (see :func:`precision_horizon`).

    ``t`` ``(S,)``: per member, the first save time at which the run perturbed by ``sizes[1]`` has
    drifted as far as the run perturbed by ``sizes[0]`` (within ``COMPARABLE``) while that drift
    is significant (>= ``significant`` x the state's scale); ``inf`` when it never happens.
    ``ts``, ``big``, ``small``: the save times and the two deviations ``(T, S)``; ``ref``: the
    unperturbed run's states ``(T, S, n, d)`` (the run itself, so a claim need not integrate twice).
    """

    t: np.ndarray
    ts: np.ndarray
    big: np.ndarray
    small: np.ndarray
    sizes: tuple[float, float]
    ref: np.ndarray

    def first(self) -> float:
        """The earliest horizon over the members."""
        return float(np.min(self.t))


# Two deviations are "comparable" when the small one reaches this fraction of the big one; in the
# linear regime of a true instability they stay in the ratio of the perturbations (1e5 here).
COMPARABLE = 0.1


def precision_horizon(
    model: Model,
    x0: np.ndarray,
    ts: np.ndarray,
    *,
    solver: Tableau,
    step: FixedStep | AdaptiveStep,
    sizes: tuple[float, float] = (1e-9, 1e-14),
    significant: float = 1e-6,
    seed: int = 0,
    max_steps: int = 10_000_000,
    quantity: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Horizon:
    """Estimate where rounding, not the dynamics, decides a run (logits grow like e^{2 lambda t}).

    Integrates ``x0`` ``(S, n, d)`` together with two perturbed copies, ``x0 + sizes[0] u`` and
    ``x0 + sizes[1] u`` (``u`` a fixed random direction per token, scaled by the data), in one
    batch. While the dynamics decides, the two deviations from the unperturbed run stay in the
    ratio of the perturbations (a true instability amplifies both alike). Once the smaller one is as
    large as the larger, the amplified quantity is rounding: both perturbed runs, and the
    unperturbed one, are then decided by float64, not by their initial data.

    ``quantity`` maps saved states ``(T, S, n, d)`` to the values the claim reads (for instance the
    projection on the unstable subspace); deviations are measured on it (default: the states).
    """
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.ndim != 3:
        raise ValueError(f"x0 must have shape (S, n, d); got {x0.shape}.")
    if not (sizes[0] > sizes[1] > 0):
        raise ValueError(f"sizes must be two decreasing positive numbers; got {sizes}.")
    S = len(x0)
    scale = np.abs(x0).max(axis=(1, 2))
    u = np.random.default_rng(seed).normal(size=x0.shape)
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    batch = np.concatenate([x0, x0 + sizes[0] * scale[:, None, None] * u, x0 + sizes[1] * scale[:, None, None] * u])
    from attndyn.core.simulation import simulate

    traj = simulate(model, batch, ts, solver=solver, step=step, max_steps=max_steps)
    xs = traj.numpy()[1]
    ref, a, b = xs[:, :S], xs[:, S : 2 * S], xs[:, 2 * S :]
    states = ref
    if quantity is not None:
        ref, a, b = quantity(ref), quantity(a), quantity(b)
    axes = tuple(range(2, ref.ndim))
    size = np.abs(ref).max(axis=axes)
    big = np.abs(a - ref).max(axis=axes)
    small = np.abs(b - ref).max(axis=axes)
    hit = (small >= COMPARABLE * big) & (big >= significant * size)
    times = traj.numpy()[0]
    t = np.array([times[np.argmax(hit[:, s])] if hit[:, s].any() else np.inf for s in range(S)])
    return Horizon(t, times, big, small, sizes, states)


def horizon_estimate(V: np.ndarray, spread: float) -> float:
    """The rescaled run's precision horizon from the spectrum alone:
    t* = ln(1e15 spread) / (Re lambda_1 - Re lambda_2) when two eigenvalues have Re > 0, else inf.

    A slow unstable coordinate enters the logit gaps only at relative size e^{(lambda_2 - lambda_1) t};
    past t* it is below float64's resolution of the leading term.
    """
    re = np.sort(np.linalg.eigvals(np.asarray(V, dtype=np.float64)).real)[::-1]
    if len(re) < 2 or re[1] <= 0 or re[0] - re[1] <= 0:
        return float("inf")
    return float(np.log(1e15 * max(spread, 1e-300)) / (re[0] - re[1]))
