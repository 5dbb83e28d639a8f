"""Parameter sweeps: a grid of simulation configs, run in batches on Dask, with a resumable ledger.

Contract
--------
A sweep file (TOML) names

* ``base``: a simulation config, either a path (relative to the sweep file) or an inline table;
* ``[grid]``: dotted keys of that config (``"model.beta"``, ``n``, ``d``, ``seed``, ``"init.kind"``,
  ...) mapped to non-empty lists; the sweep is their Cartesian product;
* ``measures``: names from :data:`MEASURES` (or ``"package.module:function"``, imported on the
  workers) and their options (``pair_threshold``, ``cluster_tol``).

Save times are the base config's. Grid points that differ only in ``seed`` form one task; a task
whose points share their weights (deterministic Q, K, V) integrates them as one batch, so 2048
systems of n = 32 are one tensor program, not 2048 loops.

``run(spec_path, out, workers=, scheduler=)`` executes a sweep: in-process for one or two tasks (or
``workers=0``), on a Dask ``LocalCluster`` with ``workers`` single-threaded worker processes, or on
an existing scheduler (``scheduler="tcp://host:8786"``, e.g. from ``dask-jobqueue``). Workers get
config data (dicts), never live objects. The driver is the only writer of ``out/ledger.sqlite``:

* ``meta``: the sweep's canonical JSON and its SHA-256 fingerprint, the save times, the ledger's
  schema version (a folder of an earlier version is refused);
* ``tasks``: the task's grid point (its coordinates except ``seed``, as JSON; the task holds that
  point at every seed of the grid, in grid order), status (pending, running, done, failed), attempts,
  error text, seconds, fingerprint;
* ``results``: one row per task (its points' measures, each stacked over the seeds: a JSON header
  and float64 bytes), written in the same transaction that marks the task done.

Running the same command again computes only the tasks not done (a killed driver loses nothing and
duplicates nothing: SQLite commits are atomic); a changed sweep file on an existing folder raises
:class:`SweepError` naming what changed. A task that raises is recorded as failed with its error
and the sweep goes on. ``load(out)`` returns an ``xarray.Dataset`` (one dimension per grid key in
file order, plus ``t`` for measures over time; missing points are NaN).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import importlib
import itertools
import json
import math
import os
import sqlite3
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .config import ConfigError, parse_config, read_toml
from .dynamics import Model

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.figure import Figure

SWEEP_KEYS = {"base", "grid", "measures", "pair_threshold", "cluster_tol"}
LEDGER = "ledger.sqlite"
SCHEMA = 2  # 2: one results row per task, grid points kept with their tasks (1: one row per point)


class SweepError(ValueError):
    """A sweep that cannot run (bad file, changed file on an existing folder); the message is one line."""


# --- measures --------------------------------------------------------------------------------------


def _cosines(x: np.ndarray) -> np.ndarray:
    """Pairwise cosines ``(..., n, n)`` of the tokens ``(..., n, d)``."""
    u = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-300)
    return u @ np.swapaxes(u, -1, -2)


def pair_fraction(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> np.ndarray:
    """Fraction of pairs i < j with cos(x_i, x_j) >= ``pair_threshold`` at every save time: ``(T,)``."""
    n = xs.shape[-2]
    iu = np.triu_indices(n, 1)
    return (_cosines(xs)[..., iu[0], iu[1]] >= options["pair_threshold"]).mean(-1)


def energy(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> np.ndarray:
    """Normalised energy (1/n^2) sum_ij e^{beta (cos(x_i, x_j) - 1)} at every save time (SPEC §8.4): ``(T,)``."""
    beta = model.beta if math.isfinite(model.beta) else 1.0
    return np.exp(beta * (_cosines(xs) - 1.0)).mean((-1, -2))


# measures over time written for any leading axes: a batch (T, B, n, d) gives (T, B) in one call
BATCHED_MEASURES = {"pair_fraction", "energy"}
# measures of the tokens' inner products only: the same on the span coordinates Y as on X = Y U^T
INNER_PRODUCT_MEASURES = {"pair_fraction", "energy", "time_to_one_cluster"}


def time_to_one_cluster(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> float:
    """First save time at which every pair has cos >= ``pair_threshold`` (NaN if never)."""
    done = pair_fraction(ts, xs, model, options) >= 1.0
    return float(ts[np.argmax(done)]) if done.any() else float("nan")


def cluster_count(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> float:
    """Clusters at the last save time: the count stable over the widest range of tolerances above
    ``cluster_tol`` (absolute; tokens closer than it are one cluster, so a collapsed system counts 1)."""
    from .clusters import stable_cluster_count

    x = xs[-1]
    diameter = 2 * float(np.max(np.linalg.norm(x - x.mean(0), axis=1)))
    if diameter <= options["cluster_tol"]:
        return 1.0
    return float(stable_cluster_count(x, rel_min=options["cluster_tol"] / diameter).count)


def boolean_distance(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> float:
    """Distance of the last attention matrix (head 0) to the nearest Boolean matrix."""
    from .dynamics import attention_matrix
    from .lowrank import boolean_distance as distance
    from .weights import to_numpy

    P = to_numpy(attention_matrix(model, xs[-1], t=float(ts[-1])))[0]
    return float(distance(P))


MEASURES: dict[str, Callable] = {
    "pair_fraction": pair_fraction,
    "energy": energy,
    "time_to_one_cluster": time_to_one_cluster,
    "cluster_count": cluster_count,
    "boolean_distance": boolean_distance,
}


def measure_function(name: str) -> Callable:
    """A measure by name, or ``package.module:function`` (imported here, on the worker)."""
    if name in MEASURES:
        return MEASURES[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise SweepError(f"measure {name!r} cannot be imported: {err}") from None
    raise SweepError(f"unknown measure {name!r}; known: {', '.join(MEASURES)} (or 'package.module:function')")


# --- the sweep file --------------------------------------------------------------------------------


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
    options = {"pair_threshold": float(data.get("pair_threshold", 0.999)), "cluster_tol": float(data.get("cluster_tol", 1e-3))}
    if not 0 < options["pair_threshold"] <= 1:
        raise SweepError(f"pair_threshold = {options['pair_threshold']} must be in (0, 1]")
    if not options["cluster_tol"] > 0:
        raise SweepError(f"cluster_tol = {options['cluster_tol']} must be > 0")
    # the axes' order numbers points and tasks, so it is part of the sweep (and of its fingerprint)
    spec = {"base": base, "grid": grid, "axes": list(grid), "measures": measures, "options": options}

    keys = list(grid)
    points, tasks, groups = [], [], {}
    ts = None
    from .config import build
    from .config import save_times as config_save_times

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


def _task_coords(sweep: Sweep, task_id: int) -> dict:
    """The grid coordinates a task's points share: all but ``seed`` (its points are that grid point at every seed)."""
    return {k: v for k, v in sweep.points[sweep.tasks[task_id][0]].coords.items() if k != "seed"}


def load_spec(path: str | Path) -> Sweep:
    path = Path(path)
    try:
        data = read_toml(path)
    except ConfigError as err:
        raise SweepError(str(err)) from None
    return parse(data, where=path.parent)


# --- one task (runs on a worker) -----------------------------------------------------------------


def _same_model(a, b) -> bool:
    import torch

    if a is b:  # seeds of one task built together share their model (config.build_many)
        return True
    options = ("beta", "mask", "geometry", "rescaled", "attention", "normalization", "scheme", "scheme_tau", "scheme_alpha")
    if any(getattr(a, k) != getattr(b, k) for k in options):
        return False
    wa, wb = a.weights, b.weights
    if (wa.ff is None) != (wb.ff is None):
        return False
    pairs = [(wa.Q, wb.Q), (wa.K, wb.K), (wa.V, wb.V)] + ([(wa.ff.W, wb.ff.W)] if wa.ff is not None else [])
    return all(torch.equal(x, y) for x, y in pairs) and (wa.ff is None or (wa.ff.sigma, wa.ff.bias_inside) == (wb.ff.sigma, wb.ff.bias_inside))


def run_task(configs: list[dict], measures: list[str], options: dict) -> dict[str, np.ndarray]:
    """Simulate the grid points of one task and return each measure stacked over them: an array of
    shape ``(len(configs), *shape)`` per measure name, points in the order given.

    Points whose models are identical are integrated as one batch; the others one by one. When
    d > n and the weights commute with rotations (Q^T K and V multiples of I, no feed-forward), a
    batch is integrated in the span of its initial tokens (``simulate(..., span=True)``): n
    dimensions instead of d, the same trajectory. A measure must have one shape at every point of
    the task (it may depend on the save times, not on the point); otherwise SweepError names it.
    """
    import torch

    from . import runs
    from .config import build_many
    from .simulation import simulate, span_coordinates, span_obstruction

    try:
        from distributed import get_worker

        get_worker()
        torch.set_num_threads(1)  # one thread per Dask worker: two workers on two cores do not oversubscribe
    except (ImportError, ValueError):
        pass
    functions = dict(zip(measures, (measure_function(m) for m in measures), strict=True))
    setups = build_many([parse_config(c) for c in configs])
    out: dict[str, np.ndarray] = {}

    def store(name: str, where, values) -> None:
        """Write a measure's values at the task positions ``where`` (an index or an index array)."""
        values = np.asarray(values, dtype=np.float64)
        shape = values.shape if np.ndim(where) == 0 else values.shape[1:]
        if name not in out:
            out[name] = np.full((len(setups), *shape), np.nan)
        elif out[name].shape[1:] != shape:
            raise SweepError(f"measure {name!r} has different shapes at the points of one task ({out[name].shape[1:]} and {shape})")
        out[name][where] = values

    batches: list[list[int]] = []
    for i, s in enumerate(setups):
        if s.kind != "ode":  # the noisy and long-horizon integrators run one point at a time (a point's noise is its own seed's)
            ts, xs, _ = runs.integrate(s)
            for m, f in functions.items():
                store(m, i, f(ts, xs, s.model, options))
            continue
        for batch in batches:
            first = setups[batch[0]]
            if _same_model(first.model, s.model) and first.x0.shape == s.x0.shape and type(first.step) is type(s.step) and first.step == s.step:
                batch.append(i)
                break
        else:
            batches.append([i])
    for batch in batches:
        first = setups[batch[0]]
        x0 = torch.stack([setups[i].x0 for i in batch])
        # d > n with rotation-commuting weights (Q = K = V = I, ...): integrate in the span of x0,
        # and give measures of inner products only the n-dimensional coordinates
        run = {"solver": first.solver, "step": first.step, "max_steps": first.max_steps}
        if x0.shape[-1] > x0.shape[-2] and span_obstruction(first.model) is None:
            traj, Ut = span_coordinates(first.model, x0, first.ts, **run)
            if not set(measures) <= INNER_PRODUCT_MEASURES:
                traj = dataclasses.replace(traj, xs=traj.xs @ Ut)
        else:
            traj = simulate(first.model, x0, first.ts, **run)
        ts, xs = traj.numpy()  # (T,), (T, B, n, d or n)
        where = np.asarray(batch)
        for m, f in functions.items():
            if m in BATCHED_MEASURES:  # one call for the whole batch: (T, B)
                store(m, where, np.moveaxis(np.asarray(f(ts, xs, first.model, options), dtype=np.float64), 1, 0))
            else:
                for b, i in enumerate(batch):
                    store(m, i, f(ts, xs[:, b], first.model, options))
    return out


# --- the ledger (driver only) ----------------------------------------------------------------------


def _blob(arrays: dict) -> bytes:
    """Arrays as bytes: a JSON header (names, shapes) then the float64 data, in order (C order).
    A task's row holds each measure stacked over its points, in task order."""
    values = [(k, np.ascontiguousarray(v, dtype=np.float64)) for k, v in arrays.items()]
    header = json.dumps({k: list(v.shape) for k, v in values}).encode()
    return len(header).to_bytes(4, "little") + header + b"".join(v.tobytes() for _, v in values)


def _unblob(data: bytes) -> dict:
    size = int.from_bytes(data[:4], "little")
    header = json.loads(data[4 : 4 + size])
    out, offset = {}, 4 + size
    for name, shape in header.items():
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(data, dtype=np.float64, count=count, offset=offset).reshape(shape).copy()
        offset += 8 * count
    return out


class Ledger:
    """The SQLite ledger of a sweep folder; every write is one transaction."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / LEDGER
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        with self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS tasks (task_id INTEGER PRIMARY KEY, coords TEXT NOT NULL, status TEXT NOT NULL, "
                "attempts INTEGER NOT NULL DEFAULT 0, error TEXT, seconds REAL, fingerprint TEXT NOT NULL)"
            )
            self.db.execute("CREATE TABLE IF NOT EXISTS results (task_id INTEGER PRIMARY KEY, data BLOB NOT NULL)")

    def close(self) -> None:
        self.db.close()

    def meta(self) -> dict:
        return {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def start(self, sweep: Sweep) -> None:
        """Record a new sweep, or check that the folder holds this same sweep (SweepError naming what changed)."""
        meta = self.meta()
        if meta:
            self.check_schema(meta)
            if meta.get("fingerprint") != sweep.fingerprint:
                raise SweepError(
                    f"{self.path.parent} holds a different sweep: {_difference(meta.get('spec', {}), sweep.spec)}; use a new --out folder"
                )
            return
        with self.db:
            for key, value in (
                ("spec", sweep.spec),
                ("fingerprint", sweep.fingerprint),
                ("ts", sweep.ts),
                ("created", time.time()),
                ("schema", SCHEMA),
            ):
                self.db.execute("INSERT INTO meta VALUES (?, ?)", (key, json.dumps(value, sort_keys=True)))
            self.db.executemany(
                "INSERT INTO tasks (task_id, coords, status, attempts, fingerprint) VALUES (?, ?, 'pending', 0, ?)",
                [(t, json.dumps(_task_coords(sweep, t)), sweep.fingerprint) for t in range(len(sweep.tasks))],
            )

    def check_schema(self, meta: dict) -> None:
        if meta.get("schema") != SCHEMA:
            raise SweepError(
                f"{self.path} was written by an earlier attndyn (ledger schema {meta.get('schema', 1)}, "
                f"this one reads {SCHEMA}); use a new --out folder"
            )

    def todo(self) -> list[int]:
        """Tasks not done (pending, failed, or marked running by a driver that was killed mid-task)."""
        return [t for (t,) in self.db.execute("SELECT task_id FROM tasks WHERE status != 'done' ORDER BY task_id")]

    def running(self, task_id: int) -> None:
        with self.db:
            self.db.execute("UPDATE tasks SET status = 'running', attempts = attempts + 1 WHERE task_id = ?", (task_id,))

    def done(self, task_id: int, blob: bytes, seconds: float) -> None:
        """Store a task's results (:func:`run_task`'s stacked arrays as one :func:`_blob`) and mark it done, in one transaction."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO results VALUES (?, ?)", (task_id, blob))
            self.db.execute("UPDATE tasks SET status = 'done', error = NULL, seconds = ? WHERE task_id = ?", (seconds, task_id))

    def failed(self, task_id: int, error: str, seconds: float) -> None:
        with self.db:
            self.db.execute("UPDATE tasks SET status = 'failed', error = ?, seconds = ? WHERE task_id = ?", (error, seconds, task_id))

    def counts(self) -> dict:
        return dict(self.db.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status"))

    def errors(self) -> list[tuple[int, str]]:
        return list(self.db.execute("SELECT task_id, error FROM tasks WHERE status = 'failed' ORDER BY task_id"))


def _difference(old: dict, new: dict, prefix: str = "") -> str:
    """The first key where two specs differ, with both values."""
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            return _difference(a, b, f"{prefix}{key}.")
        return f"{prefix}{key} was {json.dumps(a)}, now {json.dumps(b)}"
    return "the fingerprints differ"


# --- the driver ------------------------------------------------------------------------------------


@dataclass
class Summary:
    total: int
    done: int
    failed: int
    ran: int
    seconds: float
    errors: list = field(default_factory=list)


def run(
    spec_path: str | Path,
    out: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Summary:
    """Run (or resume) the sweep of ``spec_path`` into ``out``; see the module docstring."""
    sweep = load_spec(spec_path)
    for name in sweep.measures:
        measure_function(name)  # unknown or unimportable measures fail here, before any work
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {str(out)!r} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(out)
    start = time.perf_counter()
    try:
        ledger.start(sweep)
        todo = ledger.todo()
        total, ran = len(sweep.tasks), 0
        done_before = total - len(todo)
        if progress:
            progress(done_before, total)

        def payload(task_id: int) -> list[dict]:
            return [sweep.points[p].config for p in sweep.tasks[task_id]]

        local = scheduler is None and (workers == 0 or (workers is None and len(todo) <= 2))
        executions = _in_process(sweep, todo, payload) if local else _on_dask(sweep, todo, payload, workers, scheduler)
        for task_id, outcome, started in executions:
            ledger.running(task_id)
            try:
                blob = _blob(outcome())
            except Exception as err:  # a failing task is recorded, the sweep goes on
                ledger.failed(task_id, _error_text(err), time.perf_counter() - started)
            else:
                ledger.done(task_id, blob, time.perf_counter() - started)
            ran += 1
            if progress:
                progress(done_before + ran, total)
        counts = ledger.counts()
        return Summary(total, counts.get("done", 0), counts.get("failed", 0), ran, time.perf_counter() - start, ledger.errors())
    finally:
        ledger.close()


def _error_text(err: BaseException) -> str:
    tail = traceback.format_exception_only(type(err), err)[-1].strip()
    return tail[:2000]


def _in_process(sweep, todo, payload):
    """(task id, a call computing its results, its start time), one task after the other."""
    for task_id in todo:
        yield task_id, functools.partial(run_task, payload(task_id), sweep.measures, sweep.options), time.perf_counter()


def _on_dask(sweep, todo, payload, workers, scheduler):
    """The same triples for tasks submitted to Dask at once, in the order they finish."""
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is not None:
        client = Client(scheduler, timeout="30s")
    else:
        n = workers or max(1, min(os.cpu_count() or 1, len(todo)))
        # one thread per worker (OMP too): two 2-thread torch jobs on two cores run ~4x slower
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, env={"OMP_NUM_THREADS": "1"})
        client = Client(cluster)
    try:
        futures, started = {}, {}
        for task_id in todo:
            key = f"sweep-task-{task_id}-{os.getpid()}-{time.time_ns()}"
            futures[client.submit(run_task, payload(task_id), sweep.measures, sweep.options, pure=False, key=key)] = task_id
            started[task_id] = time.perf_counter()
        for fut in as_completed(futures):
            yield futures[fut], fut.result, started[futures[fut]]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# --- reading results -------------------------------------------------------------------------------


def load(folder: str | Path) -> xr.Dataset:
    """The sweep's results as an ``xarray.Dataset`` (see the module docstring)."""
    import xarray as xr

    folder = Path(folder)
    if not (folder / LEDGER).is_file():
        raise SweepError(f"{str(folder)!r} holds no sweep ledger ({LEDGER})")
    ledger = Ledger(folder)
    try:
        meta = ledger.meta()
        if not meta:
            raise SweepError(f"{folder / LEDGER} is empty")
        ledger.check_schema(meta)
        spec, ts = meta["spec"], np.asarray(meta["ts"], dtype=np.float64)
        grid = spec["grid"]
        keys = spec["axes"]  # the grid keys in file order (the canonical JSON sorts the grid's keys)
        shape = [len(grid[k]) for k in keys]
        index = {k: {json.dumps(v): i for i, v in enumerate(grid[k])} for k in keys}
        # a task is one grid point at every seed: its results fill the seed axis at that point
        place = {}
        for task_id, coords in ledger.db.execute("SELECT task_id, coords FROM tasks"):
            coords = json.loads(coords)
            place[task_id] = tuple(slice(None) if k == "seed" else index[k][json.dumps(coords[k])] for k in keys)
        data: dict[str, np.ndarray] = {}
        for task_id, blob in ledger.db.execute("SELECT task_id, data FROM results"):
            for name, value in _unblob(blob).items():
                if name not in data:
                    data[name] = np.full(shape + list(value.shape[1:]), np.nan)
                data[name][place[task_id]] = value if "seed" in keys else value[0]
    finally:
        ledger.close()
    variables = {}
    for name in spec["measures"]:
        value = data.get(name)
        if value is None:
            value = np.full(shape, np.nan)
        dims = keys + (["t"] if value.ndim > len(keys) else [])
        variables[name] = (dims, value)
    coords = {k: grid[k] for k in keys}
    if any(len(v[0]) > len(keys) for v in variables.values()):
        coords["t"] = ts
    return xr.Dataset(variables, coords=coords, attrs={"fingerprint": meta["fingerprint"], "sweep": json.dumps(spec, sort_keys=True)})


def export(folder: str | Path, fmt: str, path: str | Path | None = None) -> Path:
    """Write the sweep's Dataset as ``netcdf``, ``zarr`` or ``csv`` (atomically; default ``folder/results.<ext>``)."""
    import shutil
    import tempfile

    ext = {"netcdf": "nc", "zarr": "zarr", "csv": "csv"}
    if fmt not in ext:
        raise SweepError(f"format {fmt!r} is not one of netcdf, zarr, csv")
    ds = load(folder)
    target = Path(path) if path is not None else Path(folder) / f"results.{ext[fmt]}"
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        part = Path(tmp) / target.name
        if fmt == "netcdf":
            ds.to_netcdf(part, engine="scipy")
        elif fmt == "zarr":
            ds.to_zarr(part, mode="w", zarr_format=2, consolidated=True)  # v2: readable by every zarr reader
        else:
            ds.to_dataframe().to_csv(part)
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        os.replace(part, target)
    return target


def heatmap(folder: str | Path, measure: str, x: str, y: str) -> Figure:
    """A Figure of ``measure`` over the axes ``x`` and ``y`` (grid keys or ``t``), averaged over the others."""
    from . import plots

    ds = load(folder)
    if measure not in ds:
        raise SweepError(f"measure {measure!r} is not in this sweep; it has {', '.join(ds.data_vars)}")
    da = ds[measure]
    for axis in (x, y):
        if axis not in da.dims:
            raise SweepError(f"axis {axis!r} is not a dimension of {measure!r}; dimensions: {', '.join(da.dims)}")
    if x == y:
        raise SweepError("--x and --y must differ")
    mean = da.mean([d for d in da.dims if d not in (x, y)], skipna=True).transpose(y, x)
    return plots.grid_heatmap(np.asarray(ds[x].values), np.asarray(ds[y].values), mean.values, xlabel=x, ylabel=y, label=measure)
