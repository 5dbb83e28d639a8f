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
    # finite: high = inf reached numpy's uniform and came back as an OverflowError reported as a bug
    low: float = Field(default=-1.0, allow_inf_nan=False)
    high: float = Field(default=1.0, allow_inf_nan=False)
    std: float = Field(default=1.0, gt=0)
    values: list[list[float]] | None = None
    # sphere starts: the Gram matrix I + gram_scale (G0 - I) of the drawn points' G0 (1: the points as drawn; toward 0
    # an orthonormal frame), realised in their span with the same draws (attndyn.workflow.setup.scale_gram)
    gram_scale: float = Field(default=1.0, ge=0, le=1, allow_inf_nan=False)

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
    beta: float = Field(default=1.0, ge=0)
    mask: Mask = "full"
    geometry: Geometry = "euclidean"
    rescaled: bool = False
    # configs keep the dense kernel unless they ask for "auto" or "fused": its n x n memory estimate is what
    # refuses a config too large for this machine before any work (a fused run of 10^6 tokens fits in
    # memory and would run for hours); the library's Model defaults to "auto"
    attention: Kernel = "dense"
    normalization: Normalization = "softmax"
    scheme: Scheme = "post"
    scheme_tau: float = Field(default=1.0, gt=0)
    scheme_alpha: float = Field(default=1.0, gt=0)
    window: int | None = Field(default=None, ge=1)
    sink_bias: float = 0.0

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

    method: SolverName | Literal["long"] = "rk4"
    # finite: dt = inf passed gt=0 and made the save grid 0 * inf = NaN (found by the property test)
    dt: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    rtol: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    atol: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    t1: float = Field(gt=0, allow_inf_nan=False)
    save_every: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    save_times: list[float] | None = None
    save_log: int | None = Field(default=None, ge=2)
    kappa: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_steps: int = Field(default=1_000_000, ge=1)
    # the work a run may take, in token pairs evaluated (heads x n^2 per evaluation of the field, times
    # the evaluations of a fixed step run): 10^13 is about 3 hours of fused attention on a CPU core
    # and minutes on a GPU; n = 10^6 tokens of 10 RK4 steps ask 4 * 10^13 (refused before any work)
    max_pairs: float = Field(default=1e13, gt=0)

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
    # Intra-op threads of the integration (None: the thread policy of attndyn.core.threads). Not
    # part of the mathematics: a run's results do not depend on it beyond rounding.
    threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)


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


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "config"
    msg = first["msg"].removeprefix("Value error, ")
    value = first.get("input")
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
        raise ConfigError(_one_line(err)) from None


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

    beta: float = Field(ge=0)
    usa: bool = False
    M: int | None = Field(default=None, ge=8)
    method: Literal["spectral", "finite-volume"] = "spectral"
    # finite: t1 = inf passed gt=0 and asked for an endless run
    t1: float = Field(gt=0, allow_inf_nan=False)
    save_every: float = Field(gt=0, allow_inf_nan=False)
    rtol: float = Field(default=1e-10, gt=0, allow_inf_nan=False)
    atol: float = Field(default=1e-12, gt=0, allow_inf_nan=False)
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


class SweepError(UserError):
    """A sweep that cannot run (bad file, changed file on an existing folder); the message is one line."""
