"""The sweep ledger: one SQLite file per sweep folder, written only by the driver.

Contract
--------
``out/ledger.sqlite`` (WAL mode) holds

* ``meta``: the sweep's canonical JSON and its SHA-256 fingerprint, the save times, the ledger's
  schema version (a folder of an earlier version is refused);
* ``tasks``: the task's grid point (its coordinates except ``seed``, as JSON; the task holds that
  point at every seed of the grid, in grid order), status (pending, running, done, failed), attempts,
  error text, seconds, fingerprint;
* ``results``: one row per task (its points' measures, each stacked over the seeds: a JSON header
  and float64 bytes), with the task's coordinates and a fingerprint (the SHA-256 of the sweep's
  fingerprint, the task id, its coordinates and the bytes), written in the same transaction that
  marks the task done;
* ``set_aside`` (made by ``--repair`` when it has something to keep): rows that did not fit the
  sweep, each with its table, the reason and its cells; never deleted by attndyn.

Every row is verified against the sweep's spec whenever a ledger is opened (:func:`problems`): the
tasks are rebuilt from the spec (:func:`spec_tasks`), never counted from ``meta``, and a task row
outside them, with other coordinates, another sweep's fingerprint or an unknown status, a result
whose bytes, coordinates or fingerprint do not match its task, a missing table, column, meta row or
task row, or a task marked done without a verified result, is reported (SweepError, exit 2).
``attndyn sweep ... --repair`` moves the rows that do not fit into ``set_aside`` and recomputes what
is missing; a ledger it cannot rebuild (a table without its primary key, made by something other
than attndyn) exits 2 naming why. A changed sweep file on an existing folder raises
:class:`~attndyn.workflow.schema.SweepError` naming what changed. SQLite commits are atomic: a
killed driver loses nothing and duplicates nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

from attndyn.workflow.grid import MAX_POINTS, Sweep
from attndyn.workflow.schema import SweepError

LEDGER = "ledger.sqlite"


# 3: results carry their task's coordinates and fingerprint; 2: one results row per task, grid points
# kept with their tasks; 1: one row per point
SCHEMA = 3
STATUSES = ("pending", "running", "done", "failed")


def encode_results(arrays: dict) -> bytes:
    """Arrays as bytes: a JSON header (names, shapes) then the float64 data, in order (C order).
    A task's row holds each measure stacked over its points, in task order."""
    values = [(k, np.ascontiguousarray(v, dtype=np.float64)) for k, v in arrays.items()]
    header = json.dumps({k: list(v.shape) for k, v in values}).encode()
    return len(header).to_bytes(4, "little") + header + b"".join(v.tobytes() for _, v in values)


def cell(text: str | bytes | None, where: str) -> object:
    """A JSON cell of the ledger, parsed within bounds; :class:`SweepError` naming ``where`` when it is not
    the JSON attndyn wrote (a damaged or edited ledger)."""
    from attndyn.core.reading import FileRefused, loads_json

    if not isinstance(text, str | bytes):
        raise SweepError(f"{where} holds a {type(text).__name__}, not the JSON attndyn wrote; the ledger was changed by hand or damaged")
    try:
        return loads_json(text if isinstance(text, str) else text.decode("utf-8", "replace"), where)
    except FileRefused as err:
        raise SweepError(f"{err}; the ledger was changed by hand or damaged") from None


def decode_results(data: bytes, where: str = "a ledger result") -> dict:
    """The arrays of :func:`encode_results`; :class:`SweepError` naming ``where`` when the bytes do
    not hold what their header declares (nothing is allocated past the bytes at hand)."""
    if not isinstance(data, bytes) or len(data) < 4:
        raise SweepError(f"{where} is not a result attndyn wrote ({type(data).__name__} of length {len(data)}); the ledger is damaged")
    size = int.from_bytes(data[:4], "little")
    header = cell(data[4 : 4 + size], where) if 4 + size <= len(data) else None
    if not isinstance(header, dict):
        raise SweepError(f"{where} has no readable header; the ledger is damaged")
    out, offset = {}, 4 + size
    for name, shape in header.items():
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise SweepError(f"{where}: the array {name!r} has the shape {shape!r}; the ledger is damaged")
        count = math.prod(shape)
        if offset + 8 * count > len(data):
            raise SweepError(f"{where}: the array {name!r} of shape {tuple(shape)} runs past the {len(data)} bytes stored; the ledger is damaged")
        out[name] = np.frombuffer(data, dtype=np.float64, count=count, offset=offset).reshape(shape).copy()
        offset += 8 * count
    return out


TABLES = {
    "meta": ("key", "value"),
    "tasks": ("task_id", "coords", "status", "attempts", "error", "seconds", "fingerprint"),
    "results": ("task_id", "coords", "fingerprint", "data"),
}
CREATE = {
    "meta": "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "tasks": "CREATE TABLE IF NOT EXISTS tasks (task_id INTEGER PRIMARY KEY, coords TEXT NOT NULL, status TEXT NOT NULL, "
    "attempts INTEGER NOT NULL DEFAULT 0, error TEXT, seconds REAL, fingerprint TEXT NOT NULL)",
    "results": "CREATE TABLE IF NOT EXISTS results (task_id INTEGER PRIMARY KEY, coords TEXT NOT NULL, fingerprint TEXT NOT NULL, "
    "data BLOB NOT NULL)",
    "set_aside": "CREATE TABLE IF NOT EXISTS set_aside (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, "
    "task_id, reason TEXT NOT NULL, cells TEXT NOT NULL, data BLOB, at REAL NOT NULL)",
}
SET_ASIDE = "set_aside"


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def spec_fingerprint(spec: dict) -> str:
    """A sweep's fingerprint from its canonical spec alone (:attr:`Sweep.fingerprint`)."""
    return hashlib.sha256(canonical(spec).encode()).hexdigest()


def result_fingerprint(sweep_fingerprint: str, task_id: int, coords: dict, data: bytes) -> str:
    """What binds a result to its task: the SHA-256 of the sweep's fingerprint, the task id, its coordinates and the bytes."""
    digest = hashlib.sha256(canonical([sweep_fingerprint, task_id, coords]).encode())
    digest.update(data)
    return digest.hexdigest()


def spec_tasks(spec: dict) -> tuple[list[dict], int]:
    """Each task's grid point (its coordinates but the seed), in task order, and the number of seeds
    a task holds, from a sweep's canonical spec alone, numbered as :func:`attndyn.workflow.grid.parse`
    numbers them; :class:`SweepError` when the spec is not one (an edited ledger)."""
    grid, axes = spec.get("grid") if isinstance(spec, dict) else None, spec.get("axes") if isinstance(spec, dict) else None
    if not isinstance(grid, dict) or not isinstance(axes, list) or sorted(map(str, axes)) != sorted(grid):
        raise SweepError("its meta row 'spec' is not a sweep's spec (no grid, or axes that are not its keys)")
    if not all(isinstance(v, list) and v for v in grid.values()) or math.prod(len(v) for v in grid.values()) > MAX_POINTS:
        raise SweepError("its meta row 'spec' holds a grid that is not a sweep's (an empty axis, or more points than a sweep may hold)")
    order: dict[tuple, int] = {}
    tasks = []
    for index in itertools.product(*(range(len(grid[k])) for k in axes)):
        group = tuple(i for k, i in zip(axes, index, strict=True) if k != "seed")
        if group not in order:
            order[group] = len(tasks)
            tasks.append({k: grid[k][i] for k, i in zip(axes, index, strict=True) if k != "seed"})
    return tasks, len(grid.get("seed", [None]))


def structure(db: sqlite3.Connection) -> tuple[list[str], list[str]]:
    """What the tables lack, in words: (what ``--repair`` rebuilds: a missing table or column, the
    table's rows set aside; what it cannot: a table whose ``task_id`` is not its primary key)."""
    lacks, cannot = [], []
    for name, columns in TABLES.items():
        info = {row[1]: row for row in db.execute(f"PRAGMA table_info({name})")}
        if not info:
            lacks.append(f"its {name} table is missing")
        elif set(columns) - set(info):
            lacks.append(f"its {name} table lacks the column(s) {', '.join(sorted(set(columns) - set(info)))}")
        elif name != "meta" and (_key_of(info) != ["task_id"] or str(info["task_id"][2]).upper() != "INTEGER"):
            # task_id alone: a composite key such as (task_id, status) lets two rows hold one task
            cannot.append(
                f"its {name} table has no primary key on task_id alone, so rows of one task cannot be told apart "
                "(the table was made again by something other than attndyn)"
            )
        elif name == "meta" and _key_of(info) != ["key"]:
            cannot.append(
                "its meta table has no primary key on key alone, so one setting can hold two values "
                "(the table was made again by something other than attndyn)"
            )
    return lacks, cannot


def _key_of(info: dict) -> list[str]:
    """A table's primary-key columns in key order, from ``PRAGMA table_info`` rows (field 5: the
    column's 1-based place in the key, 0 outside it)."""
    return [row[1] for row in sorted(info.values(), key=lambda row: row[5]) if row[5]]


def audit(db: sqlite3.Connection, spec: dict, fingerprint: str, where: str) -> tuple[list[tuple[str, int, str]], list[int], int]:
    """The rows that do not fit the sweep of ``spec`` (its fingerprint ``fingerprint``): (table,
    rowid, reason) each; the task ids the tasks table lacks; the number of tasks of the spec. A
    result is verified by its bytes (readable), its coordinates and its fingerprint
    (:func:`result_fingerprint`), so a result copied onto another task does not fit."""
    tasks, seeds = spec_tasks(spec)
    n = len(tasks)
    expected = [canonical(t) for t in tasks]
    bad: list[tuple[str, int, str]] = []
    present = set()
    for rowid, task_id, coords, state, print_ in db.execute("SELECT rowid, task_id, coords, status, fingerprint FROM tasks"):
        reason = _task_misfit(task_id, n)
        if reason is None:
            try:
                got = canonical(cell(coords, f"{where} (task {task_id})"))
            except SweepError as err:
                got, reason = None, str(err)
            if reason is None and got != expected[task_id]:
                reason = f"task {task_id} holds the grid point {got}, the sweep's task {task_id} is {expected[task_id]}"
            elif reason is None and print_ != fingerprint:
                reason = f"task {task_id} belongs to another sweep (its fingerprint is {str(print_)[:16]!r}...)"
            elif reason is None and state not in STATUSES:
                reason = f"task {task_id} has the status {state!r}, not one of {', '.join(STATUSES)}"
        if reason is None:
            present.add(task_id)
        else:
            bad.append(("tasks", rowid, reason))
    for rowid, task_id, coords, print_, data in db.execute("SELECT rowid, task_id, coords, fingerprint, data FROM results"):
        reason = _task_misfit(task_id, n, "the result of task")
        if reason is None:
            name = f"{where} (result of task {task_id})"
            try:
                arrays = decode_results(data, name)
                got = canonical(cell(coords, name))
            except SweepError as err:
                arrays, reason = {}, str(err)
            if reason is None and any(len(v.shape) < 1 or v.shape[0] != seeds for v in arrays.values()):
                reason = f"{name} does not hold {seeds} seed(s) for each measure"
            elif reason is None and got != expected[task_id]:
                reason = f"the result of task {task_id} names the grid point {got}, the sweep's task {task_id} is {expected[task_id]}"
            elif reason is None and print_ != result_fingerprint(fingerprint, task_id, tasks[task_id], data):
                reason = f"the result of task {task_id} does not match its fingerprint (changed, damaged or copied from another task)"
        if reason is not None:
            bad.append(("results", rowid, reason))
    return bad, sorted(set(range(n)) - present), n


def _task_misfit(task_id: object, n: int, what: str = "task") -> str | None:
    if not isinstance(task_id, int) or not 0 <= task_id < n:
        return f"{what} {task_id!r} is outside the sweep's {n} tasks (ids 0 to {n - 1})"
    return None


def problems(db: sqlite3.Connection, where: str = "the ledger") -> list[str]:
    """What an existing ledger lacks or holds that does not fit its sweep, in words (empty when
    whole): a table or a column, the meta rows, the rows of :func:`audit` against the spec in its
    meta (whose own fingerprint must match it), task rows missing, tasks marked done without a
    verified result. A table without its primary key raises SweepError: ``--repair`` cannot rebuild it."""
    meta_cols = {row[1] for row in db.execute("PRAGMA table_info(meta)")}
    meta = dict(db.execute("SELECT key, value FROM meta")) if {"key", "value"} <= meta_cols else {}
    if meta and meta.get("schema") != json.dumps(SCHEMA):  # an earlier layout: check_schema names it
        return []
    lacks, cannot = structure(db)
    if cannot:
        raise SweepError(f"the ledger {where} cannot be repaired: {'; '.join(cannot)}; move it aside and rerun the sweep into a new folder")
    if lacks:
        return lacks
    counts = [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("tasks", "results")]
    if not meta:
        return ["its meta table is empty"] if any(counts) else []
    found = [f"its meta table lacks the row {key!r}" for key in ("spec", "fingerprint", "ts") if key not in meta]
    if "spec" not in meta or "fingerprint" not in meta:
        return found
    spec, fingerprint = cell(meta["spec"], f"{where} (meta 'spec')"), cell(meta["fingerprint"], f"{where} (meta 'fingerprint')")
    if not isinstance(spec, dict) or spec_fingerprint(spec) != fingerprint:
        return [*found, "its meta row 'spec' does not match its fingerprint (it was edited)"]
    bad, missing, n = audit(db, spec, fingerprint, where)
    if "tasks" in meta and meta["tasks"] != json.dumps(n):
        found.append(f"its meta row 'tasks' says {meta['tasks']} tasks, its spec has {n}")
    found += [reason for _, _, reason in bad[:5]] + ([f"{len(bad) - 5} more rows that do not fit the sweep"] if len(bad) > 5 else [])
    if missing:
        found.append(f"it holds {n - len(missing)} task rows of the sweep's {n}")
    bad_results = ",".join(str(rowid) for table, rowid, _ in bad if table == "results")
    fits = f"SELECT task_id FROM results WHERE rowid NOT IN ({bad_results})"
    lost = db.execute(f"SELECT COUNT(*) FROM tasks WHERE status = 'done' AND task_id NOT IN ({fits})").fetchone()[0]
    if lost:
        found.append(f"{lost} task(s) marked done have no results row that fits")
    return found


# the first bytes of SQLite's own side files: a WAL (either byte order of its checksums), a rollback journal, and
# the WAL index (its version 3007000, in this machine's byte order); SQLite deletes or rewrites such files when it
# opens the database, so a file of those names that is not SQLite's is refused before, never handed to it
SIDE_MAGIC = {
    "-wal": (bytes.fromhex("377f0682"), bytes.fromhex("377f0683")),
    "-journal": (bytes.fromhex("d9d505f920a163d7"), bytes(8)),
    "-shm": ((3007000).to_bytes(4, sys.byteorder), bytes(4)),
}


def foreign_side_file(database: Path) -> Path | None:
    """The first of ``database``'s SQLite side files (``-wal``, ``-journal``, ``-shm``) that holds bytes SQLite did not
    write (its header is not SQLite's), or None: opening the database would delete or overwrite it."""
    for suffix, magics in SIDE_MAGIC.items():
        side = database.with_name(database.name + suffix)
        if os.path.islink(side) or not side.is_file() or side.stat().st_size == 0:
            continue
        with open(side, "rb") as fh:
            head = fh.read(8)
        if not any(head.startswith(m) for m in magics):
            return side
    return None


class Ledger:
    """The SQLite ledger of a sweep folder; every write is one transaction. Its schema and rows are
    verified at open (:func:`problems`): a ledger that lacks something or holds rows that do not fit
    its sweep raises SweepError naming them, unless ``repair``: then tables that lost a column are
    set aside and made again, and :meth:`start` rebuilds the tasks from the sweep's spec (rows that
    do not fit moved to ``set_aside``, missing tasks pending, :attr:`moved` says what moved)."""

    def __init__(self, folder: Path, *, repair: bool = False):
        self.path = Path(folder) / LEDGER
        for name in (LEDGER, LEDGER + "-wal", LEDGER + "-shm", LEDGER + "-journal"):
            path = self.path.with_name(name)
            if os.path.islink(path) or (os.path.lexists(path) and not path.is_file()):
                raise SweepError(f"{path} is not a regular file (a link or a folder); attndyn never writes through it")
        foreign = foreign_side_file(self.path)
        if foreign is not None:
            raise SweepError(f"{foreign} is not SQLite's (its first bytes are not a WAL, journal or index header); SQLite would delete it")
        self.repair = repair
        self.repaired: list[str] = []  # what the ledger lacked or held that did not fit, as found at open
        self.moved: list[str] = []  # the rows set aside by --repair, each with its reason
        self.sweep: Sweep | None = None
        try:
            self.db = sqlite3.connect(self.path, timeout=30)
        except sqlite3.DatabaseError as err:
            raise SweepError(f"the ledger {self.path} cannot be opened ({err})") from None
        try:
            self._open()
        except sqlite3.DatabaseError as err:
            self.db.close()
            raise SweepError(f"the ledger {self.path} is damaged ({err}); {self.recoverable()}") from None
        except SweepError:
            self.db.close()
            raise

    def recoverable(self) -> str:
        """What a damaged ledger still holds, in words (what ``sqlite3 .recover`` could bring back)."""
        try:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            try:
                done = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            finally:
                db.close()
            return (
                f"{done} task results are still readable: move the file aside and run `sqlite3 {self.path.name} .recover`, or rerun into a new folder"
            )
        except sqlite3.DatabaseError:
            return "no task result can be read from it: move it aside and rerun the sweep to recompute them"

    def _open(self) -> None:
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        fresh = not self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        if not fresh:
            self.repaired = problems(self.db, str(self.path))
            if self.repaired and not self.repair:
                raise SweepError(
                    f"the ledger {self.path} is incomplete or does not fit its sweep: {'; '.join(self.repaired)}; "
                    "rerun the sweep with --repair to set aside what does not fit and recompute what is missing"
                )
        with self.db:
            if self.repaired:  # a table that lost a column (renamed, dropped): its rows set aside, the table made again
                for name, columns in TABLES.items():
                    have = [row[1] for row in self.db.execute(f"PRAGMA table_info({name})")]
                    if have and set(columns) - set(have):
                        self._set_aside(name, f"its {name} table lacked the column(s) {', '.join(sorted(set(columns) - set(have)))}")
                        self.db.execute(f"DROP TABLE {name}")
            for name in TABLES:
                self.db.execute(CREATE[name])

    def _set_aside(self, table: str, reason: str, rowid: int | None = None) -> None:
        """Move one row of ``table`` (every row when ``rowid`` is None) into ``set_aside``, with the
        reason and its cells (bytes kept as they were); inside the caller's transaction."""
        self.db.execute(CREATE[SET_ASIDE])
        query = f"SELECT rowid, * FROM {table}" + (" WHERE rowid = ?" if rowid is not None else "")
        cursor = self.db.execute(query, () if rowid is None else (rowid,))
        names = [d[0] for d in cursor.description][1:]
        for row in cursor.fetchall():
            cells = dict(zip(names, row[1:], strict=True))
            data = next((v for v in cells.values() if isinstance(v, bytes)), None)
            text = canonical({k: (None if isinstance(v, bytes) else v) for k, v in cells.items()})
            self.db.execute(
                f"INSERT INTO {SET_ASIDE} (source, task_id, reason, cells, data, at) VALUES (?, ?, ?, ?, ?, ?)",
                (table, cells.get("task_id"), reason, text, data, time.time()),
            )
            self.db.execute(f"DELETE FROM {table} WHERE rowid = ?", (row[0],))
            self.moved.append(f"{table} row of task {cells.get('task_id')!r}: {reason}")

    def close(self) -> None:
        self.db.close()

    def meta(self) -> dict:
        return {k: cell(v, f"{self.path} (meta {k!r})") for k, v in self.db.execute("SELECT key, value FROM meta")}

    def start(self, sweep: Sweep) -> None:
        """Record a new sweep, or check that the folder holds this same sweep (SweepError naming what changed)."""
        self.sweep = sweep
        meta = self.meta()
        if meta and ("fingerprint" in meta or not self.repair):
            self.check_schema(meta)
            if meta.get("fingerprint") != sweep.fingerprint:
                raise SweepError(
                    f"{self.path.parent} holds a different sweep: {_difference(meta.get('spec', {}), sweep.spec)}; use a new --out folder"
                )
            if self.repair:
                self._repair(sweep)
            return
        if self.repair:  # a meta table lost: the tasks' own fingerprints must be this sweep's
            others = self.db.execute("SELECT COUNT(*) FROM tasks WHERE fingerprint != ?", (sweep.fingerprint,)).fetchone()[0]
            if others:
                raise SweepError(f"{self.path} lost its meta table and its tasks belong to a different sweep; use a new --out folder")
        with self.db:
            for key, value in (
                ("spec", sweep.spec),
                ("fingerprint", sweep.fingerprint),
                ("ts", sweep.ts),
                ("created", time.time()),
                ("schema", SCHEMA),
                ("tasks", len(sweep.tasks)),
            ):
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value, sort_keys=True)))
        self._repair(sweep)

    def _repair(self, sweep: Sweep) -> None:
        """Rebuild the tasks from the sweep's spec: rows that do not fit it (:func:`audit`) set aside,
        the meta rows written again from the sweep, missing task rows inserted (pending), a task
        with a verified result done, a done task without one pending again."""
        bad, _, _ = audit(self.db, sweep.spec, sweep.fingerprint, str(self.path))
        with self.db:
            for table, rowid, reason in bad:
                self._set_aside(table, reason, rowid)
            rows = (("spec", sweep.spec), ("fingerprint", sweep.fingerprint), ("ts", sweep.ts), ("schema", SCHEMA), ("tasks", len(sweep.tasks)))
            for key, value in rows:
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value, sort_keys=True)))
            self.db.executemany(
                "INSERT OR IGNORE INTO tasks (task_id, coords, status, attempts, fingerprint) VALUES (?, ?, 'pending', 0, ?)",
                [(t, json.dumps(_task_coords(sweep, t)), sweep.fingerprint) for t in range(len(sweep.tasks))],
            )
            self.db.execute("UPDATE tasks SET status = 'done', error = NULL WHERE status != 'done' AND task_id IN (SELECT task_id FROM results)")
            self.db.execute("UPDATE tasks SET status = 'pending' WHERE status = 'done' AND task_id NOT IN (SELECT task_id FROM results)")

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
        """Store a task's results (:func:`run_task`'s stacked arrays as one :func:`encode_results`),
        with its coordinates and fingerprint, and mark it done, in one transaction (after :meth:`start`)."""
        if self.sweep is None:
            raise RuntimeError("Ledger.done before Ledger.start: the sweep is not known")
        coords = _task_coords(self.sweep, task_id)
        print_ = result_fingerprint(self.sweep.fingerprint, task_id, coords, blob)
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)", (task_id, json.dumps(coords), print_, blob))
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


def _task_coords(sweep: Sweep, task_id: int) -> dict:
    """The grid coordinates a task's points share: all but ``seed`` (its points are that grid point at every seed)."""
    return {k: v for k, v in sweep.points[sweep.tasks[task_id][0]].coords.items() if k != "seed"}


def status(folder: Path, *, limit: int = 10) -> dict:
    """What a sweep folder holds, read-only (nothing is created or locked): the count of tasks by
    status, the sweep's number of tasks (from its spec), the rows ``--repair`` set aside, and the first
    ``limit`` failed (with their error) and unfinished tasks with their grid points. SweepError when
    the folder has no ledger, or it cannot be read, or a row does not fit its sweep (:func:`problems`)."""
    path = Path(folder) / LEDGER
    if not path.is_file():
        raise SweepError(f"{folder} is not a sweep folder: it has no {LEDGER}")
    # with no write-ahead log beside it no driver is writing: open it immutable, so that SQLite creates
    # none of its -wal/-shm files either; a running driver's ledger is read through its log
    immutable = "&immutable=1" if not path.with_name(path.name + "-wal").exists() else ""
    if os.path.islink(path):
        raise SweepError(f"{path} is a symbolic link; attndyn never reads or writes a ledger through a link")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro{immutable}", uri=True)
        try:
            missing = problems(db, str(path))
            if missing:
                raise SweepError(
                    f"the ledger {path} is incomplete or does not fit its sweep: {'; '.join(missing)}; "
                    "rerun the sweep with --repair to set aside what does not fit and recompute what is missing"
                )
            meta = dict(db.execute("SELECT key, value FROM meta"))
            if meta.get("schema") != json.dumps(SCHEMA):
                raise SweepError(f"{path} was written by an earlier attndyn (ledger schema {meta.get('schema', 1)}, this one reads {SCHEMA})")
            # every row verified against the spec (problems): the total is the spec's, the counts the rows'
            total = len(spec_tasks(cell(meta["spec"], f"{path} (meta 'spec')"))[0])
            counts = dict(db.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status"))
            kept = db.execute(f"SELECT COUNT(*) FROM sqlite_master WHERE name = '{SET_ASIDE}'").fetchone()[0]
            aside = db.execute(f"SELECT COUNT(*) FROM {SET_ASIDE}").fetchone()[0] if kept else 0
            failed = list(db.execute("SELECT task_id, coords, error FROM tasks WHERE status = 'failed' ORDER BY task_id LIMIT ?", (limit,)))
            waiting = list(
                db.execute("SELECT task_id, coords, status FROM tasks WHERE status IN ('pending', 'running') ORDER BY task_id LIMIT ?", (limit,))
            )
        finally:
            db.close()
    except sqlite3.DatabaseError as err:
        raise SweepError(f"the ledger {path} cannot be read ({err})") from None
    return {
        "counts": {key: int(counts.get(key, 0)) for key in ("done", "pending", "running", "failed")},
        "total": total,
        "set_aside": int(aside),
        "failed": [{"task": t, "point": cell(c, f"{path} (task {t})"), "error": e} for t, c, e in failed],
        "unfinished": [{"task": t, "point": cell(c, f"{path} (task {t})"), "status": s} for t, c, s in waiting],
    }
