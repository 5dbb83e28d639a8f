"""``attndyn intervene --workers N | --scheduler ADDRESS``: the executor's branches split into tasks, one per
chunk of prompts, run on a local Dask cluster or on an existing scheduler (the one the sweeps use).

A task holds every prompt's plain branch and the edited branches (edits and null draws) of its chunk of
prompts: the ``mean`` edit, the ``patch`` edit and the nulls' choice of a random non-massive dimension read
every prompt's plain state at the edited block, so each task runs the plain prompts too (an overhead of one
plain forward of the prompts per task) and each edited branch still starts from its prompt's plain state at
its first edited block (prefixes reused). Every branch is computed as in one process, operation for
operation, so the merged result is bit-identical to :func:`attndyn.models.executor.run` (tested).

A worker reads a model once: :func:`_decoder` keeps the last two models it read by their name or path, and
each task says how many reads its worker has made, so the record counts the model reads over the run.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

    from attndyn.app.intervene_ledger import TaskLedger
    from attndyn.models.decoder import Decoder


@functools.lru_cache(maxsize=2)
def _decoder(source: str):
    from attndyn.models.decoder_files import load_decoder

    return load_decoder(source)


def _task(source: str, prompts: list[list[int]], branches: list[tuple[int, tuple]], dtype: str) -> tuple:
    """One task on a worker: the model by ``source`` (read once per worker), every prompt plain and the
    given branches, through the layer-major executor. Returns (plain, edited, counts, (pid, reads))."""
    from attndyn.models.executor import run

    decoder = _decoder(source)
    plain, edited, counts = run(decoder, prompts, branches, dtype=getattr(torch, dtype))
    return plain, edited, counts, (os.getpid(), _decoder.cache_info().misses)


def chunks(branches: list[tuple[int, tuple]], n_prompts: int, size: int) -> list[list[int]]:
    """The branch indices of each task: the branches whose prompt lies in each run of ``size`` prompts
    (tasks without a branch left out)."""
    if size < 1:
        raise ValueError(f"chunk size {size} is below 1")
    out: list[list[int]] = [[] for _ in range(math.ceil(n_prompts / size))]
    for b, (i, _) in enumerate(branches):
        out[i // size].append(b)
    return [c for c in out if c]


def run_in_tasks(
    decoder: Decoder,
    prompts: list[list[int]],
    branches: list[tuple[int, tuple]] | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    size: int,
    submit: Callable | None = None,
    source: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    ledger: TaskLedger | None = None,
) -> tuple[list, list, dict]:
    """What :func:`attndyn.models.executor.run` returns, computed in tasks of ``size`` prompts' branches.
    ``submit``: a Dask client's ``submit`` (the tasks then read the model by ``source`` on the workers), or
    None to run the tasks here one after the other with ``decoder``. ``progress(i, n)``: tasks done.
    ``ledger``: a :class:`~attndyn.app.intervene_ledger.TaskLedger`; a task found there is not run again, and
    each task run is written there as it finishes (``counts["from_ledger"]`` says how many were found)."""
    from attndyn.app.intervene_ledger import model_identity, task_key
    from attndyn.models.executor import run

    branches = list(branches or [])
    groups = chunks(branches, len(prompts), size) or [[]]
    tell = progress or (lambda i, n: None)
    results: list = [None] * len(groups)
    keys: list[str | None] = [None] * len(groups)
    if ledger is not None:
        identity = model_identity(decoder.source)  # the file(s) the model was read from
        for g, ids in enumerate(groups):
            own = [branches[b] for b in ids]
            keys[g] = task_key(identity, dtype, prompts, own)
            found = ledger.get(keys[g], own)
            if found is not None:
                results[g] = (*found, (None, 0))
    todo = [g for g in range(len(groups)) if results[g] is None]
    reused = len(groups) - len(todo)
    tell(reused, len(groups))

    def finished(g: int, result: tuple, seconds: float) -> None:
        results[g] = result
        if ledger is not None:
            ledger.put(keys[g], *result[:3], seconds)

    if submit is None:
        for done, g in enumerate(todo, start=reused + 1):
            t0 = time.perf_counter()
            plain, edited, counts = run(decoder, prompts, [branches[b] for b in groups[g]], dtype=dtype)
            finished(g, (plain, edited, counts, (os.getpid(), 0)), time.perf_counter() - t0)
            tell(done, len(groups))
    elif todo:
        from distributed import as_completed

        if not source:
            raise ValueError("tasks on Dask workers read the model by its name or path: this decoder has none")
        name = str(dtype).removeprefix("torch.")
        t0 = time.perf_counter()
        futures = {
            submit(_task, source, prompts, [branches[b] for b in groups[g]], name, pure=False, key=f"intervene-{g}-{os.getpid()}-{time.time_ns()}"): g
            for g in todo
        }
        for done, fut in enumerate(as_completed(futures), start=reused + 1):
            finished(futures[fut], fut.result(), time.perf_counter() - t0)
            tell(done, len(groups))
    plain = results[0][0]
    edited: list = [None] * len(branches)
    for ids, (_, part, _, _) in zip(groups, results, strict=True):
        for b, r in zip(ids, part, strict=True):
            edited[b] = r
    L = results[0][2]["layers"]
    block_runs = sum(r[2]["block_runs"] for r in results)
    reads: dict[int, int] = {}
    for _, _, _, (pid, n) in results:
        if pid is not None:  # a task found in the ledger read nothing
            reads[pid] = max(reads.get(pid, 0), n)
    counts = {
        "layers_built": sum(r[2]["layers_built"] for r in results),
        "block_runs": block_runs,
        "forwards": block_runs / L,
        "layers": L,
        "tasks": len(groups),
        "model_reads": sum(reads.values()) if submit is not None else 0,
        "from_ledger": reused,
    }
    return plain, edited, counts


def dask_client(workers: int | None, scheduler: str | None, tasks: int, notice: Callable[[str], None]) -> tuple[Client, LocalCluster | None]:
    """A client of the scheduler at ``scheduler``, or of a local cluster of ``workers`` single-threaded
    worker processes (one line says which); returns (client, cluster or None)."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        notice(f"{tasks} tasks on the Dask scheduler at {scheduler}")
        return Client(scheduler, timeout="30s"), None
    one_thread = {"OMP_NUM_THREADS": "1", "ATTNDYN_THREADS": "1"}
    notice(f"starting a local Dask cluster of {workers} worker process{'es' if workers != 1 else ''} for {tasks} tasks (--workers)")
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, env=one_thread)
    return Client(cluster), cluster


__all__ = ["chunks", "run_in_tasks", "dask_client"]
