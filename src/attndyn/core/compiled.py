"""A compiled fixed-step path for small systems: RK4 on the plain attention field, in C.

Contract
--------
For a small state, one RK4 step of the eager engine is a few dozen torch calls of a few microseconds
each, which is most of its cost (about 55 us at n = 20, d = 2). :func:`run` integrates the same
model with the same RK4 steps in a loop written in C (:data:`SOURCE`, our own), compiled once per
machine with the system's C compiler into a cache folder (``$ATTNDYN_CACHE``, else
``$XDG_CACHE_HOME/attndyn``, else ``~/.cache/attndyn``) and loaded with :mod:`ctypes`. The cold
start is one compiler call (about 0.3 s here); later runs load the cached library.

What it covers (:func:`eligible` says why not, else ``None``): RK4 with a fixed step, float64 on the
CPU, one head, dense softmax attention with a full mask, finite beta, no feed-forward layer, no sink
bias; the Euclidean model with any Q, K, V; the rescaled model with V = lambda I; the sphere
(Post-LN) with any Q, K, V. ``simulate`` uses it automatically for runs of at least
:data:`MIN_STEPS` steps of a state with ``batch * n^2 * d`` at most :data:`MAX_WORK`, unless
``ATTNDYN_COMPILED=0``; without a C compiler it stays with the eager engine (:func:`library` returns
``None`` and says why in :data:`STATUS`). The results agree with the eager engine to rounding
(tested), since the arithmetic is the same up to the order of summation.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attndyn.core.dynamics import Model
from attndyn.core.solvers import AdaptiveStep, FixedStep, Tableau

MIN_STEPS = 100  # below this the eager engine's fixed set-up is the smaller cost
MAX_WORK = 250_000  # batch * n^2 * d: above it torch's kernels (and threads) win
STATUS: dict = {"library": None, "reason": "not tried"}

SOURCE = r"""
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The attention field of one system (n tokens in R^d) at time t, written into v.
   M = Q^T K (d x d, row major), V (d x d); logits beta * scale * <x_i, M x_j>.
   mode 0: v_i = V sum_j P_ij x_j; mode 1 (rescaled, V = lam I): v_i = lam sum_j P_ij (x_j - x_i);
   mode 2 (sphere, Post-LN): a_i = V sum_j P_ij x_j, v_i = a_i - <x_i, a_i> x_i. */
static void field(int n, int d, const double *M, const double *V, double beta, double lam, int mode, double t,
                  const double *x, double *v, double *w, double *p, double *a) {
    double scale = beta;
    if (mode == 1) scale *= exp(2.0 * lam * t);
    for (int j = 0; j < n; j++)            /* w_j = M x_j */
        for (int r = 0; r < d; r++) {
            double s = 0.0;
            for (int c = 0; c < d; c++) s += M[r * d + c] * x[j * d + c];
            w[j * d + r] = s;
        }
    for (int i = 0; i < n; i++) {
        const double *xi = x + i * d;
        double top = -INFINITY;
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int c = 0; c < d; c++) s += xi[c] * w[j * d + c];
            p[j] = scale * s;
            if (p[j] > top) top = p[j];
        }
        double total = 0.0;
        for (int j = 0; j < n; j++) { p[j] = exp(p[j] - top); total += p[j]; }
        double inv = 1.0 / total;
        for (int c = 0; c < d; c++) a[c] = 0.0;
        for (int j = 0; j < n; j++) {
            double q = p[j] * inv;
            for (int c = 0; c < d; c++) a[c] += q * x[j * d + c];
        }
        double *vi = v + i * d;
        if (mode == 1) {
            for (int c = 0; c < d; c++) vi[c] = lam * (a[c] - xi[c]);
        } else {
            for (int r = 0; r < d; r++) {
                double s = 0.0;
                for (int c = 0; c < d; c++) s += V[r * d + c] * a[c];
                vi[r] = s;
            }
            if (mode == 2) {
                double s = 0.0;
                for (int c = 0; c < d; c++) s += xi[c] * vi[c];
                for (int c = 0; c < d; c++) vi[c] -= s * xi[c];
            }
        }
    }
}

/* count RK4 steps of size dt from t0 (t = t0 + k dt) for B independent systems x (B x n x d, in place).
   Returns 0, or 1 when the work buffers could not be allocated. */
int rk4_steps(int B, int n, int d, const double *M, const double *V, double beta, double lam, int mode,
              double t0, double dt, long count, long done0, double *x) {
    int size = n * d;
    double *buf = malloc(sizeof(double) * (size_t)(6 * size + n + d));
    if (!buf) return 1;
    double *k1 = buf, *k2 = k1 + size, *k3 = k2 + size, *k4 = k3 + size, *y = k4 + size, *w = y + size;
    double *p = w + size, *a = p + n;
    for (int b = 0; b < B; b++) {
        double *xb = x + (size_t)b * size;
        for (long k = 0; k < count; k++) {
            double t = t0 + (double)(done0 + k) * dt;
            field(n, d, M, V, beta, lam, mode, t, xb, k1, w, p, a);
            for (int e = 0; e < size; e++) y[e] = xb[e] + 0.5 * dt * k1[e];
            field(n, d, M, V, beta, lam, mode, t + 0.5 * dt, y, k2, w, p, a);
            for (int e = 0; e < size; e++) y[e] = xb[e] + 0.5 * dt * k2[e];
            field(n, d, M, V, beta, lam, mode, t + 0.5 * dt, y, k3, w, p, a);
            for (int e = 0; e < size; e++) y[e] = xb[e] + dt * k3[e];
            field(n, d, M, V, beta, lam, mode, t + dt, y, k4, w, p, a);
            for (int e = 0; e < size; e++) xb[e] += dt / 6.0 * (k1[e] + 2.0 * k2[e] + 2.0 * k3[e] + k4[e]);
        }
    }
    free(buf);
    return 0;
}
"""


def cache_dir() -> Path:
    """Where the compiled library lives: ``$ATTNDYN_CACHE``, else ``$XDG_CACHE_HOME/attndyn``, else ``~/.cache/attndyn``."""
    if os.environ.get("ATTNDYN_CACHE"):
        return Path(os.environ["ATTNDYN_CACHE"])
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "attndyn"


def library() -> ctypes.CDLL | None:
    """The compiled kernel (compiled on first use, then cached on disk), or ``None`` with the reason in :data:`STATUS`."""
    if STATUS["library"] is not None or STATUS["reason"] != "not tried":
        return STATUS["library"]
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        STATUS["reason"] = "no C compiler found (set CC)"
        return None
    tag = hashlib.sha256((SOURCE + compiler).encode()).hexdigest()[:16]
    target = cache_dir() / f"attndyn_small_{tag}.so"
    try:
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                src = Path(tmp) / "small.c"
                src.write_text(SOURCE)
                built = Path(tmp) / "small.so"
                cmd = [compiler, "-O2", "-fPIC", "-shared", "-o", str(built), str(src), "-lm"]
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                if done.returncode != 0:
                    STATUS["reason"] = f"the C compiler failed: {done.stderr.strip()[:200]}"
                    return None
                os.replace(built, target)  # atomic: a concurrent process sees the whole file or none
        lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as err:
        STATUS["reason"] = f"could not build or load the kernel: {err}"
        return None
    fn = lib.rk4_steps
    dbl, ptr = ctypes.c_double, ctypes.POINTER(ctypes.c_double)
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ptr, ptr, dbl, dbl, ctypes.c_int, dbl, dbl, ctypes.c_long, ctypes.c_long, ptr]
    fn.restype = ctypes.c_int
    STATUS.update(library=lib, reason="compiled", path=str(target))
    return lib


def eligible(model: Model, x: torch.Tensor, solver: Tableau, step: FixedStep | AdaptiveStep, observe: Callable | None) -> str | None:
    """Why :func:`run` cannot integrate this call (``None`` when it can); see the module docstring."""
    w = model.weights
    checks = [
        (getattr(solver, "name", "") == "rk4", "not RK4"),
        (isinstance(step, FixedStep), "not a fixed step"),
        (x.dtype == torch.float64 and x.device.type == "cpu", "not float64 on the CPU"),
        (w.heads == 1 and w.ff is None, "several heads or a feed-forward layer"),
        (model.mask == "full" and model.normalization == "softmax" and model.sink_bias == 0.0, "a mask, a sink or another normalization"),
        (math.isfinite(model.beta), "hardmax"),
        (model.geometry == "euclidean" or model.scheme == "post", "a normalization scheme other than Post-LN"),
    ]
    for ok, why in checks:
        if not ok:
            return why
    if model.rescaled:
        V = w.V[0]
        if not torch.equal(V, V[0, 0] * torch.eye(w.d, dtype=V.dtype)):
            return "a rescaled model with V not a multiple of I"
    return None


def pays(x: torch.Tensor, steps: int) -> bool:
    """Whether the compiled path is the faster one: a long run of a small state (and not switched off)."""
    if os.environ.get("ATTNDYN_COMPILED", "1") == "0" or steps < MIN_STEPS:
        return False
    n, d = x.shape[-2:]
    batch = math.prod(x.shape[:-2])
    return batch * n * n * d <= MAX_WORK


def run(
    model: Model,
    x: torch.Tensor,
    times: list[float],
    counts: list[int],
    dt: float,
    progress: Callable[[float], None] | None = None,
    observe: Callable | None = None,
) -> tuple[torch.Tensor, dict, torch.Tensor | None] | None:
    """Integrate ``counts[k]`` RK4 steps of ``dt`` between consecutive ``times`` and return the saved states
    ``(len(times), *x.shape)``, the stats and the stacked ``observe(t, x)`` of every save (as the eager solver
    records them), or ``None`` when the kernel is unavailable."""
    lib = library()
    if lib is None:
        return None
    w = model.weights
    M = np.ascontiguousarray((w.Q[0].transpose(0, 1) @ w.K[0]).double().numpy())
    V = np.ascontiguousarray(w.V[0].double().numpy())
    mode = 1 if model.rescaled else 2 if model.geometry == "sphere" else 0
    lam = float(V[0, 0]) if model.rescaled else 0.0
    n, d = x.shape[-2:]
    B = math.prod(x.shape[:-2])
    state = np.ascontiguousarray(x.detach().numpy(), dtype=np.float64).reshape(B, n, d).copy()
    ptr = ctypes.POINTER(ctypes.c_double)
    out = [state.copy()]
    seen = None if observe is None else [observe(times[0], x)]
    done = 0
    for a, (b, count) in enumerate(zip(times[1:], counts, strict=True)):
        rc = lib.rk4_steps(B, n, d, M.ctypes.data_as(ptr), V.ctypes.data_as(ptr), float(model.beta), lam, mode,
                           float(times[0]), float(dt), int(count), int(done), state.ctypes.data_as(ptr))  # fmt: skip
        if rc != 0:
            raise MemoryError("the compiled RK4 kernel could not allocate its work buffers.")
        done += count
        if not np.isfinite(state).all():
            raise FloatingPointError(f"the state became non-finite at t={b:.6g} (checked at save times; the last finite save was t={times[a]:.6g}).")
        out.append(state.copy())
        if seen is not None:
            seen.append(observe(b, torch.from_numpy(out[-1].reshape(x.shape))))
        if progress is not None:
            progress(times[0] + done * dt)
    xs = torch.from_numpy(np.stack(out).reshape(len(times), *x.shape))
    observed = None if seen is None else torch.stack([torch.as_tensor(o) for o in seen])
    return xs, {"nfev": 4 * done, "steps": done, "rejected": 0}, observed
