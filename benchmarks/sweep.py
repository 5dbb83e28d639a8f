"""Sweep benchmarks (issue 10), ratios measured in one run.

* Throughput: the phase-diagram sweep (n = 32, d = 128, Q = K = V = I on the sphere, t <= T) scaled
  to this machine, in grid points per second: attndyn's batched sweep task (seeds in one tensor)
  against a plain loop of ``simulate`` over the systems, and against ``torchdiffeq.odeint`` on the
  same batch and vector field (RK4 at the same step: equal accuracy; and Dopri5 at the same rtol
  and atol as attndyn's Dopri5). torchdiffeq is a benchmark-only dependency (``pip install
  torchdiffeq --no-deps``); without it those rows are skipped.
* Scaling: the same sweep on a Dask LocalCluster with 1 and 2 single-threaded workers.
* Ledger overhead: a sweep of 10,000 tiny grid points (100 betas x 100 seeds, n = 2, d = 2); the
  overhead is the driver's time outside ``run_task`` (parsing, SQLite, blobs) over the total.
Usage: python benchmarks/sweep.py [--quick]
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import attndyn as ad
from attndyn import sweep
from attndyn.dynamics import prepare, vector_field


def spec(betas, systems, d, T, dt, n=32) -> dict:
    base = {
        "seed": 0,
        "n": n,
        "d": d,
        "init": {"kind": "sphere"},
        "model": {"beta": 1.0, "geometry": "sphere"},
        "solver": {"method": "rk4", "dt": dt, "t1": T, "save_every": 1.0},
    }
    return {"base": base, "grid": {"model.beta": list(betas), "seed": list(range(systems))}, "measures": ["pair_fraction"]}


def throughput(quick: bool) -> dict:
    betas = np.linspace(1, 8, 4 if quick else 8).tolist()
    systems, d, T, dt = (32, 128, 5.0, 0.1) if quick else (64, 128, 10.0, 0.1)
    s = sweep.parse(spec(betas, systems, d, T, dt))
    points = len(s.points)
    out = {"points": points}
    t = time.perf_counter()
    for task in s.tasks:
        sweep.run_task([s.points[p].config for p in task], s.measures, s.options)
    out["attndyn_batched"] = points / (time.perf_counter() - t)

    # a per-system loop over simulate, and the same systems as one batch (one beta's systems)
    from attndyn.config import build, parse_config

    task = s.tasks[0]
    setups = [build(parse_config(s.points[p].config)) for p in task]
    t = time.perf_counter()
    for st in setups:
        ad.simulate(st.model, st.x0, st.ts, solver=st.solver, step=st.step)
    out["per_system_loop"] = len(task) / (time.perf_counter() - t)
    first = setups[0]
    x0 = torch.stack([st.x0 for st in setups])
    t = time.perf_counter()
    ad.simulate(first.model, x0, first.ts, solver=ad.RK4(), step=ad.FixedStep(dt))
    out["attndyn_rk4_batch"] = len(task) / (time.perf_counter() - t)
    t = time.perf_counter()
    ad.simulate(first.model, x0, first.ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-6, atol=1e-8))
    out["attndyn_dopri5_batch"] = len(task) / (time.perf_counter() - t)

    try:
        import torchdiffeq
    except ImportError:
        return out
    args = prepare(first.model, x0)

    def f(t, x):
        return vector_field(float(t), x, args)

    ts = torch.as_tensor(first.ts)
    t = time.perf_counter()
    torchdiffeq.odeint(f, x0, ts, method="rk4", options={"step_size": dt})
    out["torchdiffeq_rk4_batch"] = len(task) / (time.perf_counter() - t)
    t = time.perf_counter()
    torchdiffeq.odeint(f, x0, ts, method="dopri5", rtol=1e-6, atol=1e-8)
    out["torchdiffeq_dopri5_batch"] = len(task) / (time.perf_counter() - t)
    return out


def scaling(quick: bool) -> dict:
    """Seconds of the same sweep on 1 and 2 single-threaded workers of an already running LocalCluster."""
    from distributed import LocalCluster

    betas = np.linspace(1, 8, 4 if quick else 8).tolist()
    data = spec(betas, 16, 64, 5.0 if quick else 10.0, 0.1)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.toml"
        path.write_text(_toml(data))
        for workers in (1, 2):
            with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None, env={"OMP_NUM_THREADS": "1"}) as cluster:
                t = time.perf_counter()
                sweep.run(path, Path(tmp) / f"w{workers}", scheduler=cluster.scheduler_address)
                out[workers] = time.perf_counter() - t
    return out


def _toml(data: dict) -> str:
    base = data["base"]
    lines = [f"measures = {data['measures']!r}".replace("'", '"'), "[base]", f"seed = {base['seed']}", f"n = {base['n']}", f"d = {base['d']}"]
    lines += ["[base.init]", 'kind = "sphere"', "[base.model]", "beta = 1.0", 'geometry = "sphere"']
    s = base["solver"]
    lines += ["[base.solver]", f'method = "{s["method"]}"', f"dt = {s['dt']}", f"t1 = {s['t1']}", f"save_every = {s['save_every']}"]
    lines += ["[grid]", f'"model.beta" = {data["grid"]["model.beta"]}', f"seed = {data['grid']['seed']}"]
    return "\n".join(lines) + "\n"


def ledger_overhead() -> dict:
    data = spec(np.linspace(0.5, 5, 100).round(6).tolist(), 100, 2, 0.2, 0.1, n=2)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.toml"
        path.write_text(_toml(data))
        compute = 0.0
        original = sweep.run_task

        def timed(*a, **k):
            nonlocal compute
            t = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                compute += time.perf_counter() - t

        sweep.run_task = timed
        try:
            t = time.perf_counter()
            summary = sweep.run(path, Path(tmp) / "out", workers=0)
            total = time.perf_counter() - t
        finally:
            sweep.run_task = original
    return {"points": 10_000, "tasks": summary.total, "total": total, "compute": compute, "overhead": (total - compute) / total}


def main():
    quick = "--quick" in sys.argv
    tp = throughput(quick)
    print(f"phase-diagram sweep, n = 32, d = 128 ({tp['points']} grid points), systems per second:")
    for key in (
        "attndyn_batched",
        "per_system_loop",
        "attndyn_rk4_batch",
        "torchdiffeq_rk4_batch",
        "attndyn_dopri5_batch",
        "torchdiffeq_dopri5_batch",
    ):
        if key in tp:
            print(f"  {key:26s} {tp[key]:8.2f}")
    print(f"  whole sweep (build, batched RK4, measures) / per-system loop of simulate: {tp['attndyn_batched'] / tp['per_system_loop']:.1f}x")
    print(f"  batched RK4 / per-system loop: {tp['attndyn_rk4_batch'] / tp['per_system_loop']:.1f}x")
    if "torchdiffeq_rk4_batch" in tp:
        print(f"  attndyn / torchdiffeq, same batch and field: RK4 {tp['attndyn_rk4_batch'] / tp['torchdiffeq_rk4_batch']:.2f}x, ", end="")
        print(f"Dopri5 at equal tolerances {tp['attndyn_dopri5_batch'] / tp['torchdiffeq_dopri5_batch']:.2f}x")
    sc = scaling(quick)
    print(f"Dask LocalCluster (started beforehand): 1 worker {sc[1]:.1f} s, 2 workers {sc[2]:.1f} s: speed-up {sc[1] / sc[2]:.2f}x")
    lo = ledger_overhead()
    share = 100 * lo["overhead"]
    print(f"ledger: {lo['points']} points, {lo['tasks']} tasks: {lo['total']:.1f} s total, {lo['compute']:.1f} s in tasks, overhead {share:.1f} %")
    assert math.isfinite(lo["overhead"])


if __name__ == "__main__":
    main()
