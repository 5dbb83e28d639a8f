"""The attention field and a fixed-step RK4 loop in C, for float64 states on the CPU.

Contract
--------
For a small state, one RK4 step of the eager engine is a few dozen torch calls, whose fixed per-call
cost is most of its cost; for a batch of small systems, torch's exp and its tiny batched matrix
products are (``benchmarks/solvers.py`` measures both). This module holds the same field
written in C (:data:`SOURCE`, our own), compiled once per machine with the system's C compiler
(``-O3 -march=native``, else ``-O2``) into a cache folder (``$ATTNDYN_CACHE``, else
``$XDG_CACHE_HOME/attndyn``, else ``~/.cache/attndyn``; the key includes the CPU's model and flags)
and loaded with :mod:`ctypes`. Code is loaded only from a folder owned by the user and writable by no
one else (else a private temporary folder is used, said once on stderr), and only after the library's
SHA-256, size and ELF header match the ones recorded at build time beside it (``<library>.sha256``, held
to the same checks) and every segment its program headers map lies within the file (a truncated library
would kill the process with SIGBUS when the loader touched its missing pages, whatever its record says);
a missing, damaged, truncated or planted library, or one that fails to load, is rebuilt, with one line
saying why.
The cold start is one compiler call; later runs load the cached library. Its exponential is a
polynomial the compiler vectorises (within 4e-16 of libm, and faster than torch's exp), and it computes
eight rows of attention at once, one per vector lane.

Kernels only: which call uses them is decided in :mod:`attndyn.core.plan` (the C field's conditions,
the compiled loop's, and why each was not taken). Three uses:

* :func:`field`: one evaluation, for any solver, of a :class:`Native` spec (:func:`native_spec`): the
  plain field with any Q, K, V, the rescaled model with V = lambda I (and with any V, its logits
  <e^{tV} z_i, Q^T K e^{tV} z_j> through the d x d matrix e^{tV^T} Q^T K e^{tV}), the sphere under
  Post-LN; softmax or USA weights, one head, a full mask, d <= :data:`MAX_D`.
* :func:`stepper`: the stages and error norm of one adaptive step in C (the controller stays in Python).
* :func:`run`: a whole fixed-step classical RK4 run in one C loop (no Python per step).

Without a C compiler :func:`library` returns ``None`` and says why in :data:`STATUS`. The results agree
with the eager engine to rounding (tested): the arithmetic is the same up to the order of summation and
the last bit of the exponential.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attndyn.core.solvers import Tableau

STATUS: dict = {"library": None, "reason": "not tried"}

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* e^x, written so that the compiler vectorises it (no libm call in the loops): x = k ln2 + r with
   |r| <= ln2 / 2, e^r by its degree-13 Taylor polynomial (truncation below 1e-17), 2^k from the
   exponent bits. Arguments below -708 give e^-708 (~3e-308), which in a softmax row whose largest
   entry is 1 changes nothing; above 709.4, inf; NaN stays NaN. Measured against libm: within 4e-16 relative. */
static inline double vexp(double x) {
    const double shift = 6755399441055744.0; /* 1.5 * 2^52: adding it rounds to an integer */
    const double inv_ln2 = 1.4426950408889634, ln2_hi = 0.6931471805599453, ln2_lo = 2.3190468138462996e-17;
    const int over = x > 709.4; /* e^709.4 ~ 1.2e308 (k = 1023 at most): above it, inf */
    x = x < -708.0 ? -708.0 : over ? 709.4 : x;
    double kd = x * inv_ln2 + shift;
    uint64_t ki;
    memcpy(&ki, &kd, 8);
    kd -= shift;
    double r = (x - kd * ln2_hi) - kd * ln2_lo;
    double q = 1.0 / 6227020800.0;
    q = q * r + 1.0 / 479001600.0;
    q = q * r + 1.0 / 39916800.0;
    q = q * r + 1.0 / 3628800.0;
    q = q * r + 1.0 / 362880.0;
    q = q * r + 1.0 / 40320.0;
    q = q * r + 1.0 / 5040.0;
    q = q * r + 1.0 / 720.0;
    q = q * r + 1.0 / 120.0;
    q = q * r + 1.0 / 24.0;
    q = q * r + 1.0 / 6.0;
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r + 1.0;
    uint64_t bits = (ki + 1023) << 52;
    double s;
    memcpy(&s, &bits, 8);
    return over ? INFINITY : q * s;
}

void exp_array(long count, const double *x, double *y) {
#pragma omp simd
    for (long i = 0; i < count; i++) y[i] = vexp(x[i]);
}

#define LANES 8 /* rows of attention computed together, one per vector lane */
#define MAXD 16  /* the largest d of the C field (NATIVE_MAX_D) */

/* The attention field of one system (n tokens in R^d, d <= MAXD), written into v; work holds n d
   doubles (the scaled keys) and LANES n (a block of logits). M = Q^T K (d x d, row major), V (d x d);
   logits scale * <x_i, M x_j> (scale = beta, times e^{2 lam t} in the rescaled model). mode 0:
   v_i = V sum_j P_ij x_j; mode 1 (rescaled, V = lam I): v_i = lam (sum_j P_ij x_j - x_i); mode 2
   (sphere, Post-LN): a_i = V sum_j P_ij x_j, v_i = a_i - <x_i, a_i> x_i / |x_i|^2; mode 3 (rescaled, any V, with
   M = E^T Q^T K E for E = e^{tV}): v_i = V (sum_j P_ij x_j - x_i). mode + 4: the same with the
   unnormalized weights of USA, P_ij = e^{logit_ij} / n.
   LANES rows i are computed together, one per vector lane, so that every loop over the lanes
   vectorises and no row needs a horizontal reduction: a first pass over j writes the logits and each
   row's maximum, a second takes exp(logit - max), sums it and accumulates the weighted tokens in
   registers. A last block shorter than LANES repeats its last row in the spare lanes and discards
   them. The body is inlined once per small d (field_one's switch), so that the loops over d unroll. */
static inline __attribute__((always_inline)) void field_body(int n, const int d, const double *restrict M,
        const double *restrict V, double scale, double lam, int mode, const double *restrict x,
        double *restrict v, double *restrict work) {
    const int usa = mode >= 4; /* unnormalized (USA): A_ij = e^{logit} / n, no maximum subtracted */
    mode &= 3;
    double *restrict w = work, *restrict P = work + n * d;
    for (int j = 0; j < n; j++) /* w_j = scale M x_j */
        for (int r = 0; r < d; r++) {
            double s = 0.0;
            for (int c = 0; c < d; c++) s += M[r * d + c] * x[j * d + c];
            w[j * d + r] = scale * s;
        }
    for (int i0 = 0; i0 < n; i0 += LANES) {
        double xq[MAXD * LANES], acc[MAXD * LANES], top[LANES], tot[LANES];
        for (int c = 0; c < d; c++)
            for (int l = 0; l < LANES; l++) {
                int i = i0 + l < n ? i0 + l : n - 1;
                xq[c * LANES + l] = x[i * d + c];
            }
        for (int l = 0; l < LANES; l++) top[l] = -INFINITY;
        for (int j = 0; j < n; j++) {
            double s[LANES];
            for (int l = 0; l < LANES; l++) s[l] = 0.0;
            for (int c = 0; c < d; c++) {
                const double wc = w[j * d + c];
#pragma omp simd
                for (int l = 0; l < LANES; l++) s[l] += xq[c * LANES + l] * wc;
            }
#pragma omp simd
            for (int l = 0; l < LANES; l++) {
                P[j * LANES + l] = s[l];
                top[l] = s[l] > top[l] ? s[l] : top[l];
            }
        }
        if (usa)
            for (int l = 0; l < LANES; l++) top[l] = 0.0;
        for (int k = 0; k < d * LANES; k++) acc[k] = 0.0;
        for (int l = 0; l < LANES; l++) tot[l] = 0.0;
        for (int j = 0; j < n; j++) {
            double e[LANES];
#pragma omp simd
            for (int l = 0; l < LANES; l++) {
                e[l] = vexp(P[j * LANES + l] - top[l]);
                tot[l] += e[l];
            }
            for (int c = 0; c < d; c++) {
                const double xc = x[j * d + c];
#pragma omp simd
                for (int l = 0; l < LANES; l++) acc[c * LANES + l] += e[l] * xc;
            }
        }
        for (int l = 0; l < LANES && i0 + l < n; l++) {
            const int i = i0 + l;
            const double *xi = x + i * d, inv = usa ? 1.0 / n : 1.0 / tot[l];
            double *vi = v + i * d;
            if (mode == 1) {
                for (int c = 0; c < d; c++) vi[c] = lam * (acc[c * LANES + l] * inv - xi[c]);
                continue;
            }
            if (mode == 3) {
                for (int r = 0; r < d; r++) {
                    double s = 0.0;
                    for (int c = 0; c < d; c++) s += V[r * d + c] * (acc[c * LANES + l] * inv - xi[c]);
                    vi[r] = s;
                }
                continue;
            }
            for (int r = 0; r < d; r++) {
                double s = 0.0;
                for (int c = 0; c < d; c++) s += V[r * d + c] * acc[c * LANES + l];
                vi[r] = s * inv;
            }
            if (mode == 2) { /* the projection at x_i / |x_i|: radii constant off the sphere (dynamics.py) */
                double s = 0.0, r2 = 0.0;
                for (int c = 0; c < d; c++) s += xi[c] * vi[c], r2 += xi[c] * xi[c];
                s /= r2;
                for (int c = 0; c < d; c++) vi[c] -= s * xi[c];
            }
        }
    }
}

#define FIELD_CASE(D) case D: field_body(n, D, M, V, scale, lam, mode, x, v, work); break;
static void field_one(int n, int d, const double *M, const double *V, double scale, double lam, int mode,
                      const double *x, double *v, double *work) {
    switch (d) {
        FIELD_CASE(1) FIELD_CASE(2) FIELD_CASE(3) FIELD_CASE(4) FIELD_CASE(6) FIELD_CASE(8)
        default: field_body(n, d, M, V, scale, lam, mode, x, v, work);
    }
}

static size_t work_size(int n, int d) { return (size_t)n * d + (size_t)LANES * n; }

/* One field evaluation of B independent systems x (B x n x d) into v. Returns 0, 1 when the work
   buffer could not be allocated, 2 when d > MAXD. */
int field_batch(int B, int n, int d, const double *M, const double *V, double scale, double lam, int mode,
                const double *x, double *v) {
    if (d > MAXD) return 2;
    double *work = malloc(sizeof(double) * work_size(n, d));
    if (!work) return 1;
    for (int b = 0; b < B; b++) field_one(n, d, M, V, scale, lam, mode, x + (size_t)b * n * d, v + (size_t)b * n * d, work);
    free(work);
    return 0;
}

/* count RK4 steps of size dt from t0 (t = t0 + k dt) for B independent systems x (B x n x d, in place),
   scale = beta (times e^{2 lam t} at each stage in mode 1). Returns 0, 1 when the work buffers could
   not be allocated, 2 when d > MAXD. */
int rk4_steps(int B, int n, int d, const double *M, const double *V, double beta, double lam, int mode,
              double t0, double dt, long count, long done0, double *x) {
    if (d > MAXD) return 2;
    int size = n * d;
    double *buf = malloc(sizeof(double) * (5 * (size_t)size + work_size(n, d)));
    if (!buf) return 1;
    double *k1 = buf, *k2 = k1 + size, *k3 = k2 + size, *k4 = k3 + size, *y = k4 + size, *work = y + size;
    for (int b = 0; b < B; b++) {
        double *xb = x + (size_t)b * size;
        for (long k = 0; k < count; k++) {
            double t = t0 + (double)(done0 + k) * dt;
            double s0 = beta, s1 = beta, s2 = beta;
            if ((mode & 3) == 1) {
                s0 = beta * exp(2.0 * lam * t);
                s1 = beta * exp(2.0 * lam * (t + 0.5 * dt));
                s2 = beta * exp(2.0 * lam * (t + dt));
            }
            field_one(n, d, M, V, s0, lam, mode, xb, k1, work);
            for (int e = 0; e < size; e++) y[e] = xb[e] + 0.5 * dt * k1[e];
            field_one(n, d, M, V, s1, lam, mode, y, k2, work);
            for (int e = 0; e < size; e++) y[e] = xb[e] + 0.5 * dt * k2[e];
            field_one(n, d, M, V, s1, lam, mode, y, k3, work);
            for (int e = 0; e < size; e++) y[e] = xb[e] + dt * k3[e];
            field_one(n, d, M, V, s2, lam, mode, y, k4, work);
            for (int e = 0; e < size; e++) xb[e] += dt / 6.0 * (k1[e] + 2.0 * k2[e] + 2.0 * k3[e] + k4[e]);
        }
    }
    free(buf);
    return 0;
}

/* One step of size h of an explicit Runge-Kutta tableau with an embedded error estimate (S stages; a is
   S x S row major, lower triangular; b, e = b - b_hat and c of length S; fsal: the last stage is
   evaluated at the new point) for B independent systems x, with the first stage k1 given. Writes
   x_new and the last stage k_last; returns the error norm of the adaptive controller: the maximum
   over the systems of the RMS of err / (atol + rtol max(|x|, |x_new|)) (NaN for a non-finite
   state, -1 when the buffers could not be allocated, -2 when d > MAXD). The stage sums accumulate
   term by term in tableau order, skipping zero weights, as the eager engine's do. */
double rk_step(int B, int n, int d, const double *M, const double *V, double beta, double lam, int mode,
               int S, const double *a, const double *b, const double *e, const double *c, int fsal,
               double t, double h, double rtol, double atol, const double *x, const double *k1,
               double *x_new, double *k_last) {
    if (d > MAXD || S > 64) return -2.0;
    int size = n * d;
    double *buf = malloc(sizeof(double) * ((size_t)(S + 1) * size + work_size(n, d)));
    if (!buf) return -1.0;
    double *y = buf + (size_t)S * size, *work = y + size, worst = 0.0;
    for (int m = 0; m < B; m++) {
        const double *xm = x + (size_t)m * size;
        double *k[64];
        k[0] = (double *)(k1 + (size_t)m * size);
        for (int st = 1; st < S; st++) k[st] = buf + (size_t)st * size;
        for (int st = 1; st < S; st++) {
            for (int q = 0; q < size; q++) y[q] = xm[q];
            for (int j = 0; j < st; j++) {
                double w = h * a[st * S + j];
                if (w == 0.0) continue;
                for (int q = 0; q < size; q++) y[q] += w * k[j][q];
            }
            double ts = t + c[st] * h, scale = (mode & 3) == 1 ? beta * exp(2.0 * lam * ts) : beta;
            field_one(n, d, M, V, scale, lam, mode, y, k[st], work);
        }
        double *xn = x_new + (size_t)m * size;
        if (fsal) {
            for (int q = 0; q < size; q++) xn[q] = y[q];
        } else {
            for (int q = 0; q < size; q++) xn[q] = xm[q];
            for (int j = 0; j < S; j++) {
                double w = h * b[j];
                if (w == 0.0) continue;
                for (int q = 0; q < size; q++) xn[q] += w * k[j][q];
            }
        }
        double sum = 0.0;
        for (int q = 0; q < size; q++) {
            double err = 0.0;
            int first = 1;
            for (int j = 0; j < S; j++) {
                double w = h * e[j];
                if (w == 0.0) continue;
                err = first ? w * k[j][q] : err + w * k[j][q];
                first = 0;
            }
            double ax = fabs(xm[q]), an = fabs(xn[q]);
            double r = err / (atol + rtol * (ax > an ? ax : an));
            sum += r * r;
        }
        double rms = sqrt(sum / size);
        if (!isnan(worst) && (isnan(rms) || rms > worst)) worst = rms; /* a NaN stays */
        for (int q = 0; q < size; q++) k_last[(size_t)m * size + q] = k[S - 1][q];
    }
    free(buf);
    return worst;
}

/* Velocities of k distinct unit points y (k x d) carrying e^{log_mass_j} tokens each (the long-time
   integrator's merged system; its NumPy reference is attndyn.core.longtime._field): logits
   L_ij = beta <y_i, M y_j> + log_mass_j; weights softmax_j(L_ij) (usa_n == 0) or USA's
   e^{L_ij - beta usa_m} / usa_n; w_i = sum_j A_ij (y_j - y_i), from the differences so that the own
   term does not cancel; v_i = w_i - <w_i, y_i> y_i. Returns the largest logit gap
   max_i (max_j L_ij - min_j L_ij), or -1 when a buffer could not be allocated. */
double points_field(int k, int d, const double *y, const double *log_mass, const double *M, double beta,
                    double usa_m, double usa_n, double *v) {
    double *buf = malloc(sizeof(double) * ((size_t)k * d + k + d));
    if (!buf) return -1.0;
    double *my = buf, *L = buf + (size_t)k * d, *w = L + k, gap = 0.0;
    for (int j = 0; j < k; j++)
        for (int r = 0; r < d; r++) {
            double s = 0.0;
            for (int c = 0; c < d; c++) s += M[r * d + c] * y[j * d + c];
            my[j * d + r] = s;
        }
    for (int i = 0; i < k; i++) {
        const double *yi = y + i * d;
        double top = -INFINITY, low = INFINITY;
        for (int j = 0; j < k; j++) {
            double s = 0.0;
            for (int c = 0; c < d; c++) s += yi[c] * my[j * d + c];
            L[j] = beta * s + log_mass[j];
            if (L[j] > top) top = L[j];
            if (L[j] < low) low = L[j];
        }
        if (top - low > gap || isnan(top - low)) gap = top - low;
        double shift = usa_n > 0 ? beta * usa_m : top, total = 0.0;
        for (int j = 0; j < k; j++) {
            L[j] = exp(L[j] - shift);
            total += L[j];
        }
        double inv = usa_n > 0 ? 1.0 / usa_n : 1.0 / total;
        for (int c = 0; c < d; c++) w[c] = 0.0;
        for (int j = 0; j < k; j++)
            for (int c = 0; c < d; c++) w[c] += L[j] * (y[j * d + c] - yi[c]);
        double s = 0.0;
        for (int c = 0; c < d; c++) {
            w[c] *= inv;
            s += w[c] * yi[c];
        }
        for (int c = 0; c < d; c++) v[i * d + c] = w[c] - s * yi[c];
    }
    free(buf);
    return gap;
}
"""


def cache_dir() -> Path:
    """Where the compiled library lives: ``$ATTNDYN_CACHE``, else ``$XDG_CACHE_HOME/attndyn``, else
    ``~/.cache/attndyn``, when that folder is safe (:func:`unsafe_folder`); else a private temporary
    folder for this process, said once on stderr and removed when the process exits. A missing folder is
    created private (0700)."""
    global _PRIVATE
    if os.environ.get("ATTNDYN_CACHE"):
        chosen = Path(os.environ["ATTNDYN_CACHE"])
    else:
        base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
        chosen = base / "attndyn"
    try:
        if not os.path.lexists(chosen):
            chosen.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = unsafe_folder(chosen)
    except OSError as err:
        why = f"cannot be created ({err.strerror or err})"
    if why is None:
        return chosen
    if _PRIVATE is None or _PRIVATE[0] != chosen:
        import atexit
        import shutil
        import sys

        private = Path(tempfile.mkdtemp(prefix="attndyn-kernel-"))  # 0700, this process's own
        atexit.register(shutil.rmtree, private, ignore_errors=True)  # a loaded library outlives its file on POSIX
        _PRIVATE = (chosen, private)
        sys.stderr.write(f"attndyn: the kernel cache {chosen} {why}; using the private folder {private} for this run\n")
    return _PRIVATE[1]


_PRIVATE: tuple[Path, Path] | None = None  # (the unsafe cache folder, the private one used instead)


def _unsafe(path: Path, *, folder: bool) -> str | None:
    """Why ``path`` may not hold (or be) code this process loads: a link, not the expected kind, owned by
    another user, or writable by group or others; None when it is safe."""
    import stat

    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if folder != stat.S_ISDIR(st.st_mode) or (not folder and not stat.S_ISREG(st.st_mode)):
        return "is not a folder" if folder else "is not a regular file"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else "others" if st.st_mode & 0o002 else "its group"
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def unsafe_folder(path: Path) -> str | None:
    """Why a cache folder may not be used (see :func:`_unsafe`), or None."""
    return _unsafe(path, folder=True)


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def verified(target: Path) -> str | None:
    """None when ``target`` may be loaded: it and its side file ``<target>.sha256`` (written at build
    time) are regular files owned by this user and writable by no one else, and the library's SHA-256
    is the recorded one; else why not, in words."""
    side = target.with_name(target.name + ".sha256")
    if not os.path.lexists(target):
        return "it is not built yet"
    for path, what in ((target, "the library"), (side, "its recorded hash")):
        if not os.path.lexists(path):
            return f"{what} ({path.name}) is missing"
        why = _unsafe(path, folder=False)
        if why:
            return f"{what} ({path.name}) {why}"
    recorded = side.read_text().split("\n", 1)[0].strip()  # the first line; the size and header follow (loadable)
    actual = _sha256(target)
    if recorded != actual:
        return f"its SHA-256 {actual[:12]}... is not the recorded {recorded[:12]}..."
    return None


# the bytes of a library's start recorded at build time: a 64-bit ELF header is 64 bytes (a 32-bit one 52)
HEADER_BYTES = 64


def record(data: bytes) -> str:
    """The side file's text for the library ``data``: its SHA-256, then its size and its first
    :data:`HEADER_BYTES` bytes (the ELF header) in hex, one a line."""
    return f"{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\nheader {data[:HEADER_BYTES].hex()}\n"


def elf_problem(data: bytes) -> str | None:
    """Why ``data``, a whole file that starts with the ELF magic number, is not a complete ELF shared
    object, or None: its header, program headers and section headers must lie within the file and every
    segment the program headers map must end within it (the loader maps the file and touches those
    pages: past the end of a truncated file that touch is a SIGBUS, not an error)."""
    n = len(data)
    cls, order = data[4:5], data[5:6]
    if cls not in (b"\x01", b"\x02") or order not in (b"\x01", b"\x02"):
        return f"its ELF class {cls.hex() or 'none'} or byte order {order.hex() or 'none'} is not 1 or 2"
    wide, end = cls == b"\x02", "<" if order == b"\x01" else ">"
    head = struct.Struct(end + ("16sHHIQQQIHHHHHH" if wide else "16sHHIIIIIHHHHHH"))
    segment = struct.Struct(end + ("IIQQQQQQ" if wide else "IIIIIIII"))
    if n < head.size:
        return f"it is {n} bytes, shorter than its ELF header ({head.size} bytes)"
    _, kind, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = head.unpack_from(data)
    if kind != 3:
        return f"its ELF type is {kind}, not a shared object (3)"
    if phnum == 0 or phentsize < segment.size:
        return f"its program header table ({phnum} entries of {phentsize} bytes) is malformed"
    if phoff + phnum * phentsize > n:
        return f"its program headers end at byte {phoff + phnum * phentsize}, past its {n} bytes (truncated)"
    for k in range(phnum):
        fields = segment.unpack_from(data, phoff + k * phentsize)
        offset, size = (fields[2], fields[5]) if wide else (fields[1], fields[4])
        if offset + size > n:
            return f"its segment {k} ends at byte {offset + size}, past its {n} bytes (truncated)"
    if shnum and shoff + shnum * shentsize > n:
        return f"its section headers end at byte {shoff + shnum * shentsize}, past its {n} bytes (truncated)"
    return None


def loadable(target: Path) -> str | None:
    """None when ``target`` (already :func:`verified`) is whole: its size and first :data:`HEADER_BYTES`
    bytes are the ones recorded at build time in ``<target>.sha256``, and when it is an ELF file,
    :func:`elf_problem` finds nothing (so a truncated library is never handed to the loader, even one
    whose recorded hash, size and header were all rewritten to match); else why not, in words. A file
    that is not ELF (another platform's format) is left to the loader, whose failure rebuilds it."""
    side = target.with_name(target.name + ".sha256")
    fields = dict(line.split(" ", 1) for line in side.read_text().splitlines()[1:] if " " in line)
    try:
        size, header = int(fields["size"]), bytes.fromhex(fields["header"])
    except (KeyError, ValueError):
        return "its record holds no readable size and ELF header (an older attndyn wrote it, or it was edited)"
    with open(target, "rb") as fh:
        data = fh.read()
    if len(data) != size:
        return f"it is {len(data)} bytes, not the recorded {size}"
    if data[:HEADER_BYTES] != header:
        return "its header is not the recorded one"
    return elf_problem(data) if data[:4] == b"\x7fELF" else None


def _machine() -> str:
    """What the library is built for: ``-march=native`` code must not be loaded on another CPU (a shared
    home folder on a cluster of mixed nodes), so the CPU's model and flags are part of the cache key."""
    ident = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo") as fh:
            ident += sorted({line.strip() for line in fh if line.startswith(("model name", "flags", "Features"))})
    except OSError:
        pass
    return "|".join(ident)


# tried in order: the first is this CPU's vector units (AVX2/AVX-512 here), the second any compiler
FLAGS = (["-O3", "-march=native", "-fopenmp-simd"], ["-O2"])


def library_path(compiler: str) -> Path:
    """The cache file of the kernel built by ``compiler`` for this CPU (in :func:`cache_dir`)."""
    tag = hashlib.sha256((SOURCE + compiler + _machine()).encode()).hexdigest()[:16]
    return cache_dir() / f"attndyn_small_{tag}.so"


def _build(compiler: str, target: Path) -> bool:
    """Compile :data:`SOURCE` into ``target`` and record its SHA-256 beside it (``<target>.sha256``),
    both written then renamed from a temporary folder inside the cache folder; False (the reason in
    :data:`STATUS`) when the compiler fails."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "small.c"
        src.write_text(SOURCE)
        built = Path(tmp) / "small.so"
        for flags in FLAGS:
            cmd = [compiler, *flags, "-fPIC", "-shared", "-o", str(built), str(src), "-lm"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if done.returncode == 0:
                break
        else:
            STATUS["reason"] = f"the C compiler failed: {done.stderr.strip()[:200]}"
            return False
        os.chmod(built, 0o755)
        digest = Path(tmp) / "small.sha256"
        digest.write_text(record(built.read_bytes()))
        os.chmod(digest, 0o644)
        # a concurrent process sees the whole file or none; the library first, its hash last: a reader
        # between the two sees a mismatch and rebuilds
        os.replace(built, target)
        os.replace(digest, target.with_name(target.name + ".sha256"))
    return True


def _rebuild(compiler: str, target: Path, why: str) -> str | None:
    """Build the kernel into ``target`` (one line on stderr saying why, unless it was never built) and
    check the result as a cached one is checked; None when it may be loaded, else the reason."""
    if why != "it is not built yet":
        sys.stderr.write(f"attndyn: rebuilding the compiled kernel {target.name}: {why}\n")
    if not _build(compiler, target):
        return STATUS["reason"]
    why = verified(target) or loadable(target)
    if why is not None:  # another process's build in between, or a folder that changed under us
        return f"the kernel just built cannot be verified: {why}"
    return None


def library() -> ctypes.CDLL | None:
    """The compiled kernel (compiled on first use, then cached on disk), or ``None`` with the reason in
    :data:`STATUS`. A cached library that fails :func:`verified` or :func:`loadable`, or that the loader
    refuses, is rebuilt once, with one line on stderr saying why."""
    if STATUS["library"] is not None or STATUS["reason"] != "not tried":
        return STATUS["library"]
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        STATUS["reason"] = "no C compiler found (set CC)"
        return None
    target = library_path(compiler)
    try:
        why = verified(target) or loadable(target)
        rebuilt = why is not None
        if rebuilt and (failed := _rebuild(compiler, target, why)) is not None:
            STATUS["reason"] = failed
            return None
        try:
            lib = ctypes.CDLL(str(target))
        except OSError as err:
            if rebuilt:
                raise
            # a failed load registers nothing with the loader, so the rebuilt file is loaded afresh
            said = " ".join(str(err).split())
            if (failed := _rebuild(compiler, target, f"it did not load ({said})")) is not None:
                STATUS["reason"] = failed
                return None
            lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as err:
        STATUS["reason"] = f"could not build or load the kernel: {err}"
        return None
    dbl, ptr, i32 = ctypes.c_double, ctypes.c_void_p, ctypes.c_int
    if not all(hasattr(lib, name) for name in ("rk4_steps", "field_batch", "rk_step", "points_field", "exp_array")):
        STATUS["reason"] = f"{target} lacks the kernel's functions"
        return None
    lib.rk4_steps.argtypes = [i32, i32, i32, ptr, ptr, dbl, dbl, i32, dbl, dbl, ctypes.c_long, ctypes.c_long, ptr]
    lib.rk4_steps.restype = i32
    lib.field_batch.argtypes = [i32, i32, i32, ptr, ptr, dbl, dbl, i32, ptr, ptr]
    lib.field_batch.restype = i32
    lib.rk_step.argtypes = [i32, i32, i32, ptr, ptr, dbl, dbl, i32, i32, ptr, ptr, ptr, ptr, i32, dbl, dbl, dbl, dbl, ptr, ptr, ptr, ptr]
    lib.rk_step.restype = dbl
    lib.points_field.argtypes = [i32, i32, ptr, ptr, ptr, dbl, dbl, dbl, ptr]
    lib.points_field.restype = dbl
    lib.exp_array.argtypes = [ctypes.c_long, ptr, ptr]
    lib.exp_array.restype = None
    STATUS.update(library=lib, reason="compiled", path=str(target))
    return lib


# The largest d the C kernels take (MAXD in SOURCE); which calls use them is decided in attndyn.core.plan.
MAX_D = 16
# the C field's modes (bits 0-1; + USA_BIT for the unnormalized weights of USA), see field_body in SOURCE
MODES = {"plain": 0, "rescaled, V = lambda I": 1, "sphere, Post-LN": 2, "rescaled, any V": 3}
USA_BIT = 4


@dataclass(frozen=True, eq=False)
class Native:
    """What :func:`field` needs: the library, ``M = Q^T K`` and V as contiguous float64 arrays (kept
    alive here), the mode of the C field, lambda (V = lambda I) and beta. Built by
    :func:`attndyn.core.dynamics.native_field` once the C field is chosen."""

    lib: ctypes.CDLL
    M: np.ndarray
    V: np.ndarray
    mode: int
    lam: float
    beta: float

    @property
    def form(self) -> str:
        """The field's form: a key of :data:`MODES`."""
        return next(k for k, v in MODES.items() if v == self.mode & 3)


def native_spec(M: np.ndarray, V: np.ndarray, form: str, beta: float, *, usa: bool = False) -> Native | None:
    """The C field for ``M = Q^T K`` and ``V`` (d x d) in ``form`` (a key of :data:`MODES`), or ``None``
    where the library is unavailable (the reason in :data:`STATUS`)."""
    lib = library()
    if lib is None:
        return None
    M = np.ascontiguousarray(M, dtype=np.float64)
    V = np.ascontiguousarray(V, dtype=np.float64)
    mode = MODES[form] + (USA_BIT if usa else 0)
    return Native(lib, M, V, mode, float(V[0, 0]) if form == "rescaled, V = lambda I" else 0.0, float(beta))


def field(spec: Native, x: torch.Tensor, scale: float, M: np.ndarray | None = None) -> torch.Tensor:
    """One evaluation of the attention field at ``x`` ``(*batch, n, d)`` with logits ``scale * <x_i, M x_j>``
    (the module's field in C; a fresh tensor); ``M`` replaces the spec's ``Q^T K`` for this call (mode 3:
    ``E^T Q^T K E``, contiguous float64). Non-finite logits give NaN, as in torch."""
    if x.requires_grad:
        raise ValueError("the native field does not record gradients; prepare the model with ATTNDYN_COMPILED=0 to differentiate.")
    x = x.contiguous()
    out = torch.empty_like(x)
    n, d = x.shape[-2:]
    B = x.numel() // (n * d) if n * d else 0
    M = spec.M if M is None else np.ascontiguousarray(M, dtype=np.float64)
    rc = spec.lib.field_batch(B, n, d, M.ctypes.data, spec.V.ctypes.data, scale, spec.lam, spec.mode, x.data_ptr(), out.data_ptr())
    if rc == 2:
        raise ValueError(f"the native attention field takes d <= {MAX_D}; got d = {d}.")
    if rc != 0:
        raise MemoryError("the native attention field could not allocate its work buffer.")
    return out


Stepper = Callable[[float, torch.Tensor, float, torch.Tensor], tuple[torch.Tensor, float, torch.Tensor]]


def stepper(spec: Native, tableau: Tableau, rtol: float, atol: float) -> Stepper:
    """One adaptive step in C: ``step(t, x, h, k1) -> (x_new, error_norm, k_last)``, the stages, the
    stage sums and the controller's error norm (``solvers.rk_step`` and ``solvers.error_norm`` over the
    systems of ``x``) in one call, the controller staying in Python. ``tableau`` needs an error estimate."""
    S = len(tableau.b)
    a = np.zeros((S, S))
    for i, row in enumerate(tableau.a):
        a[i, : len(row)] = row
    b, e, c = (np.ascontiguousarray(v, dtype=np.float64) for v in (tableau.b, tableau.b_err, tableau.c))
    keep = (a, b, e, c)  # alive as long as the closure
    fn = spec.lib.rk_step

    def step(t: float, x: torch.Tensor, h: float, k1: torch.Tensor) -> tuple[torch.Tensor, float, torch.Tensor]:
        if spec.form == "rescaled, V = lambda I":
            try:
                math.exp(2.0 * spec.lam * (t + h))
            except OverflowError:
                raise FloatingPointError(
                    f"e^(tV) overflows at t={t + h:g} (V = {spec.lam:g} I): the logits beta*e^(2 lambda t) exceed float range."
                ) from None
        x = x.contiguous()
        n, d = x.shape[-2:]
        x_new, k_last = torch.empty_like(x), torch.empty_like(x)
        en = fn(x.numel() // (n * d), n, d, spec.M.ctypes.data, spec.V.ctypes.data, spec.beta, spec.lam, spec.mode, S,
                keep[0].ctypes.data, keep[1].ctypes.data, keep[2].ctypes.data, keep[3].ctypes.data, int(tableau.fsal),
                t, h, rtol, atol, x.data_ptr(), k1.contiguous().data_ptr(), x_new.data_ptr(), k_last.data_ptr())  # fmt: skip
        if en == -1.0:
            raise MemoryError("the compiled RK step could not allocate its work buffers.")
        if en < 0:
            raise ValueError(f"the compiled RK step takes d <= {MAX_D} and at most 64 stages; got d = {d}, {S} stages.")
        return x_new, en, k_last

    return step


def _address(a: np.ndarray) -> int:
    """The data address of a C-contiguous float64 array: the buffer protocol where the array is
    writable (the cheaper call), else ``.ctypes``."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def points_kernel(M: np.ndarray | None, d: int, beta: float, usa: tuple[float, int] | None = None) -> Callable | None:
    """``longtime._field`` in C for fixed ``M`` (``None``: the identity), ``beta`` and ``usa``:
    ``kernel(y, log_mass) -> (velocities, largest logit gap)``, the same arguments and results as the
    NumPy reference; ``None`` where the library is unavailable or ``ATTNDYN_COMPILED=0``. It is resolved
    once per run: the integrator calls it at every stage (350,000 times in the demo's metastability
    claim), so the per-call Python is a few array addresses."""
    if os.environ.get("ATTNDYN_COMPILED", "1") == "0":
        return None
    lib = library()
    if lib is None:
        return None
    Mc = np.ascontiguousarray(np.eye(d) if M is None else M, dtype=np.float64)
    mptr, fn = Mc.ctypes.data, lib.points_field
    m, n = (float(usa[0]), float(usa[1])) if usa is not None else (0.0, 0.0)
    beta = float(beta)

    def kernel(y: np.ndarray, log_mass: np.ndarray) -> tuple[np.ndarray, float]:
        y = np.ascontiguousarray(y, dtype=np.float64)
        log_mass = np.ascontiguousarray(log_mass, dtype=np.float64)
        v = np.empty_like(y)
        gap = fn(y.shape[0], d, _address(y), _address(log_mass), mptr, beta, m, n, _address(v))
        if gap == -1.0:
            raise MemoryError(f"the compiled points field could not allocate its buffers ({Mc.shape[0]} dimensions).")
        return v, gap

    return kernel


# one call into the C loop integrates about this many attention entries (a fraction of a second), so
# that progress is reported and Ctrl-C is seen (between calls) at least that often
CHUNK_ENTRIES = 2.5e8


def run(
    spec: Native,
    x: torch.Tensor,
    times: list[float],
    counts: list[int],
    dt: float,
    progress: Callable[[float], None] | None = None,
    observe: Callable | None = None,
) -> tuple[torch.Tensor, dict, torch.Tensor | None] | None:
    """Integrate ``counts[k]`` RK4 steps of ``dt`` between consecutive ``times`` and return the saved states
    ``(len(times), *x.shape)``, the stats and the stacked ``observe(t, x)`` of every save (as the eager solver
    records them); ``spec``'s mode is the plain field, the sphere's (Post-LN) or the rescaled one with
    V = lambda I."""
    lib, M, V, mode, lam = spec.lib, spec.M, spec.V, spec.mode, spec.lam
    n, d = x.shape[-2:]
    B = math.prod(x.shape[:-2])
    state = np.ascontiguousarray(x.detach().numpy(), dtype=np.float64).reshape(B, n, d).copy()
    out = [state.copy()]
    seen = None if observe is None else [observe(times[0], x)]
    done = 0
    chunk = max(1, int(CHUNK_ENTRIES / (4 * B * n * n)))
    for a, (b, count) in enumerate(zip(times[1:], counts, strict=True)):
        left = count
        while left:
            k = min(left, chunk)
            rc = lib.rk4_steps(B, n, d, M.ctypes.data, V.ctypes.data, spec.beta, lam, mode,
                               float(times[0]), float(dt), int(k), int(done), state.ctypes.data)  # fmt: skip
            if rc != 0:
                raise MemoryError("the compiled RK4 kernel could not allocate its work buffers.")
            done += k
            left -= k
            if progress is not None and left:
                progress(times[0] + done * dt)
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
