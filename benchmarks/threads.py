"""The thread policy against fixed thread counts, alone and beside a competing process (issue 25).

Each workload runs in a fresh subprocess per setting, so that torch's thread pool starts as a user's
would: ``ATTNDYN_THREADS=1``, ``ATTNDYN_THREADS=2``, the policy (no variable), and torch's default
(the policy bypassed: every call given all cores). Workloads:

* ``small``: 1,000 RK4 steps of ``simulate`` at n = 20, d = 2 (the per-call-bound regime);
* ``batch``: 200 RK4 steps of a (64, 128, 8) batch (above the crossover: two threads pay when idle);
* ``claims``: ``reproduce polytope sphere multihead --quick`` (the demo's kind of work).

The loops are timed inside their process after a warm-up; the claims as a user waits for them
(imports included). Rounds alternate the settings; the table gives medians of wall time and, per workload, the
policy's time over the better of one and two threads (target: <= 1.10). The competitor is one
CPU-bound Python loop. Usage: ``python benchmarks/threads.py [--rounds 3] [--quick] [--only claims]``. Beside a competitor single runs vary by 1.5x
in both directions (the scheduler shares the cores): use five or more rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

SMALL = """
import time, numpy as np, attndyn as ad
m = ad.Model(ad.Weights.from_value(np.eye(2)))
x = np.random.default_rng(0).standard_normal((20, 2))
ad.simulate(m, x, [0, 0.1], solver=ad.RK4(), step=ad.FixedStep(0.01){extra})  # warm-up
t = time.perf_counter()
ad.simulate(m, x, [0, 10.0], solver=ad.RK4(), step=ad.FixedStep(0.01){extra})
print(time.perf_counter() - t)
"""
BATCH = """
import time, numpy as np, attndyn as ad
m = ad.Model(ad.Weights.from_value(np.eye(8)))
x = np.random.default_rng(0).standard_normal((64, 128, 8)) / 3
ad.simulate(m, x, [0, 0.02], solver=ad.RK4(), step=ad.FixedStep(0.01){extra})  # warm-up
t = time.perf_counter()
ad.simulate(m, x, [0, 2.0], solver=ad.RK4(), step=ad.FixedStep(0.01){extra})
print(time.perf_counter() - t)
"""


def run(workload: str, setting: str, out: str) -> float:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    env.pop("ATTNDYN_THREADS", None)
    extra = ""
    if setting in ("1", "2"):
        env["ATTNDYN_THREADS"] = setting
    elif setting == "torch-default":
        extra = ", threads=os.cpu_count()"
    if workload == "claims":
        args = [sys.executable, "-m", "attndyn", "reproduce", "polytope", "sphere", "multihead", "--quick", "--out", out]
        if setting == "torch-default":
            args.insert(3, "--threads")
            args.insert(4, str(os.cpu_count()))
    else:
        code = (SMALL if workload == "small" else BATCH).format(extra=extra)
        args = [sys.executable, "-c", "import os\n" + code]
    start = time.perf_counter()
    done = subprocess.run(args, env=env, check=True, capture_output=True, text=True)
    if workload == "claims":  # what a user waits for, imports included
        return time.perf_counter() - start
    return float(done.stdout.strip().splitlines()[-1])  # the loop alone, after a warm-up


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the small and batch loops only")
    parser.add_argument("--only", choices=["small", "batch", "claims"], action="append", help="run only this workload (repeatable)")
    opts = parser.parse_args()
    if opts.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {opts.rounds}")
    workloads = opts.only or (["small", "batch"] if opts.quick else ["small", "batch", "claims"])
    rounds = opts.rounds
    settings = ["1", "2", "policy", "torch-default"]
    print(f"{os.cpu_count()} cores; medians of {rounds} alternating rounds (wall seconds; one subprocess per run)")
    for load in ("quiet", "one competitor"):
        competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load != "quiet" else None
        try:
            for workload in workloads:
                times = {s: [] for s in settings}
                with tempfile.TemporaryDirectory() as tmp:
                    for r in range(rounds):
                        for s in settings if r % 2 == 0 else reversed(settings):
                            times[s].append(run(workload, s, os.path.join(tmp, f"{s}-{r}")))
                med = {s: statistics.median(v) for s, v in times.items()}
                best = min(med["1"], med["2"])
                cells = "  ".join(f"{s} {med[s]:7.2f}" for s in settings)
                print(f"{load:15s} {workload:7s} {cells}   policy / best of 1, 2 threads: {med['policy'] / best:.2f}")
        finally:
            if competitor is not None:
                competitor.kill()
                competitor.wait()


if __name__ == "__main__":
    main()
