"""Sweep files: a grid of simulation configs, expanded into points and grouped into tasks.

Contract
--------
A sweep file (TOML) names

* ``base``: a simulation config, either a path (relative to the sweep file) or an inline table;
* ``[grid]``: dotted keys of that config (``"model.beta"``, ``n``, ``d``, ``seed``, ``"init.kind"``,
  ...) mapped to non-empty lists; the sweep is their Cartesian product;
* ``measures``: names from :data:`attndyn.workflow.measures.MEASURES` (or
  ``"package.module:function"``, imported on the workers) and their options (``pair_threshold``,
  ``cluster_tol``).

``parse(data)`` / ``load_spec(path)`` validate every point's config and return a :class:`Sweep`:
its points, save times (the base config's), and tasks (grid points that differ only in ``seed``).
Problems raise :class:`~attndyn.workflow.schema.SweepError` with one line. The axes' order is part of the fingerprint.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from attndyn.workflow.measures import MEASURES, measure_function
from attndyn.workflow.schema import ConfigError, SweepError, parse_config, read_toml

SWEEP_KEYS = {"base", "grid", "measures", "pair_threshold", "cluster_tol"}
# The most points one sweep may hold (a stated limit, checked before any point is made): every task is
# validated before the first runs (about 1 ms each) and every point is a ledger row; a grid of 10^9
# points, or of 10^6 tasks, was expanded for minutes to hours before this limit
MAX_POINTS = 100_000


@dataclass(frozen=True, slots=True)
class Point:
    point_id: int
    task_id: int
    coords: dict
    config: dict  # the full simulation config (validated)


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: its grid, points, tasks (lists of point ids), measures and fingerprint."""

    spec: dict  # canonical: base (a dict), grid, axes (the grid keys in file order), measures, options
    grid: dict
    points: list[Point]
    tasks: list[list[int]]
    measures: list[str]
    options: dict
    ts: list[float] = field(default_factory=list)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode()).hexdigest()


def _set(config: dict, dotted: str, value) -> None:
    node = config
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise SweepError(f"grid key {dotted!r}: {part!r} is not a table of the base config")
        node = child
    node[parts[-1]] = value


def parse(data: dict, *, where: Path | None = None) -> Sweep:
    """Validate a sweep table (``read_toml`` of the file) and expand it into points and tasks."""
    unknown = sorted(set(data) - SWEEP_KEYS)
    if unknown:
        raise SweepError(f"unknown key {unknown[0]!r} in the sweep file; allowed: {', '.join(sorted(SWEEP_KEYS))}")
    if "base" not in data:
        raise SweepError("the sweep file needs 'base': a config path or an inline table")
    base = data["base"]
    if isinstance(base, str):
        path = Path(base) if where is None or Path(base).is_absolute() else where / base
        try:
            base = read_toml(path)
        except ConfigError as err:
            raise SweepError(f"base: {err}") from None
    if not isinstance(base, dict):
        raise SweepError("base must be a config path or an inline table")
    grid = data.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise SweepError("the sweep file needs a non-empty [grid] of dotted keys to lists")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"grid key {key!r} must map to a non-empty list; got {values!r}")
        if len(set(map(json.dumps, values))) != len(values):
            raise SweepError(f"grid key {key!r} repeats a value: {values!r}")
    measures = data.get("measures", ["pair_fraction"])
    if not isinstance(measures, list) or not measures or not all(isinstance(m, str) for m in measures):
        raise SweepError(f"measures must be a non-empty list of names; got {measures!r}")
    for name in measures:
        if name not in MEASURES and ":" not in name:
            measure_function(name)  # raises with the known names
    options = {"pair_threshold": data.get("pair_threshold", 0.999), "cluster_tol": data.get("cluster_tol", 1e-3)}
    for key, value in options.items():  # numbers as written: no conversion of strings or booleans
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise SweepError(f"{key} = {value!r} must be a number, not {type(value).__name__}")
        options[key] = float(value)
    if not 0 < options["pair_threshold"] <= 1:
        raise SweepError(f"pair_threshold = {options['pair_threshold']} must be in (0, 1]")
    if not options["cluster_tol"] > 0:
        raise SweepError(f"cluster_tol = {options['cluster_tol']} must be > 0")
    # the axes' order numbers points and tasks, so it is part of the sweep (and of its fingerprint)
    spec = {"base": base, "grid": grid, "axes": list(grid), "measures": measures, "options": options}

    keys = list(grid)
    # an estimate before work: the grid's size is the product of its axes' lengths, each point a ledger row
    size = math.prod(len(grid[k]) for k in keys)
    if size > MAX_POINTS:
        shape = " x ".join(str(len(grid[k])) for k in keys)
        raise SweepError(f"the grid has {shape} = {size:.4g} points, more than the {MAX_POINTS} a sweep may hold; split it into sweeps")
    points, tasks, groups = [], [], {}
    ts = None
    from attndyn.workflow.setup import build
    from attndyn.workflow.setup import save_times as config_save_times

    for seed in grid.get("seed", []):
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise SweepError(f"grid key 'seed': {seed!r} is not an integer")
    # a task is a grid point up to its seed: the positions along the other axes (values are unique)
    task_axes = [a for a, k in enumerate(keys) if k != "seed"]
    validated: dict[tuple, dict] = {}  # per task: the resolved config of its first point
    for pid, index in enumerate(itertools.product(*(range(len(grid[k])) for k in keys))):
        coords = {k: grid[k][i] for k, i in zip(keys, index, strict=True)}
        group = tuple([index[a] for a in task_axes])
        first = validated.get(group)
        if first is not None:
            # another seed of a validated point: a seed is an integer and changes nothing else, so
            # the resolved config is the first point's with this seed (no second validation)
            resolved = {**first, "seed": coords["seed"]}
        else:
            cfg = copy.deepcopy(base)
            for key, value in coords.items():
                _set(cfg, key, value)
            try:
                parsed = parse_config(cfg)
                # impossible combinations (rescaled on the sphere, fused hardmax, ...) are caught when
                # the model is built: once per task, since seeds do not change what is possible
                build(parsed)
            except ConfigError as err:
                raise SweepError(f"grid point {coords}: {err}") from None
            point_ts = [float(t) for t in config_save_times(parsed.solver)]
            if ts is None:
                ts = point_ts
            elif point_ts != ts:
                raise SweepError(f"grid point {coords} changes the save times; sweep keys may not change them")
            resolved = validated[group] = parsed.model_dump(mode="json")
            groups[group] = len(tasks)
            tasks.append([])
        tid = groups[group]
        tasks[tid].append(pid)
        points.append(Point(pid, tid, coords, resolved))
    return Sweep(spec, grid, points, tasks, measures, options, ts or [])


def load_spec(path: str | Path) -> Sweep:
    path = Path(path)
    try:
        data = read_toml(path)
    except ConfigError as err:
        raise SweepError(str(err)) from None
    return parse(data, where=path.parent)
