"""Running a sweep: tasks in-process or on Dask, outcomes recorded in the ledger, resumable.

Contract
--------
``run(spec_path, out, workers=, scheduler=)`` executes a sweep: in-process for one or two tasks (or
``workers=0``), on a Dask ``LocalCluster`` with ``workers`` single-threaded worker processes, or on
an existing scheduler (``scheduler="tcp://host:8786"``, e.g. from ``dask-jobqueue``). Workers get
config data (dicts), never live objects; the driver is the only writer of the ledger. Running the
same command again computes only the tasks not done. A task that raises is recorded as failed with
its error and the sweep goes on.
"""

from __future__ import annotations

import functools
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from attndyn.app.ledger import LEDGER, Ledger, encode_results
from attndyn.workflow import ownership
from attndyn.workflow.grid import load_spec
from attndyn.workflow.measures import measure_function
from attndyn.workflow.schema import SweepError
from attndyn.workflow.tasks import run_task


@dataclass
class Summary:
    total: int
    done: int
    failed: int
    ran: int
    seconds: float
    errors: list = field(default_factory=list)
    set_aside: list = field(default_factory=list)  # --repair: the ledger rows moved to its set_aside table, with why


def _importable(*folders: Path) -> None:
    """Put ``folders`` first on this process's import path and on the one its child processes inherit."""
    import os
    import sys

    for folder in reversed([str(f) for f in folders]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([*(str(f) for f in folders if str(f) not in current), *current])


def run(
    spec_path: str | Path,
    out: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    allow_import: bool = False,
    repair: bool = False,
    notice: Callable[[str], None] | None = None,
) -> Summary:
    """Run (or resume) the sweep of ``spec_path`` into ``out``; see the module docstring.

    ``repair``: a ledger that lacks something or holds rows that do not fit the sweep is rebuilt
    from the sweep's spec (those rows moved to its ``set_aside`` table, never deleted) and what it
    lacks recomputed, instead of refused.

    ``allow_import``: measures named ``package.module:function`` import (and so run) code named in
    the sweep file; they are refused unless this is set (``--allow-import``). One driver per
    folder: a second one exits with :class:`SweepError` naming the first (a lock that the OS
    releases when its holder dies, SIGKILL included). With ``allow_import`` the sweep file's folder
    and the working folder are importable (prepended to ``sys.path`` and, for the workers of a local
    cluster, to ``PYTHONPATH``): a ``my_measures.py`` beside the sweep file serves as
    ``my_measures:function``. Workers of an external scheduler need the module on their own path.

    ``notice``: called with one line when the run starts a local Dask cluster (how many worker
    processes, for how many tasks) or connects to a scheduler.
    """
    if scheduler is not None:
        check_scheduler(scheduler)
    if allow_import:
        _importable(Path(spec_path).resolve().parent, Path.cwd())
    sweep = load_spec(spec_path)
    imported = [m for m in sweep.measures if ":" in m]
    if imported and not allow_import:
        raise SweepError(f"measure {imported[0]!r} imports code named in the sweep file; pass --allow-import to run it")
    for name in sweep.measures:
        measure_function(name)  # unknown, unimportable or non-callable measures fail here, before any work
    owner = ownership.claim(out, "sweep", "attndyn sweep")
    out = owner.folder
    lock = _lock(owner)
    owner.add(LOCK)
    try:
        ledger = Ledger(out, repair=repair)
    except BaseException:  # a ledger that cannot be opened: the lock is released, not leaked
        lock.close()
        ownership.unlock(out)
        raise
    owner.add(LEDGER)
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
        executions = _in_process(sweep, todo, payload) if local else _on_dask(sweep, todo, payload, workers, scheduler, notice)
        for task_id, outcome, started in executions:
            ledger.running(task_id)
            try:
                blob = encode_results(outcome())
            except Exception as err:  # a failing task is recorded, the sweep goes on
                ledger.failed(task_id, _error_text(err), time.perf_counter() - started)
            else:
                ledger.done(task_id, blob, time.perf_counter() - started)
            ran += 1
            if progress:
                progress(done_before + ran, total)
        counts = ledger.counts()
        return Summary(total, counts.get("done", 0), counts.get("failed", 0), ran, time.perf_counter() - start, ledger.errors(), ledger.moved)
    finally:
        ledger.close()
        lock.close()  # releases the lock (the OS does the same for a driver that dies)
        ownership.unlock(out)


LOCK = "driver.lock"


def _lock(owner: ownership.Owner):
    """An exclusive lock on ``folder/driver.lock`` held for the driver's life (never through a link);
    SweepError naming the holder."""
    import fcntl

    folder = owner.folder
    handle = ownership.open_live(owner, LOCK)  # held open until the sweep ends
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise SweepError(f"{folder} is being run by another attndyn sweep driver (pid {holder}); wait for it to finish or stop it") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _error_text(err: BaseException) -> str:
    tail = traceback.format_exception_only(type(err), err)[-1].strip()
    return tail[:2000]


def _in_process(sweep, todo, payload):
    """(task id, a call computing its results, its start time), one task after the other."""
    for task_id in todo:
        yield task_id, functools.partial(run_task, payload(task_id), sweep.measures, sweep.options), time.perf_counter()


def check_scheduler(address: str) -> None:
    """:class:`SweepError` naming ``address`` unless Dask can parse it (``tcp://host:port``), before any work."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address, strict=True)
        if scheme not in ("tcp", "tls", "ucx", "ws", "wss", "inproc"):  # Dask's own schemes; any other fails at connect
            raise ValueError(f"unknown address scheme {scheme!r}: Dask knows tcp, tls, ucx, ws, wss and inproc")
        if scheme != "inproc":
            host, port = parse_host_port(location)
            if not host or not 0 < int(port) < 65536:
                raise ValueError(f"host {host!r}, port {port} (ports are 1 to 65535)")
    except (ValueError, TypeError) as err:
        raise SweepError(f"--scheduler {address!r} is not a scheduler address like tcp://host:8786 ({' '.join(str(err).split())})") from None


def _on_dask(sweep, todo, payload, workers, scheduler, notice=None):
    """The same triples for tasks submitted to Dask at once, in the order they finish."""
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is not None:
        if notice:
            notice(f"{len(todo)} tasks on the Dask scheduler at {scheduler}")
        client = Client(scheduler, timeout="30s")
    else:
        n = workers or max(1, min(os.cpu_count() or 1, len(todo)))
        # one thread per worker (OMP too): two 2-thread torch jobs on two cores oversubscribe them and run much slower
        one_thread = {"OMP_NUM_THREADS": "1", "ATTNDYN_THREADS": "1"}
        if notice:
            why = "--workers" if workers else "more than 2 tasks; --workers 0 runs them in this process"
            notice(f"starting a local Dask cluster of {n} worker process{'es' if n != 1 else ''} for {len(todo)} tasks ({why})")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, env=one_thread)
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
