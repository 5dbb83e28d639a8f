"""Mean-field solver: the continuity equation of self-attention on the circle (arXiv 2305.05465 §6).

Contract
--------
``solve_circle(rho0, ts, beta=..., usa=False, rtol=..., atol=...)`` evolves a density ``rho(theta)``
on M equispaced points of [0, 2 pi) (normalised: ``sum(rho) * 2 pi / M = 1``) by

    d_t rho + d_theta(rho v[rho]) = 0,   v[rho](theta) = int e^{beta cos(phi - theta)} sin(phi - theta) rho(phi) dphi,

divided by Z(theta) = int e^{beta cos(phi - theta)} rho(phi) dphi for SA (Q = K = V = I on S^1). The kernel
is diagonal in Fourier: with K(x) = e^{beta cos x} = sum_k I_k(beta) e^{ikx}, the m-th coefficients are
Z_m = 2 pi I_m(beta) rho_m and v_m = 2 pi (i m / beta) I_m(beta) rho_m (beta > 0; v_{+-1} = +-i pi rho_{+-1}
at beta = 0). The Bessel functions are exponentially scaled (``ive``): SA's ratio v / Z never overflows;
USA multiplies by e^beta. The flux derivative is pseudo-spectral (FFT, 2/3 de-aliasing) and time steps are
the package's generic adaptive Dopri5 (``attndyn.core.solvers.integrate``).

Resolution: at every save time the solver checks that the density is not negative beyond round-off and
that the top third of the spectrum holds no more than 1e-8 of it; otherwise it raises ``ResolutionError``
naming the time (clusters sharper than the grid: refine M or hand over to particles). Returns
``MeanFieldSolution(ts, theta, rho)``; ``order_parameter`` and ``mode_amplitude`` read it.

``method="finite-volume"`` is the robust alternative: cell averages on the same grid, an upwind flux
with minmod-limited linear reconstruction (second order where the density is smooth, positivity
preserving; Carrillo, Chertock, Huang, arXiv 1402.4252) and the three-stage strong-stability-
preserving Runge-Kutta scheme of Shu and Osher with a CFL-limited step (``cfl`` <= 1/2 of the cell
crossing time). Velocities at the cell faces come from the same Fourier coefficients, shifted by half a
cell. It conserves mass to round-off and never makes the density negative, so it keeps going where the
spectral method stops, at first order in the cells where clusters are sharper than the grid.

Also here: ``w1_circle(angles, sol_or_density)`` (Wasserstein-1 on the circle: the L1 distance of the
CDFs, minimised over the constant) and ``initial_density(kind, M, **params)`` (uniform with a
perturbation, wrapped Cauchy, von Mises mixture, or smoothed samples).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from scipy.special import ive

from attndyn.core.solvers import RK4, AdaptiveStep, Dopri5, FixedStep, Solution, integrate
from attndyn.core.threads import policy as threads_policy

Method = Literal["spectral", "finite-volume"]
METHODS = ("spectral", "finite-volume")

# the density may dip below 0 by this fraction of its maximum (round-off), no more
NEGATIVE_TOL = 1e-8
# spectral energy allowed in the top third of the modes, relative to the whole
TAIL_TOL = 1e-8


class ResolutionError(RuntimeError):
    """The grid no longer resolves the density (negative values or energy in the top modes)."""


@dataclass(frozen=True)
class MeanFieldSolution:
    """``ts`` ``(T,)``, ``theta`` ``(M,)`` and ``rho`` ``(T, M)`` (density w.r.t. d theta, mass 1);
    ``steps`` (accepted time steps) and ``method``."""

    ts: np.ndarray
    theta: np.ndarray
    rho: np.ndarray
    steps: int = 0
    method: str = "spectral"


@dataclass(frozen=True)
class _Args:
    coef: torch.Tensor  # (2, M//2 + 1) complex: v_m / rho_m and Z_m / rho_m
    minus_ik: torch.Tensor  # (M//2 + 1,) complex: -i m, de-aliased
    usa: bool
    M: int
    diffusion: torch.Tensor | None = None  # (M//2 + 1,): -m^2 / kappa (the noise sqrt(2 / kappa) dW), or None


def _coefficients(M: int, beta: float, usa: bool) -> tuple[np.ndarray, np.ndarray]:
    m = np.arange(M // 2 + 1)
    if beta == 0:
        z = np.zeros(len(m))
        z[0] = 2 * math.pi
        v = np.zeros(len(m), dtype=complex)
        v[1] = 1j * math.pi
        return z.astype(complex), v
    scaled = ive(m, beta)  # I_m(beta) e^{-beta}
    factor = math.exp(beta) if usa else 1.0  # SA: e^beta cancels in v / Z
    if usa and not math.isfinite(factor):
        raise ValueError(f"beta = {beta} is too large for USA in float64 (e^beta overflows).")
    z = 2 * math.pi * scaled * factor
    v = 2j * math.pi * m / beta * scaled * factor
    return z.astype(complex), v


# On the CPU, scipy.fft (pocketfft) beats torch.fft from this many grid points on, and torch is faster
# below (benchmarks/meanfield.py)
SCIPY_FFT_FROM = 2048


def _rfft(x: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cpu" and x.shape[-1] >= SCIPY_FFT_FROM:
        import scipy.fft

        return torch.from_numpy(scipy.fft.rfft(x.numpy(), axis=-1))
    return torch.fft.rfft(x)


def _irfft(X: torch.Tensor, n: int) -> torch.Tensor:
    if X.device.type == "cpu" and n >= SCIPY_FFT_FROM:
        import scipy.fft

        return torch.from_numpy(scipy.fft.irfft(X.numpy(), n=n, axis=-1))
    return torch.fft.irfft(X, n=n)


def _field(t: float, rho: torch.Tensor, args: _Args) -> torch.Tensor:
    """-d_theta(rho v[rho]): four FFTs (the two inverse transforms of v and Z in one batched call)."""
    rho_hat = _rfft(rho)  # the 1/M of the coefficients and the M of the inverse cancel
    if args.usa:
        flux = _irfft(args.coef[0] * rho_hat, n=args.M).mul_(rho)
    else:
        both = _irfft(args.coef * rho_hat, n=args.M)
        flux = both[0].div_(both[1]).mul_(rho)
    if args.diffusion is not None:  # d_t rho = -d_theta(rho v) + (1 / kappa) d_theta^2 rho
        return _irfft(args.minus_ik * _rfft(flux) + args.diffusion * rho_hat, n=args.M)
    return _irfft(args.minus_ik * _rfft(flux), n=args.M)


def finite_vector(x: np.ndarray, name: str, min_size: int, what: str) -> np.ndarray:
    """``x`` as a float64 vector of at least ``min_size`` finite entries, else ValueError naming ``name``."""
    v = np.asarray(x, dtype=np.float64)
    if v.ndim != 1 or v.size < min_size:
        raise ValueError(f"{name} must be {what}; got shape {v.shape}.")
    if not np.isfinite(v).all():
        raise ValueError(f"{name} contains non-finite values.")
    return v


def check_resolution(t: float, values: np.ndarray, power: np.ndarray, grid: str, remedy: str) -> None:
    """Raise ResolutionError at time ``t`` when the density ``values`` dips below zero beyond round-off or
    the top third of its spectrum ``power`` holds more than TAIL_TOL of the whole (``grid`` names the grid)."""
    if values.min() < -NEGATIVE_TOL * max(values.max(), 1e-300):
        raise ResolutionError(f"the density became negative at t = {t:.6g} (min {values.min():.3g}): {grid} no longer resolves it.")
    tail = power[2 * len(power) // 3 :].sum() / power.sum()
    if tail > TAIL_TOL:
        raise ResolutionError(f"at t = {t:.6g} the top third of the spectrum on {grid} holds {tail:.2g} of it: {remedy}.")


def check_density(rho0: np.ndarray) -> np.ndarray:
    """Validate an initial density on an equispaced grid: finite, non-negative, mass 1 (to 1e-8)."""
    rho = finite_vector(rho0, "rho0", 8, "a 1-D density on at least 8 grid points")
    if rho.min() < 0:
        raise ValueError(f"rho0 is negative somewhere (min {rho.min():.3g}); a density must be >= 0.")
    mass = rho.sum() * 2 * math.pi / rho.size
    if abs(mass - 1) > 1e-8:
        raise ValueError(f"rho0 has mass {mass:.12g}, not 1 (sum(rho) * 2 pi / M must be 1).")
    return rho


def check_run(beta: float, ts: np.ndarray | list[float], dt: float | None) -> np.ndarray:
    """Validate a solver's beta (finite, >= 0), save times (finite, increasing, >= 0) and fixed step; returns ts as float64."""
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta = {beta!r} must be a finite number >= 0.")
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.size < 1 or not np.isfinite(ts).all() or (np.diff(ts) <= 0).any() or ts[0] < 0:
        raise ValueError(f"ts must be finite, increasing and >= 0; got {ts!r}.")
    if dt is not None and not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt = {dt!r} must be a finite number > 0.")
    return ts


def step_through(
    field: Callable,
    x0: torch.Tensor,
    ts: np.ndarray,
    args: object,
    *,
    rtol: float,
    atol: float,
    dt: float | None,
    observe: Callable,
    max_steps: int,
    progress: Callable[[float], None] | None = None,
) -> Solution:
    """Adaptive Dopri5 at ``rtol``/``atol``, or RK4 at the fixed step ``dt`` when one is given; ``observe`` at every
    save, ``progress(t)`` after every accepted step."""
    solver, controller = (Dopri5(), AdaptiveStep(rtol=rtol, atol=atol)) if dt is None else (RK4(), FixedStep(dt))
    return integrate(field, x0, ts, args, solver=solver, controller=controller, observe=observe, max_steps=max_steps, progress=progress)


def solve_circle(
    rho0: np.ndarray,
    ts: np.ndarray,
    *,
    beta: float,
    usa: bool = False,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 1_000_000,
    method: Method = "spectral",
    cfl: float = 0.4,
    dt: float | None = None,
    threads: int | None = None,
    progress: Callable[[float], None] | None = None,
    kappa: float | None = None,
) -> MeanFieldSolution:
    """Evolve ``rho0`` (M points on [0, 2 pi)) and save it at ``ts`` (see the module docstring).

    ``kappa``: with noise, the particles' sqrt(2 / kappa) dW (the `noisy` claim's) adds (1 / kappa) d_theta^2 rho, applied
    exactly in Fourier (-m^2 / kappa); spectral method only. None (the default): no noise.

    Spectral runs step with adaptive Dopri5 at ``rtol``/``atol``, or with classical RK4 at a fixed
    step ``dt`` when one is given (no error control: the caller owns the accuracy).
    ``threads``: intra-op threads for this call, as for :func:`attndyn.simulate`; ``progress(t)``
    after every accepted step.
    """
    rho = check_density(rho0)
    ts = check_run(beta, ts, dt)
    if method not in METHODS:
        raise ValueError(f"method = {method!r} is not one of {', '.join(METHODS)}.")
    M = rho.size
    # the kernel must be resolved: its coefficients at the de-aliasing cut must be negligible
    cut = M // 3
    if beta > 0 and ive(cut, beta) / ive(0, beta) > 1e-13:
        raise ValueError(f"M = {M} modes are too few for beta = {beta:g}: I_{cut}(beta) / I_0(beta) = {ive(cut, beta) / ive(0, beta):.2g} > 1e-13.")
    if kappa is not None:
        if not (isinstance(kappa, int | float) and math.isfinite(kappa) and kappa > 0):
            raise ValueError(f"kappa = {kappa!r} must be a finite number > 0 (the noise is sqrt(2 / kappa) dW).")
        if method != "spectral":
            raise ValueError("kappa (diffusion) is implemented for method='spectral' only.")
    if method == "finite-volume":
        if not 0 < cfl <= 0.5:
            raise ValueError(f"cfl = {cfl} must be in (0, 0.5] for the scheme to preserve positivity.")
        return _finite_volume(rho, ts, beta=beta, usa=usa, cfl=cfl, max_steps=max_steps, progress=progress)
    with threads_policy(float(M), threads):  # FFTs of M points: one thread below the crossover
        z, v = _coefficients(M, beta, usa)
        m = np.arange(M // 2 + 1)
        minus_ik = -1j * m * (m <= cut)
        diffusion = None if kappa is None else torch.as_tensor(-(m.astype(np.float64) ** 2) / kappa)
        args = _Args(torch.as_tensor(np.stack([v, z])), torch.as_tensor(minus_ik), usa, M, diffusion)

        def check(t: float, r: torch.Tensor) -> torch.Tensor:
            arr = r.numpy()
            check_resolution(t, arr, np.abs(np.fft.rfft(arr)) ** 2, f"the grid of M = {M}", "refine M")
            return r.new_zeros(())

        sol = step_through(_field, torch.as_tensor(rho), ts, args, rtol=rtol, atol=atol, dt=dt, observe=check, max_steps=max_steps, progress=progress)
        return MeanFieldSolution(np.asarray(sol.ts), 2 * math.pi * np.arange(M) / M, sol.xs.numpy(), int(sol.stats["steps"]), "spectral")


def _face_velocity(rho: np.ndarray, z: np.ndarray, v: np.ndarray, shift: np.ndarray, usa: bool) -> np.ndarray:
    """v[rho] (divided by Z for SA) at the faces theta_i + h/2 (the density's cell values as point masses)."""
    M = rho.size
    rho_hat = np.fft.rfft(rho)
    vel = np.fft.irfft(v * shift * rho_hat, n=M)
    if not usa:
        vel = vel / np.fft.irfft(z * shift * rho_hat, n=M)
    return vel


def _minmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(a * b > 0, np.sign(a) * np.minimum(np.abs(a), np.abs(b)), 0.0)


def _fv_rhs(rho: np.ndarray, vel: np.ndarray, h: float) -> np.ndarray:
    """-(F_{i+1/2} - F_{i-1/2}) / h with the upwind flux of the minmod-reconstructed face values."""
    forward = np.roll(rho, -1) - rho
    slope = _minmod(forward, rho - np.roll(rho, 1))  # times h: the limited increment per cell
    east = rho + 0.5 * slope  # value at the right face of cell i
    west = np.roll(rho - 0.5 * slope, -1)  # value of cell i + 1 at the same face
    flux = np.maximum(vel, 0.0) * east + np.minimum(vel, 0.0) * west
    return -(flux - np.roll(flux, 1)) / h


def _finite_volume(
    rho: np.ndarray, ts: np.ndarray, *, beta: float, usa: bool, cfl: float, max_steps: int, progress: Callable[[float], None] | None = None
) -> MeanFieldSolution:
    M = rho.size
    h = 2 * math.pi / M
    z, v = _coefficients(M, beta, usa)
    shift = np.exp(0.5j * h * np.arange(M // 2 + 1))  # evaluate at theta + h/2
    out = np.empty((ts.size, M))
    t, steps = 0.0, 0
    for k, target in enumerate(ts):
        while t < target:
            vel = _face_velocity(rho, z, v, shift, usa)
            top = float(np.abs(vel).max())
            dt = min(target - t, cfl * h / top if top > 0 else target - t)
            # Shu-Osher SSP-RK3: convex combinations of forward-Euler steps, each positivity preserving
            r1 = rho + dt * _fv_rhs(rho, vel, h)
            r2 = 0.75 * rho + 0.25 * (r1 + dt * _fv_rhs(r1, _face_velocity(r1, z, v, shift, usa), h))
            rho = rho / 3 + 2 / 3 * (r2 + dt * _fv_rhs(r2, _face_velocity(r2, z, v, shift, usa), h))
            t = target if target - t <= dt else t + dt
            steps += 1
            if progress is not None:
                progress(t)
            if steps > max_steps:
                raise RuntimeError(f"the finite-volume scheme took more than max_steps = {max_steps} steps before t = {target:g}.")
        out[k] = rho
    return MeanFieldSolution(ts, h * np.arange(M), out, steps, "finite-volume")


def take_params(what: str, params: dict, names: tuple, defaults: dict) -> list:
    """The values of the required ``names`` and of the optional ``defaults`` in ``params``, in that order;
    an unknown or a missing parameter raises ValueError naming it (``what``: "initial density 'uniform'")."""
    unknown = set(params) - set(names) - set(defaults)
    if unknown:
        raise ValueError(f"{what} has no parameter {sorted(unknown)[0]!r}; it takes {', '.join([*names, *defaults])}.")
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError(f"{what} needs {missing[0]!r}.")
    return [params[n] for n in names] + [params.get(k, d) for k, d in defaults.items()]


def initial_density(kind: str, M: int, **params) -> np.ndarray:
    """An initial density on M grid points, mass 1. Kinds and their parameters:

    * ``uniform``: ``modes`` (list of ints), ``amplitude`` (eps, default 0), ``phases`` (optional):
      (1 + eps sum_k cos(k theta + phase_k)) / (2 pi);
    * ``wrapped-cauchy``: ``R0`` in (0, 1) (the order parameter), ``mean`` (default 0);
    * ``von-mises``: ``means``, ``kappas``, ``weights`` (lists of equal length; weights sum to 1);
    * ``samples``: ``angles`` (a list), ``kappa`` (the von Mises smoothing, default 50):
      the average of von Mises bumps centred at the samples.
    """
    if M < 8:
        raise ValueError(f"M = {M} must be at least 8.")
    theta = 2 * math.pi * np.arange(M) / M

    def vm(mean, kappa):
        if not kappa >= 0:
            raise ValueError(f"a von Mises concentration must be >= 0; got {kappa}.")
        return np.exp(kappa * (np.cos(theta - mean) - 1)) / (2 * math.pi * ive(0, kappa))

    def take(*names, **defaults):
        return take_params(f"initial density {kind!r}", params, names, defaults)

    if kind == "uniform":
        modes, amplitude, phases = take(modes=[], amplitude=0.0, phases=None)
        phases = [0.0] * len(modes) if phases is None else phases
        if len(phases) != len(modes):
            raise ValueError(f"phases has {len(phases)} entries for {len(modes)} modes.")
        rho = (1 + amplitude * sum((np.cos(k * theta + p) for k, p in zip(modes, phases, strict=True)), np.zeros(M))) / (2 * math.pi)
    elif kind == "wrapped-cauchy":
        R0, mean = take("R0", mean=0.0)
        if not 0 <= R0 < 1:
            raise ValueError(f"R0 = {R0} must be in [0, 1).")
        rho = (1 - R0**2) / (1 + R0**2 - 2 * R0 * np.cos(theta - mean)) / (2 * math.pi)
    elif kind == "von-mises":
        means, kappas, weights = take("means", "kappas", "weights")
        if not len(means) == len(kappas) == len(weights) or not means:
            raise ValueError(f"means, kappas and weights must have the same length >= 1; got {len(means)}, {len(kappas)}, {len(weights)}.")
        if min(weights) < 0 or abs(sum(weights) - 1) > 1e-12:
            raise ValueError(f"weights must be >= 0 and sum to 1; got {list(weights)}.")
        rho = sum(w * vm(m, k) for m, k, w in zip(means, kappas, weights, strict=True))
    elif kind == "samples":
        angles, kappa = take("angles", kappa=50.0)
        angles = np.asarray(angles, dtype=np.float64).ravel()
        if angles.size == 0 or not np.isfinite(angles).all():
            raise ValueError("samples: angles must be a non-empty list of finite numbers.")
        rho = np.mean([vm(a, kappa) for a in angles], axis=0)
    else:
        raise ValueError(f"initial density kind {kind!r} is not one of uniform, wrapped-cauchy, von-mises, samples.")
    if rho.min() < 0:
        raise ValueError(f"the initial density is negative somewhere (min {rho.min():.3g}); lower the amplitude.")
    return rho / (rho.sum() * 2 * math.pi / M)  # the grid's mass exactly 1 (quadrature of a smooth density)


def cdf_circle(rho: np.ndarray, points: np.ndarray, *, refine: int = 16) -> np.ndarray:
    """G(p) = int_0^p rho d theta at ``points`` in [0, 2 pi], from the Fourier series of ``rho``.

    G = c_0 p + P(p) - P(0) with P the periodic antiderivative; P is evaluated by a zero-padded inverse
    FFT on ``refine * M`` points and interpolated linearly (error ~ 1e-9 for a smooth density on M = 512).
    """
    M = rho.shape[-1]
    c = np.fft.rfft(rho) / M  # rho(theta) = c_0 + 2 Re sum_{m >= 1} c_m e^{i m theta} (Nyquist term halved)
    if M % 2 == 0:
        c[-1] /= 2
    L = refine * M
    spec = np.zeros(L // 2 + 1, dtype=complex)
    m = np.arange(1, c.size)
    spec[1 : c.size] = c[1:] / (1j * m)
    P = np.fft.irfft(spec, n=L) * L  # = 2 Re sum_m c_m e^{i m theta} / (i m) on the fine grid
    grid = 2 * math.pi * np.arange(L + 1) / L
    P = np.append(P, P[0])
    p = np.asarray(points, dtype=np.float64)
    return c[0].real * p + np.interp(np.mod(p, 2 * math.pi), grid, P) - P[0]


def w1_circle(angles: np.ndarray, rho: np.ndarray) -> float | np.ndarray:
    """Wasserstein-1 distance on the circle (arc length) between the empirical measure of ``angles``
    ``(n,)`` or ``(S, n)`` and the density ``rho`` on an equispaced grid:
    min_c int_0^{2 pi} |F_n(theta) - G(theta) - c| d theta (one value per system).

    The integral is a trapezoid rule on the union of a fine grid (2 M points) and the particles (just
    left and right of each), on which F_n is constant between nodes and G smooth; |F_n - G - c| is integrated
    exactly on each linear piece (sign changes included), so the error is O(h^2) of G's curvature.
    """
    A = np.mod(np.asarray(angles, dtype=np.float64), 2 * math.pi)
    if A.ndim not in (1, 2) or A.shape[-1] == 0 or not np.isfinite(A).all():
        raise ValueError(f"angles must be finite, of shape (n,) or (S, n) with n >= 1; got shape {A.shape}.")
    single = A.ndim == 1
    A = np.sort(np.atleast_2d(A), axis=-1)
    fine = np.linspace(0.0, 2 * math.pi, 2 * rho.shape[-1] + 1)
    G_fine = cdf_circle(rho, fine)
    eps = 1e-12
    near = np.clip(np.concatenate([A - eps, A + eps], axis=-1), 0.0, 2 * math.pi)
    G_near = cdf_circle(rho, near.ravel()).reshape(near.shape)
    out = np.empty(len(A))
    for s, a in enumerate(A):
        pts = np.concatenate([fine, near[s]])
        G = np.concatenate([G_fine, G_near[s]])
        order = np.argsort(pts, kind="stable")
        pts, G = pts[order], G[order]
        D = np.searchsorted(a, pts, side="right") / a.size - G
        dx = np.diff(pts)
        w = np.zeros(pts.size)
        w[:-1] += dx / 2
        w[1:] += dx / 2
        # the best constant is a weighted median of D
        by = np.argsort(D)
        cum = np.cumsum(w[by])
        c = D[by][np.searchsorted(cum, cum[-1] / 2)]
        lo, hi = D[:-1] - c, D[1:] - c
        same = lo * hi >= 0
        # |linear| integrated exactly on each piece, also where it changes sign inside
        piece = np.where(same, (np.abs(lo) + np.abs(hi)) / 2, (lo**2 + hi**2) / (2 * np.maximum(np.abs(lo) + np.abs(hi), 1e-300)))
        out[s] = (dx * piece).sum()
    return float(out[0]) if single else out


def order_parameter(rho: np.ndarray) -> np.ndarray:
    """|int e^{i theta} rho d theta| for densities ``(..., M)``."""
    return mode_amplitude(rho, 1)


def mode_amplitude(rho: np.ndarray, k: int) -> np.ndarray:
    """|int e^{i k theta} rho d theta| (the k-th Fourier amplitude, 1 at k = 0 for mass 1)."""
    M = rho.shape[-1]
    return np.abs(np.fft.fft(rho, axis=-1)[..., (-k) % M]) * 2 * math.pi / M
