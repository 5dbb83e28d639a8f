"""Where attention="auto" switches from the dense to the fused kernel, and what it costs.

For each (systems B, tokens n) one field evaluation is timed with the dense kernel, the fused one
and ``auto``, on one thread, in interleaved rounds (the median of each); ``auto / best`` is the
price of the rule (1 where it picks the faster kernel). Usage: python benchmarks/kernels.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import attndyn as ad
from attndyn.core.dynamics import prepare, resolve_kernel, vector_field

CASES = [(1, 128), (1, 256), (1, 512), (1, 1024), (1, 2048), (64, 32), (64, 64), (64, 128), (16, 256), (4, 512)]


def timer(model: ad.Model, x: torch.Tensor, reps: int):
    args = prepare(model, x)
    vector_field(0.0, x, args)

    def once() -> float:
        start = time.perf_counter()
        for _ in range(reps):
            vector_field(0.0, x, args)
        return (time.perf_counter() - start) / reps

    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three rounds instead of seven")
    parser.add_argument("--d", type=int, default=3)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    W = ad.Weights.identity(opts.d)
    print(f"{'B':>4} {'n':>5} {'dense ms':>9} {'fused ms':>9} {'auto':>6} {'auto/best':>9}")
    for B, n in CASES:
        x = torch.as_tensor(rng.normal(size=(B, n, opts.d)) / opts.d**0.5)
        reps = max(1, int(2e6 / (B * n * n)))
        kernels = {k: timer(ad.Model(W, attention=k), x, reps) for k in ("dense", "fused", "auto")}
        rounds = {k: [] for k in kernels}
        for _ in range(3 if opts.quick else 7):
            for k, once in kernels.items():
                rounds[k].append(once())
        med = {k: float(np.median(v)) for k, v in rounds.items()}
        picked = resolve_kernel(ad.Model(W), B, n)
        print(
            f"{B:>4} {n:>5} {med['dense'] * 1e3:>9.3f} {med['fused'] * 1e3:>9.3f} {picked:>6} {med['auto'] / min(med['dense'], med['fused']):>9.2f}"
        )


if __name__ == "__main__":
    main()
