"""The ledger of ``attndyn intervene --workers N | --scheduler ADDRESS``: each finished task of prompts is
kept in ``OUT/ledger.sqlite`` as soon as it comes back, so that the same command run again after a kill (or
a lost worker, or a full disk) computes only the tasks that had not finished.

A task is known by its content, not by its place in the run: its key is the SHA-256 of the model's identity
(the file or folder it was read from, each file's size and modification time), the dtype, every prompt of the
run (a task runs them all plain) and the task's own branches (prompt and edits, null draws included, as
their ``repr``). A rerun with other prompts, edits, draws or another model shares no key with the old rows,
which stay unused. A row holds the task's losses (each branch's per-position ``nll`` and ``kl``) as
safetensors bytes and its counts as JSON, and an HMAC-SHA256 of key and bytes under the user's attndyn key
(the one that signs the folder's marker): a row that does not verify, or that does not decode to the task's
branches, is not used (the task is computed again and its row replaced). Nothing is unpickled.

The driver is the only writer (the workers return their results to it, as the sweeps do); SQLite commits
each row atomically, so a killed driver loses at most the tasks in flight.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
from pathlib import Path

import torch

LEDGER = "ledger.sqlite"  # one of the folder's live files (attndyn.workflow.ownership.LIVE_FILES)
SCHEMA = "intervene-1"


def model_identity(source: str | Path) -> list:
    """The model's file(s) as (name, size, mtime_ns): a changed or replaced model gives other keys."""
    path = Path(source)
    if not path.exists():
        raise ValueError(f"the ledger knows a model by the file it was read from; {source!r} is not one")
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    return [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def task_key(identity: list, dtype: torch.dtype, prompts: list[list[int]], branches: list[tuple[int, tuple]]) -> str:
    content = {"schema": SCHEMA, "model": identity, "dtype": str(dtype), "prompts": [list(map(int, p)) for p in prompts]}
    content["branches"] = [[i, repr(e)] for i, e in branches]
    body = json.dumps(content, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def encode(plain: list, edited: list, counts: dict) -> bytes:
    """A task's result as bytes: a JSON header (its counts, the tensors' layout) then safetensors bytes."""
    from safetensors.torch import save

    tensors = {f"plain.{k}.nll": r.nll.contiguous() for k, r in enumerate(plain)}
    for k, r in enumerate(edited):
        tensors[f"edited.{k}.nll"] = r.nll.contiguous()
        if r.kl is not None:
            tensors[f"edited.{k}.kl"] = r.kl.contiguous()
    head = json.dumps({"counts": counts, "plain": [r.prompt for r in plain], "edited": [r.prompt for r in edited]}).encode()
    return len(head).to_bytes(8, "little") + head + save(tensors)


def decode(data: bytes, branches: list[tuple[int, tuple]]) -> tuple[list, list, dict]:
    """``(plain, edited, counts)`` from :func:`encode`'s bytes, the edits taken from ``branches``; ValueError
    when the bytes do not hold these branches."""
    from safetensors.torch import load

    from attndyn.models.executor import BranchResult

    n = int.from_bytes(data[:8], "little")
    head = json.loads(data[8 : 8 + n])
    tensors = load(data[8 + n :])
    if head["edited"] != [i for i, _ in branches]:
        raise ValueError("the row holds other branches")
    plain = [BranchResult(i, (), tensors[f"plain.{k}.nll"], None) for k, i in enumerate(head["plain"])]
    edited = [BranchResult(i, e, tensors[f"edited.{k}.nll"], tensors.get(f"edited.{k}.kl")) for k, (i, e) in enumerate(branches)]
    return plain, edited, head["counts"]


class TaskLedger:
    """``folder/ledger.sqlite``: finished tasks by key (see the module). ``get`` returns None for a task
    not finished, or whose row does not verify or decode; ``put`` commits one row."""

    def __init__(self, folder: str | Path):
        from attndyn.workflow import ownership

        self.path = Path(folder) / LEDGER
        if os.path.islink(self.path) or (os.path.lexists(self.path) and not self.path.is_file()):
            raise ownership.OwnershipError(f"{self.path} is not a regular file (a link or a folder); attndyn never writes through it")
        from attndyn.app.ledger import foreign_side_file

        foreign = foreign_side_file(self.path)
        if foreign is not None:
            raise ownership.OwnershipError(f"{foreign} is not SQLite's (its first bytes are not a journal header); SQLite would delete it")
        self._mac_key = ownership.mac_key("intervene ledger")
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.execute("CREATE TABLE IF NOT EXISTS intervene_tasks (key TEXT PRIMARY KEY, data BLOB NOT NULL, mac TEXT NOT NULL, seconds REAL)")
        self.db.commit()
        self.rejected = 0  # rows found that did not verify or decode
        self.found = 0  # tasks found finished (not run again)

    def _mac(self, key: str, data: bytes) -> str:
        return hmac.new(self._mac_key, key.encode() + b"\0" + data, hashlib.sha256).hexdigest()

    def get(self, key: str, branches: list[tuple[int, tuple]]) -> tuple[list, list, dict] | None:
        row = self.db.execute("SELECT data, mac FROM intervene_tasks WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        data, mac = bytes(row[0]), str(row[1])
        try:
            if not hmac.compare_digest(mac, self._mac(key, data)):
                raise ValueError("its HMAC does not verify")
            result = decode(data, branches)
        except Exception:  # a row written by something else, or damaged: computed again, never trusted
            self.rejected += 1
            return None
        self.found += 1
        return result

    def put(self, key: str, plain: list, edited: list, counts: dict, seconds: float) -> None:
        data = encode(plain, edited, counts)
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO intervene_tasks VALUES (?, ?, ?, ?)", (key, data, self._mac(key, data), seconds))

    def close(self) -> None:
        self.db.close()


__all__ = ["TaskLedger", "task_key", "model_identity", "encode", "decode", "LEDGER"]
