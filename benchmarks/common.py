"""Helpers shared by the benchmark scripts: machine bounds, timing, memory."""

from __future__ import annotations

import statistics
import time

import torch


def median_time(fn, *, repeat: int = 5, min_time: float = 0.0) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if min_time and sum(times) > min_time and len(times) >= 3:
            break
    return statistics.median(times)


def gemm_rate(dtype=torch.float64, size: int = 1024) -> float:
    """Machine GEMM rate in FLOP/s (median of a square matmul)."""
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    return 2 * size**3 / median_time(lambda: a @ b, repeat=7)


def exp_rate(dtype=torch.float64, size: int = 1 << 23) -> float:
    """Machine exp rate in evaluations/s (median of torch.exp on a large vector, out= preallocated)."""
    x = torch.rand(size, dtype=dtype)
    out = torch.empty_like(x)
    return size / median_time(lambda: torch.exp(x, out=out), repeat=7)


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
