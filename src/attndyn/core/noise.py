"""The noisy model: an SDE on the sphere, seeded and batched (core: torch).

Contract
--------
``simulate_sde(model, x0, ts, kappa=, dt=, seed=)`` integrates

    dX_i = f(X)_i dt + sqrt(2 / kappa) P_{X_i} dW_i  on S^{d-1},

with f the engine's vector field of ``model`` (``geometry="sphere"``; the noisy model is usually stated with USA,
``normalization="unnormalized"``), by projected Euler-Maruyama: Y = X + f(X) dt + sigma P_X dW,
then X <- Y / |Y| (a retraction onto the sphere). Its strong order is 1/2 (tested against a finer
run on the same Brownian path). The Brownian increments come from ``torch.Generator`` seeded by
``seed`` in a fixed order (one ``(*batch, n, d)`` draw per step), so a seed reproduces a path;
``increments`` (``(steps, *x0.shape)``) passes a path explicitly instead. ``ts`` must lie on the
``dt`` grid. Returns ``(ts, xs)`` as NumPy arrays ``(T,)`` and ``(T, *x0.shape)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attndyn.core.dynamics import Model, prepare, vector_field
from attndyn.core.threads import policy as threads_policy
from attndyn.core.threads import state_batch, state_work
from attndyn.core.weights import as_float_tensor


def simulate_sde(
    model: Model,
    x0: np.ndarray | torch.Tensor,
    ts: np.ndarray | list[float],
    *,
    kappa: float,
    dt: float,
    seed: int | None = None,
    increments: torch.Tensor | None = None,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Projected Euler-Maruyama for the noisy sphere dynamics (see the module docstring).

    ``threads``: intra-op threads for this call, as for :func:`attndyn.simulate`.
    """
    if model.geometry != "sphere":
        raise ValueError("simulate_sde integrates the noisy model on the sphere; the model needs geometry='sphere'.")
    if not (math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"kappa = {kappa!r} must be a finite number > 0 (the noise is sqrt(2 / kappa) dW).")
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt = {dt!r} must be a finite number > 0.")
    if (seed is None) == (increments is None):
        raise ValueError("give exactly one of seed (a reproducible path) or increments (an explicit path).")
    x = as_float_tensor(x0, "x0") if not isinstance(x0, torch.Tensor) else x0
    if not torch.isfinite(x).all():
        raise ValueError("x0 contains non-finite values.")
    x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts[0] != 0 or (np.diff(ts) <= 0).any():
        raise ValueError("ts must start at 0 and increase.")
    marks = np.round(ts / dt).astype(np.int64)
    if np.abs(marks * dt - ts).max() > 1e-9 * max(1.0, ts[-1]):
        raise ValueError(f"save times must be multiples of dt = {dt:g}.")
    steps = int(marks[-1])
    if increments is not None and tuple(increments.shape) != (steps, *x.shape):
        raise ValueError(f"increments must have shape {(steps, *x.shape)}; got {tuple(increments.shape)}.")
    gen = None
    if seed is not None:
        gen = torch.Generator(device=x.device).manual_seed(int(seed))
    with threads_policy(state_work(x.shape, model.weights.heads), threads, batch=state_batch(x.shape)):
        args = prepare(model, x)
        sigma = math.sqrt(2.0 / kappa)
        out = [x.clone()] if marks[0] == 0 else []
        k_save = 1 if marks[0] == 0 else 0
        sqrt_dt = math.sqrt(dt)
        for k in range(steps):
            # sigma dW, projected on the tangent space, plus the drift: few full-size passes (the
            # step costs about one field evaluation plus the Gaussian draw)
            if increments is not None:
                noise = increments[k].to(dtype=x.dtype, device=x.device) * sigma
            else:
                noise = torch.randn(x.shape, generator=gen, dtype=x.dtype, device=x.device).mul_(sigma * sqrt_dt)
            y = torch.addcmul(noise, (noise * x).sum(-1, keepdim=True), x, value=-1.0)
            y.add_(x).add_(vector_field(k * dt, x, args), alpha=dt)
            x = y.div_(torch.linalg.vector_norm(y, dim=-1, keepdim=True))
            while k_save < len(marks) and marks[k_save] == k + 1:
                out.append(x.clone())
                k_save += 1
        xs = torch.stack(out)
        if not torch.isfinite(xs).all():
            raise FloatingPointError("the noisy trajectory became non-finite.")
        return ts, xs.detach().cpu().numpy()


def brownian_increments(seed: int, steps: int, shape: tuple[int, ...], dt: float) -> torch.Tensor:
    """A Brownian path's increments ``(steps, *shape)`` with variance ``dt`` (float64, host)."""
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn((steps, *shape), generator=gen, dtype=torch.float64) * math.sqrt(dt)


def coarsen(increments: torch.Tensor, factor: int) -> torch.Tensor:
    """The same path seen with a step ``factor`` times larger: sums of consecutive increments."""
    steps = increments.shape[0]
    if steps % factor:
        raise ValueError(f"{steps} steps do not divide into blocks of {factor}.")
    return increments.reshape(steps // factor, factor, *increments.shape[1:]).sum(1)
