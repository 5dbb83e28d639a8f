"""Integrate a ``Model`` in time: ``simulate`` (the ODE) and ``residual_layers`` (the discrete
Transformer of SPEC §1.4).

Contract
--------
* ``simulate(model, x0, ts, *, solver, step, observe=None, max_steps=100_000, progress=None)``
  returns a :class:`Trajectory` with ``xs[k]`` the state at ``ts[k]`` (``ts[0]`` is the initial
  time). Fixed-step runs require every save time on the ``dt`` grid; adaptive runs shorten the
  step to land exactly on each save time. A batch ``x0`` of shape ``(*batch, n, d)`` is
  integrated as one state: all members share the time steps (the adaptive error norm is the
  maximum over members, so each meets its tolerance).
* Raises ``FloatingPointError`` (naming the time) when the state becomes non-finite,
  ``RuntimeError`` when ``max_steps`` is reached, ``ValueError`` for bad ``ts`` or ``x0``.
* For a rescaled model the state is z = e^{-tV} x and ``xs`` holds z.
* ``residual_layers`` iterates x^{k+1} = x^k + dt sum_j P_ij(x^k) V x_j^k; for a rescaled model
  it iterates the exact discrete rescaling z^k = R^{-k} x^k, R = I + dt V (r:discreterescaling),
  which is not Euler applied to the z-ODE.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from .attention import all_finite
from .dynamics import Model, _check_state, attention_update, velocity
from .solvers import AdaptiveStep, FixedStep, Tableau, error_norm, initial_step, rk_step
from .weights import Weights, as_float_tensor

# Relative tolerance for "this save time lies on the dt grid".
GRID_RTOL = 1e-9
# Unit vectors on the sphere: |x_i| = 1 to this tolerance at t0.
SPHERE_NORM_TOL = 1e-8


@dataclass(frozen=True)
class Trajectory:
    """Saved states: ``ts`` ``(T,)`` float64, ``xs`` ``(T, *batch, n, d)`` (time first, always).

    ``stats`` counts ``nfev``, ``steps`` (accepted) and ``rejected``. ``observed`` holds the
    stacked outputs of ``observe(t, x)`` at the save times, or ``None``. ``variable`` is ``"z"``
    when ``xs`` holds rescaled tokens, ``"x"`` otherwise; ``step_size`` is the layer step of a
    discrete (``residual_layers``) trajectory and ``None`` for an ODE solution.
    """

    ts: torch.Tensor
    xs: torch.Tensor
    stats: dict = field(default_factory=dict)
    observed: torch.Tensor | None = None
    variable: str = "x"
    step_size: float | None = None

    def numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ts, xs)`` as NumPy arrays (on the host)."""
        return self.ts.detach().cpu().numpy(), self.xs.detach().cpu().numpy()


def prepare_state(model: Model, x0) -> torch.Tensor:
    """Validate ``x0`` against the model and convert it to a tensor (NumPy float64 stays float64)."""
    x = as_float_tensor(x0, "x0")
    if x.ndim < 2:
        raise ValueError(f"x0 must have shape (*batch, n, d); got shape {tuple(x.shape)}.")
    n, d = x.shape[-2:]
    if n == 0 or d == 0:
        raise ValueError(f"x0 has shape {tuple(x.shape)}; n and d must both be positive.")
    _check_state(x, model)
    if model.geometry == "sphere":
        err = float((x.norm(dim=-1) - 1).abs().max())
        if err > SPHERE_NORM_TOL:
            raise ValueError(f"geometry='sphere' needs unit-norm tokens; x0 (shape {tuple(x.shape)}) has | |x_i| - 1 | up to {err:.3g}.")
    return x


def _prepare_ts(ts) -> list[float]:
    arr = np.asarray(ts.detach().cpu() if isinstance(ts, torch.Tensor) else ts, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"ts must be a non-empty 1-D array of save times; got shape {arr.shape}.")
    if not np.isfinite(arr).all():
        raise ValueError("ts contains non-finite values.")
    if arr.size > 1 and not (np.diff(arr) > 0).all():
        raise ValueError(f"ts must be strictly increasing; got {arr.tolist()[:8]}{' ...' if arr.size > 8 else ''}.")
    return arr.tolist()


def simulate(
    model: Model,
    x0,
    ts,
    *,
    solver: Tableau,
    step: FixedStep | AdaptiveStep,
    observe: Callable[[float, torch.Tensor], torch.Tensor] | None = None,
    max_steps: int = 100_000,
    progress: Callable[[float], None] | None = None,
) -> Trajectory:
    """Integrate ``model`` from ``x0`` at ``ts[0]`` and save the state at every time in ``ts``.

    Parameters
    ----------
    model : Model
    x0 : array (*batch, n, d)
    ts : increasing save times; ``ts[0]`` is the initial time.
    solver : Tableau (``Euler()``, ``Heun()``, ``RK4()``, ``Dopri5()``)
    step : FixedStep or AdaptiveStep (the latter needs an embedded error estimate).
    observe : optional ``f(t, x) -> tensor`` recorded at each save time.
    max_steps : cap on accepted + rejected steps.
    progress : optional callback ``progress(t)`` after each accepted step.
    """
    if not isinstance(model, Model):
        raise TypeError(f"model must be an attndyn.Model, not {type(model).__name__}.")
    if not isinstance(solver, Tableau):
        raise TypeError(f"solver must be a Tableau such as RK4(), not {type(solver).__name__}.")
    x = prepare_state(model, x0)
    times = _prepare_ts(ts)
    if not isinstance(max_steps, int) or max_steps <= 0:
        raise ValueError(f"max_steps={max_steps!r} must be a positive integer.")
    nbatch = x.ndim - 2
    stats = {"nfev": 0, "steps": 0, "rejected": 0}

    def f(t, y):
        return velocity(t, y, model)

    saved = [x]
    obs = [observe(times[0], x)] if observe is not None else None

    def check_finite(y, t):
        if not all_finite(y):
            hint = " (the logits beta*<Q e^{tV} z_i, K e^{tV} z_j> overflowed)" if model.rescaled else ""
            raise FloatingPointError(f"the state became non-finite at t={t:.6g}{hint}.")

    def count_step():
        if stats["steps"] + stats["rejected"] >= max_steps:
            raise RuntimeError(f"max_steps={max_steps} reached at t={t:.6g} before the last save time {times[-1]:g}.")

    t = times[0]
    if isinstance(step, FixedStep):
        dt = step.dt
        counts = []
        for a, b in zip(times[:-1], times[1:], strict=True):
            k = (b - a) / dt
            if abs(k - round(k)) > GRID_RTOL * max(1.0, k):
                raise ValueError(f"save time {b:g} is not on the dt={dt:g} grid from {a:g}; use save times that are multiples of dt.")
            counts.append(round(k))
        base = times[0]
        done = 0
        for target, count in zip(times[1:], counts, strict=True):
            for _ in range(count):
                count_step()
                x, _, _, nf = rk_step(f, t, x, dt, solver)
                done += 1
                # t from the step count, so rounding does not drift over many steps.
                t = base + done * dt
                stats["nfev"] += nf
                stats["steps"] += 1
                check_finite(x, t)
                if progress is not None:
                    progress(t)
            t = target
            saved.append(x)
            if observe is not None:
                obs.append(observe(t, x))
    elif isinstance(step, AdaptiveStep):
        if not solver.adaptive:
            raise ValueError(f"AdaptiveStep needs a solver with an error estimate (Dopri5); {solver.name} has none.")
        k1 = f(t, x)
        stats["nfev"] += 1
        if step.dt0 is None:
            dt, nf = initial_step(f, t, x, k1, solver.order - 1, step.rtol, step.atol, nbatch)
            stats["nfev"] += nf
        else:
            dt = step.dt0
        exponent = 1.0 / solver.order
        err_prev = 1.0
        for target in times[1:]:
            while t < target:
                count_step()
                landing = t + dt >= target * (1 - 1e-14) if target > 0 else t + dt >= target
                h = target - t if landing else dt
                x_new, err, k_last, nf = rk_step(f, t, x, h, solver, k1=k1)
                stats["nfev"] += nf
                en = error_norm(err, x, x_new, step.rtol, step.atol, nbatch)
                if not math.isfinite(en):
                    en = math.inf
                if en <= 1.0:
                    t = target if landing else t + h
                    x = x_new
                    k1 = k_last if solver.fsal else None
                    if k1 is None:
                        k1 = f(t, x)
                        stats["nfev"] += 1
                    stats["steps"] += 1
                    en = max(en, 1e-10)
                    factor = step.safety * en ** (-exponent + 0.75 * step.pi_beta) * err_prev**step.pi_beta
                    factor = min(step.max_factor, max(step.min_factor, factor))
                    err_prev = en
                    # A landing step is only shortened; keep the controller's step for the next one.
                    dt = max(dt, h) * factor if landing else h * factor
                    if progress is not None:
                        progress(t)
                else:
                    stats["rejected"] += 1
                    factor = step.min_factor if math.isinf(en) else max(step.min_factor, step.safety * en ** (-exponent))
                    dt = h * min(1.0, factor)
                    if t + dt == t:
                        raise FloatingPointError(f"the step size underflowed at t={t:.6g}: the state is non-finite or the problem is too stiff.")
            check_finite(x, t)
            saved.append(x)
            if observe is not None:
                obs.append(observe(t, x))
    else:
        raise TypeError(f"step must be FixedStep or AdaptiveStep, not {type(step).__name__}.")

    return Trajectory(
        ts=torch.tensor(times, dtype=torch.float64),
        xs=torch.stack(saved),
        stats=stats,
        observed=torch.stack([torch.as_tensor(o) for o in obs]) if obs is not None else None,
        variable="z" if model.rescaled else "x",
    )


def residual_layers(model: Model, x0, layers: int, *, step_size: float) -> Trajectory:
    """The discrete-time Transformer (SPEC §1.4, eq. e:discreteequation).

    ``x^{k+1} = x^k + dt * v(x^k)`` with ``v`` the model's (non-rescaled) vector field. For a
    rescaled model the state is ``z^k = R^{-k} x^k`` with ``R = I + dt V`` and the exact recursion
    ``z^{k+1} = z^k + dt sum_j P_ij(R^k z^k) R^{-1} V (z_j^k - z_i^k)`` (r:discreterescaling).
    ``ts`` of the result are ``k * dt``.
    """
    x = prepare_state(model, x0)
    if not isinstance(layers, int) or layers < 0:
        raise ValueError(f"layers={layers!r} must be a non-negative integer.")
    dt = float(step_size)
    if not math.isfinite(dt) or dt <= 0:
        raise ValueError(f"step_size={step_size!r} must be a finite number > 0.")
    saved = [x]
    if model.rescaled:
        if model.weights.ff is not None:
            raise ValueError("residual_layers with rescaled=True and a feed-forward map is not defined (SPEC §1.4 rescales attention only).")
        V = model.cast(x)["V"][0]
        d = V.shape[0]
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        R = eye + dt * V
        if torch.linalg.matrix_rank(R) < d:
            raise ValueError(f"R = I + dt V is singular for dt={dt:g}; the discrete rescaling needs it invertible.")
        # The R-recursion is the attention update with value matrix R^{-1} V, scores at R^k z.
        lifted = Model(
            Weights(model.weights.Q, model.weights.K, torch.linalg.solve(R, V).to(model.weights.V.dtype)),
            beta=model.beta,
            mask=model.mask,
            attention=model.attention,
            normalization=model.normalization,
        )
        Rk = eye
        for k in range(layers):
            xk = x @ Rk.transpose(-1, -2)
            if not bool(torch.isfinite(xk).all()):
                raise FloatingPointError(f"R^k z overflowed at layer {k}.")
            # velocity(x -> attention at xk) - R^{-1}V z: the non-rescaled field of `lifted`
            # evaluated with scores at xk and values at z.
            x = x + dt * attention_update(lifted, xk, x)
            Rk = R @ Rk
            saved.append(x)
    else:
        for k in range(layers):
            x = x + dt * velocity(0.0, x, model)
            if not bool(torch.isfinite(x).all()):
                raise FloatingPointError(f"the state became non-finite at layer {k + 1}.")
            saved.append(x)
    return Trajectory(
        ts=torch.arange(layers + 1, dtype=torch.float64) * dt,
        xs=torch.stack(saved),
        stats={"nfev": layers, "steps": layers, "rejected": 0},
        variable="z" if model.rescaled else "x",
        step_size=dt,
    )
