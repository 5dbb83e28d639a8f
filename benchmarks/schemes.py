"""Normalization schemes and the noisy SDE against the plain sphere model (issue 11), ratios in one run.

* Per step of RK4 (four field evaluations): each scheme of SPEC §8.5 against Post-LN (the plain
  ``geometry="sphere"`` model) at (n, d) = (20, 2) dense and (4096, 64) fused.
* One projected Euler-Maruyama step of ``attndyn.noise`` against one deterministic Euler step of the
  same model (USA on the sphere) at the same sizes (dense at n = 20, 1024 at d = 64: USA is dense only).
Usage: python benchmarks/schemes.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import median_time  # noqa: E402

import attndyn as ad  # noqa: E402
from attndyn import noise  # noqa: E402
from attndyn.dynamics import prepare, vector_field  # noqa: E402
from attndyn.solvers import rk_step  # noqa: E402

SCHEMES = ["post", "pre", "mix", "peri", "ngpt", "sqrt"]


def start(n, d):
    x = torch.as_tensor(np.random.default_rng(0).standard_normal((n, d)))
    return x / x.norm(dim=-1, keepdim=True)


def scheme_ratios(n, d, kernel):
    """Per RK4 step (four field evaluations and the stage sums): the median over rounds of each
    scheme's time / Post-LN's time in the same round.

    The schemes are timed in turn within each round (interleaved), so a drift of this shared
    machine's speed during the run affects numerator and denominator alike.
    """
    x = start(n, d)
    W = ad.Weights.identity(d)
    fields = {}
    rk4 = ad.RK4()
    for scheme in SCHEMES:
        args = prepare(ad.Model(W, beta=1.0, geometry="sphere", scheme=scheme, attention=kernel), x)
        fields[scheme] = lambda args=args: rk_step(lambda t, y, args=args: vector_field(t, y, args), 0.5, x, 0.01, rk4)
    rounds, inner = (31, 200) if n < 1000 else (9, 1)
    for f in fields.values():
        f()  # warm-up
    ratios = {s: [] for s in SCHEMES}
    posts = []
    for _ in range(rounds):
        t = {s: _loop_time(f, inner) for s, f in fields.items()}
        posts.append(t["post"])
        for s in SCHEMES:
            ratios[s].append(t[s] / t["post"])
    return {s: float(np.median(v)) for s, v in ratios.items()}, float(np.median(posts))


def _loop_time(f, inner):
    """Seconds per call of ``f`` over ``inner`` calls in a row."""
    start = time.perf_counter()
    for _ in range(inner):
        f()
    return (time.perf_counter() - start) / inner


def sde_ratio(n, d):
    """One projected Euler-Maruyama step over one Euler step of the same model, timed in turn
    (interleaved rounds, median of the per-round ratios)."""
    x = start(n, d)
    model = ad.Model(ad.Weights.identity(d), beta=1.0, geometry="sphere", normalization="unnormalized")
    steps = 50 if n < 1000 else 5
    dt = 0.01
    ts = [0.0, steps * dt]
    ratios, odes = [], []
    for _ in range(9):
        sde = median_time(lambda: noise.simulate_sde(model, x, ts, kappa=2.0, dt=dt, seed=0), repeat=1) / steps
        ode = median_time(lambda: ad.simulate(model, x, ts, solver=ad.Euler(), step=ad.FixedStep(dt)), repeat=1) / steps
        ratios.append(sde / ode)
        odes.append(ode)
    return float(np.median(ratios)), float(np.median(odes))


def main():
    for n, d, kernel in ((20, 2, "dense"), (4096, 64, "fused")):
        ratios, base = scheme_ratios(n, d, kernel)
        row = ", ".join(f"{s} {r:.2f}x" for s, r in ratios.items())
        print(f"n = {n}, d = {d}, {kernel}: RK4 step vs Post-LN ({base * 1e3:.3f} ms): {row}")
    for n, d in ((20, 2), (1024, 64)):
        r, base = sde_ratio(n, d)
        print(f"n = {n}, d = {d}: projected Euler-Maruyama step / Euler step ({base * 1e3:.3f} ms) = {r:.2f}x")


if __name__ == "__main__":
    main()
