"""Helpers shared by the benchmark scripts: machine bounds, timing, memory."""

from __future__ import annotations

import statistics
import time

import torch


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def median_time(fn, *, repeat: int = 5, min_time: float = 0.0, device: str = "cpu") -> float:
    """Median wall time of ``fn()`` (after one warm-up call); waits for the device on CUDA."""
    fn()  # warm up
    _sync(device)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t)
        if min_time and sum(times) > min_time and len(times) >= 3:
            break
    return statistics.median(times)


def gemm_rate(dtype=torch.float64, size: int = 1024, device: str = "cpu") -> float:
    """Machine GEMM rate in FLOP/s (median of a square matmul)."""
    size = size if device == "cpu" else 4 * size
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    return 2 * size**3 / median_time(lambda: a @ b, repeat=7, device=device)


def exp_rate(dtype=torch.float64, size: int = 1 << 23, device: str = "cpu") -> float:
    """Machine exp rate in evaluations/s (median of torch.exp on a large vector, out= preallocated)."""
    size = size if device == "cpu" else 16 * size
    x = torch.rand(size, dtype=dtype, device=device)
    out = torch.empty_like(x)
    return size / median_time(lambda: torch.exp(x, out=out), repeat=7, device=device)


def rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def interleaved(runs: dict, *, rounds: int = 7) -> dict[str, tuple[float, float]]:
    """Median (CPU seconds, wall seconds) of each candidate ``runs[name]()``: one warm-up call each,
    then ``rounds`` rounds that call every candidate once in turn (so drift in the machine's load
    falls on all of them alike)."""
    for f in runs.values():
        f()
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    wall: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for k, f in runs.items():
            w0, c0 = time.perf_counter(), time.process_time()
            f()
            wall[k].append(time.perf_counter() - w0)
            cpu[k].append(time.process_time() - c0)
    return {k: (statistics.median(cpu[k]), statistics.median(wall[k])) for k in runs}
