"""Velocity time as a fraction of the machine's bound, dense vs fused, with peak extra memory.

bound = max(flops / GEMM rate, n^2 / exp rate), flops = 4 n^2 d + 6 n d^2 (DESIGN §6). GEMM and
exp rates are measured in the same run. Each (n, d, kernel) runs in its own subprocess so that
its peak resident memory (VmHWM) minus the resident memory before the call is its extra memory.
On ``--device cuda`` the rates are measured on the GPU and the extra memory is the CUDA peak
allocation (torch.cuda.max_memory_allocated) beyond the inputs.
Usage: python benchmarks/velocity.py [--quick] [--device cpu|cuda] [--dtype float64|float32]
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
from attndyn.core.dynamics import prepare, vector_field
n, d, kernel, device, dtype = {n}, {d}, {kernel!r}, {device!r}, getattr(torch, {dtype!r})
g = torch.Generator().manual_seed(0)
x = (torch.randn(n, d, generator=g, dtype=torch.float64) / d ** 0.5).to(device=device, dtype=dtype)
W = ad.Weights.identity(d)
model = ad.Model(W, attention=kernel)
args = prepare(model, x)  # what simulate does once per run
if device == "cpu":
    before = rss_bytes()
else:
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); before = torch.cuda.memory_allocated()
t = median_time(lambda: vector_field(0.0, x, args), repeat=5 if n <= 8192 or device != "cpu" else 1, device=device)
extra = (peak_rss_bytes() if device == "cpu" else torch.cuda.max_memory_allocated()) - before
print(json.dumps({{"seconds": t, "extra_bytes": extra}}))
"""


def run_case(n, d, kernel, device="cpu", dtype="float64"):
    code = CHILD.format(here=str(Path(__file__).parent), n=n, d=d, kernel=kernel, device=device, dtype=dtype)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    sys.path.insert(0, str(Path(__file__).parent))
    import argparse

    import torch
    from common import exp_rate, gemm_rate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at n = 4096")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    opts = parser.parse_args()
    quick, device, dtype = opts.quick, opts.device, opts.dtype
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(f"--device {device}: no CUDA device is available here; nothing to measure.")
        return
    tdtype = getattr(torch, dtype)
    gemm, expr = gemm_rate(tdtype, device=device), exp_rate(tdtype, device=device)
    print(f"machine ({device}): GEMM {gemm / 1e9:.2f} GFLOP/s ({dtype}), exp {expr / 1e9:.3f} G/s ({dtype})")
    print(f"{'n':>7} {'d':>4} {'kernel':>6} {'time [s]':>10} {'bound [s]':>10} {'% of bound':>10} {'extra MB':>9}")
    for n, d in CASES:
        if quick and n > 4096:
            continue
        flops = 4 * n * n * d + 6 * n * d * d
        bound = max(flops / gemm, n * n / expr)
        for kernel in ("dense", "fused"):
            if kernel == "dense" and n > DENSE_MAX_N and device == "cpu":
                print(f"{n:>7} {d:>4} {kernel:>6} {f'skipped: n x n scores need {2 * 8 * n * n / 1e9:.0f} GB':>43}")
                continue
            r = run_case(n, d, kernel, device, dtype)
            share = 100 * bound / r["seconds"]
            extra_mb = r["extra_bytes"] / 2**20
            print(f"{n:>7} {d:>4} {kernel:>6} {r['seconds']:>10.4f} {bound:>10.4f} {share:>9.1f}% {extra_mb:>9.1f}")


if __name__ == "__main__":
    main()
