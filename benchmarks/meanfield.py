"""Mean-field and long-context benchmarks (issue 13), ratios measured in one run.

* Step time of the pseudo-spectral solver at M = 4096 (SA, beta = 4): one Dopri5 step (6 field
  evaluations) and one RK4 step (4), against the machine's FFT bound measured here (the field
  costs two real FFTs and one batched pair of inverse FFTs: 4 transforms of 4096 points).
* Crossover: time per unit of simulated time, mean field against particles of equal W1 accuracy.
  Particles' W1 error is C / sqrt(n) with C measured here (RMS over systems, beta = 1, T = 1); the
  mean field on the coarsest grid that resolves beta = 1 is accurate to < 1e-6 in W1. For each
  accuracy eps the particle run needs n = (C / eps)^2; the crossover n is where the particle run's
  cost per unit time equals the mean field's.
* The zonal solver on S^2 at degree L = 256 (SA, beta = 4, two caps): one Dopri5 step and one RK4
  step, against the bound of its field (the four matrix-vector products of about 1.5 L x L measured
  alone).
* Long context: one layer of the long-context claim at n = 4096, d = 4097 (Q = K = V = I) through
  fused and dense attention, each in its own subprocess; peak extra resident memory beyond the
  inputs, the weights and the prepared model (VmHWM reset before the call).
Usage: python benchmarks/meanfield.py [--quick]
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import median_time  # noqa: E402

from attndyn.claims import circle
from attndyn.claims.mean_field_limit import Config, sample
from attndyn.theory import meanfield as mf
from attndyn.theory import meanfield_sphere as ms

CHILD = r"""
import json, math, sys, time
import attndyn as ad
from attndyn.claims.long_context import inputs
n, kernel = {n}, {kernel!r}
x = ad.core.weights.as_float_tensor(inputs(n, 0.4), "x")
model = ad.Model(ad.Weights.identity(n + 1), beta=2.0 * math.log(n), attention=kernel)
args = ad.core.dynamics.prepare(model, x)
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM to the current RSS
before = status("VmRSS:")
t = time.perf_counter()
y = ad.core.dynamics.vector_field(0.0, x, args)
seconds = time.perf_counter() - t
extra = status("VmHWM:") - before - y.numel() * y.element_size()
print(json.dumps({{"seconds": seconds, "extra_bytes": extra}}))
"""


def fft_bound(M: int) -> float:
    """The transforms of one field evaluation, timed alone with the field's own FFT routines (scipy.fft or
    torch.fft, as the field picks for this M): two forward transforms (of rho and of the flux), the
    inverse pair (velocity and normaliser) and the last inverse (the divergence)."""
    r = torch.rand(M, dtype=torch.float64)
    h = mf._rfft(r)
    h2 = torch.stack([h, h])
    forward = median_time(lambda: mf._rfft(r), repeat=200)
    inverse2 = median_time(lambda: mf._irfft(h2, M), repeat=200)
    inverse = median_time(lambda: mf._irfft(h, M), repeat=200)
    return 2 * forward + inverse2 + inverse


def step_times(M: int) -> dict:
    rho0 = mf.initial_density("von-mises", M, means=[0.0, 2.5], kappas=[2.0, 1.0], weights=[0.6, 0.4])
    out = {}
    sol = mf.solve_circle(rho0, [0.0, 0.5], beta=4.0)
    out["dopri5_step_ms"] = median_time(lambda: mf.solve_circle(rho0, [0.0, 0.5], beta=4.0), repeat=5) / sol.steps * 1e3
    out["rk4_step_ms"] = median_time(lambda: mf.solve_circle(rho0, [0.0, 0.5], beta=4.0, dt=0.002), repeat=5) / 250 * 1e3
    out["fft_bound_per_evaluation_ms"] = fft_bound(M) * 1e3
    return out


def sphere_step_times(L: int = 256) -> dict:
    a0 = ms.zonal_density("caps", L, kappas=[3.0, 1.5], poles=[1, -1], weights=[0.6, 0.4])
    sol = ms.solve_sphere(a0, [0.0, 0.5], beta=4.0)
    out = {"L": L, "dopri5_steps": sol.steps}
    out["dopri5_step_ms"] = median_time(lambda: ms.solve_sphere(a0, [0.0, 0.5], beta=4.0), repeat=5) / sol.steps * 1e3
    out["rk4_step_ms"] = median_time(lambda: ms.solve_sphere(a0, [0.0, 0.5], beta=4.0, dt=0.005), repeat=5) / 100 * 1e3
    u, _ = ms.nodes(L)
    P = torch.rand(u.size, L + 1, dtype=torch.float64)
    Pt = P.T.contiguous()
    a = torch.rand(L + 1, dtype=torch.float64)
    r = torch.rand(u.size, dtype=torch.float64)
    out["matvec_bound_per_evaluation_ms"] = (3 * median_time(lambda: P @ a, repeat=500) + median_time(lambda: Pt @ r, repeat=500)) * 1e3
    return out


def crossover(quick: bool) -> dict:
    cfg = Config(seed=0)
    beta, T, dt = 1.0, 1.0, 0.05
    rng = np.random.default_rng(0)
    M_ref = 2048
    rho_ref = mf.initial_density("von-mises", M_ref, means=cfg.means, kappas=cfg.kappas, weights=cfg.weights)
    ref = mf.solve_circle(rho_ref, [0.0, T], beta=beta, rtol=1e-12, atol=1e-14).rho[-1]
    # particle error constant: RMS W1 * sqrt(n) at n = 256 over 32 systems
    n0, S = 256, 32
    _, theta = circle.run(sample(rng, cfg, (S, n0)), beta, T, dt=dt, saves=2)
    C = float(np.sqrt((mf.w1_circle(theta[-1], ref) ** 2).mean()) * math.sqrt(n0))
    # mean field: the coarsest grid that resolves beta = 1 (M = 64), Dopri5 at rtol 1e-10
    M = 64
    rho0 = mf.initial_density("von-mises", M, means=cfg.means, kappas=cfg.kappas, weights=cfg.weights)
    mf_cost = median_time(lambda: mf.solve_circle(rho0, [0.0, T], beta=beta), repeat=5) / T
    sol = mf.solve_circle(rho0, [0.0, T], beta=beta).rho[-1]
    # its W1 distance to the reference: compare CDFs on a common fine grid
    grid = np.linspace(0, 2 * math.pi, 20001)
    D = mf.cdf_circle(sol, grid) - mf.cdf_circle(ref, grid)
    mf_w1 = float(np.abs(D - np.median(D)).mean() * 2 * math.pi)
    # particle cost per unit time measured at every candidate n (not extrapolated from large n: small
    # runs are overhead-bound); the crossover interpolates log cost between the two bracketing sizes
    ns = [8, 16, 32, 64, 128, 256, 512] if quick else [8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    cost = {}
    for n in ns:
        th = sample(rng, cfg, (1, n))
        cost[n] = median_time(lambda th=th: circle.run(th, beta, T, dt=dt, saves=2), repeat=5) / T
    n_cross = math.nan
    for a, b in zip(ns, ns[1:], strict=False):
        if cost[a] <= mf_cost <= cost[b]:
            w = math.log(mf_cost / cost[a]) / math.log(cost[b] / cost[a]) if cost[b] > cost[a] else 0.0
            n_cross = a * (b / a) ** w
            break
    if math.isnan(n_cross) and mf_cost < cost[ns[0]]:
        n_cross = float(ns[0])  # cheaper than the smallest particle run measured
    return {
        "particle_C": C,
        "particle_seconds_per_unit_time": {str(n): cost[n] for n in ns},
        "meanfield_M": M,
        "meanfield_seconds_per_unit_time": mf_cost,
        "meanfield_w1_error": mf_w1,
        "crossover_n": n_cross,
        "particle_w1_at_crossover": C / math.sqrt(n_cross),
        "particles_needed_for_meanfield_accuracy": (C / max(mf_w1, 1e-12)) ** 2,
    }


def long_context(kernel: str, n: int = 4096) -> dict:
    code = CHILD.format(n=n, kernel=kernel)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    quick = "--quick" in sys.argv
    steps = step_times(4096)
    print(f"mean field, M = 4096, SA beta = 4: Dopri5 step {steps['dopri5_step_ms']:.3f} ms, RK4 step {steps['rk4_step_ms']:.3f} ms")
    ratio = steps["rk4_step_ms"] / (4 * steps["fft_bound_per_evaluation_ms"])
    print(f"  FFT bound per field evaluation {steps['fft_bound_per_evaluation_ms']:.3f} ms; RK4 step / (4 x bound) = {ratio:.2f}")
    sp = sphere_step_times(256)
    print(
        f"zonal solver on S^2, L = {sp['L']}, SA beta = 4: Dopri5 step {sp['dopri5_step_ms']:.3f} ms ({sp['dopri5_steps']} steps to t = 0.5), "
        f"RK4 step {sp['rk4_step_ms']:.3f} ms"
    )
    print(
        f"  matrix-vector bound per field evaluation {sp['matvec_bound_per_evaluation_ms']:.4f} ms; "
        f"RK4 step / (4 x bound) = {sp['rk4_step_ms'] / (4 * sp['matvec_bound_per_evaluation_ms']):.1f}"
    )
    c = crossover(quick)
    print(f"crossover (beta = 1, T = 1): particles W1 ~ {c['particle_C']:.3f} / sqrt(n)")
    for n, s in c["particle_seconds_per_unit_time"].items():
        print(f"  particles n = {n}: {s:.3f} s per unit time (W1 ~ {c['particle_C'] / math.sqrt(int(n)):.2e})")
    per_unit = c["meanfield_seconds_per_unit_time"] * 1e3
    print(f"  mean field M = {c['meanfield_M']}: {per_unit:.2f} ms per unit time, W1 error {c['meanfield_w1_error']:.1e}")
    print(f"  crossover n = {c['crossover_n']:.0f} (particle W1 there ~ {c['particle_w1_at_crossover']:.2f});")
    print(f"  particles would need n ~ {c['particles_needed_for_meanfield_accuracy']:.1e} to match the mean field's accuracy")
    for kernel in ("fused", "dense"):
        r = long_context(kernel)
        print(f"long context n = 4096, d = 4097, {kernel}: {r['seconds']:.2f} s, peak extra {r['extra_bytes'] / 2**20:.0f} MiB beyond the inputs")


if __name__ == "__main__":
    main()
