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
  and float64 bytes), written in the same transaction that marks the task done.

The schema and the row counts are verified whenever a ledger is opened (:func:`problems`): a
missing table, meta row or task row, or a task marked done without its results, is reported
(SweepError, exit 2) and ``attndyn sweep ... --repair`` recomputes what is missing. A changed sweep
file on an existing folder raises :class:`~attndyn.workflow.schema.SweepError` naming
what changed. SQLite commits are atomic: a killed driver loses nothing and duplicates nothing.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from pathlib import Path

import numpy as np

from attndyn.workflow.grid import Sweep
from attndyn.workflow.schema import SweepError

LEDGER = "ledger.sqlite"


SCHEMA = 2  # 2: one results row per task, grid points kept with their tasks (1: one row per point)


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
    "results": ("task_id", "data"),
}


def expected_tasks(spec: dict) -> int:
    """The number of tasks of a sweep spec: its grid points without the seed axis."""
    return int(np.prod([len(v) for k, v in spec.get("grid", {}).items() if k != "seed"], dtype=np.int64))


def problems(db: sqlite3.Connection) -> list[str]:
    """What an existing ledger lacks, in words (empty when whole): a table or a column, the meta
    rows, task rows (against the count the sweep spec gives), results of tasks marked done."""
    have = {name: {row[1] for row in db.execute(f"PRAGMA table_info({name})")} for name in TABLES}
    found = []
    for name, columns in TABLES.items():
        if not have[name]:
            found.append(f"its {name} table is missing")
        elif set(columns) - have[name]:
            found.append(f"its {name} table lacks the column(s) {', '.join(sorted(set(columns) - have[name]))}")
    if found:
        return found
    meta = dict(db.execute("SELECT key, value FROM meta"))
    tasks = db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
    if not meta:
        return ["its meta table is empty"] if tasks or db.execute("SELECT COUNT(*) FROM results").fetchone()[0] else []
    if meta.get("schema") != json.dumps(SCHEMA):  # an earlier layout: check_schema names it
        return []
    for key in ("spec", "fingerprint", "ts"):
        if key not in meta:
            found.append(f"its meta table lacks the row {key!r}")
    if "spec" in meta:
        try:
            expected = json.loads(meta["tasks"]) if "tasks" in meta else expected_tasks(json.loads(meta["spec"]))
        except (ValueError, TypeError, AttributeError):
            return [*found, "its meta row 'spec' is not readable"]
        if tasks != expected:
            found.append(f"it holds {tasks} task rows of the sweep's {expected}")
    lost = db.execute("SELECT COUNT(*) FROM tasks WHERE status = 'done' AND task_id NOT IN (SELECT task_id FROM results)").fetchone()[0]
    if lost:
        found.append(f"{lost} task(s) marked done have no results row")
    return found


class Ledger:
    """The SQLite ledger of a sweep folder; every write is one transaction. Its schema and row counts
    are verified at open (:func:`problems`): an incomplete ledger raises SweepError naming what is
    missing, unless ``repair``, which adds the missing tables and lets :meth:`start` recompute the
    missing tasks (rows re-inserted as pending, done tasks without results pending again)."""

    def __init__(self, folder: Path, *, repair: bool = False):
        self.path = Path(folder) / LEDGER
        for name in (LEDGER, LEDGER + "-wal", LEDGER + "-shm", LEDGER + "-journal"):
            path = self.path.with_name(name)
            if os.path.islink(path) or (os.path.lexists(path) and not path.is_file()):
                raise SweepError(f"{path} is not a regular file (a link or a folder); attndyn never writes through it")
        self.repair = repair
        self.repaired: list[str] = []
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
            self.repaired = problems(self.db)
            if self.repaired and not self.repair:
                raise SweepError(
                    f"the ledger {self.path} is incomplete: {'; '.join(self.repaired)}; rerun the sweep with --repair to recompute what is missing"
                )
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
        return {k: cell(v, f"{self.path} (meta {k!r})") for k, v in self.db.execute("SELECT key, value FROM meta")}

    def start(self, sweep: Sweep) -> None:
        """Record a new sweep, or check that the folder holds this same sweep (SweepError naming what changed)."""
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
        """Insert the task rows that are missing (pending) and make done tasks without results pending again."""
        with self.db:
            self.db.executemany(
                "INSERT OR IGNORE INTO tasks (task_id, coords, status, attempts, fingerprint) VALUES (?, ?, 'pending', 0, ?)",
                [(t, json.dumps(_task_coords(sweep, t)), sweep.fingerprint) for t in range(len(sweep.tasks))],
            )
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
        """Store a task's results (:func:`run_task`'s stacked arrays as one :func:`encode_results`) and mark it done, in one transaction."""
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


def _task_coords(sweep: Sweep, task_id: int) -> dict:
    """The grid coordinates a task's points share: all but ``seed`` (its points are that grid point at every seed)."""
    return {k: v for k, v in sweep.points[sweep.tasks[task_id][0]].coords.items() if k != "seed"}


def status(folder: Path, *, limit: int = 10) -> dict:
    """What a sweep folder holds, read-only (nothing is created or locked): the count of tasks by
    status, and the first ``limit`` failed (with their error) and unfinished tasks with their grid
    points. SweepError when the folder has no ledger or it cannot be read."""
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
            missing = problems(db)
            if missing:
                raise SweepError(f"the ledger {path} is incomplete: {'; '.join(missing)}; rerun the sweep with --repair to recompute what is missing")
            counts = dict(db.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status"))
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
        "total": int(sum(counts.values())),
        "failed": [{"task": t, "point": cell(c, f"{path} (task {t})"), "error": e} for t, c, e in failed],
        "unfinished": [{"task": t, "point": cell(c, f"{path} (task {t})"), "status": s} for t, c, s in waiting],
    }
