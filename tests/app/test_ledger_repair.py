"""Ledgers repaired against their sweep's spec (issue 51 finding 3): one table of damage cases, each
written into a copy of a finished sweep's ledger. For every case ``status``, ``export`` and a rerun
refuse (exit 2, one line naming the damage), ``--repair`` sets the rows that do not fit aside (kept
in the ledger's ``set_aside`` table, never deleted) and recomputes what they held, after which
``status`` counts the spec's tasks and the export is byte for byte that of the undamaged sweep; a
ledger ``--repair`` cannot rebuild exits 2 naming why and is left as it was. Each case failed on the
code before this change (exit 0 with "4 of 3 tasks done" or wrong numbers, an IndexError, or a
``--repair`` after which ``status`` still refused)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from attndyn.app.cli import entry
from tests.app.test_bad_input import CONFIG

SWEEP = """base = "base.toml"
measures = ["pair_fraction", "energy"]

[grid]
"model.beta" = [1.0, 2.0, 4.0]
seed = [0, 1]
"""
TASKS = 3


@dataclass(frozen=True)
class Damage:
    id: str
    sql: str
    says: str  # what status, export and a rerun name
    aside: int = 1  # rows --repair moves to set_aside; -1: a ledger --repair cannot rebuild


ROW0 = "SELECT {id}, {coords}, status, attempts, error, seconds, fingerprint FROM tasks WHERE task_id = 0"
RESULT0 = "SELECT {id}, coords, fingerprint, data FROM results WHERE task_id = 0"
OFF_GRID = "'{\"model.beta\": 8.0}'"
NO_KEY = "CREATE TABLE t2 AS SELECT * FROM {t}; DROP TABLE {t}; ALTER TABLE t2 RENAME TO {t};"
# The same table with a composite key (task_id, another column): two rows of one task fit the key.
TWO_KEYS = (
    "CREATE TABLE t2 ({columns}, PRIMARY KEY (task_id, {second})); INSERT INTO t2 SELECT * FROM {t}; DROP TABLE {t}; ALTER TABLE t2 RENAME TO {t};"
)
TASK_COLUMNS = (
    "task_id INTEGER, coords TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
    "error TEXT, seconds REAL, fingerprint TEXT NOT NULL"
)
RESULT_COLUMNS = "task_id INTEGER, coords TEXT NOT NULL, fingerprint TEXT NOT NULL, data BLOB NOT NULL"

DAMAGES = [
    Damage("task-outside-the-grid", "INSERT INTO tasks " + ROW0.format(id=7, coords=OFF_GRID) + "; INSERT INTO results " + RESULT0.format(id=7),
           "task 7 is outside the sweep's 3 tasks", aside=2),
    Damage("duplicate-of-task-0", f"INSERT INTO tasks {ROW0.format(id=3, coords='coords')}; INSERT INTO results {RESULT0.format(id=3)};",
           "task 3 is outside", aside=2),
    Damage("negative-task-id", f"INSERT INTO tasks {ROW0.format(id=-1, coords='coords')};", "task -1 is outside"),
    Damage("pending-row-for-task-99", "INSERT INTO tasks SELECT 99, coords, 'pending', 0, NULL, NULL, fingerprint FROM tasks WHERE task_id = 0;",
           "task 99 is outside"),
    Damage("meta-task-count-edited", "UPDATE meta SET value = '5' WHERE key = 'tasks';", "'tasks' says 5 tasks, its spec has 3", aside=0),
    Damage("meta-spec-edited", "UPDATE meta SET value = replace(value, '4.0', '5.0') WHERE key = 'spec';", "does not match its fingerprint", aside=0),
    Damage("renamed-task-column", "ALTER TABLE tasks RENAME COLUMN status TO state;", "tasks table lacks the column(s) status", aside=TASKS),
    Damage("renamed-result-column", "ALTER TABLE results RENAME COLUMN data TO blob;", "results table lacks the column(s) data", aside=TASKS),
    Damage("garbage-result-blob", "UPDATE results SET data = x'0badc0de' WHERE task_id = 1;", "(result of task 1) has no readable header"),
    Damage("truncated-result-blob", "UPDATE results SET data = substr(data, 1, length(data) - 8) WHERE task_id = 1;", "result of task 1"),
    Damage("edited-task-coordinates", "UPDATE tasks SET coords = (SELECT coords FROM tasks WHERE task_id = 2) WHERE task_id = 0;",
           "task 0 holds the grid point"),
    Damage("edited-result-coordinates", "UPDATE results SET coords = '{\"model.beta\": 4.0}' WHERE task_id = 0;",
           "result of task 0 names the grid point"),
    Damage("result-copied-onto-another-task", "UPDATE results SET data = (SELECT data FROM results WHERE task_id = 0) WHERE task_id = 1;",
           "result of task 1 does not match its fingerprint"),
    Damage("result-row-copied-onto-another-task",
           f"DELETE FROM results WHERE task_id = 1; INSERT INTO results {RESULT0.format(id=1)};", "result of task 1 names the grid point"),
    Damage("results-swapped", "UPDATE results SET task_id = 9 WHERE task_id = 0; UPDATE results SET task_id = 0 WHERE task_id = 1;"
           "UPDATE results SET task_id = 1 WHERE task_id = 9;", "names the grid point", aside=2),
    Damage("task-of-another-sweep", "UPDATE tasks SET fingerprint = 'f00d' WHERE task_id = 1;", "task 1 belongs to another sweep"),
    Damage("unknown-status", "UPDATE tasks SET status = 'finished' WHERE task_id = 1;", "task 1 has the status 'finished'"),
    Damage("tasks-without-primary-key", NO_KEY.format(t="tasks") + f"INSERT INTO tasks {ROW0.format(id=0, coords='coords')};",
           "tasks table has no primary key on task_id", aside=-1),
    Damage("results-without-primary-key", NO_KEY.format(t="results") + f"INSERT INTO results {RESULT0.format(id=0)};",
           "results table has no primary key on task_id", aside=-1),
    Damage("tasks-keyed-on-task-and-status",
           TWO_KEYS.format(t="tasks", columns=TASK_COLUMNS, second="status")
           + "INSERT INTO tasks SELECT task_id, coords, 'pending', 0, NULL, NULL, fingerprint FROM tasks WHERE task_id = 0;",
           "tasks table has no primary key on task_id alone", aside=-1),
    Damage("results-keyed-on-task-and-fingerprint",
           TWO_KEYS.format(t="results", columns=RESULT_COLUMNS, second="fingerprint")
           + "INSERT INTO results SELECT 0, coords, 'f00d', data FROM results WHERE task_id = 1;",
           "results table has no primary key on task_id alone", aside=-1),
    Damage("meta-keyed-on-key-and-value",
           "CREATE TABLE m2 (key TEXT, value TEXT NOT NULL, PRIMARY KEY (key, value)); INSERT INTO m2 SELECT * FROM meta; "
           "DROP TABLE meta; ALTER TABLE m2 RENAME TO meta; INSERT INTO meta VALUES ('tasks', '5');",
           "meta table has no primary key on key alone", aside=-1),
]  # fmt: skip


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A finished sweep and its CSV export."""
    root = tmp_path_factory.mktemp("pristine")
    (root / "base.toml").write_text(CONFIG)
    (root / "sweep.toml").write_text(SWEEP)
    assert entry(["sweep", str(root / "sweep.toml"), "--out", str(root / "swept"), "--workers", "0"]) == 0
    assert entry(["sweep", "export", str(root / "swept"), "--format", "csv", "--out", str(root / "pristine.csv")]) == 0
    return root


def one_error_line(capsys, says: str) -> None:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert says in lines[0], f"{lines[0]!r} does not say {says!r}"


def digest(folder: Path) -> str:
    return hashlib.sha256((folder / "ledger.sqlite").read_bytes()).hexdigest()


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.id for d in DAMAGES])
def test_a_damaged_ledger_is_refused_then_repaired_against_the_spec(damage, pristine, tmp_path, capsys):
    out = tmp_path / "swept"
    shutil.copytree(pristine / "swept", out)
    db = sqlite3.connect(out / "ledger.sqlite")
    db.executescript(damage.sql)
    db.commit()
    db.close()
    sweep_file = str(pristine / "sweep.toml")
    capsys.readouterr()
    rerun = ["sweep", sweep_file, "--out", str(out), "--workers", "0"]
    for argv in (["sweep", "status", str(out)], ["sweep", "export", str(out), "--format", "csv"], rerun):
        assert entry(argv) == 2, argv
        one_error_line(capsys, damage.says)
    before = digest(out)
    code = entry([*rerun, "--repair"])
    if damage.aside < 0:
        assert code == 2
        one_error_line(capsys, damage.says)
        assert digest(out) == before  # left as it was
        return
    assert code == 0
    capsys.readouterr()
    assert entry(["sweep", "status", str(out)]) == 0
    assert f"{TASKS} of {TASKS} tasks done, 0 pending, 0 running, 0 failed" in capsys.readouterr().out
    assert entry(["sweep", "export", str(out), "--format", "csv"]) == 0
    assert (out / "results.csv").read_bytes() == (pristine / "pristine.csv").read_bytes()
    db = sqlite3.connect(out / "ledger.sqlite")
    try:
        kept = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'set_aside'").fetchone()[0]
        aside = db.execute("SELECT COUNT(*) FROM set_aside").fetchone()[0] if kept else 0
    finally:
        db.close()
    assert aside == damage.aside


def test_the_task_grid_rebuilt_from_the_spec_is_the_sweep_s(tmp_path):
    """:func:`spec_tasks` (from the stored spec alone) numbers tasks as the sweep file's parse does."""
    from attndyn.app.ledger import spec_tasks
    from attndyn.workflow.grid import load_spec

    (tmp_path / "base.toml").write_text(CONFIG)
    (tmp_path / "s.toml").write_text('base = "base.toml"\n[grid]\nseed = [5, 0]\n"model.beta" = [1.0, 2]\n"init.kind" = ["sphere", "gaussian"]\n')
    sweep = load_spec(tmp_path / "s.toml")
    tasks, seeds = spec_tasks(sweep.spec)
    assert seeds == 2
    assert tasks == [{k: v for k, v in sweep.points[t[0]].coords.items() if k != "seed"} for t in sweep.tasks]


def test_rows_set_aside_keep_their_cells_and_bytes(pristine, tmp_path):
    out = tmp_path / "swept"
    shutil.copytree(pristine / "swept", out)
    db = sqlite3.connect(out / "ledger.sqlite")
    with db:
        db.execute("UPDATE results SET data = (SELECT data FROM results WHERE task_id = 0) WHERE task_id = 1")
        (blob,) = db.execute("SELECT data FROM results WHERE task_id = 1").fetchone()
    db.close()
    assert entry(["sweep", str(pristine / "sweep.toml"), "--out", str(out), "--workers", "0", "--repair"]) == 0
    db = sqlite3.connect(out / "ledger.sqlite")
    try:
        ((source, task, reason, data),) = db.execute("SELECT source, task_id, reason, data FROM set_aside")
    finally:
        db.close()
    assert (source, task, data) == ("results", 1, blob)
    assert "does not match its fingerprint" in reason


@pytest.mark.parametrize("side", ["ledger.sqlite-wal", "ledger.sqlite-journal", "ledger.sqlite-shm"])
def test_a_users_file_under_a_sqlite_side_name_is_refused_not_deleted(side, pristine, tmp_path, capsys):
    """SQLite deletes or rewrites a -wal/-journal/-shm beside the database when it opens it: one that is not SQLite's
    (a referee's notes under that name were deleted by a rerun, exit 0) is refused, exit 2 naming it, and kept."""
    out = tmp_path / "swept"
    shutil.copytree(pristine / "swept", out)
    (out / side).write_text("the researcher's notes\n")
    capsys.readouterr()
    assert entry(["sweep", str(pristine / "sweep.toml"), "--out", str(out), "--workers", "0"]) == 2
    one_error_line(capsys, f"{out / side} is not SQLite's")
    assert (out / side).read_text() == "the researcher's notes\n"
