"""Mean-field solver: the continuity equation of self-attention on the circle (SPEC §1.6, §8.8).

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
the package's generic adaptive Dopri5 (``attndyn.solvers.integrate``).

Resolution: at every save time the solver checks that the density is not negative beyond round-off and
that the top third of the spectrum holds no more than 1e-8 of it; otherwise it raises ``ResolutionError``
naming the time (clusters sharper than the grid: refine M or hand over to particles). Returns
``MeanFieldSolution(ts, theta, rho)``; ``order_parameter`` and ``mode_amplitude`` read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import ive

from .solvers import AdaptiveStep, Dopri5, integrate

# the density may dip below 0 by this fraction of its maximum (round-off), no more
NEGATIVE_TOL = 1e-8
# spectral energy allowed in the top third of the modes, relative to the whole
TAIL_TOL = 1e-8


class ResolutionError(RuntimeError):
    """The grid no longer resolves the density (negative values or energy in the top modes)."""


@dataclass(frozen=True)
class MeanFieldSolution:
    """``ts`` ``(T,)``, ``theta`` ``(M,)`` and ``rho`` ``(T, M)`` (density w.r.t. d theta, mass 1)."""

    ts: np.ndarray
    theta: np.ndarray
    rho: np.ndarray


@dataclass(frozen=True)
class _Args:
    z_coef: torch.Tensor  # (M//2 + 1,) complex: Z_m / rho_m
    v_coef: torch.Tensor  # (M//2 + 1,) complex: v_m / rho_m
    ik: torch.Tensor  # (M//2 + 1,) complex: i m, de-aliased
    usa: bool
    M: int


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


def _field(t: float, rho: torch.Tensor, args: _Args) -> torch.Tensor:
    rho_hat = torch.fft.rfft(rho) / args.M
    v = torch.fft.irfft(args.v_coef * rho_hat, n=args.M) * args.M
    if not args.usa:
        v = v / (torch.fft.irfft(args.z_coef * rho_hat, n=args.M) * args.M)
    flux_hat = torch.fft.rfft(rho * v)
    return -torch.fft.irfft(args.ik * flux_hat, n=args.M)


def check_density(rho0: np.ndarray) -> np.ndarray:
    """Validate an initial density on an equispaced grid: finite, non-negative, mass 1 (to 1e-8)."""
    rho = np.asarray(rho0, dtype=np.float64)
    if rho.ndim != 1 or rho.size < 8:
        raise ValueError(f"rho0 must be a 1-D density on at least 8 grid points; got shape {rho.shape}.")
    if not np.isfinite(rho).all():
        raise ValueError("rho0 contains non-finite values.")
    if rho.min() < 0:
        raise ValueError(f"rho0 is negative somewhere (min {rho.min():.3g}); a density must be >= 0.")
    mass = rho.sum() * 2 * math.pi / rho.size
    if abs(mass - 1) > 1e-8:
        raise ValueError(f"rho0 has mass {mass:.12g}, not 1 (sum(rho) * 2 pi / M must be 1).")
    return rho


def solve_circle(
    rho0: np.ndarray,
    ts: np.ndarray,
    *,
    beta: float,
    usa: bool = False,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 1_000_000,
) -> MeanFieldSolution:
    """Evolve ``rho0`` (M points on [0, 2 pi)) and save it at ``ts`` (see the module docstring)."""
    rho = check_density(rho0)
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta = {beta!r} must be a finite number >= 0.")
    M = rho.size
    # the kernel must be resolved: its coefficients at the de-aliasing cut must be negligible
    cut = M // 3
    if beta > 0 and ive(cut, beta) / ive(0, beta) > 1e-13:
        raise ValueError(f"M = {M} modes are too few for beta = {beta:g}: I_{cut}(beta) / I_0(beta) = {ive(cut, beta) / ive(0, beta):.2g} > 1e-13.")
    z, v = _coefficients(M, beta, usa)
    m = np.arange(M // 2 + 1)
    ik = 1j * m * (m <= cut)
    args = _Args(torch.as_tensor(z), torch.as_tensor(v), torch.as_tensor(ik), usa, M)

    def check(t: float, r: torch.Tensor) -> torch.Tensor:
        arr = r.numpy()
        if arr.min() < -NEGATIVE_TOL * max(arr.max(), 1e-300):
            raise ResolutionError(f"the density became negative at t = {t:.6g} (min {arr.min():.3g}): the grid of M = {M} no longer resolves it.")
        power = np.abs(np.fft.rfft(arr)) ** 2
        tail = power[2 * len(power) // 3 :].sum() / power.sum()
        if tail > TAIL_TOL:
            raise ResolutionError(f"at t = {t:.6g} the top third of the M = {M} modes holds {tail:.2g} of the spectrum: refine M.")
        return r.new_zeros(())

    sol = integrate(
        _field,
        torch.as_tensor(rho),
        ts,
        args,
        solver=Dopri5(),
        controller=AdaptiveStep(rtol=rtol, atol=atol),
        observe=check,
        max_steps=max_steps,
    )
    return MeanFieldSolution(np.asarray(sol.ts), 2 * math.pi * np.arange(M) / M, sol.xs.numpy())


def order_parameter(rho: np.ndarray) -> np.ndarray:
    """|int e^{i theta} rho d theta| for densities ``(..., M)``."""
    return mode_amplitude(rho, 1)


def mode_amplitude(rho: np.ndarray, k: int) -> np.ndarray:
    """|int e^{i k theta} rho d theta| (the k-th Fourier amplitude, 1 at k = 0 for mass 1)."""
    M = rho.shape[-1]
    return np.abs(np.fft.fft(rho, axis=-1)[..., (-k) % M]) * 2 * math.pi / M
