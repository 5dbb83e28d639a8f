"""Integrate a ``Model`` in time: ``simulate`` (the ODE) and ``residual_layers`` (the discrete
Transformer of arXiv 2305.05465).

Contract
--------
* ``simulate(model, x0, ts, *, solver, step, observe=None, max_steps=100_000, progress=None,
  span=False)`` returns a :class:`Trajectory` with ``xs[k]`` the state at ``ts[k]`` (``ts[0]`` is
  the initial time). ``span=True`` integrates in the span of x0 when d > n (same trajectory, n
  dimensions; :func:`span_obstruction` says which models allow it, :func:`span_coordinates` gives
  the n-dimensional coordinates themselves). Fixed-step runs require every save time on the
  ``dt`` grid; adaptive runs shorten the step to land exactly on each save time. A batch ``x0`` of shape ``(*batch, n, d)`` is
  integrated as one state: all members share the time steps (the adaptive error norm is the
  maximum over members, so each meets its tolerance).
* Raises ``FloatingPointError`` (naming the time) when a saved state is non-finite (checked at
  the save times, so the step loop never waits on the device),
  ``RuntimeError`` when ``max_steps`` is reached, ``ValueError`` for bad ``ts`` or ``x0``.
* For a rescaled model the state is z = e^{-tV} x and ``xs`` holds z.
* ``residual_layers`` iterates x^{k+1} = x^k + dt sum_j P_ij(x^k) V x_j^k; for a rescaled model
  it iterates the exact discrete rescaling z^k = R^{-k} x^k, R = I + dt V (r:discreterescaling),
  which is not Euler applied to the z-ODE.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from attndyn.core import compiled
from attndyn.core.dynamics import Model, _check_state, attention_term, prepare, unit_sphere_field, vector_field
from attndyn.core.plan import Plan, decide, span_model
from attndyn.core.schemes import SCHEME_TABLE
from attndyn.core.solvers import AdaptiveStep, Dopri5, FixedStep, Tableau, integrate, save_times, step_counts
from attndyn.core.threads import policy as threads_policy
from attndyn.core.threads import state_batch, state_work
from attndyn.core.weights import Weights, as_float_tensor, to_numpy

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
        return to_numpy(self.ts), to_numpy(self.xs)

    def __repr__(self) -> str:
        shape = tuple(self.xs.shape)
        span = f"t in [{float(self.ts[0]):g}, {float(self.ts[-1]):g}]" if len(self.ts) else "no saves"
        where = f"{str(self.xs.dtype).removeprefix('torch.')}" + ("" if self.xs.device.type == "cpu" else f" on {self.xs.device}")
        stats = ", ".join(f"{k} {v}" for k, v in self.stats.items())
        return f"Trajectory({len(self.ts)} saves, {span}, {self.variable} of shape {shape[1:]}, {where}" + (f"; {stats})" if stats else ")")

    def save(self, path: str | Path) -> Path:
        """Write ``ts``, ``xs`` (and ``observed``) to an ``.npz`` file, written then renamed (never a
        half-written file); read it back with :meth:`Trajectory.load`."""
        path = Path(path)
        arrays = {"ts": to_numpy(self.ts), "xs": to_numpy(self.xs), "variable": np.array(self.variable)}
        if self.observed is not None:
            arrays["observed"] = to_numpy(self.observed)
        if self.step_size is not None:
            arrays["step_size"] = np.array(self.step_size)
        for key, value in self.stats.items():
            arrays[f"stats_{key}"] = np.array(value)
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trajectory:
        """A trajectory written by :meth:`save` (or a run folder's ``trajectory.npz``); float64 on the host.
        No pickled object is ever loaded (``allow_pickle=False``), and the declared sizes are checked
        against memory before any array is read (:func:`attndyn.core.reading.load_npz`)."""
        from attndyn.core.reading import load_npz

        data = load_npz(path, "trajectory file")
        keys = set(data)
        if not {"ts", "xs"} <= keys:
            raise ValueError(f"{path} holds no trajectory: it lacks {sorted({'ts', 'xs'} - keys)}")
        stats = {k.removeprefix("stats_"): int(data[k]) for k in data if k.startswith("stats_")}
        return cls(
            torch.from_numpy(np.array(data["ts"], dtype=np.float64)),
            torch.from_numpy(np.array(data["xs"])),
            stats,
            torch.from_numpy(np.array(data["observed"])) if "observed" in keys else None,
            str(data["variable"]) if "variable" in keys else "x",
            float(data["step_size"]) if "step_size" in keys else None,
        )

    def to_xarray(self):
        """The states as an ``xarray.DataArray`` with dimensions ``(t, *batch, token, coordinate)``."""
        import xarray as xr

        ts, xs = self.numpy()
        batch = [f"batch{k}" for k in range(xs.ndim - 3)]
        dims = ["t", *batch, "token", "coordinate"]
        coords = {"t": ts, "token": np.arange(xs.shape[-2]), "coordinate": np.arange(xs.shape[-1])}
        return xr.DataArray(xs, dims=dims, coords=coords, name=self.variable, attrs={k: int(v) for k, v in self.stats.items()})


def sphere_start(n: int, d: int, *, batch: tuple[int, ...] = (), seed: int | None = 0) -> np.ndarray:
    """``(*batch, n, d)`` tokens drawn uniformly on the unit sphere S^{d-1} (normalised Gaussians),
    the start every ``geometry="sphere"`` model with Post-LN needs."""
    if n < 1 or d < 1:
        raise ValueError(f"n = {n} and d = {d} must both be >= 1.")
    x = np.random.default_rng(seed).normal(size=(*batch, n, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def prepare_state(model: Model, x0: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Validate ``x0`` against the model and convert it to a tensor (NumPy float64 stays float64)."""
    x = as_float_tensor(x0, "x0")
    if x.ndim < 2:
        raise ValueError(f"x0 must have shape (*batch, n, d); got shape {tuple(x.shape)}.")
    n, d = x.shape[-2:]
    if n == 0 or d == 0:
        raise ValueError(f"x0 has shape {tuple(x.shape)}; n and d must both be positive.")
    _check_state(x, model)
    # Post-LN, sqrt-scaling and Mix-LN (Post-LN first) move unit tokens; Pre-LN, Peri-LN and nGPT
    # split any x into a radius and a direction (arXiv 2510.22026), so their tokens may have any norm
    if model.geometry == "sphere" and SCHEME_TABLE[model.scheme].unit_start:
        err = float((x.norm(dim=-1) - 1).abs().max())
        if err > max(SPHERE_NORM_TOL, 64 * torch.finfo(x.dtype).eps):  # unit tokens to the dtype's rounding
            raise ValueError(f"geometry='sphere' needs unit-norm tokens; x0 (shape {tuple(x.shape)}) has | |x_i| - 1 | up to {err:.3g}.")
    return x


# simulate's default: Dopri5 with adaptive steps at these tolerances
DEFAULT_RTOL = 1e-8
DEFAULT_ATOL = 1e-10


def simulate(
    model: Model,
    x0: np.ndarray | torch.Tensor,
    ts: np.ndarray | torch.Tensor | list[float],
    *,
    solver: Tableau | None = None,
    step: FixedStep | AdaptiveStep | None = None,
    observe: Callable[[float, torch.Tensor], torch.Tensor] | None = None,
    max_steps: int = 100_000,
    progress: Callable[[float], None] | None = None,
    span: bool = False,
    threads: int | None = None,
) -> Trajectory:
    """Integrate ``model`` from ``x0`` at ``ts[0]`` and save the state at every time in ``ts``.

    The attention-specific wrapper of :func:`attndyn.core.solvers.integrate`: it validates ``x0``,
    prepares the model once for ``x0``'s dtype and device (:func:`attndyn.core.dynamics.prepare`) and
    integrates :func:`attndyn.core.dynamics.vector_field` (for nGPT, sqrt-scaling and Mix-LN before its
    switch, :func:`attndyn.core.dynamics.unit_sphere_field`: the same solution from the unit tokens the
    sphere requires, at the cost of a Post-LN step).

    Parameters
    ----------
    model : Model
    x0 : array (*batch, n, d); a tensor keeps its dtype and device.
    ts : increasing save times; ``ts[0]`` is the initial time.
    solver : Tableau (``Euler()``, ``Heun()``, ``RK4()``, ``Dopri5()``); default ``Dopri5()``.
    step : FixedStep or AdaptiveStep (the latter needs an embedded error estimate); default
        ``AdaptiveStep(rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL)`` (1e-8 and 1e-10) with Dopri5.
    observe : optional ``f(t, x) -> tensor`` recorded at each save time.
    max_steps : cap on accepted + rejected steps.
    progress : optional callback ``progress(t)`` after each accepted step.
    span : integrate in the span of x0 when d > n (see :func:`span_obstruction`): the same
        trajectory, at the cost of n dimensions instead of d; ``ValueError`` for a model whose
        dynamics do not commute with rotations.
    threads : intra-op threads for this call; None applies the thread policy
        (:mod:`attndyn.core.threads`: one thread for small states, ``ATTNDYN_THREADS`` overrides).

    Which engine runs is decided once by :func:`attndyn.core.plan.decide` and executed here
    (:data:`EXECUTORS`); :func:`plan` shows it with the reason each faster path was not taken.
    Fixed-step classical RK4 runs of at least 100 steps of a small plain-attention state in float64
    on the CPU go through the compiled loop of :mod:`attndyn.core.compiled` (the same steps;
    ``ATTNDYN_COMPILED=0`` switches it off, and without a C compiler the eager engine runs). Other
    fixed-step batches on the CPU with more than about 1 MiB of state and logits run in cache-sized
    chunks of systems (:func:`attndyn.core.plan.cache_chunk`; the same steps and results).
    """
    solver, step = _solver_and_step(model, solver, step)
    x = prepare_state(model, x0)
    with threads_policy(state_work(x.shape, model.weights.heads), threads, batch=state_batch(x.shape)):
        times = save_times(ts)
        plan = decide(model, x, times, solver=solver, step=step, observe=observe, progress=progress, max_steps=max_steps, span=span)
        return EXECUTORS[plan.path](plan, model, x, times, solver=solver, step=step, observe=observe, max_steps=max_steps, progress=progress)


def _solver_and_step(model: Model, solver: Tableau | None, step: FixedStep | AdaptiveStep | None) -> tuple[Tableau, FixedStep | AdaptiveStep]:
    """The checked solver and step of :func:`simulate` (its default when both are ``None``)."""
    if not isinstance(model, Model):
        raise TypeError(f"model must be an attndyn.Model, not {type(model).__name__}.")
    if solver is None and step is None:
        return Dopri5(), AdaptiveStep(rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL)
    if solver is None or step is None:
        raise ValueError("give both solver and step, or neither (the default is Dopri5 with adaptive steps, rtol 1e-8, atol 1e-10).")
    if not isinstance(solver, Tableau):
        raise TypeError(f"solver must be a Tableau such as RK4(), not {type(solver).__name__}.")
    return solver, step


def plan(
    model: Model,
    x0: np.ndarray | torch.Tensor,
    ts: np.ndarray | torch.Tensor | list[float] | None = None,
    *,
    solver: Tableau | None = None,
    step: FixedStep | AdaptiveStep | None = None,
    observe: Callable | None = None,
    progress: Callable | None = None,
    max_steps: int = 100_000,
    span: bool = False,
    threads: int | None = None,
) -> Plan:
    """The engine plan of ``simulate(model, x0, ts, ...)`` with the same arguments: which path runs and
    why each faster one was not taken (:mod:`attndyn.core.plan`); ``print(ad.plan(...))`` shows it.
    Without ``ts`` the compiled loop's step count (at least ``plan.MIN_STEPS``) is not checked."""
    solver, step = _solver_and_step(model, solver, step)
    x = prepare_state(model, x0)
    with threads_policy(state_work(x.shape, model.weights.heads), threads, batch=state_batch(x.shape)):
        times = None if ts is None else save_times(ts)
        return decide(model, x, times, solver=solver, step=step, observe=observe, progress=progress, max_steps=max_steps, span=span)


def _run_eager(plan: Plan, model: Model, x: torch.Tensor, times: list[float], *, solver, step, observe, max_steps, progress) -> Trajectory:
    """The eager loop: ``integrate`` of the planned field, with the C step where the plan says so."""
    args = prepare(model, x)
    field = unit_sphere_field if plan.form == "unit_sphere_field" else vector_field
    fused_step = compiled.stepper(args.native, solver, step.rtol, step.atol) if plan.stepper == "C step" else None
    try:
        sol = integrate(
            field,
            x,
            times,
            args,
            solver=solver,
            controller=step,
            batch_dims=x.ndim - 2,
            observe=observe,
            max_steps=max_steps,
            progress=progress,
            stepper=fused_step,
        )
    except FloatingPointError as err:
        if model.rescaled and "non-finite" in str(err):
            raise FloatingPointError(f"{err} The logits beta*<Q e^(tV) z_i, K e^(tV) z_j> or e^(tV) overflowed.") from None
        if model.normalization == "unnormalized":
            raise FloatingPointError(
                f"{err} The unnormalized weights e^(beta <Q x_i, K x_j>) overflow at beta = {model.beta:g}: lower beta or the tokens' scale."
            ) from None
        raise
    return Trajectory(
        ts=torch.tensor(sol.ts, dtype=torch.float64),
        xs=sol.xs,
        stats=sol.stats,
        observed=sol.observed,
        variable="z" if model.rescaled else "x",
    )


def _run_loop(plan: Plan, model: Model, x: torch.Tensor, times: list[float], *, solver, step, observe, max_steps, progress) -> Trajectory:
    """The compiled loop: the whole classical RK4 run in C (:func:`attndyn.core.compiled.run`)."""
    counts = step_counts(times, step.dt)
    xs, stats, observed = compiled.run(plan.native, x, times, counts, step.dt, progress, observe)
    return Trajectory(ts=torch.tensor(times, dtype=torch.float64), xs=xs, stats=stats, observed=observed, variable="z" if model.rescaled else "x")


def _run_chunked(plan: Plan, model: Model, x: torch.Tensor, times: list[float], *, solver, step, observe, max_steps, progress) -> Trajectory:
    """The batch as consecutive chunks of ``plan.chunk`` systems (the batch axes flattened, then
    restored), each on the threads the whole batch was given."""
    batch, (n, d) = x.shape[:-2], x.shape[-2:]
    flat = x.reshape(-1, n, d)
    threads = torch.get_num_threads()
    chunk = plan.chunk
    parts = [
        simulate(model, flat[i : i + chunk], times, solver=solver, step=step, max_steps=max_steps, threads=threads)
        for i in range(0, len(flat), chunk)
    ]
    xs = torch.cat([p.xs for p in parts], dim=1)
    first = parts[0]
    # every chunk takes the same fixed steps: the statistics are those of one (as for the whole batch)
    return dataclasses.replace(first, xs=xs.reshape(len(first.ts), *batch, n, d))


def _run_span(plan: Plan, model: Model, x: torch.Tensor, times: list[float], *, solver, step, observe, max_steps, progress) -> Trajectory:
    """The run in the span of x0 (``span=True`` with d > n; the model already checked)."""
    traj, Ut = span_coordinates(model, x, times, solver=solver, step=step, observe=observe, max_steps=max_steps, progress=progress)
    return dataclasses.replace(traj, xs=traj.xs @ Ut)


# what simulate runs for each path of the plan (attndyn.core.plan.PATHS)
EXECUTORS = {"span reduction": _run_span, "compiled loop": _run_loop, "chunked batch": _run_chunked, "eager loop": _run_eager}


def span_coordinates(
    model: Model,
    x: torch.Tensor,
    ts: np.ndarray | torch.Tensor | list[float],
    *,
    observe: Callable[[float, torch.Tensor], torch.Tensor] | None = None,
    **options,
) -> tuple[Trajectory, torch.Tensor]:
    """Integrate in the span of ``x`` (d > n, rotation-commuting ``model``, both checked by the
    caller): the trajectory of the coordinates Y (n x n per member) and ``U^T`` (n x d), X = Y U^T.
    ``observe(t, X)`` sees the full-dimensional state. Inner products, hence every
    rotation-invariant measure, are the same for Y as for X.
    """
    n = x.shape[-2]
    # X0^T = U R (thin QR per batch member): U (..., d, n) orthonormal, X0 = R^T U^T, so Y0 = R^T
    U, R = torch.linalg.qr(x.transpose(-1, -2), mode="reduced")
    Ut = U.transpose(-1, -2)
    y0 = R.transpose(-1, -2).contiguous()
    reduced = span_model(model, n)
    watch = None if observe is None else (lambda t, y: observe(t, y @ Ut))
    return simulate(reduced, y0, ts, observe=watch, **options), Ut


def residual_layers(model: Model, x0: np.ndarray | torch.Tensor, layers: int, *, step_size: float, threads: int | None = None) -> Trajectory:
    """The discrete-time Transformer (arXiv 2305.05465, eq. e:discreteequation).

    ``x^{k+1} = x^k + dt * v(x^k)`` with ``v`` the model's (non-rescaled) vector field. For a
    rescaled model the state is ``z^k = R^{-k} x^k`` with ``R = I + dt V`` and the exact recursion
    ``z^{k+1} = z^k + dt sum_j P_ij(R^k z^k) R^{-1} V (z_j^k - z_i^k)`` (r:discreterescaling).
    ``ts`` of the result are ``k * dt``. ``threads``: as for :func:`simulate`.
    """
    x = prepare_state(model, x0)
    with threads_policy(state_work(x.shape, model.weights.heads), threads, batch=state_batch(x.shape)):
        if not isinstance(layers, int) or layers < 0:
            raise ValueError(f"layers={layers!r} must be a non-negative integer.")
        dt = float(step_size)
        if not math.isfinite(dt) or dt <= 0:
            raise ValueError(f"step_size={step_size!r} must be a finite number > 0.")
        saved = [x]
        if model.rescaled:
            if model.weights.ff is not None:
                raise ValueError("residual_layers with rescaled=True and a feed-forward map is not defined (only attention is rescaled).")
            V = model.weights.V[0].to(dtype=x.dtype, device=x.device)
            d = V.shape[0]
            eye = torch.eye(d, dtype=x.dtype, device=x.device)
            R = eye + dt * V
            if torch.linalg.matrix_rank(R) < d:
                raise ValueError(f"R = I + dt V is singular for dt={dt:g}; the discrete rescaling needs it invertible.")
            # The R-recursion is the attention update with value matrix R^{-1} V, scores at R^k z.
            lifted = dataclasses.replace(
                model,
                weights=Weights(model.weights.Q, model.weights.K, torch.linalg.solve(R, V).to("cpu", model.weights.V.dtype)),
                rescaled=False,
            )
            args = prepare(lifted, x)
            Rk = eye
            for k in range(layers):
                xk = x @ Rk.transpose(-1, -2)
                if not bool(torch.isfinite(xk).all()):
                    raise FloatingPointError(f"R^k z overflowed at layer {k}.")
                # velocity(x -> attention at xk) - R^{-1}V z: the non-rescaled field of `lifted`
                # evaluated with scores at xk and values at z.
                x = x + dt * attention_term(xk, x, args, args.scale, subtract_own=True)
                Rk = R @ Rk
                saved.append(x)
        else:
            args = prepare(model, x)
            for k in range(layers):
                x = x + dt * vector_field(0.0, x, args)
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
