"""Sweep benchmarks (issues 10 and 25), ratios measured in one run.

Every comparison runs both sides on one thread (torch and the BLAS pools; the Dask workers one
thread each), on the same problem, timed on the process CPU clock and the wall clock after one
warm-up call per candidate, in ``--rounds`` (default 5) interleaved rounds; medians.

* Throughput: the phase-diagram sweep (n = 32, d = 128, Q = K = V = I on the sphere, t <= T) scaled
  to this machine. On one beta's systems: a plain loop of ``simulate`` over the systems, the same
  loop in the span of x0 (n of the d dimensions, exact for Q = K = V = I), attndyn's sweep task
  (seeds in one tensor, in the span), and the batch in full dimension and in the span: so batching
  and the span reduction show separately, each against a loop that does the same.
* Equal accuracy, in full dimension on both sides: attndyn's RK4 (dt 1 ... 0.05) and Dopri5 (rtol
  1e-4 ... 1e-10) against ``torchdiffeq.odeint``'s on the same batch and vector field. Each method's
  cost at a final-state error of 1e-5, 1e-7 and 1e-9 is interpolated on its work-precision curve
  (log-log, between the settings that bracket the target; a loosest setting that already meets it
  gives an upper bound). torchdiffeq is a benchmark-only dependency (``pip install torchdiffeq
  --no-deps``, done by ``make bench``); without it those rows are skipped.
* Scaling: the same sweep on a Dask LocalCluster with 1 and 2 single-threaded workers (wall clock).
* Ledger overhead: sweeps of 10,000 grid points (100 betas x 100 seeds), in process: the time in
  the ledger (SQLite, result blobs) over the total, and separately the rest of the driver's time
  outside ``run_task`` (parsing the points, scheduling). Two point sizes: the worst case (n = 2,
  d = 2, two RK4 steps: about 0.1 ms of work a point) and phase-diagram points (n = 32, d = 8, t <= 5).
Usage: python benchmarks/sweep.py [--quick] [--rounds 5] [--only throughput|scaling|ledger]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

os.environ["ATTNDYN_THREADS"] = "1"  # one thread a side: threads are not what this benchmark compares
import attndyn as ad  # noqa: E402
from attndyn import sweep  # noqa: E402
from attndyn.app import sweep_driver  # noqa: E402
from attndyn.core.dynamics import prepare, vector_field  # noqa: E402
from attndyn.core.threads import set_process_default  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from common import gemm_rate, interleaved  # noqa: E402


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


def work_precision_cost(points: list[tuple[float, float]], target: float) -> tuple[float, str] | None:
    """The cost at final-state error ``target`` on one method's work-precision curve.

    ``points`` are (error, seconds) pairs of one method at several settings. Only the Pareto front
    counts (a setting that is slower and no more accurate than another is never the one to use).
    Between the two front points that bracket ``target`` the cost is interpolated linearly in
    log(error)-log(seconds); where the loosest setting already meets the target its cost is returned
    as an upper bound ("bound"); where no setting meets it, None (no extrapolation).
    """
    front = []
    for err, sec in sorted(points, key=lambda p: p[1]):  # cheapest first: keep each setting more accurate than every cheaper one
        if not front or err < front[-1][0]:
            front.append((err, sec))
    if not front or front[-1][0] > target:
        return None
    if front[0][0] <= target:
        return front[0][1], "bound"
    for (e0, s0), (e1, s1) in zip(front, front[1:], strict=False):
        if e0 > target >= e1:
            w = (math.log(target) - math.log(e0)) / (math.log(e1) - math.log(e0))
            return math.exp(math.log(s0) + w * (math.log(s1) - math.log(s0))), "interpolated"
    raise AssertionError("unreachable: the front's errors decrease to below the target")


def throughput(quick: bool, rounds: int) -> dict:
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
    # through torchdiffeq; every candidate warmed up once, then timed once per round, rounds interleaved
    from attndyn.workflow.schema import parse_config
    from attndyn.workflow.setup import build

    task = s.tasks[-1]  # the largest beta: the stiffest systems
    setups = [build(parse_config(s.points[p].config)) for p in task]
    first = setups[0]
    x0 = torch.stack([st.x0 for st in setups])
    ts = first.ts
    reference = ad.simulate(first.model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-12, atol=1e-14)).xs[-1]

    configs = [s.points[p].config for p in task]
    # the per-system loops run over the first 32 systems (their cost is linear in the systems) and
    # are reported per system like the rest
    looped = setups[:32]
    loop_share = len(looped) / len(setups)
    candidates = {
        "per_system_loop": lambda: torch.stack([ad.simulate(st.model, st.x0, ts, solver=st.solver, step=st.step).xs[-1] for st in looped]),
        "per_system_loop_span": lambda: torch.stack(
            [ad.simulate(st.model, st.x0, ts, solver=st.solver, step=st.step, span=True).xs[-1] for st in looped]
        ),
        # the sweep's own task on the same systems: configs built, integrated in the span, measured
        "sweep_task": lambda: sweep.run_task(configs, s.measures, s.options) and None,
        "attndyn_rk4_dt0.1_span": lambda: ad.simulate(first.model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(dt), span=True).xs[-1],
    }
    # the work-precision curves: every candidate below integrates the whole batch in full dimension
    steps, rtols = (1.0, 0.5, 0.25, 0.1, 0.05), (1e-4, 1e-6, 1e-8, 1e-10)
    for h in steps:
        candidates[f"attndyn_rk4_dt{h:g}"] = lambda h=h: ad.simulate(first.model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(h)).xs[-1]
    for rtol in rtols:
        candidates[f"attndyn_dopri5_{rtol:g}"] = lambda rtol=rtol: ad.simulate(
            first.model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=rtol, atol=rtol * 1e-2)
        ).xs[-1]
    try:
        import torchdiffeq
    except ImportError:
        print("  (torchdiffeq not installed: pip install torchdiffeq --no-deps for its rows)")
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
    finals: dict[str, torch.Tensor | None] = {}
    runs = {name: (lambda name=name, run=run: finals.__setitem__(name, run())) for name, run in candidates.items()}
    med = interleaved(runs, rounds=rounds)  # (CPU, wall) medians; the warm-up call leaves each final state
    out["cpu"] = {}
    out["wall"] = {}
    for name, (cpu, wall) in med.items():
        share = loop_share if name.startswith("per_system_loop") else 1.0
        out["cpu"][name] = cpu / share / len(task)  # seconds per system
        out["wall"][name] = wall / share / len(task)
    out["errors"] = {k: float((v - reference).abs().max()) for k, v in finals.items() if v is not None and not k.startswith("per_system_loop")}
    # equal accuracy: each method's cost at each error target, on its work-precision curve (CPU clock)
    out["equal_accuracy"] = {}
    methods = {lib: [m for m in ("rk4", "dopri5") if any(k.startswith(f"{lib}_{m}") for k in candidates)] for lib in ("attndyn", "torchdiffeq")}
    for target in (1e-5, 1e-7, 1e-9):
        row = {}
        for lib, ms in methods.items():
            for m in ms:
                curve = [
                    (out["errors"][k], out["cpu"][k])
                    for k in candidates
                    if k.startswith(f"{lib}_{m}_") and not k.endswith("_span") and math.isfinite(out["errors"][k])
                ]
                row[f"{lib}_{m}"] = work_precision_cost(curve, target)
        out["equal_accuracy"][target] = row
    return out


def scaling(quick: bool, rounds: int) -> dict:
    """The same sweep on 1 and 2 single-threaded workers of already running (and warmed-up)
    LocalClusters, timed in alternation over ``rounds`` rounds: the median of the per-round speed-ups,
    and the median seconds (wall clock: the work runs in the workers)."""
    from distributed import LocalCluster

    # 16 tasks (betas): with only a few, one worker's extra task would dominate the two-worker time;
    # the throughput's batch size (256 systems a beta; 32 in the quick run), t <= 10
    betas = np.linspace(1, 8, 16).round(6).tolist()
    data = spec(betas, 32 if quick else 256, 128, 10.0, 0.1)
    seconds: dict[int, list[float]] = {1: [], 2: []}
    cluster_options = {"threads_per_worker": 1, "dashboard_address": ":0", "env": {"OMP_NUM_THREADS": "1", "ATTNDYN_THREADS": "1"}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.toml"
        path.write_text(_toml(data))
        with LocalCluster(n_workers=1, **cluster_options) as one, LocalCluster(n_workers=2, **cluster_options) as two:
            for workers, cluster in ((1, one), (2, two)):  # warm-up: the workers import attndyn and torch once
                sweep.run(path, Path(tmp) / f"warm{workers}", scheduler=cluster.scheduler_address)
            for k in range(rounds):
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="32 systems a beta, t <= 5 (the smoke version)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of every comparison (default 5)")
    parts = ("throughput", "scaling", "ledger")
    parser.add_argument("--only", choices=parts, action="append", help="run only this part (repeatable)")
    a = parser.parse_args()
    if a.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {a.rounds}")
    set_process_default(1)  # one thread for torch and the BLAS pools, both sides alike
    only = a.only or parts
    if "throughput" in only:
        report_throughput(a.quick, a.rounds)
    if "scaling" in only:
        report_scaling(a.quick, a.rounds)
    if "ledger" in only:
        report_ledger()


def report_throughput(quick: bool, rounds: int) -> None:
    tp = throughput(quick, rounds)
    cpu, wall = tp["cpu"], tp["wall"]
    print(f"phase-diagram sweep, n = 32, d = 128: {tp['points']} grid points at {tp['attndyn_batched']:.1f} points/s", end="")
    print(" (one pass after a warm-up task, wall clock)")
    print(f"one beta's {tp['systems']} systems (the per-system loops over 32 of them), one thread each side,")
    print(f"systems per second on the CPU clock / the wall clock (medians of {rounds} interleaved rounds after a warm-up call each):")
    for key in cpu:
        err = tp["errors"].get(key)
        print(f"  {key:28s} {1 / cpu[key]:8.2f} / {1 / wall[key]:8.2f}" + (f"   final-state error {err:.1e}" if err is not None else ""))

    def ratio(slow: str, fast: str) -> str:
        return f"{cpu[slow] / cpu[fast]:.2f}x (wall {wall[slow] / wall[fast]:.2f}x)"

    print("ratios on the CPU clock (wall clock in brackets):")
    print("  the sweep task (configs built, batched RK4 in the span, measures) / a loop of simulate:", ratio("per_system_loop", "sweep_task"))
    print("    of which batching, both in full dimension (batched RK4 at the loop's step / the loop):", ratio("per_system_loop", "attndyn_rk4_dt0.1"))
    print(f"    of which batching, both in the span of x0 (n = 32 dimensions, not 128): {ratio('per_system_loop_span', 'attndyn_rk4_dt0.1_span')}")
    print(f"    the task / the loop, both in the span: {ratio('per_system_loop_span', 'sweep_task')}")
    print(f"    the span alone (the loop in the span / the plain loop): {ratio('per_system_loop', 'per_system_loop_span')}")
    gemm = gemm_rate()
    per_system = 2 * 2 * 32 * 32 * 128 * 4 * tp["steps"]  # two n x n x d GEMMs per evaluation, 4 per RK4 step
    print(f"  the GEMM bound ({gemm / 1e9:.1f} GFLOP/s float64): {gemm / per_system:.0f} systems/s; the batch reaches ", end="")
    print(f"{100 * per_system / cpu['attndyn_rk4_dt0.1'] / gemm:.0f} % of it, the loop {100 * per_system / cpu['per_system_loop'] / gemm:.0f} %")
    if "torchdiffeq_rk4_dt0.1" in cpu:
        same = ratio("torchdiffeq_rk4_dt0.1", "attndyn_rk4_dt0.1")
        print(f"  same step and field, full dimension (attndyn's RK4 / torchdiffeq's 3/8-rule RK4, dt = 0.1): {same}")
    print("equal accuracy, both in full dimension: seconds per system at a final-state error,", end="")
    print(" interpolated on each method's work-precision curve (CPU clock)")
    for target, row in tp["equal_accuracy"].items():
        cells = ", ".join(f"{k} {c[0] * 1e3:.1f} ms" + (" (bound)" if c[1] == "bound" else "") if c else f"{k} -" for k, c in row.items())
        print(f"  error <= {target:g}: {cells}")
        ours = [c[0] for k, c in row.items() if k.startswith("attndyn") and c]
        if not ours:
            continue
        best = min(ours)
        theirs = {k: c[0] for k, c in row.items() if k.startswith("torchdiffeq") and c}
        if "torchdiffeq_dopri5" in theirs:
            print(f"    attndyn's best / torchdiffeq's Dopri5 (its default): {theirs['torchdiffeq_dopri5'] / best:.2f}x", end="")
        if theirs:
            print(f"; / torchdiffeq's best method: {min(theirs.values()) / best:.2f}x")


def report_scaling(quick: bool, rounds: int) -> None:
    sc = scaling(quick, rounds)
    per_round = ", ".join(f"{r:.2f}" for r in sc["ratios"])
    size = 32 if quick else 256
    print(f"Dask LocalCluster (started beforehand, one thread a worker), 16 tasks of {size} systems: ", end="")
    print(f"1 worker {sc[1]:.1f} s, 2 workers {sc[2]:.1f} s (medians, wall clock): ", end="")
    print(f"speed-up {sc['speedup']:.2f}x (rounds: {per_round})")


def report_ledger() -> None:
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
