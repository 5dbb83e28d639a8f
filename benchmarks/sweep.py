"""Sweep benchmarks (issue 10), ratios measured in one run.

* Throughput: the phase-diagram sweep (n = 32, d = 128, Q = K = V = I on the sphere, t <= T) scaled
  to this machine, in grid points per second: attndyn's batched sweep task (seeds in one tensor)
  against a plain loop of ``simulate`` over the systems, and against ``torchdiffeq.odeint`` on the
  same batch and vector field (RK4 at the same step: equal accuracy; and Dopri5 at the same rtol
  and atol as attndyn's Dopri5). torchdiffeq is a benchmark-only dependency (``pip install
  torchdiffeq --no-deps``); without it those rows are skipped.
  The sweep task integrates in the span of x0 (n of the d dimensions, exact for Q = K = V = I):
  the batch and the loop are also timed with ``span=True``, so both effects show separately.
* Scaling: the same sweep on a Dask LocalCluster with 1 and 2 single-threaded workers.
* Ledger overhead: sweeps of 10,000 grid points (100 betas x 100 seeds), in process: the time in
  the ledger (SQLite, result blobs) over the total, and separately the rest of the driver's time
  outside ``run_task`` (parsing the points, scheduling). Two point sizes: the worst case (n = 2,
  d = 2, two RK4 steps: about 0.1 ms of work a point) and phase-diagram points (n = 32, d = 8, t <= 5).
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
from attndyn.app import sweep_driver
from attndyn.core.dynamics import prepare, vector_field

sys.path.insert(0, str(Path(__file__).parent))
from common import gemm_rate  # noqa: E402


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
    """The issue's size scaled to this machine (256 systems a beta, n = 32, d = 128, t <= 30; 8
    betas, not 30), or ``quick``: 32 systems a beta, 4 betas, t <= 5 (smaller batches: less to gain)."""
    betas = np.linspace(1, 8, 4 if quick else 8).tolist()
    systems, d, T, dt = (32, 128, 5.0, 0.1) if quick else (256, 128, 30.0, 0.1)
    s = sweep.parse(spec(betas, systems, d, T, dt))
    points = len(s.points)
    out = {"points": points, "systems": systems, "steps": round(T / dt)}
    sweep.run_task([s.points[p].config for p in s.tasks[0]], s.measures, s.options)  # warm-up (imports, first calls)
    t = time.perf_counter()
    for task in s.tasks:
        sweep.run_task([s.points[p].config for p in task], s.measures, s.options)
    out["attndyn_batched"] = points / (time.perf_counter() - t)

    # one beta's systems: a per-system loop over simulate, the batch through attndyn, the batch
    # through torchdiffeq; every candidate timed once per round, rounds interleaved, medians
    from attndyn.workflow.schema import parse_config
    from attndyn.workflow.setup import build

    task = s.tasks[-1]  # the largest beta: the stiffest systems
    setups = [build(parse_config(s.points[p].config)) for p in task]
    first = setups[0]
    x0 = torch.stack([st.x0 for st in setups])
    ts = first.ts
    reference = ad.simulate(first.model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-12, atol=1e-14)).xs[-1]

    def error(final) -> float:
        return float((final - reference).abs().max())

    configs = [s.points[p].config for p in task]
    # the per-system loops run over the first 32 systems (their cost is linear in the systems) and
    # are reported per system like the rest
    looped = setups[:32]
    loop_share = len(looped) / len(setups)
    candidates = {
        "per_system_loop": lambda: torch.stack([ad.simulate(st.model, st.x0, ts, solver=st.solver, step=st.step).xs[-1] for st in looped]),
        # the sweep's own task on the same systems: configs built, integrated, measured
        "sweep_task": lambda: sweep.run_task(configs, s.measures, s.options) and None,
    }
    candidates["per_system_loop_span"] = lambda: torch.stack(
        [ad.simulate(st.model, st.x0, ts, solver=st.solver, step=st.step, span=True).xs[-1] for st in looped]
    )
    candidates["attndyn_rk4_dt0.1_span"] = lambda: ad.simulate(first.model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(dt), span=True).xs[-1]
    steps, rtols = (0.2, 0.1, 0.05), (1e-4, 1e-6, 1e-8, 1e-10)
    for h in steps:
        candidates[f"attndyn_rk4_dt{h:g}"] = lambda h=h: ad.simulate(first.model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(h)).xs[-1]
    for rtol in rtols:
        candidates[f"attndyn_dopri5_{rtol:g}"] = lambda rtol=rtol: ad.simulate(
            first.model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=rtol, atol=rtol * 1e-2)
        ).xs[-1]
    try:
        import torchdiffeq
    except ImportError:
        torchdiffeq = None
    if torchdiffeq is not None:
        args = prepare(first.model, x0)

        def f(t, x):
            return vector_field(float(t), x, args)

        def tdq(**kw):
            return torchdiffeq.odeint(f, x0, torch.as_tensor(ts), **kw)[-1]

        for h in steps:
            candidates[f"torchdiffeq_rk4_dt{h:g}"] = lambda h=h: tdq(method="rk4", options={"step_size": h})
        for rtol in rtols:
            candidates[f"torchdiffeq_dopri5_{rtol:g}"] = lambda rtol=rtol: tdq(method="dopri5", rtol=rtol, atol=rtol * 1e-2)
    times = {k: [] for k in candidates}
    errors = {}
    for _ in range(3):
        for name, run in candidates.items():
            start = time.perf_counter()
            final = run()
            times[name].append(time.perf_counter() - start)
            if final is not None and not name.startswith("per_system_loop"):
                errors[name] = error(final)
    for name in candidates:
        share = loop_share if name.startswith("per_system_loop") else 1.0
        out[name] = share * len(task) / float(np.median(times[name]))
    out["errors"] = errors
    # equal accuracy: at each error target, each library's cheapest configuration that meets it
    out["equal_accuracy"] = {}
    for target in (1e-5, 1e-7, 1e-9):
        best = {}
        # torchdiffeq_dopri5: its default method, the one the issue (and the replication scripts) use
        for lib in ("attndyn", "torchdiffeq", "torchdiffeq_dopri5"):
            ok = [k for k in candidates if k.startswith(lib) and errors[k] <= target]
            if ok:
                best[lib] = max(ok, key=lambda k: out[k])
        out["equal_accuracy"][target] = best
    return out


def scaling(quick: bool) -> dict:
    """The same sweep on 1 and 2 single-threaded workers of already running (and warmed-up)
    LocalClusters, timed in alternation over three rounds: the median of the per-round speed-ups,
    and the median seconds."""
    from distributed import LocalCluster

    # 16 tasks (betas): with only a few, one worker's extra task would dominate the two-worker time;
    # the throughput's batch size (256 systems a beta; 32 in the quick run), t <= 10
    betas = np.linspace(1, 8, 16).round(6).tolist()
    data = spec(betas, 32 if quick else 256, 128, 10.0, 0.1)
    seconds: dict[int, list[float]] = {1: [], 2: []}
    cluster_options = {"threads_per_worker": 1, "dashboard_address": ":0", "env": {"OMP_NUM_THREADS": "1"}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.toml"
        path.write_text(_toml(data))
        with LocalCluster(n_workers=1, **cluster_options) as one, LocalCluster(n_workers=2, **cluster_options) as two:
            for workers, cluster in ((1, one), (2, two)):  # warm-up: the workers import attndyn and torch once
                sweep.run(path, Path(tmp) / f"warm{workers}", scheduler=cluster.scheduler_address)
            for k in range(3):
                for workers, cluster in ((1, one), (2, two)):
                    t = time.perf_counter()
                    sweep.run(path, Path(tmp) / f"w{workers}-{k}", scheduler=cluster.scheduler_address)
                    seconds[workers].append(time.perf_counter() - t)
    ratios = [a / b for a, b in zip(seconds[1], seconds[2], strict=True)]
    return {1: float(np.median(seconds[1])), 2: float(np.median(seconds[2])), "speedup": float(np.median(ratios)), "ratios": ratios}


def _toml(data: dict) -> str:
    base = data["base"]
    lines = [f"measures = {data['measures']!r}".replace("'", '"'), "[base]", f"seed = {base['seed']}", f"n = {base['n']}", f"d = {base['d']}"]
    lines += ["[base.init]", 'kind = "sphere"', "[base.model]", "beta = 1.0", 'geometry = "sphere"']
    s = base["solver"]
    lines += ["[base.solver]", f'method = "{s["method"]}"', f"dt = {s['dt']}", f"t1 = {s['t1']}", f"save_every = {s['save_every']}"]
    lines += ["[grid]", f'"model.beta" = {data["grid"]["model.beta"]}', f"seed = {data['grid']['seed']}"]
    return "\n".join(lines) + "\n"


def ledger_overhead(n: int = 2, d: int = 2, T: float = 0.2) -> dict:
    """100 betas x 100 seeds = 10,000 points of n tokens in d dimensions, RK4 to T at dt = 0.1, in process.

    Three shares of the sweep's wall time: the tasks (``run_task``), the ledger (every ``Ledger``
    method: SQLite writes and reads, and the result blobs) and the rest of the driver (parsing the
    sweep file into its 10,000 points, scheduling, progress).
    """
    data = spec(np.linspace(0.5, 5, 100).round(6).tolist(), 100, d, T, 0.1, n=n)
    spent = {"compute": 0.0, "ledger": 0.0}
    originals = {"run_task": sweep_driver.run_task, "encode_results": sweep_driver.encode_results}
    methods = [k for k, v in vars(sweep.Ledger).items() if callable(v)]
    originals.update({f"Ledger.{k}": getattr(sweep.Ledger, k) for k in methods})

    def timed(f, bucket):
        def call(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[bucket] += time.perf_counter() - t

        return call

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.toml"
        path.write_text(_toml(data))
        sweep_driver.run_task = timed(originals["run_task"], "compute")
        sweep_driver.encode_results = timed(originals["encode_results"], "ledger")
        for k in methods:
            setattr(sweep.Ledger, k, timed(originals[f"Ledger.{k}"], "ledger"))
        try:
            t = time.perf_counter()
            summary = sweep.run(path, Path(tmp) / "out", workers=0)
            total = time.perf_counter() - t
        finally:
            sweep_driver.run_task, sweep_driver.encode_results = originals["run_task"], originals["encode_results"]
            for k in methods:
                setattr(sweep.Ledger, k, originals[f"Ledger.{k}"])
    compute, ledger = spent["compute"], spent["ledger"]
    return {
        "points": 10_000,
        "tasks": summary.total,
        "total": total,
        "compute": compute,
        "ledger": ledger / total,
        "driver": (total - compute - ledger) / total,
    }


def main():
    quick = "--quick" in sys.argv
    tp = throughput(quick)
    print(f"phase-diagram sweep, n = 32, d = 128: {tp['points']} grid points at {tp['attndyn_batched']:.1f} points/s (after a warm-up task)")
    print(f"one beta's {tp['systems']} systems (the per-system loops over 32 of them), systems per second (medians of 3 interleaved rounds):")
    for key, value in tp.items():
        if key not in ("points", "systems", "steps", "errors", "equal_accuracy", "attndyn_batched"):
            err = tp["errors"].get(key)
            print(f"  {key:28s} {value:8.2f}" + (f"   final-state error {err:.1e}" if err is not None else ""))
    print(f"  the sweep task (configs built, batched RK4, measures) / per-system loop of simulate: {tp['sweep_task'] / tp['per_system_loop']:.1f}x")
    print(f"  batched RK4 (dt = 0.1, the loop's step) / per-system loop: {tp['attndyn_rk4_dt0.1'] / tp['per_system_loop']:.1f}x")
    loop = tp["per_system_loop"]
    print(f"  in the span of x0 (n = 32 dimensions, not 128): batched RK4 {tp['attndyn_rk4_dt0.1_span'] / loop:.1f}x, ", end="")
    print(f"the loop itself {tp['per_system_loop_span'] / loop:.1f}x, against the plain loop")
    gemm = gemm_rate()
    per_system = 2 * 2 * 32 * 32 * 128 * 4 * tp["steps"]  # two n x n x d GEMMs per evaluation, 4 per RK4 step
    print(f"  the GEMM bound ({gemm / 1e9:.1f} GFLOP/s float64): {gemm / per_system:.0f} systems/s; the batch reaches ", end="")
    print(f"{100 * tp['attndyn_rk4_dt0.1'] * per_system / gemm:.0f} % of it, the loop {100 * tp['per_system_loop'] * per_system / gemm:.0f} %")
    for target, best in tp["equal_accuracy"].items():
        if "attndyn" in best and "torchdiffeq" in best:
            a, b = best["attndyn"], best["torchdiffeq"]
            print(f"  equal accuracy, final-state error <= {target:g}: attndyn {a} / torchdiffeq's best {b} = {tp[a] / tp[b]:.2f}x", end="")
            if "torchdiffeq_dopri5" in best:
                c = best["torchdiffeq_dopri5"]
                print(f"; / torchdiffeq's Dopri5 {c} = {tp[a] / tp[c]:.2f}x", end="")
            print()
    if "torchdiffeq_rk4_dt0.1" in tp:
        same = tp["attndyn_rk4_dt0.1"] / tp["torchdiffeq_rk4_dt0.1"]
        print(f"  same algorithm and field (RK4, dt = 0.1): attndyn / torchdiffeq = {same:.2f}x")
    sc = scaling(quick)
    rounds = ", ".join(f"{r:.2f}" for r in sc["ratios"])
    size = 32 if quick else 256
    print(f"Dask LocalCluster (started beforehand), 16 tasks of {size} systems: ", end="")
    print(f"1 worker {sc[1]:.1f} s, 2 workers {sc[2]:.1f} s (medians): ", end="")
    print(f"speed-up {sc['speedup']:.2f}x (rounds: {rounds})")
    for label, size in (("worst case, n = 2, d = 2, 2 steps", {}), ("phase-diagram points, n = 32, d = 8, t <= 5", {"n": 32, "d": 8, "T": 5.0})):
        runs = [ledger_overhead(**size) for _ in range(3)]
        lo = runs[int(np.argsort([r["ledger"] for r in runs])[1])]  # the median run by ledger share
        print(f"ledger ({label}): {lo['points']} points, {lo['tasks']} tasks: {lo['total']:.2f} s total, {lo['compute']:.2f} s in tasks; ", end="")
        print(f"ledger {100 * lo['ledger']:.1f} %, rest of the driver (parsing 10,000 points, scheduling) {100 * lo['driver']:.1f} % ", end="")
        shares = ", ".join(f"{100 * r['ledger']:.1f}" for r in runs)
        print(f"(median of 3 runs; ledger shares {shares} %)")
        assert math.isfinite(lo["ledger"])


if __name__ == "__main__":
    main()
