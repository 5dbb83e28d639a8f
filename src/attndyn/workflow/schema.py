"""The schema of config files: TOML -> pydantic models (unknown keys rejected), one-line errors.

Contract
--------
``load_config(path)`` reads a TOML file into :class:`SimulationConfig` and
``load_meanfield_config(path)`` into :class:`MeanFieldConfig`; every problem (a missing file, bad
TOML, an unknown key, a value of the wrong type or range) raises :class:`ConfigError` with one
readable line naming the key. Validation only: turning a config into library objects is
:mod:`attndyn.workflow.setup`.

Matrix specs (``kind``): ``identity``, ``scaled_identity`` (``scale``), ``diagonal``
(``diag``), ``matrix`` (``values``: ``(m, d)`` for every head or ``(heads, m, d)``), ``random``
(``dist`` = ``gaussian`` N(0, scale^2), ``uniform`` U[-scale, scale], ``goe`` (G + G^T)/2 with
G ~ N(0, scale^2), ``bbt`` B B^T with B ~ U[-scale, scale]; ``m`` rows for Q and K).
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from attndyn.core.errors import UserError
from attndyn.core.names import Geometry, Kernel, Mask, Normalization, Scheme, SolverName
from attndyn.core.threads import MAX_THREADS


class Strict(BaseModel):
    """Unknown keys are refused, and values are never converted (pydantic's strict mode): ``n = true``,
    ``n = "6"`` and ``n = 6.0`` are refused, not read as 1 or 6. One conversion is kept: an integer
    where a float is expected (``beta = 1`` for 1.0), which is exact and what TOML writers expect."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class MatrixSpec(Strict):
    kind: Literal["identity", "scaled_identity", "diagonal", "matrix", "random"] = Field(
        default="identity", description="How the matrix is made; each kind takes the keys below that name it."
    )
    scale: float = Field(
        default=1.0, description="The factor of scaled_identity; the spread of a random draw (gaussian N(0, scale^2), uniform U[-scale, scale])."
    )
    diag: list[float] | None = Field(default=None, description="The diagonal of kind = diagonal (d numbers).")
    values: list | None = Field(default=None, description="The entries of kind = matrix: (m, d) for every head, or (heads, m, d).")
    dist: Literal["gaussian", "uniform", "goe", "bbt"] | None = Field(
        default=None, description="The law of kind = random: gaussian, uniform, goe ((G + G^T)/2), bbt (B B^T)."
    )
    m: int | None = Field(default=None, ge=1, description="Rows of a random Q or K (default d): a low-rank attention when m < d.")

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
    W: MatrixSpec = Field(default=MatrixSpec(), description="The feed-forward matrix W (a matrix table, as Q, K and V).")
    sigma: Literal["relu", "tanh", "identity"] = Field(default="identity", description="The activation applied by the feed-forward layer.")
    bias: list[float] | None = Field(default=None, description="The feed-forward bias b (d numbers); none when absent.")
    bias_inside: bool = Field(default=True, description="true: sigma(W x + b); false: sigma(W x) + b.")


class WeightsSpec(Strict):
    heads: int = Field(default=1, ge=1, description="Attention heads (each head draws its own Q, K, V).")
    Q: MatrixSpec = Field(default=MatrixSpec(), description="The query matrix (a matrix table).")
    K: MatrixSpec = Field(default=MatrixSpec(), description="The key matrix (a matrix table).")
    V: MatrixSpec = Field(default=MatrixSpec(), description="The value matrix (a matrix table).")
    feedforward: FeedForwardSpec | None = Field(default=None, description="An optional feed-forward layer after attention (a table).")


class InitSpec(Strict):
    kind: Literal["uniform", "gaussian", "sphere", "array"] = Field(
        default="uniform", description="The initial tokens: uniform in [low, high]^d, gaussian, uniform on the unit sphere, or given values."
    )
    # finite: high = inf reached numpy's uniform and came back as an OverflowError reported as a bug
    low: float = Field(default=-1.0, allow_inf_nan=False, description="The lower end of kind = uniform's box (finite).")
    high: float = Field(default=1.0, allow_inf_nan=False, description="The upper end of kind = uniform's box (finite, above low).")
    std: float = Field(default=1.0, gt=0, description="The standard deviation of kind = gaussian.")
    values: list[list[float]] | None = Field(default=None, description="The n x d tokens of kind = array.")
    # sphere starts: the Gram matrix I + gram_scale (G0 - I) of the drawn points' G0 (1: the points as drawn; toward 0
    # an orthonormal frame), realised in their span with the same draws (attndyn.workflow.setup.scale_gram)
    gram_scale: float = Field(
        default=1.0,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="kind = sphere: the drawn Gram matrix G0 replaced by I + gram_scale (G0 - I) in the points' span (d >= n below 1).",
    )

    @model_validator(mode="after")
    def _check(self):
        if self.kind == "array" and self.values is None:
            raise ValueError("init kind = 'array' needs the key 'values'")
        if self.kind != "array" and self.values is not None:
            raise ValueError(f"key 'values' does not apply to init kind = {self.kind!r}")
        if self.kind != "sphere" and self.gram_scale != 1:
            raise ValueError(f"key 'gram_scale' = {self.gram_scale} applies only to init kind = 'sphere', not {self.kind!r}")
        if self.kind == "uniform" and not self.low < self.high:
            raise ValueError(f"init low = {self.low} must be below high = {self.high}")
        if self.kind == "uniform" and not math.isfinite(self.high - self.low):
            raise ValueError(f"init high - low = {self.high} - {self.low} overflows a float; use a narrower range")
        return self


class ModelSpec(Strict):
    beta: float = Field(default=1.0, ge=0, description="The inverse temperature of the attention softmax.")
    mask: Mask = Field(default="full", description="Which tokens each token attends to: all, earlier ones (causal), or a window of them.")
    geometry: Geometry = Field(default="euclidean", description="Tokens in R^d, or on the unit sphere (the layer-normalized model).")
    rescaled: bool = Field(default=False, description="Integrate the rescaled tokens z(t) = e^{-tV} x(t) (the paper's change of variables).")
    # configs keep the dense kernel unless they ask for "auto" or "fused": its n x n memory estimate is what
    # refuses a config too large for this machine before any work (a fused run of 10^6 tokens fits in
    # memory and would run for hours); the library's Model defaults to "auto"
    attention: Kernel = Field(
        default="dense", description="The attention kernel: dense (n x n, memory checked first), fused (blockwise), or auto (chosen by size)."
    )
    normalization: Normalization = Field(
        default="softmax", description="How attention weights are normalized: softmax rows, unnormalized, or linear."
    )
    scheme: Scheme = Field(default="post", description="The layer-normalization scheme of the radius/direction split (attndyn.core.schemes).")
    scheme_tau: float = Field(default=1.0, gt=0, description="scheme = mix: the time at which Post-LN gives way to Pre-LN.")
    scheme_alpha: float = Field(default=1.0, gt=0, description="scheme = ngpt: the speed divisor alpha (s = |A| / alpha).")
    window: int | None = Field(default=None, ge=1, description="mask = window: the width w (token i attends to i - w < j <= i).")
    sink_bias: float = Field(default=0.0, description="Added to every query's logit for the first token (an attention sink).")

    @model_validator(mode="after")
    def _check_window(self):
        if self.mask == "window" and self.window is None:
            raise ValueError("mask = 'window' needs the key 'window' (the width w: token i attends to i - w < j <= i)")
        if self.window is not None and self.mask != "window":
            raise ValueError(f"key 'window' applies to mask = 'window' only, not mask = {self.mask!r}")
        return self


class SolverSpec(Strict):
    """``method``: an explicit Runge-Kutta tableau, or ``long`` (:func:`attndyn.simulate_long`, the
    sphere model over exponentially long horizons; adaptive). ``kappa``: the noisy model on the sphere
    (projected Euler-Maruyama, ``method = "euler"`` with ``dt``). Save times: ``save_every``,
    ``save_times``, or ``save_log`` (0 and that many times spaced geometrically from 1e-2 to t1)."""

    method: SolverName | Literal["long"] = Field(
        default="rk4", description="A Runge-Kutta tableau, or long (the sphere model over exponentially long horizons; adaptive)."
    )
    # finite: dt = inf passed gt=0 and made the save grid 0 * inf = NaN (found by the property test)
    dt: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="The fixed step (give dt, or rtol and atol).")
    rtol: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="The relative tolerance of adaptive steps (dopri5 or long).")
    atol: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="The absolute tolerance of adaptive steps (dopri5 or long).")
    t1: float = Field(gt=0, allow_inf_nan=False, description="The final time (required).")
    save_every: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="Save every this much time (a multiple of dt).")
    save_times: list[float] | None = Field(default=None, description="Save at these times (instead of save_every).")
    save_log: int | None = Field(default=None, ge=2, description="Save at 0 and N times spaced geometrically from 1e-2 to t1 (adaptive steps).")
    kappa: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="The noise strength of the noisy model on the sphere (method = euler with dt)."
    )
    max_steps: int = Field(default=1_000_000, ge=1, description="The most steps a run may take (checked before any work).")
    # the work a run may take, in token pairs evaluated (heads x n^2 per evaluation of the field, times
    # the evaluations of a fixed step run): 10^13 is about 3 hours of fused attention on a CPU core
    # and minutes on a GPU; n = 10^6 tokens of 10 RK4 steps ask 4 * 10^13 (refused before any work)
    max_pairs: float = Field(
        default=1e13, gt=0, description="The most token pairs a run may evaluate (10^13: about 3 hours of fused attention on a CPU core)."
    )

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
    seed: int = Field(description="The seed of every random draw (tokens, weights, noise; required).")
    n: int = Field(ge=1, description="The number of tokens (required).")
    d: int = Field(ge=1, description="The dimension of each token (required).")
    # Where and in what precision the state is integrated. Random draws are made in float64 NumPy
    # on the host first, so a seed gives the same system on every device.
    device: str = Field(default="cpu", description="Where the state is integrated: cpu, cuda or cuda:N (draws are made on the host first).")
    dtype: DType = Field(default="float64", description="The precision of the integrated state.")
    init: InitSpec = Field(default=InitSpec(), description="The initial tokens (a table).")
    weights: WeightsSpec = Field(default=WeightsSpec(), description="The weights Q, K, V and the heads (a table).")
    model: ModelSpec = Field(default=ModelSpec(), description="The dynamics' options (a table).")
    solver: SolverSpec = Field(description="The integration and the save times (a table; required).")
    # Intra-op threads of the integration (None: the thread policy of attndyn.core.threads). Not
    # part of the mathematics: a run's results do not depend on it beyond rounding.
    threads: int | None = Field(
        default=None, ge=1, le=MAX_THREADS, description="Intra-op threads (default: the thread policy); results do not depend on it beyond rounding."
    )


class ConfigError(UserError):
    """A config that cannot be used; the message is one readable line."""


# pydantic's type errors of strict mode, as the type a reader expects
_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
}
_TOML_TYPE = {bool: "the boolean", int: "the integer", float: "the float", str: "the string", list: "the list", dict: "the table"}


def _keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys a config table accepts at ``loc`` (the path of its parent tables), or [] where unknown."""
    models: list[type[BaseModel]] = [model]
    for part in loc:
        found: list[type[BaseModel]] = []
        for m in models:
            field = m.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                continue
            stack = [field.annotation]
            while stack:
                tp = stack.pop()
                if isinstance(tp, type) and issubclass(tp, BaseModel):
                    found.append(tp)
                else:
                    stack.extend(getattr(tp, "__args__", ()))
        if not found:
            return []
        models = found
    return sorted({key for m in models for key in m.model_fields})


def _one_line(err: ValidationError, model: type[BaseModel] | None = None) -> str:
    errors = err.errors()
    # a misspelt key is both unknown and a missing required one: name the unknown key, which says what to fix
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = ".".join(str(p) for p in first["loc"]) or "config"
    msg = first["msg"].removeprefix("Value error, ")
    value = first.get("input")
    if first["type"] == "extra_forbidden" and first["loc"]:
        key = str(first["loc"][-1])
        known = _keys_at(model, tuple(first["loc"][:-1])) if model is not None else []
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else (f"; the keys here are {', '.join(known)}" if known else "")
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        return f"{loc}: unknown key{hint}{more}"
    if first["type"] in _EXPECTED:  # strict mode: no conversion, so say what was given and what is expected
        given = "true" if value is True else "false" if value is False else repr(value)
        if isinstance(value, list | dict) and len(repr(value)) > 60:
            given = repr(value)[:57] + "..."
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        got = _TOML_TYPE.get(type(value), type(value).__name__)
        return f"{loc}: expected {_EXPECTED[first['type']]}, got {got} {given} (values are not converted){more}"
    got = f" (got {value!r})" if isinstance(value, str | int | float | bool) and not msg.startswith("Field required") else ""
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{loc}: {msg}{got}{more}"


def parse_config(data: dict) -> SimulationConfig:
    try:
        return SimulationConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_one_line(err, SimulationConfig)) from None


def read_toml(path: str | Path) -> dict:
    """The table of a TOML file; raises ConfigError (one line) when it is missing, not a regular file
    (a FIFO or a device is refused by name, never opened), larger than 64 MiB, not TOML, or nested
    more than 64 tables deep (:mod:`attndyn.core.reading`)."""
    from attndyn.core.reading import FileRefused, loads_toml, read_text

    try:
        return loads_toml(read_text(path, "config file"), str(path))
    except FileRefused as err:
        raise ConfigError(str(err)) from None


def load_config(path: str | Path) -> SimulationConfig:
    """Read and validate a TOML config; raises ConfigError with one line on any problem."""
    return parse_config(read_toml(path))


class MeanFieldConfig(Strict):
    """A mean-field run on the circle: the solver's options and the initial density.

    ``init`` holds ``kind`` (``uniform``, ``wrapped-cauchy``, ``von-mises``, ``samples`` or
    ``values``) and that kind's parameters (see :func:`attndyn.theory.meanfield.initial_density`;
    ``values`` lists the density on the M grid points itself and must have mass 1).
    """

    beta: float = Field(ge=0, description="The inverse temperature (required, finite).")
    usa: bool = Field(default=False, description="The USA model (unnormalized self-attention) instead of the softmax one.")
    M: int | None = Field(default=None, ge=8, description="Grid points on the circle (required unless init.kind = values).")
    method: Literal["spectral", "finite-volume"] = Field(default="spectral", description="The discretisation of the transport equation.")
    # finite: t1 = inf passed gt=0 and asked for an endless run
    t1: float = Field(gt=0, allow_inf_nan=False, description="The final time (required).")
    save_every: float = Field(gt=0, allow_inf_nan=False, description="Save every this much time (at most t1; required).")
    rtol: float = Field(default=1e-10, gt=0, allow_inf_nan=False, description="The relative tolerance of the time integration.")
    atol: float = Field(default=1e-12, gt=0, allow_inf_nan=False, description="The absolute tolerance of the time integration.")
    cfl: float = Field(default=0.4, gt=0, le=0.5, description="method = finite-volume: the CFL number of its steps.")
    init: dict = Field(description="The initial density: kind (uniform, wrapped-cauchy, von-mises, samples, values) and its parameters.")

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
        raise ConfigError(_one_line(err, MeanFieldConfig)) from None


class SweepError(UserError):
    """A sweep that cannot run (bad file, changed file on an existing folder); the message is one line."""
