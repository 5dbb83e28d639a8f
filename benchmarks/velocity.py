"""Velocity time as a fraction of the machine's bound, dense vs fused, with peak extra memory.

bound = max(flops / GEMM rate, n^2 / exp rate), flops = 4 n^2 d + 6 n d^2 (DESIGN §6). GEMM and
exp rates are measured in the same run. Each (n, d, kernel) runs in its own subprocess so that
its peak resident memory (VmHWM) minus the resident memory before the call is its extra memory.
Usage: python benchmarks/velocity.py [--quick]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CASES = [(128, 128), (1024, 64), (4096, 64), (32768, 16), (100_000, 16)]
# Dense attention materialises n x n float64 scores and weights: skip where that exceeds RAM.
DENSE_MAX_N = 8192

CHILD = r"""
import json, sys, torch
sys.path.insert(0, {here!r})
from common import median_time, rss_bytes, peak_rss_bytes
import attndyn as ad
n, d, kernel = {n}, {d}, {kernel!r}
g = torch.Generator().manual_seed(0)
x = torch.randn(n, d, generator=g, dtype=torch.float64) / d ** 0.5
W = ad.Weights(torch.eye(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64))
model = ad.Model(W, attention=kernel)
model.cast(x)
before = rss_bytes()
t = median_time(lambda: ad.velocity(0.0, x, model), repeat=5 if n <= 8192 else 1)
extra = peak_rss_bytes() - before
print(json.dumps({{"seconds": t, "extra_bytes": extra}}))
"""


def run_case(n, d, kernel):
    code = CHILD.format(here=str(Path(__file__).parent), n=n, d=d, kernel=kernel)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    sys.path.insert(0, str(Path(__file__).parent))
    from common import exp_rate, gemm_rate

    quick = "--quick" in sys.argv
    gemm, expr = gemm_rate(), exp_rate()
    print(f"machine: GEMM {gemm / 1e9:.2f} GFLOP/s (float64), exp {expr / 1e9:.3f} G/s (float64)")
    print(f"{'n':>7} {'d':>4} {'kernel':>6} {'time [s]':>10} {'bound [s]':>10} {'% of bound':>10} {'extra MB':>9}")
    for n, d in CASES:
        if quick and n > 4096:
            continue
        flops = 4 * n * n * d + 6 * n * d * d
        bound = max(flops / gemm, n * n / expr)
        for kernel in ("dense", "fused"):
            if kernel == "dense" and n > DENSE_MAX_N:
                print(f"{n:>7} {d:>4} {kernel:>6} {f'skipped: n x n scores need {2 * 8 * n * n / 1e9:.0f} GB':>43}")
                continue
            r = run_case(n, d, kernel)
            share = 100 * bound / r["seconds"]
            extra_mb = r["extra_bytes"] / 2**20
            print(f"{n:>7} {d:>4} {kernel:>6} {r['seconds']:>10.4f} {bound:>10.4f} {share:>9.1f}% {extra_mb:>9.1f}")


if __name__ == "__main__":
    main()
