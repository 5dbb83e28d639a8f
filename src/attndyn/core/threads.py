"""The thread policy: how many intra-op threads torch may use for one integration.

Contract
--------
``choose(work, threads=None) -> int`` picks the thread count of one call; ``policy(work, threads=)``
is the context manager that sets it with ``torch.set_num_threads`` and restores the previous count on
exit. The library's entry points (``simulate``, ``residual_layers``, ``simulate_long``,
``simulate_sde``, the mean-field solver) wrap their work in it, so no import changes global state.
``set_process_default()`` sets the count for everything else (torch, and NumPy's and SciPy's BLAS
pools through ``threadpoolctl``): the CLI and the test suite call it.

The rule, in order:

1. an explicit ``threads`` argument (or config key ``threads``, or CLI ``--threads``);
2. the environment variable ``ATTNDYN_THREADS`` (a positive integer);
3. one thread when the work of one field evaluation, ``batch * heads * n^2 * d``, is below
   :data:`CROSSOVER` (:data:`BATCH_CROSSOVER` for a batch of 4 or more systems): there the
   per-call cost of waking a second thread exceeds what it saves;
4. above it, every core this process may run on, less the cores that other processes kept busy
   since the last decision (read from ``/proc/stat`` on Linux; elsewhere all cores).

On an idle machine a second thread costs more than it saves on small systems and pays above the
crossover; beside a CPU-bound competitor, extra threads cost at every size (``benchmarks/threads.py``
measures both; the numbers are in docs/benchmarks). Torch's default (all cores, always) is therefore
the worst choice on a busy laptop or a shared node.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator

# B * heads * n^2 * d of one field evaluation above which a second thread pays on an idle machine:
# for one system, and for a batch of systems (parallel over the members pays sooner than parallel
# inside one small system's products; benchmarks/threads.py).
CROSSOVER = 2.5e5
BATCH_CROSSOVER = 2e4
ENV = "ATTNDYN_THREADS"
# The most threads one may ask for: torch's OpenMP pool crashes the process (a segmentation fault, not an
# error) when asked for a million threads, and no machine this runs on has more than this many cores.
MAX_THREADS = 1024
# The window over which other processes' CPU use is read when no recent reading exists (seconds):
# /proc/stat counts in 10 ms ticks, so 50 ms gives five ticks a core (20 ms, two, misread a
# competitor as half a core often enough to choose two threads beside it).
_SAMPLE = 0.05
_last: tuple[float, float, float, float] | None = None  # (wall, busy jiffies, total jiffies, own CPU seconds)
_last_busy: float | None = None  # what that reading found


def cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def check_threads(value: object, name: str = "threads") -> int:
    """A thread count as an int in 1..MAX_THREADS; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name} = {value!r} must be a positive integer")
    try:
        k = int(value)
    except ValueError:
        raise ValueError(f"{name} = {value!r} must be a positive integer") from None
    if k < 1:
        raise ValueError(f"{name} = {value!r} must be a positive integer")
    if k > MAX_THREADS:
        raise ValueError(f"{name} = {k} is more than {MAX_THREADS} threads (this machine has {cores()} cores)")
    return k


def requested() -> int | None:
    """The count set by ``ATTNDYN_THREADS``, or None when unset or empty."""
    value = os.environ.get(ENV, "").strip()
    return check_threads(value, ENV) if value else None


def _cpu_sample() -> tuple[float, float, float, float] | None:
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    own = time.process_time()
    return time.monotonic(), total - idle, total, own


def others_busy() -> float | None:
    """Cores kept busy by other processes since the last reading (or over a window of ``_SAMPLE``, 50 ms); None if unknown."""
    global _last, _last_busy
    now = _cpu_sample()
    if now is None:
        return None
    before = _last
    if before is not None and now[0] - before[0] < _SAMPLE and _last_busy is not None:
        return _last_busy  # read under 50 ms ago: many short calls in a row must not sleep 50 ms each
    if before is None or not (_SAMPLE <= now[0] - before[0] <= 10.0):
        before = now
        time.sleep(_SAMPLE)
        now = _cpu_sample()
        if now is None:
            return None
    _last = now
    jiffies = now[2] - before[2]
    if jiffies <= 0:
        return None
    n = os.cpu_count() or 1
    busy_cores = n * (now[1] - before[1]) / jiffies
    own_cores = (now[3] - before[3]) / max(now[0] - before[0], 1e-9)
    _last_busy = max(0.0, busy_cores - own_cores)
    return _last_busy


def choose(work: float, threads: int | None = None, *, batch: int = 1) -> int:
    """The intra-op thread count for one call whose field evaluation costs ``work`` over ``batch``
    systems (see the module docstring)."""
    if threads is not None:
        return check_threads(threads)
    env = requested()
    if env is not None:
        return env
    if work < (BATCH_CROSSOVER if batch >= 4 else CROSSOVER):
        return 1
    available = cores()
    busy = others_busy()
    if busy is None:
        return available
    # a core counts as free when others used less than a quarter of it: beside a competitor, one
    # thread is the safe side (oversubscribing a busy core costs more than leaving one idle)
    return max(1, min(available, int(available - busy + 0.25)))


def state_batch(shape: tuple[int, ...]) -> int:
    """The number of systems in a state of shape ``(*batch, n, d)``."""
    b = 1
    for s in shape[:-2]:
        b *= int(s)
    return b


def state_work(shape: tuple[int, ...], heads: int = 1) -> float:
    """``batch * heads * n^2 * d`` for a state of shape ``(*batch, n, d)``."""
    if len(shape) < 2:
        return 0.0
    *batch, n, d = shape
    b = 1
    for s in batch:
        b *= s
    return float(b) * heads * n * n * d


def limit_blas(k: int) -> bool:
    """Hold NumPy's and SciPy's BLAS/LAPACK thread pools (OpenBLAS, MKL, BLIS) at ``k`` threads for the
    rest of the process, through ``threadpoolctl``; False where it is not installed.

    Those pools start with every core, like torch's, and the analysis' eigendecompositions and SVDs of
    small matrices pay for it the same way (``reproduce trained-spectra --quick`` is about twice as
    slow with OpenBLAS on two threads as on one).
    """
    k = check_threads(k)
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # a BLAS loaded later (SciPy's own) reads these
        os.environ[var] = str(k)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return False
    threadpool_limits(limits=k, user_api="blas")  # the pools loaded already (NumPy's)
    return True


def workers(jobs: int, workers: int | None = None) -> int:
    """The worker processes for ``jobs`` independent jobs (:func:`attndyn.core.parallel.pmap`): ``workers``,
    else ``ATTNDYN_THREADS``, else every core this process may run on; never more than the jobs.

    Unlike torch's intra-op threads, which spin while they wait and cost beside a competitor, a worker
    process runs a whole job and sleeps otherwise, so the count does not shrink for other processes' load."""
    k = check_threads(workers, "workers") if workers is not None else (requested() or cores())
    return max(1, min(k, int(jobs)))


def set_process_default(threads: int | None = None) -> int:
    """The process-wide count for work outside the library's entry points, which choose per call:
    ``threads``, else ``ATTNDYN_THREADS``, else one; applied to torch and to the BLAS pools. The CLI
    and the test suite call it; a library user may (importing attndyn changes nothing).

    Torch is not imported here (the light commands never load it): when it is not loaded yet, the
    count goes to ``OMP_NUM_THREADS``, which torch reads for its pool when it is imported."""
    k = choose(0.0, threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(k)
    else:
        os.environ["OMP_NUM_THREADS"] = str(k)
    limit_blas(k)
    return k


@contextlib.contextmanager
def policy(work: float, threads: int | None = None, *, batch: int = 1) -> Iterator[int]:
    """Run the body with :func:`choose`'s thread count; the previous count is restored on exit."""
    k = choose(work, threads, batch=batch)
    import torch

    previous = torch.get_num_threads()
    if k != previous:
        torch.set_num_threads(k)
    try:
        yield k
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
