"""Validated configs -> library objects: the model, the initial state, the solver and the save times.

Contract
--------
``build(config)`` returns a :class:`Setup` (model, x0, solver, step control, save times, kind);
``build_many(configs)`` shares the work among configs that differ only in their seed. Random draws
come from one stream per role (x0, Q, K, V, feed-forward W, the noise of the noisy model), each
``numpy.random.SeedSequence(seed, spawn_key=(role,))`` (:func:`rng_for`): changing n changes x0
only. Strings from the file are resolved to library objects here, once (the library itself takes
typed objects). Inconsistent configs raise :class:`~attndyn.workflow.schema.ConfigError`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from attndyn.core.dynamics import AUTO_FUSED_ENTRIES, AUTO_FUSED_N, Model
from attndyn.core.reading import available_memory
from attndyn.core.simulation import prepare_state
from attndyn.core.solvers import SOLVERS, AdaptiveStep, FixedStep, Tableau
from attndyn.core.weights import FeedForward, Weights
from attndyn.workflow.schema import ConfigError, MatrixSpec, MeanFieldConfig, SimulationConfig, SolverSpec


def matrix(spec: MatrixSpec, heads: int, d: int, rng: Callable[[], np.random.Generator], name: str, *, square: bool) -> np.ndarray:
    """A ``(heads, m, d)`` array from a spec; ``square`` (V and W) forces m = d.

    ``rng()`` gives the role's random stream; it is called only for ``kind = "random"`` (a stream
    costs a SeedSequence, which a sweep of 10,000 identity-weight points need not pay).
    """
    m = d if square else (spec.m or d)
    if spec.kind == "random" and spec.m is not None and square:
        raise ConfigError(f"{name}: key 'm' applies only to Q and K")
    if spec.kind in ("identity", "scaled_identity", "diagonal") and not square and m != d:
        raise ConfigError(f"{name}: kind = {spec.kind!r} is square")
    if spec.kind == "identity":
        return np.broadcast_to(np.eye(d), (heads, d, d)).copy()
    if spec.kind == "scaled_identity":
        return np.broadcast_to(spec.scale * np.eye(d), (heads, d, d)).copy()
    if spec.kind == "diagonal":
        if len(spec.diag) != d:
            raise ConfigError(f"{name}: diag has {len(spec.diag)} entries, expected d = {d}")
        return np.broadcast_to(np.diag(spec.diag), (heads, d, d)).copy()
    if spec.kind == "matrix":
        try:
            a = np.asarray(spec.values, dtype=np.float64)
        except ValueError:
            raise ConfigError(f"{name}: values is not a rectangular array of numbers") from None
        if a.ndim == 2:
            a = np.broadcast_to(a, (heads, *a.shape)).copy()
        if a.ndim != 3 or a.shape[0] != heads or a.shape[2] != d or (square and a.shape[1] != d):
            want = f"({d}, {d})" if square else f"(m, {d})"
            raise ConfigError(f"{name}: values has shape {a.shape}; expected {want} or (heads={heads}, ...)")
        return a
    out = np.empty((heads, m, d))
    rng = rng()
    for h in range(heads):
        if spec.dist == "gaussian":
            out[h] = rng.normal(0, spec.scale, (m, d))
        elif spec.dist == "uniform":
            out[h] = rng.uniform(-spec.scale, spec.scale, (m, d))
        else:
            if m != d:
                raise ConfigError(f"{name}: dist = {spec.dist!r} is square; drop m")
            if spec.dist == "goe":
                G = rng.normal(0, spec.scale, (d, d))
                out[h] = (G + G.T) / 2
            else:
                B = rng.uniform(-spec.scale, spec.scale, (d, d))
                out[h] = B @ B.T
    return out


def initial_state(config: SimulationConfig, rng: np.random.Generator) -> np.ndarray:
    n, d, init = config.n, config.d, config.init
    if init.kind == "uniform":
        return rng.uniform(init.low, init.high, (n, d))
    if init.kind == "gaussian":
        return rng.normal(0, init.std, (n, d))
    if init.kind == "sphere":
        x = rng.normal(size=(n, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        if init.gram_scale == 1:
            return x
        if d < n:
            raise ConfigError(f"init.gram_scale = {init.gram_scale} needs d >= n (the scaled Gram matrix has rank n); got d = {d}, n = {n}")
        return scale_gram(x, init.gram_scale)
    x = np.asarray(init.values, dtype=np.float64)
    if x.shape != (n, d):
        raise ConfigError(f"init.values has shape {x.shape}; expected (n, d) = ({n}, {d})")
    return x


def scale_gram(x: np.ndarray, lam: float) -> np.ndarray:
    """Unit points (n, d), d >= n, with Gram matrix ``I + lam (x x^T - I)`` in the span of the rows of ``x``.

    With the SVD x = U S W^T, ``M^{1/2} U W^T`` (M the scaled Gram matrix) has Gram matrix M; at lam = 1 it is x
    itself (M^{1/2} = U S U^T), at lam = 0 the orthonormal frame U W^T nearest x. The off-diagonal inner products are
    lam times the drawn ones, so one draw gives a family of starts whose Gram fluctuations scale as lam / d^{1/2}
    (those of the sphere in d / lam^2 dimensions, to second order).
    """
    U, _, Wt = np.linalg.svd(x, full_matrices=False)
    n = x.shape[0]
    e, E = np.linalg.eigh(np.eye(n) + lam * (x @ x.T - np.eye(n)))
    y = (E * np.sqrt(np.clip(e, 0.0, None))) @ E.T @ U @ Wt
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def save_times(s: SolverSpec) -> np.ndarray:
    if s.save_log is not None:
        return np.concatenate([[0.0], np.geomspace(1e-2, s.t1, s.save_log)])
    if s.save_times is not None:
        ts = np.asarray(s.save_times, dtype=np.float64)
        if ts.ndim != 1 or ts.size == 0 or ts[0] != 0 or np.any(np.diff(ts) <= 0) or ts[-1] > s.t1:
            raise ConfigError("solver.save_times must start at 0, increase strictly and end at or before t1")
        if s.dt is not None:
            from attndyn.core.solvers import step_counts

            try:  # the solver's own test, here, so that an off-grid time is a config error naming its key
                step_counts(ts.tolist(), s.dt)
            except ValueError as err:
                raise ConfigError(f"solver.save_times: {err}") from None
        return ts
    if s.dt is not None:
        steps = s.t1 / s.dt
        if abs(steps - round(steps)) > 1e-9 * max(1.0, steps):
            raise ConfigError(f"solver.t1 = {s.t1} is not a multiple of dt = {s.dt}")
        steps = round(steps)
        every = max(1, round(s.save_every / s.dt)) if s.save_every else max(1, steps // 100)
        if s.save_every and abs(s.save_every / s.dt - every) > 1e-9 * every:
            raise ConfigError(f"solver.save_every = {s.save_every} is not a multiple of dt = {s.dt}")
        k = np.arange(0, steps + 1, every)
        if k[-1] != steps:
            k = np.append(k, steps)
        return k * s.dt
    if s.save_every:
        ts = np.arange(0.0, s.t1, s.save_every)
        return np.append(ts, s.t1)
    return np.linspace(0.0, s.t1, 101)


@dataclass(frozen=True)
class Setup:
    """A built config. ``kind``: ``ode`` (:func:`attndyn.simulate`), ``sde`` (the noisy model, with
    ``kappa`` and ``noise_seed``) or ``long`` (:func:`attndyn.simulate_long`)."""

    model: Model
    x0: torch.Tensor
    ts: np.ndarray
    solver: Tableau
    step: FixedStep | AdaptiveStep
    max_steps: int
    kind: Literal["ode", "sde", "long"] = "ode"
    kappa: float | None = None
    noise_seed: int | None = None
    threads: int | None = None


def resolve_device(name: str) -> torch.device:
    """A torch device from its name (``cpu``, ``cuda``, ``cuda:1``, ``mps``); ConfigError if unusable here."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device = {name!r} is not a device name (use 'cpu', 'cuda' or 'cuda:N')") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device = {name!r}: no CUDA device is available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device = {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device = {name!r}: MPS is not available on this machine")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device = {name!r} is not supported (use 'cpu', 'cuda' or 'cuda:N')")
    return device


ROLES = {"x0": 0, "Q": 1, "K": 2, "V": 3, "ff": 4, "noise": 5}


def rng_for(seed: int, role: str) -> np.random.Generator:
    """The random stream of one role (``x0``, ``Q``, ``K``, ``V``, ``ff``, ``noise``) of a seed.

    ``SeedSequence(seed, spawn_key=(k,))`` per role: the streams are independent, and changing n or
    d (which changes how many numbers x0 draws) leaves every other role's draws unchanged.
    """
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(ROLES[role],)))


def estimated_bytes(config: SimulationConfig) -> int:
    """A lower bound on the memory a run of ``config`` needs: the weights, the saved states, the
    solver's stages, and the n x n attention of the dense kernel (O(n d) for the fused one)."""
    n, d, w = config.n, config.d, config.weights
    item = 8 if config.dtype == "float64" else 4
    m = max(w.Q.m or d, w.K.m or d)
    weights = w.heads * (2 * m * d + d * d) * 8
    steps = save_times(config.solver).size if config.solver.save_log is None else config.solver.save_log + 1
    states = (steps + 8) * n * d * item  # the saves, plus the Runge-Kutta stages and temporaries
    kernel = config.model.attention
    if kernel == "auto":  # as resolve_kernel decides for one system
        plain = (
            config.model.normalization == "softmax"
            and config.model.mask != "window"
            and not config.model.sink_bias
            and config.model.beta != float("inf")
        )
        kernel = "fused" if plain and (n * n >= AUTO_FUSED_ENTRIES or n >= AUTO_FUSED_N) else "dense"
    attention = w.heads * n * n * item * 2 if kernel == "dense" else 8 * n * d * item
    return int(weights + states + attention)


def estimated_pairs(config: SimulationConfig) -> float:
    """The token pairs a run evaluates, an estimate before work: heads x n^2 per evaluation of the
    field (each pair costs O(d)), times the evaluations: a fixed step's stages times its steps, or at
    least one step per save for adaptive stepping (a lower bound)."""
    s = config.solver
    stages = len(SOLVERS[s.method]().b) if s.method in SOLVERS else 7
    steps = s.t1 / s.dt if s.dt is not None else len(save_times(s))
    return float(config.weights.heads) * float(config.n) ** 2 * stages * steps


def check_budget(config: SimulationConfig) -> None:
    """ConfigError before any allocation when a run cannot fit in memory, within ``max_steps`` or within
    ``max_pairs`` (the token pairs it would evaluate, :func:`estimated_pairs`)."""
    s = config.solver
    if s.dt is not None and s.t1 / s.dt > s.max_steps:
        raise ConfigError(f"solver: t1 / dt = {s.t1 / s.dt:.4g} steps exceeds solver.max_steps = {s.max_steps}; raise max_steps or the step dt")
    if s.save_every is not None and s.t1 / s.save_every > 10_000_000:
        raise ConfigError(f"solver: t1 / save_every = {s.t1 / s.save_every:.4g} saves is more than 10^7; save less often")
    need, have = estimated_bytes(config), available_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"n = {config.n}, d = {config.d}, weights.heads = {config.weights.heads} need at least {need / 2**30:.3g} GiB "
            f"({config.model.attention} attention), more than the {have / 2**30:.3g} GiB available"
        )
    pairs = estimated_pairs(config)
    if pairs > s.max_pairs:
        raise ConfigError(
            f"n = {config.n} tokens, weights.heads = {config.weights.heads} and the solver's evaluations come to about {pairs:.3g} token pairs, "
            f"more than solver.max_pairs = {s.max_pairs:.3g} (hours of work); lower n or t1, or raise solver.max_pairs"
        )


def build(config: SimulationConfig) -> Setup:
    """Resolve a config into library objects. Raises ConfigError (one line) when inconsistent, or
    when it cannot run within its memory and step budgets (:func:`check_budget`, before any work)."""
    check_budget(config)
    d, w, seed = config.d, config.weights, config.seed
    try:
        x0 = initial_state(config, rng_for(seed, "x0"))
        if not np.isfinite(x0).all():
            raise ConfigError(f"init: the initial state (shape {x0.shape}) contains non-finite values")
        Q = matrix(w.Q, w.heads, d, functools.partial(rng_for, seed, "Q"), "weights.Q", square=False)
        K = matrix(w.K, w.heads, d, functools.partial(rng_for, seed, "K"), "weights.K", square=False)
        V = matrix(w.V, w.heads, d, functools.partial(rng_for, seed, "V"), "weights.V", square=True)
        ff = None
        if w.feedforward is not None:
            W = matrix(w.feedforward.W, 1, d, functools.partial(rng_for, seed, "ff"), "weights.feedforward.W", square=True)[0]
            ff = FeedForward(W, w.feedforward.sigma, w.feedforward.bias, w.feedforward.bias_inside)
        model = Model(Weights(Q, K, V, ff), **config.model.model_dump())
        try:
            prepare_state(model, x0)  # the initial state fits the model (unit tokens on the sphere, ...)
        except ValueError as err:
            if model.geometry != "sphere":
                raise
            raise ConfigError(f"init.kind = {config.init.kind!r}: {err} The sphere needs unit tokens: use init.kind = 'sphere'.") from None
        s = config.solver
        step = FixedStep(s.dt) if s.dt is not None else AdaptiveStep(rtol=s.rtol, atol=s.atol)
        device = resolve_device(config.device)
        x0 = torch.from_numpy(x0).to(device=device, dtype=getattr(torch, config.dtype))
        if s.kappa is not None:
            if model.geometry != "sphere":
                raise ConfigError("solver.kappa: the noisy model lives on the sphere; set model.geometry = 'sphere'")
            noise_seed = _noise_seed(seed)
            return Setup(model, x0, save_times(s), SOLVERS["euler"](), step, s.max_steps, "sde", s.kappa, noise_seed, config.threads)
        if s.method == "long":
            from attndyn.core.longtime import check_model

            check_model(model)
            if not np.allclose(np.linalg.norm(x0.cpu().numpy(), axis=-1), 1.0):
                raise ConfigError(f"method = 'long' integrates unit tokens; init.kind = {config.init.kind!r} gives others: use 'sphere'")
            return Setup(model, x0, save_times(s), SOLVERS["dopri5"](), step, s.max_steps, "long", threads=config.threads)
        return Setup(model, x0, save_times(s), SOLVERS[s.method](), step, s.max_steps, threads=config.threads)
    except ConfigError:
        raise
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from None


def _noise_seed(seed: int) -> int:
    """The torch generator seed of the noisy model's Brownian path (the seed's ``noise`` stream)."""
    return int(rng_for(seed, "noise").integers(2**62))


def _draws_weights(config: SimulationConfig) -> bool:
    """Whether building ``config`` draws any weight at random (so the seed changes the model)."""
    w = config.weights
    specs = [w.Q, w.K, w.V] + ([w.feedforward.W] if w.feedforward is not None else [])
    return any(spec.kind == "random" for spec in specs)


def build_many(configs: list[SimulationConfig]) -> list[Setup]:
    """``[build(c) for c in configs]``, sharing the work among configs that differ only in ``seed``
    and draw no random weights: those share one model and draw only their initial state (and
    noise seed). A sweep task builds its seeds this way (one derivation saved per grid point)."""
    out: list[Setup] = []
    built: dict[str, Setup] = {}  # the first setup of each config up to its seed
    for config in configs:
        key = config.model_dump_json(exclude={"seed"})
        if key in built and not _draws_weights(config):
            first = built[key]
            x0 = initial_state(config, rng_for(config.seed, "x0"))
            x0 = torch.from_numpy(x0).to(device=first.x0.device, dtype=first.x0.dtype)
            noise_seed = _noise_seed(config.seed) if first.kind == "sde" else None
            out.append(dataclasses.replace(first, x0=x0, noise_seed=noise_seed))
            continue
        setup = build(config)
        built.setdefault(key, setup)
        out.append(setup)
    return out


def meanfield_bytes(M: int, saves: int) -> int:
    """A lower bound on the memory of a mean-field run: the saved densities and about 16 work
    arrays of the grid (the solver's stages and the spectral transforms, complex)."""
    return 8 * M * (saves + 16)


def meanfield_setup(config: MeanFieldConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(rho0, ts)`` of a mean-field config; raises ConfigError naming the bad value."""
    from attndyn.theory.meanfield import check_density, initial_density

    params = {k: v for k, v in config.init.items() if k != "kind"}
    kind = config.init["kind"]
    # estimates before work: the saves and the grid are checked before any array is made
    saves = config.t1 / config.save_every + 1
    if saves > 10_000_000:
        raise ConfigError(f"t1 / save_every = {saves - 1:.4g} saves is more than 10^7; save less often")
    values = params.get("values")
    M = config.M if config.M is not None else len(values) if isinstance(values, list) else 0
    need, have = meanfield_bytes(M, int(saves)), available_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"M = {M} grid points with {int(saves)} saves need at least {need / 2**30:.3g} GiB, more than the {have / 2**30:.3g} GiB available"
        )
    try:
        if kind == "values":
            if set(params) != {"values"}:
                raise ValueError(f"init.kind = 'values' takes only 'values'; got {sorted(params)}")
            rho0 = check_density(np.asarray(params["values"], dtype=np.float64))
            if config.M is not None and config.M != rho0.size:
                raise ValueError(f"M = {config.M} but init.values has {rho0.size} entries")
        else:
            rho0 = initial_density(kind, config.M, **params)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"init: {err}") from None
    steps = round(config.t1 / config.save_every)
    ts = np.linspace(0.0, steps * config.save_every, steps + 1)
    if ts[-1] < config.t1 - 1e-12:
        ts = np.append(ts, config.t1)
    return rho0, np.minimum(ts, config.t1)
