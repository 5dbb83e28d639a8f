"""Independent jobs over worker processes: ``pmap(fn, count)`` is ``[fn(i) for i in range(count)]``.

Contract
--------
``pmap(fn, count, workers=None, progress=None, cost=None) -> list`` returns ``fn(0), ..., fn(count - 1)`` in that order. With one
worker (or one job) it runs them here, one after another; with more, in that many processes forked from
this one, each running torch on one thread. The processes inherit everything this process holds when
``pmap`` is called (a decoder read once, forward passes already run: copy-on-write, nothing is sent to
them but the job's index), and send back only ``fn``'s result (pickled). A job must therefore depend on
its index and on what existed before the call alone, never on another job: the results are then the
same whatever the worker count, which :func:`attndyn.core.threads.workers` decides (explicit argument,
then ``ATTNDYN_THREADS``, then every core this process may run on). ``progress(done, count)`` is called
here, in this process, each time a job has ended (``done`` = 1, ..., ``count``, in that order, whichever
job it was): the count behind a command's progress line. With ``cost`` (one number a job: what it does, in
a unit the caller names, e.g. forward passes) ``done`` and ``count`` are sums of the costs instead.

Where ``fork`` is not available (Windows, macOS' default spawn start would have to pickle ``fn``), the
jobs run here, one after another: the same numbers, one core.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import warnings
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from attndyn.core.threads import ENV, limit_blas
from attndyn.core.threads import workers as choose_workers

T = TypeVar("T")

_JOB: Callable[[int], object] | None = None  # the job of the pool being run (set before the fork)


def _init() -> None:
    # the workers share the cores: one intra-op thread each, also for the library's entry points, whose
    # thread policy reads ATTNDYN_THREADS first (this process' environment only)
    os.environ[ENV] = "1"
    torch.set_num_threads(1)
    limit_blas(1)  # and NumPy's BLAS/LAPACK pool, which a library caller may not have limited (two workers of 2 threads each)
    # the parent handles Ctrl-C and SIGTERM (the CLI keeps what finished) and ends its pool, which sends the
    # workers SIGTERM: they end quietly, without the parent's handler raising in each of them
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run(i: int) -> tuple[int, object]:
    assert _JOB is not None
    return i, _JOB(i)


def pmap(
    fn: Callable[[int], T], count: int, *, workers: int | None = None, progress: Callable[[int, int], None] | None = None,
    cost: Sequence[int] | None = None,
) -> list[T]:  # fmt: skip
    """``[fn(i) for i in range(count)]``, over :func:`attndyn.core.threads.workers` processes (module docstring);
    ``progress(done, count)`` after each job ends (with ``cost``: the sums of the jobs' costs)."""
    global _JOB
    count = int(count)
    costs = [1] * count if cost is None else [int(c) for c in cost]
    if len(costs) != count:
        raise ValueError(f"pmap: {len(costs)} costs for {count} jobs")
    total, done = sum(costs), 0

    def ended(i: int) -> None:
        nonlocal done
        done += costs[i]
        if progress is not None:
            progress(done, total)

    k = choose_workers(count, workers)
    if k <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        here = []
        for i in range(count):
            here.append(fn(i))
            ended(i)
        return here
    _JOB = fn
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork of a process with threads (torch's): the workers only compute
            ctx = multiprocessing.get_context("fork")
            pool = ctx.Pool(k, initializer=_init)
            try:
                out: list = [None] * count
                # in the order they end (each result put at its index): the count moves as soon as any job ends
                for i, value in pool.imap_unordered(_run, range(count), chunksize=1):
                    out[i] = value
                    ended(i)
                pool.close()  # the workers end on their own: no SIGTERM races a worker still starting
                pool.join()
                return out
            finally:
                pool.terminate()  # after an error or Ctrl-C (a no-op once joined)
    finally:
        _JOB = None
