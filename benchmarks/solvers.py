"""Solver benchmarks: ensemble throughput, single-system step time, work-precision.

* Ensemble: 256 systems of (n, d) = (32, 3), RK4, batched, against a batched NumPy RK4 written
  here (einsum/matmul, attention recomputed at every stage). Ratio measured in the same run.
* Single system (20, 2): time per RK4 step through ``simulate``; also one step of an
  authors-style loop implementation (Python loops over i, j, k with expm inside, SPEC §6.1) as
  the reference the project replaces.
* Work-precision: max error at T = 2 vs nfev for each solver on one attention problem, against
  scipy DOP853 at rtol = atol = 1e-13.
* Small-system paths (20, 2), 1000 RK4 steps: the compiled path (``attndyn.core.compiled``, warm
  cache; its cold start measured apart), the eager engine (``ATTNDYN_COMPILED=0``) and a NumPy RK4
  written here, on the process CPU clock and the wall clock, seven interleaved rounds, medians.
Usage: python benchmarks/solvers.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.linalg as sla
import torch
from scipy.integrate import solve_ivp
from scipy.special import softmax

sys.path.insert(0, str(Path(__file__).parent))
from common import median_time  # noqa: E402

import attndyn as ad  # noqa: E402


def numpy_rk4_batched(X, V, dt, steps):
    """Batched NumPy RK4 for x' = softmax(X X^T) X V^T, X (B, n, d)."""

    def f(Y):
        L = Y @ Y.transpose(0, 2, 1)
        L -= L.max(-1, keepdims=True)
        P = np.exp(L)
        P /= P.sum(-1, keepdims=True)
        return P @ Y @ V.T

    for _ in range(steps):
        k1 = f(X)
        k2 = f(X + dt / 2 * k1)
        k3 = f(X + dt / 2 * k2)
        k4 = f(X + dt * k3)
        X = X + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return X


def ensemble():
    rng = np.random.default_rng(0)
    B, n, d, steps, dt = 256, 32, 3, 50, 0.01
    X = rng.uniform(-1, 1, (B, n, d))
    V = np.eye(d)
    model = ad.Model(ad.Weights.identity(d))
    ts = [0.0, steps * dt]
    t_ours = median_time(lambda: ad.simulate(model, X, ts, solver=ad.RK4(), step=ad.FixedStep(dt)), repeat=5)
    t_np = median_time(lambda: numpy_rk4_batched(X, V, dt, steps), repeat=5)
    ours = ad.simulate(model, X, ts, solver=ad.RK4(), step=ad.FixedStep(dt)).xs[-1].numpy()
    assert np.allclose(ours, numpy_rk4_batched(X, V, dt, steps), atol=1e-12)
    rate = B * steps / t_ours
    print(
        f"ensemble 256 x (32, 3), RK4, {steps} steps: attndyn {t_ours:.3f} s ({rate:,.0f} system-steps/s), "
        f"batched NumPy {t_np:.3f} s -> ratio {t_np / t_ours:.2f}x"
    )


def authors_style_step(z, t, dt, V):
    """One step of the loop implementation the paper's scripts use (Euler with frozen P, expm in the inner loop)."""
    n = len(z)
    att = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            s = 0.0
            for k in range(n):
                s += np.exp(np.dot(sla.expm(V * t) @ z[i], sla.expm(V * t) @ (z[k] - z[j])))
            att[i, j] = 1 / s
    return z + dt * np.array([att[i] @ (z - z[i]) @ V.T for i in range(n)])


def single_system():
    rng = np.random.default_rng(1)
    z0 = rng.uniform(-5, 5, (20, 2))
    model = ad.Model(ad.Weights.identity(2), rescaled=True)
    steps = 500
    t = median_time(lambda: ad.simulate(model, z0, [0.0, steps * 0.01], solver=ad.RK4(), step=ad.FixedStep(0.01)), repeat=5)
    start = time.perf_counter()
    authors_style_step(z0, 0.5, 0.1, np.eye(2))
    t_ref = time.perf_counter() - start
    print(
        f"single system (20, 2), rescaled V = I, RK4: {1e6 * t / steps:.0f} us per step "
        f"(authors-style loop step: {1e3 * t_ref:.0f} ms -> {t_ref / (t / steps):,.0f}x)"
    )


def work_precision():
    rng = np.random.default_rng(2)
    W = ad.Weights(rng.normal(0, 0.8, (2, 2)), rng.normal(0, 0.8, (2, 2)), rng.normal(0, 0.8, (2, 2)))
    x0 = rng.normal(size=(8, 2))
    T = 2.0
    Q, K, V = (a[0].numpy() for a in (W.Q, W.K, W.V))

    def f(t, y):
        X = y.reshape(8, 2)
        return (softmax((X @ Q.T) @ (X @ K.T).T, axis=1) @ X @ V.T).ravel()

    ref = solve_ivp(f, (0, T), x0.ravel(), method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1].reshape(8, 2)
    model = ad.Model(W)
    print("work-precision (n = 8, d = 2, T = 2):")
    print(f"  {'solver':>8} {'setting':>16} {'nfev':>7} {'max error':>10}")
    for name, solver in [("euler", ad.Euler), ("heun", ad.Heun), ("rk4", ad.RK4)]:
        for dt in (0.1, 0.02, 0.004):
            tr = ad.simulate(model, x0, [0, T], solver=solver(), step=ad.FixedStep(dt))
            print(f"  {name:>8} {f'dt={dt:g}':>16} {tr.stats['nfev']:>7} {np.abs(tr.xs[-1].numpy() - ref).max():>10.2e}")
    for tol in (1e-4, 1e-7, 1e-10):
        tr = ad.simulate(model, x0, [0, T], solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=tol, atol=tol))
        print(f"  {'dopri5':>8} {f'rtol=atol={tol:g}':>16} {tr.stats['nfev']:>7} {np.abs(tr.xs[-1].numpy() - ref).max():>10.2e}")


def numpy_rk4_rescaled(z, dt, steps):
    """NumPy RK4 for the rescaled V = I field z' = sum_j P_ij (z_j - z_i), P at x = e^t z."""

    def f(t, y):
        L = np.exp(2 * t) * (y @ y.T)
        L -= L.max(1, keepdims=True)
        P = np.exp(L)
        P /= P.sum(1, keepdims=True)
        return P @ y - y

    t = 0.0
    for _ in range(steps):
        k1 = f(t, z)
        k2 = f(t + dt / 2, z + dt / 2 * k1)
        k3 = f(t + dt / 2, z + dt / 2 * k2)
        k4 = f(t + dt, z + dt * k3)
        z = z + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += dt
    return z


def small_system_paths():
    from attndyn.core import compiled

    rng = np.random.default_rng(1)
    z0 = rng.uniform(-1, 1, (20, 2))
    model = ad.Model(ad.Weights.identity(2), rescaled=True)
    steps, dt = 1000, 0.005
    ts = [0.0, steps * dt]
    with tempfile.TemporaryDirectory() as tmp:  # the cold start: one compiler call into an empty cache
        os.environ["ATTNDYN_CACHE"] = tmp
        compiled.STATUS.update(library=None, reason="not tried")
        start = time.perf_counter()
        compiled.library()
        cold = time.perf_counter() - start
        runs = {
            "compiled": lambda: (os.environ.__setitem__("ATTNDYN_COMPILED", "1"), ad.simulate(model, z0, ts, solver=ad.RK4(), step=ad.FixedStep(dt))),
            "eager": lambda: (os.environ.__setitem__("ATTNDYN_COMPILED", "0"), ad.simulate(model, z0, ts, solver=ad.RK4(), step=ad.FixedStep(dt))),
            "numpy": lambda: numpy_rk4_rescaled(z0, dt, steps),
        }
        for f in runs.values():
            f()  # warm-up
        wall = {k: [] for k in runs}
        cpu = {k: [] for k in runs}
        for _ in range(7):
            for k, f in runs.items():
                w0, c0 = time.perf_counter(), time.process_time()
                f()
                wall[k].append(time.perf_counter() - w0)
                cpu[k].append(time.process_time() - c0)
        os.environ.pop("ATTNDYN_COMPILED", None)
        os.environ.pop("ATTNDYN_CACHE", None)
    med = {k: (float(np.median(cpu[k])) / steps * 1e6, float(np.median(wall[k])) / steps * 1e6) for k in runs}
    print(f"small system (20, 2), rescaled V = I, RK4, {steps} steps; us per step, CPU clock / wall clock (medians of 7 rounds):")
    for k, (c, w) in med.items():
        print(f"  {k:>9}: {c:6.1f} / {w:6.1f}   eager over it: {med['eager'][0] / c:5.2f}x (CPU)")
    print(
        f"  compiled cold start (one compiler call, then cached on disk): {cold:.2f} s, {1e6 * cold / steps:.0f} us per step of a first 1000-step run"
    )


if __name__ == "__main__":
    torch.set_num_threads(torch.get_num_threads())
    ensemble()
    single_system()
    small_system_paths()
    work_precision()
