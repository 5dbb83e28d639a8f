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

Common noise
------------
``noise="common"`` drives every token by one d x d matrix Brownian motion B (per batch entry), shared by the
tokens (derived here; arXiv 2601.21942 states this limit for value matrices resampled at every layer under
diffusion scaling, and its text was not at hand):

    dX_i = f(X)_i dt + sqrt(2 / kappa) P_{X_i}(o dB X_i)                      (Stratonovich)
         = f(X)_i dt + sqrt(2 / kappa) P_{X_i}(dB X_i) - ((d - 1) / kappa) X_i dt   (Ito),

B with i.i.d. standard entries (``generator="gaussian"``) or B = (G - G^T) / sqrt 2 (``"antisymmetric"``, a
Brownian motion on so(d)). The Ito correction is -(d - 1) / kappa X for both generators: (1/2) sum_k Dg_k g_k of
g_ab(x) = P_x(E_ab x) sums to -(d - 1) x. Each token alone is a Brownian motion on the sphere with generator
(1 / kappa) Laplacian, as with independent noise; only the tokens' correlations differ. With the antisymmetric
generator and no drift the noise is a rotation shared by all tokens, so their inner products are constant.
``scheme="stratonovich"`` splits a step into the drift's projected Euler step (and retraction) and the noise's
exact flow for a frozen increment, e^{sigma dB} X / |e^{sigma dB} X| (an exact rotation for the antisymmetric
generator); ``scheme="ito"`` is Euler-Maruyama of the Ito form in R^d without retraction (the correction keeps
E|X|^2 = 1 + O(dt)). Both have weak order 1. ``increments`` is then ``(steps, *batch, d, d)``.
:func:`random_layer_chain` is the chain of random layers the SDE is the limit of (weak order 1 in 1 / depth).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attndyn.core.dynamics import Model, prepare, vector_field
from attndyn.core.threads import policy as threads_policy
from attndyn.core.threads import state_batch, state_work
from attndyn.core.weights import as_float_tensor

NOISES = ("independent", "common")
GENERATORS = ("gaussian", "antisymmetric")
SCHEMES = ("stratonovich", "ito")


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
    noise: str = "independent",
    generator: str = "gaussian",
    scheme: str = "stratonovich",
    correction: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The noisy sphere dynamics, with independent or common noise (see the module docstring).

    ``threads``: intra-op threads for this call, as for :func:`attndyn.simulate`. ``noise="common"``: one matrix
    Brownian motion B for all tokens (``generator`` ``"gaussian"`` or ``"antisymmetric"``), integrated by ``scheme``
    ``"stratonovich"`` or ``"ito"``; ``correction`` replaces the Itô scheme's drift coefficient c in c X dt (default
    -(d - 1) / kappa, the derived one; the common-noise claim's sensitivity check sets 0).
    """
    if model.geometry != "sphere":
        raise ValueError("simulate_sde integrates the noisy model on the sphere; the model needs geometry='sphere'.")
    if not (math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"kappa = {kappa!r} must be a finite number > 0 (the noise is sqrt(2 / kappa) dW).")
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt = {dt!r} must be a finite number > 0.")
    if noise not in NOISES:
        raise ValueError(f"noise = {noise!r} is not one of {', '.join(NOISES)}.")
    if generator not in GENERATORS:
        raise ValueError(f"generator = {generator!r} is not one of {', '.join(GENERATORS)}.")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme = {scheme!r} is not one of {', '.join(SCHEMES)}.")
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
    common = noise == "common"
    shape = (*x.shape[:-2], x.shape[-1], x.shape[-1]) if common else tuple(x.shape)
    if increments is not None and tuple(increments.shape) != (steps, *shape):
        raise ValueError(f"increments must have shape {(steps, *shape)}; got {tuple(increments.shape)}.")
    gen = None
    if seed is not None:
        gen = torch.Generator(device=x.device).manual_seed(int(seed))
    d = x.shape[-1]
    c = -(d - 1) / kappa if correction is None else float(correction)
    with threads_policy(state_work(x.shape, model.weights.heads), threads, batch=state_batch(x.shape)):
        args = prepare(model, x)
        sigma = math.sqrt(2.0 / kappa)
        out = [x.clone()] if marks[0] == 0 else []
        k_save = 1 if marks[0] == 0 else 0
        sqrt_dt = math.sqrt(dt)
        for k in range(steps):
            # sigma dW (or sigma dB), scaled once: few full-size passes (a step costs about one field evaluation
            # plus the Gaussian draw)
            if increments is not None:
                dw = increments[k].to(dtype=x.dtype, device=x.device) * sigma
            else:
                dw = torch.randn(shape, generator=gen, dtype=x.dtype, device=x.device).mul_(sigma * sqrt_dt)
            if common:
                x = _common_step(x, k * dt, args, dt, _generated(dw, generator), scheme, c)
            else:
                y = torch.addcmul(dw, (dw * x).sum(-1, keepdim=True), x, value=-1.0)
                y.add_(x).add_(vector_field(k * dt, x, args), alpha=dt)
                x = y.div_(torch.linalg.vector_norm(y, dim=-1, keepdim=True))
            while k_save < len(marks) and marks[k_save] == k + 1:
                out.append(x.clone())
                k_save += 1
        xs = torch.stack(out)
        if not torch.isfinite(xs).all():
            raise FloatingPointError("the noisy trajectory became non-finite.")
        return ts, xs.detach().cpu().numpy()


def _generated(dw: torch.Tensor, generator: str) -> torch.Tensor:
    """sigma dB from a Gaussian matrix increment: itself, or its antisymmetric part (G - G^T) / sqrt 2."""
    if generator == "gaussian":
        return dw
    return (dw - dw.transpose(-1, -2)) / math.sqrt(2.0)


def _common_step(x: torch.Tensor, t: float, args, dt: float, dB: torch.Tensor, scheme: str, c: float) -> torch.Tensor:
    """One step of dX_i = f_i dt + P_{X_i}(sigma dB X_i) (Stratonovich), ``dB`` ``(*batch, d, d)`` already times sigma."""
    f = vector_field(t, x, args)
    if scheme == "ito":  # Euler-Maruyama of the Ito form, in R^d, no retraction: X + (f + c X) dt + P_X (dB X)
        z = x @ dB.transpose(-1, -2)
        z = torch.addcmul(z, (z * x).sum(-1, keepdim=True) / (x * x).sum(-1, keepdim=True), x, value=-1.0)
        return z.add_(f, alpha=dt).add_(x, alpha=1.0 + c * dt)
    # Lie splitting of two exact-flow steps: the drift (projected Euler, retraction), then the noise's flow for a
    # frozen increment, e^{dB} X / |e^{dB} X| (a rotation when dB is antisymmetric)
    y = x + dt * f
    y = y / torch.linalg.vector_norm(y, dim=-1, keepdim=True)
    z = y @ torch.linalg.matrix_exp(dB).transpose(-1, -2)
    return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True)


def random_layer_chain(
    model: Model,
    x0: np.ndarray | torch.Tensor,
    T: float,
    depth: int,
    *,
    kappa: float,
    increments: torch.Tensor,
    generator: str = "gaussian",
) -> np.ndarray:
    """The chain of ``depth`` random layers whose limit is the common-noise SDE: with h = T / depth,

        Y_i = X_i + h f(X)_i + sqrt(2 / kappa) sqrt(h) Z_k X_i,   X_i <- Y_i / |Y_i|,

    one random matrix Z_k per layer (i.i.d. N(0, 1) entries, or their antisymmetric part), shared by the tokens,
    given as ``increments`` = sqrt(h) Z_k ``(depth, *batch, d, d)`` (a matrix Brownian path's increments on the
    h grid). Returns the last layer's state ``(*batch, n, d)`` as a NumPy array.
    """
    if generator not in GENERATORS:
        raise ValueError(f"generator = {generator!r} is not one of {', '.join(GENERATORS)}.")
    if not (math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"kappa = {kappa!r} must be a finite number > 0 (the noise is sqrt(2 / kappa) dB X).")
    if depth < 1 or not (math.isfinite(T) and T > 0):
        raise ValueError(f"depth = {depth!r} must be >= 1 and T = {T!r} a finite number > 0.")
    x = as_float_tensor(x0, "x0") if not isinstance(x0, torch.Tensor) else x0
    x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    d = x.shape[-1]
    if tuple(increments.shape) != (depth, *x.shape[:-2], d, d):
        raise ValueError(f"increments must have shape {(depth, *x.shape[:-2], d, d)}; got {tuple(increments.shape)}.")
    h, sigma = T / depth, math.sqrt(2.0 / kappa)
    args = prepare(model, x)
    for k in range(depth):
        dB = _generated(increments[k].to(dtype=x.dtype, device=x.device) * sigma, generator)
        y = x + h * vector_field(k * h, x, args) + x @ dB.transpose(-1, -2)
        x = y / torch.linalg.vector_norm(y, dim=-1, keepdim=True)
    return x.detach().cpu().numpy()


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
