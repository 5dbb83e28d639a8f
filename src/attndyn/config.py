"""Simulation configs: TOML -> pydantic (unknown keys rejected) -> Model, x0, solver, save times.

Contract
--------
``load_config(path)`` reads a TOML file into :class:`SimulationConfig`; ``build(config)``
returns a :class:`Setup` with the model, the initial state, the solver, the step control and the
save times. Random draws come from one stream per role (x0, Q, K, V, feed-forward W, the noise of the noisy model), each
``numpy.random.SeedSequence(seed, spawn_key=(role,))`` (:func:`rng_for`): changing n changes x0 only. Strings from the file are resolved to library
objects here, once (the library itself takes typed objects). An edge module: it imports pydantic.

Matrix specs (``kind``): ``identity``, ``scaled_identity`` (``scale``), ``diagonal``
(``diag``), ``matrix`` (``values``: ``(m, d)`` for every head or ``(heads, m, d)``), ``random``
(``dist`` = ``gaussian`` N(0, scale^2), ``uniform`` U[-scale, scale], ``goe`` (G + G^T)/2 with
G ~ N(0, scale^2), ``bbt`` B B^T with B ~ U[-scale, scale]; ``m`` rows for Q and K).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .dynamics import Geometry, Kernel, Mask, Model, Normalization, Scheme
from .solvers import SOLVERS, AdaptiveStep, FixedStep, SolverName, Tableau
from .weights import FeedForward, Weights


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MatrixSpec(Strict):
    kind: Literal["identity", "scaled_identity", "diagonal", "matrix", "random"] = "identity"
    scale: float = 1.0
    diag: list[float] | None = None
    values: list | None = None
    dist: Literal["gaussian", "uniform", "goe", "bbt"] | None = None
    m: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _fields_match_kind(self):
        needs = {"diagonal": "diag", "matrix": "values", "random": "dist"}
        if self.kind in needs and getattr(self, needs[self.kind]) is None:
            raise ValueError(f"kind = {self.kind!r} needs the key {needs[self.kind]!r}")
        for key in ("diag", "values", "dist"):
            if getattr(self, key) is not None and needs.get(self.kind) != key:
                raise ValueError(f"key {key!r} does not apply to kind = {self.kind!r}")
        if self.m is not None and self.kind != "random":
            raise ValueError("key 'm' applies only to kind = 'random'")
        if not math.isfinite(self.scale):
            raise ValueError(f"scale = {self.scale} must be finite")
        return self


class FeedForwardSpec(Strict):
    W: MatrixSpec = MatrixSpec()
    sigma: Literal["relu", "tanh", "identity"] = "identity"
    bias: list[float] | None = None
    bias_inside: bool = True


class WeightsSpec(Strict):
    heads: int = Field(default=1, ge=1)
    Q: MatrixSpec = MatrixSpec()
    K: MatrixSpec = MatrixSpec()
    V: MatrixSpec = MatrixSpec()
    feedforward: FeedForwardSpec | None = None


class InitSpec(Strict):
    kind: Literal["uniform", "gaussian", "sphere", "array"] = "uniform"
    low: float = -1.0
    high: float = 1.0
    std: float = Field(default=1.0, gt=0)
    values: list[list[float]] | None = None

    @model_validator(mode="after")
    def _check(self):
        if self.kind == "array" and self.values is None:
            raise ValueError("init kind = 'array' needs the key 'values'")
        if self.kind != "array" and self.values is not None:
            raise ValueError(f"key 'values' does not apply to init kind = {self.kind!r}")
        if self.kind == "uniform" and not self.low < self.high:
            raise ValueError(f"init low = {self.low} must be below high = {self.high}")
        return self


class ModelSpec(Strict):
    beta: float = Field(default=1.0, ge=0)
    mask: Mask = "full"
    geometry: Geometry = "euclidean"
    rescaled: bool = False
    attention: Kernel = "dense"
    normalization: Normalization = "softmax"
    scheme: Scheme = "post"
    scheme_tau: float = Field(default=1.0, gt=0)
    scheme_alpha: float = Field(default=1.0, gt=0)


class SolverSpec(Strict):
    """``method``: an explicit Runge-Kutta tableau, or ``long`` (:func:`attndyn.simulate_long`, the
    sphere model over exponentially long horizons; adaptive). ``kappa``: the noisy model of SPEC §8.7
    (projected Euler-Maruyama, ``method = "euler"`` with ``dt``). Save times: ``save_every``,
    ``save_times``, or ``save_log`` (0 and that many times spaced geometrically from 1e-2 to t1)."""

    method: SolverName | Literal["long"] = "rk4"
    dt: float | None = Field(default=None, gt=0)
    rtol: float | None = Field(default=None, gt=0)
    atol: float | None = Field(default=None, gt=0)
    t1: float = Field(gt=0)
    save_every: float | None = Field(default=None, gt=0)
    save_times: list[float] | None = None
    save_log: int | None = Field(default=None, ge=2)
    kappa: float | None = Field(default=None, gt=0)
    max_steps: int = Field(default=1_000_000, ge=1)

    @model_validator(mode="after")
    def _check(self):
        adaptive = self.rtol is not None or self.atol is not None
        if adaptive and self.dt is not None:
            raise ValueError("give either dt (fixed step) or rtol and atol (adaptive), not both")
        if adaptive and (self.rtol is None or self.atol is None):
            raise ValueError("adaptive stepping needs both rtol and atol")
        if not adaptive and self.dt is None:
            raise ValueError("give dt (fixed step) or rtol and atol (adaptive)")
        if adaptive and self.method not in ("dopri5", "long"):
            raise ValueError(f"method = {self.method!r} has no error estimate; adaptive stepping needs 'dopri5'")
        if self.method == "long" and not adaptive:
            raise ValueError("method = 'long' chooses its own steps: give rtol and atol, not dt")
        if self.kappa is not None and (self.method != "euler" or self.dt is None):
            raise ValueError("solver.kappa (the noisy model) is integrated by projected Euler-Maruyama: use method = 'euler' with dt")
        if sum(v is not None for v in (self.save_every, self.save_times, self.save_log)) > 1:
            raise ValueError("give one of save_every, save_times and save_log")
        if self.save_log is not None and self.dt is not None:
            raise ValueError("save_log times are not on a dt grid: use adaptive steps (rtol and atol) with save_log")
        if self.save_log is not None and self.t1 <= 1e-2:
            raise ValueError(f"save_log spaces times from 1e-2 to t1; t1 = {self.t1} must be larger")
        return self


DType = Literal["float64", "float32"]


class SimulationConfig(Strict):
    seed: int
    n: int = Field(ge=1)
    d: int = Field(ge=1)
    # Where and in what precision the state is integrated. Random draws are made in float64 NumPy
    # on the host first, so a seed gives the same system on every device.
    device: str = "cpu"
    dtype: DType = "float64"
    init: InitSpec = InitSpec()
    weights: WeightsSpec = WeightsSpec()
    model: ModelSpec = ModelSpec()
    solver: SolverSpec


class ConfigError(ValueError):
    """A config that cannot be used; the message is one readable line."""


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "config"
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{loc}: {msg}{more}"


def parse_config(data: dict) -> SimulationConfig:
    try:
        return SimulationConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_one_line(err)) from None


def read_toml(path: str | Path) -> dict:
    """The table of a TOML file; raises ConfigError (one line) when it is missing or not TOML."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None


def load_config(path: str | Path) -> SimulationConfig:
    """Read and validate a TOML config; raises ConfigError with one line on any problem."""
    return parse_config(read_toml(path))


def matrix(spec: MatrixSpec, heads: int, d: int, rng: Callable[[], np.random.Generator], name: str, *, square: bool) -> np.ndarray:
    """A ``(heads, m, d)`` array from a spec; ``square`` (V and W) forces m = d.

    ``rng()`` gives the role's random stream; it is called only for ``kind = "random"`` (a stream
    costs a SeedSequence, about 40 us, which a sweep of 10,000 identity-weight points need not pay).
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
        return x / np.linalg.norm(x, axis=1, keepdims=True)
    x = np.asarray(init.values, dtype=np.float64)
    if x.shape != (n, d):
        raise ConfigError(f"init.values has shape {x.shape}; expected (n, d) = ({n}, {d})")
    return x


def save_times(s: SolverSpec) -> np.ndarray:
    if s.save_log is not None:
        return np.concatenate([[0.0], np.geomspace(1e-2, s.t1, s.save_log)])
    if s.save_times is not None:
        ts = np.asarray(s.save_times, dtype=np.float64)
        if ts.ndim != 1 or ts.size == 0 or ts[0] != 0 or np.any(np.diff(ts) <= 0) or ts[-1] > s.t1:
            raise ConfigError("solver.save_times must start at 0, increase strictly and end at or before t1")
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


def build(config: SimulationConfig) -> Setup:
    """Resolve a config into library objects. Raises ConfigError (one line) when inconsistent."""
    d, w, seed = config.d, config.weights, config.seed
    try:
        x0 = initial_state(config, rng_for(seed, "x0"))
        Q = matrix(w.Q, w.heads, d, functools.partial(rng_for, seed, "Q"), "weights.Q", square=False)
        K = matrix(w.K, w.heads, d, functools.partial(rng_for, seed, "K"), "weights.K", square=False)
        V = matrix(w.V, w.heads, d, functools.partial(rng_for, seed, "V"), "weights.V", square=True)
        ff = None
        if w.feedforward is not None:
            W = matrix(w.feedforward.W, 1, d, functools.partial(rng_for, seed, "ff"), "weights.feedforward.W", square=True)[0]
            ff = FeedForward(W, w.feedforward.sigma, w.feedforward.bias, w.feedforward.bias_inside)
        model = Model(Weights(Q, K, V, ff), **config.model.model_dump())
        s = config.solver
        step = FixedStep(s.dt) if s.dt is not None else AdaptiveStep(rtol=s.rtol, atol=s.atol)
        device = resolve_device(config.device)
        x0 = torch.from_numpy(x0).to(device=device, dtype=getattr(torch, config.dtype))
        if s.kappa is not None:
            if model.geometry != "sphere":
                raise ConfigError("solver.kappa: the noisy model lives on the sphere; set model.geometry = 'sphere'")
            noise_seed = _noise_seed(seed)
            return Setup(model, x0, save_times(s), SOLVERS["euler"](), step, s.max_steps, "sde", s.kappa, noise_seed)
        if s.method == "long":
            from .longtime import check_model

            check_model(model)
            if not np.allclose(np.linalg.norm(x0.cpu().numpy(), axis=-1), 1.0):
                raise ConfigError(f"method = 'long' integrates unit tokens; init.kind = {config.init.kind!r} gives others: use 'sphere'")
            return Setup(model, x0, save_times(s), SOLVERS["dopri5"](), step, s.max_steps, "long")
        return Setup(model, x0, save_times(s), SOLVERS[s.method](), step, s.max_steps)
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
    noise seed). A sweep task builds its seeds this way (about 1 ms saved per grid point at d = 128)."""
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


# --- mean-field runs (``attndyn meanfield``) --------------------------------------------------------


class MeanFieldConfig(Strict):
    """A mean-field run on the circle (SPEC §8.8): the solver's options and the initial density.

    ``init`` holds ``kind`` (``uniform``, ``wrapped-cauchy``, ``von-mises``, ``samples`` or
    ``values``) and that kind's parameters (see :func:`attndyn.meanfield.initial_density`;
    ``values`` lists the density on the M grid points itself and must have mass 1).
    """

    beta: float = Field(ge=0)
    usa: bool = False
    M: int | None = Field(default=None, ge=8)
    method: Literal["spectral", "finite-volume"] = "spectral"
    t1: float = Field(gt=0)
    save_every: float = Field(gt=0)
    rtol: float = Field(default=1e-10, gt=0)
    atol: float = Field(default=1e-12, gt=0)
    cfl: float = Field(default=0.4, gt=0, le=0.5)
    init: dict

    @model_validator(mode="after")
    def _check(self):
        if not math.isfinite(self.beta):
            raise ValueError(f"beta = {self.beta} must be finite")
        kind = self.init.get("kind")
        if kind is None:
            raise ValueError("init needs a 'kind'")
        if kind != "values" and self.M is None:
            raise ValueError(f"M (the number of grid points) is required for init.kind = {kind!r}")
        if self.save_every > self.t1:
            raise ValueError(f"save_every = {self.save_every} exceeds t1 = {self.t1}")
        return self


def load_meanfield_config(path: str | Path) -> MeanFieldConfig:
    """Read and validate a mean-field TOML config; raises ConfigError with one line on any problem."""
    try:
        return MeanFieldConfig.model_validate(read_toml(path))
    except ValidationError as err:
        raise ConfigError(_one_line(err)) from None


def meanfield_setup(config: MeanFieldConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(rho0, ts)`` of a mean-field config; raises ConfigError naming the bad value."""
    from .meanfield import check_density, initial_density

    params = {k: v for k, v in config.init.items() if k != "kind"}
    kind = config.init["kind"]
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
