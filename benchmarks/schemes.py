"""Normalization schemes and the noisy SDE against the plain sphere model (issue 11), ratios in one run.

* Per step of RK4 (four field evaluations): each scheme of SPEC §8.5 against Post-LN (the plain
  ``geometry="sphere"`` model) at (n, d) = (20, 2) dense and (4096, 64) fused.
* One projected Euler-Maruyama step of ``attndyn.noise`` against one deterministic Euler step of the
  same model (USA on the sphere) at the same sizes (dense at n = 20, 1024 at d = 64: USA is dense only).
Usage: python benchmarks/schemes.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import median_time  # noqa: E402

import attndyn as ad  # noqa: E402
from attndyn import noise  # noqa: E402
from attndyn.dynamics import prepare, vector_field  # noqa: E402

SCHEMES = ["post", "pre", "mix", "peri", "ngpt", "sqrt"]


def start(n, d):
    x = torch.as_tensor(np.random.default_rng(0).standard_normal((n, d)))
    return x / x.norm(dim=-1, keepdim=True)


def scheme_ratios(n, d, kernel):
    x = start(n, d)
    W = ad.Weights.identity(d)
    times = {}
    for scheme in SCHEMES:
        args = prepare(ad.Model(W, beta=1.0, geometry="sphere", scheme=scheme, attention=kernel), x)
        times[scheme] = median_time(lambda args=args: vector_field(0.5, x, args), repeat=20 if n < 1000 else 5)
    return {s: times[s] / times["post"] for s in SCHEMES}, times["post"]


def sde_ratio(n, d):
    x = start(n, d)
    model = ad.Model(ad.Weights.identity(d), beta=1.0, geometry="sphere", normalization="unnormalized")
    steps = 50 if n < 1000 else 5
    dt = 0.01
    ts = [0.0, steps * dt]
    sde = median_time(lambda: noise.simulate_sde(model, x, ts, kappa=2.0, dt=dt, seed=0), repeat=5) / steps
    ode = median_time(lambda: ad.simulate(model, x, ts, solver=ad.Euler(), step=ad.FixedStep(dt)), repeat=5) / steps
    return sde / ode, ode


def main():
    for n, d, kernel in ((20, 2, "dense"), (4096, 64, "fused")):
        ratios, base = scheme_ratios(n, d, kernel)
        row = ", ".join(f"{s} {r:.2f}x" for s, r in ratios.items())
        print(f"n = {n}, d = {d}, {kernel}: field evaluation vs Post-LN ({base * 1e3:.3f} ms): {row}")
    for n, d in ((20, 2), (1024, 64)):
        r, base = sde_ratio(n, d)
        print(f"n = {n}, d = {d}: projected Euler-Maruyama step / Euler step ({base * 1e3:.3f} ms) = {r:.2f}x")


if __name__ == "__main__":
    main()
