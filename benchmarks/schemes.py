"""Normalization schemes and the noisy SDE against the plain sphere model (issue 11), ratios in one run.

* Per RK4 step of ``simulate``: each scheme of SPEC §8.5 against Post-LN (the plain
  ``geometry="sphere"`` model) at (n, d) = (20, 2) dense and (4096, 64) fused. ``simulate``
  integrates the schemes of one common speed (sqrt-scaling, Mix-LN before its switch) as Post-LN
  at speed c(t) (``attndyn.core.dynamics.unit_sphere_field``); the others through the split.
* One projected Euler-Maruyama step of ``attndyn.core.noise`` against one deterministic Euler step of the
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
from attndyn.core import noise
from attndyn.core.dynamics import prepare, vector_field
from attndyn.core.solvers import rk_step

SCHEMES = ["post", "pre", "mix", "peri", "ngpt", "sqrt"]


def start(n, d):
    x = torch.as_tensor(np.random.default_rng(0).standard_normal((n, d)))
    return x / x.norm(dim=-1, keepdim=True)


def scheme_ratios(n, d, kernel):
    """Per RK4 step of ``simulate`` (fixed dt): the median over rounds of each scheme's time per step
    / Post-LN's in the same round.

    A step's time is (time of a run of N2 steps - time of a run of N1 steps) / (N2 - N1), so the
    per-call set-up (validation, ``prepare``) cancels. dt is small enough that Mix-LN (switch at
    t = 1) stays before its switch, its costlier phase. The schemes are timed in turn within each
    round (interleaved), so a drift of this shared machine's speed during the run affects
    numerator and denominator alike.
    """
    x = start(n, d)
    W = ad.Weights.identity(d)
    small = n < 1000
    dt = 1e-3
    n1, n2 = (50, 250) if small else (1, 4)
    rk4, step = ad.RK4(), ad.FixedStep(dt)
    models = {s: ad.Model(W, beta=1.0, geometry="sphere", scheme=s, attention=kernel) for s in SCHEMES}

    def run(model, steps):
        start = time.perf_counter()
        ad.simulate(model, x, [0.0, steps * dt], solver=rk4, step=step)
        return time.perf_counter() - start

    for model in models.values():
        run(model, n1)  # warm-up
    ratios = {s: [] for s in SCHEMES}
    posts = []
    for _ in range(21 if small else 7):
        per_step = {s: (run(m, n2) - run(m, n1)) / (n2 - n1) for s, m in models.items()}
        posts.append(per_step["post"])
        for s in SCHEMES:
            ratios[s].append(per_step[s] / per_step["post"])
    return {s: float(np.median(v)) for s, v in ratios.items()}, float(np.median(posts))


def field_ratios(n, d, kernel):
    """The split field itself (``vector_field``, every scheme through the radius/direction split) per
    RK4 step (four evaluations and the stage sums): the median over rounds of each scheme's time /
    Post-LN's time in the same round.

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
        print(f"n = {n}, d = {d}, {kernel}: simulate's RK4 step vs Post-LN ({base * 1e3:.3f} ms): {row}")
        if n < 1000:
            ratios, base = field_ratios(n, d, kernel)
            row = ", ".join(f"{s} {r:.2f}x" for s, r in ratios.items())
            print(f"n = {n}, d = {d}, {kernel}: the split field's RK4 step (vector_field) vs Post-LN ({base * 1e3:.3f} ms): {row}")
    for n, d in ((20, 2), (1024, 64)):
        r, base = sde_ratio(n, d)
        print(f"n = {n}, d = {d}: projected Euler-Maruyama step / Euler step ({base * 1e3:.3f} ms) = {r:.2f}x")


if __name__ == "__main__":
    main()
