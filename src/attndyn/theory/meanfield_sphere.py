"""Mean field on the sphere S^2 for zonal densities: a Legendre-Galerkin solver (arXiv 2305.05465 §6; arXiv 2410.23228).

Contract
--------
A zonal density on S^2 depends only on the height u = <x, e_3> in [-1, 1]. It is stored by its
Legendre coefficients ``a`` ``(L + 1,)``: rho(u) = sum_l a_l P_l(u), as a density with respect to
the normalised surface measure (so u is distributed with density rho(u) / 2 on [-1, 1], a_0 = 1,
and the zonal moment E[P_l(u)] = a_l / (2 l + 1)).

``solve_sphere(a0, ts, beta=..., usa=False)`` evolves it by the continuity equation of Q = K = V = I
on S^2 (SA, or USA with ``usa=True``). By Funk-Hecke the convolution
F(x) = int e^{beta <x, y>} rho(y) d sigma(y) is diagonal, F = sum_l K_l a_l P_l(u) with
K_l(beta) = sqrt(pi / (2 beta)) I_{l + 1/2}(beta) (arXiv 2410.23228 with d = 3), and the velocity is a
tangential gradient, v = grad_S log F / beta (SA) or grad_S F / beta (USA). For zonal fields
v = w(u) grad_S u with |grad_S u|^2 = 1 - u^2, so

    d_t rho = -d_u[(1 - u^2) rho w],    w = F' / (beta F) (SA) or F' / beta (USA),

and, tested against P_l and integrated by parts (the flux vanishes at the poles),

    d_t a_l = (2 l + 1) / 2 * int_{-1}^{1} P_l'(u) (1 - u^2) rho(u) w(u) du.

The integral is evaluated by Gauss-Legendre quadrature on 3 (L + 1) / 2 nodes (exact for the
polynomial USA integrand), mass (a_0) is conserved exactly, and one right-hand side is four
matrix-vector products of size about 1.5 L x L. Linearised about the uniform state (a = e_0), a
degree-l coefficient grows at l (l + 1) K_l / (beta K_0) (SA) or l (l + 1) K_l / beta (USA), the
rates of arXiv 2410.23228: the claims ``mode-selection`` and ``mean-field-limit`` check both the rates and the
particles in d = 3 against this solver.

Steps are the package's adaptive Dopri5 (``attndyn.core.solvers.integrate``). At every save the
solver checks that the density is not negative at the nodes beyond round-off and that the top third of
the degrees holds no more than 1e-8 of the L^2 norm; otherwise it raises
:class:`attndyn.theory.meanfield.ResolutionError` naming the time (clusters sharper than degree L).

Also here: ``zonal_density(kind, L, **params)`` (uniform with a perturbation, or a mixture of
von Mises-Fisher caps at the poles), ``density(a, u)``, ``cdf(a, u)``, ``moments(a, ls)`` and
``sample(a, uniforms)`` (points on S^2 whose heights have the density, by inverse transform).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import ive

from attndyn.core.threads import policy as threads_policy
from attndyn.theory.meanfield import TAIL_TOL, check_resolution, check_run, finite_vector, step_through, take_params


@dataclass(frozen=True)
class ZonalSolution:
    """``ts`` ``(T,)`` and Legendre coefficients ``coeffs`` ``(T, L + 1)``; ``steps`` (accepted steps)."""

    ts: np.ndarray
    coeffs: np.ndarray
    steps: int = 0

    @property
    def degree(self) -> int:
        return self.coeffs.shape[-1] - 1


def legendre_table(L: int, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P_l(u) and P_l'(u) for l = 0..L at the points ``u``: two arrays ``(len(u), L + 1)``.

    Bonnet's recurrence for the values, P'_{l+1} = P'_{l-1} + (2 l + 1) P_l for the derivatives (both
    stable on [-1, 1]).
    """
    u = np.asarray(u, dtype=np.float64)
    P = np.zeros((u.size, L + 1))
    D = np.zeros((u.size, L + 1))
    P[:, 0] = 1.0
    if L >= 1:
        P[:, 1] = u
        D[:, 1] = 1.0
    for k in range(1, L):
        P[:, k + 1] = ((2 * k + 1) * u * P[:, k] - k * P[:, k - 1]) / (k + 1)
        D[:, k + 1] = D[:, k - 1] + (2 * k + 1) * P[:, k]
    return P, D


def kernel(L: int, beta: float, usa: bool) -> tuple[np.ndarray, np.ndarray]:
    """(K_l, K_l / beta) for l = 0..L, both scaled by e^{-beta} for SA (the scale cancels in F' / F).

    At beta = 0 the limits: K_l = [l = 0] and K_l / beta = [l = 1] / 3.
    """
    ls = np.arange(L + 1)
    if beta == 0:
        k = (ls == 0).astype(float)
        kb = np.where(ls == 1, 1.0 / 3.0, 0.0)
        return k, kb
    factor = math.exp(beta) if usa else 1.0
    if not math.isfinite(factor):
        raise ValueError(f"beta = {beta} is too large for USA in float64 (e^beta overflows).")
    k = math.sqrt(math.pi / (2 * beta)) * ive(ls + 0.5, beta) * factor
    return k, k / beta


@dataclass(frozen=True)
class _Args:
    P: torch.Tensor  # (N, L + 1) values at the nodes
    D: torch.Tensor  # (N, L + 1) derivatives
    Dt: torch.Tensor  # (L + 1, N): (2 l + 1) / 2 * P_l'(u_i) * w_i * (1 - u_i^2)
    k: torch.Tensor  # (L + 1,) kernel K_l (scaled)
    kb: torch.Tensor  # (L + 1,) K_l / beta (scaled)
    usa: bool
    diffusion: torch.Tensor | None = None  # (L + 1,): -l (l + 1) / kappa (the noise sqrt(2 / kappa) dW), or None


def _field(t: float, a: torch.Tensor, args: _Args) -> torch.Tensor:
    rho = args.P @ a
    slope = args.D @ (args.kb * a)  # F' / beta
    w = slope if args.usa else slope / (args.P @ (args.k * a))
    out = args.Dt @ (rho * w)
    return out if args.diffusion is None else out + args.diffusion * a


def check_coefficients(a0: np.ndarray) -> np.ndarray:
    a = finite_vector(a0, "a0", 2, "a vector of Legendre coefficients a_0..a_L with L >= 1")
    if abs(a[0] - 1) > 1e-12:
        raise ValueError(f"a0[0] = {a[0]:.12g} must be 1 (the density has mass 1 for the normalised surface measure).")
    return a


def nodes(L: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights used for degree L: 3 (L + 1) / 2 of them (rounded up)."""
    return np.polynomial.legendre.leggauss(max(8, -(-3 * (L + 1) // 2)))


def solve_sphere(
    a0: np.ndarray, ts: np.ndarray, *, beta: float, usa: bool = False, rtol: float = 1e-10, atol: float = 1e-12, dt: float | None = None,
    max_steps: int = 1_000_000, threads: int | None = None, kappa: float | None = None,
) -> ZonalSolution:  # fmt: skip
    """Evolve the zonal density with Legendre coefficients ``a0`` and save it at ``ts`` (see the module docstring).

    Adaptive Dopri5 at ``rtol``/``atol``, or classical RK4 at a fixed step ``dt`` when one is given.
    ``threads``: intra-op threads for this call, as for :func:`attndyn.simulate`. ``kappa``: with noise, the
    particles' sqrt(2 / kappa) dW adds (1 / kappa) Delta_S rho, i.e. -l (l + 1) / kappa on a_l; None: no noise.
    """
    if kappa is not None and not (isinstance(kappa, int | float) and math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"kappa = {kappa!r} must be a finite number > 0 (the noise is sqrt(2 / kappa) dW).")
    a = check_coefficients(a0)
    ts = check_run(beta, ts, dt)
    L = a.size - 1
    cut = (2 * L) // 3
    if beta > 0 and ive(cut + 0.5, beta) / ive(0.5, beta) > 1e-13:
        raise ValueError(f"degree L = {L} is too low for beta = {beta:g}: K_{cut} / K_0 = {ive(cut + 0.5, beta) / ive(0.5, beta):.2g} > 1e-13.")
    u, wq = nodes(L)
    P, D = legendre_table(L, u)
    k, kb = kernel(L, beta, usa)
    half = (2 * np.arange(L + 1) + 1) / 2
    args = _Args(
        torch.as_tensor(P),
        torch.as_tensor(D),
        torch.as_tensor((D * (wq * (1 - u * u))[:, None]).T * half[:, None]),
        torch.as_tensor(k),
        torch.as_tensor(kb),
        usa,
        None if kappa is None else torch.as_tensor(-np.arange(L + 1) * (np.arange(L + 1) + 1.0) / kappa),
    )
    norm = 2 / (2 * np.arange(L + 1) + 1)  # ||P_l||^2 on [-1, 1]

    def check(t: float, c: torch.Tensor) -> torch.Tensor:
        arr = c.numpy()
        check_resolution(t, P @ arr, arr**2 * norm, f"degree L = {L}", "raise L")
        return c.new_zeros(())

    with threads_policy(float(u.size * (L + 1)), threads):
        sol = step_through(_field, torch.as_tensor(a.copy()), ts, args, rtol=rtol, atol=atol, dt=dt, observe=check, max_steps=max_steps)
    return ZonalSolution(np.asarray(sol.ts), sol.xs.numpy(), int(sol.stats["steps"]))


def zonal_density(kind: str, L: int, **params) -> np.ndarray:
    """Legendre coefficients (a_0 = 1) of an initial zonal density. Kinds and their parameters:

    * ``uniform``: ``modes`` (list of degrees >= 1), ``amplitude`` (eps, default 0), ``signs``
      (optional, +-1 per mode): 1 + eps sum_l sign_l P_l(u);
    * ``caps``: ``kappas`` (>= 0), ``poles`` (+1 or -1), ``weights`` (sum 1), lists of equal length: a
      mixture of von Mises-Fisher densities e^{kappa pole u} / K_0(kappa) around the north or south pole,
      whose coefficients are (2 l + 1) pole^l K_l(kappa) / K_0(kappa).
    """
    if L < 1:
        raise ValueError(f"L = {L} must be at least 1.")
    ls = np.arange(L + 1)

    what = f"zonal density {kind!r}"
    if kind == "uniform":
        modes, amplitude, signs = take_params(what, params, (), {"modes": [], "amplitude": 0.0, "signs": None})
        signs = np.ones(len(modes)) if signs is None else np.asarray(signs, dtype=np.float64)
        if signs.shape != (len(modes),):
            raise ValueError(f"signs must have one entry per mode ({len(modes)}); got {signs.size}.")
        a = np.zeros(L + 1)
        a[0] = 1.0
        for deg, s in zip(modes, signs, strict=True):
            if not 1 <= deg <= L:
                raise ValueError(f"mode {deg} is not in 1..L = {L}.")
            a[deg] += amplitude * s
    elif kind == "caps":
        kappas, poles, weights = take_params(what, params, ("kappas", "poles", "weights"), {})
        if not len(kappas) == len(poles) == len(weights) or not kappas:
            raise ValueError(f"kappas, poles and weights must have the same length >= 1; got {len(kappas)}, {len(poles)}, {len(weights)}.")
        if min(weights) < 0 or abs(sum(weights) - 1) > 1e-12:
            raise ValueError(f"weights must be >= 0 and sum to 1; got {list(weights)}.")
        if any(p not in (1, -1) for p in poles):
            raise ValueError(f"poles must be +1 or -1; got {list(poles)}.")
        a = np.zeros(L + 1)
        for kappa, pole, weight in zip(kappas, poles, weights, strict=True):
            if not (math.isfinite(kappa) and kappa >= 0):
                raise ValueError(f"a concentration must be a finite number >= 0; got {kappa}.")
            ratio = (ls == 0).astype(float) if kappa == 0 else ive(ls + 0.5, kappa) / ive(0.5, kappa)
            a += weight * (2 * ls + 1) * float(pole) ** ls * ratio
        tail = (a[2 * (L + 1) // 3 :] ** 2 * 2 / (2 * ls[2 * (L + 1) // 3 :] + 1)).sum() / (a**2 * 2 / (2 * ls + 1)).sum()
        if tail > TAIL_TOL:
            raise ValueError(f"degree L = {L} does not resolve caps of concentration {max(kappas):g} (tail {tail:.2g}): raise L.")
    else:
        raise ValueError(f"zonal density kind {kind!r} is not one of uniform, caps.")
    u, _ = nodes(L)
    rho = legendre_table(L, u)[0] @ a
    if rho.min() < 0:
        raise ValueError(f"the initial density is negative somewhere (min {rho.min():.3g}); lower the amplitude.")
    return a


def density(a: np.ndarray, u: np.ndarray) -> np.ndarray:
    """rho(u) = sum_l a_l P_l(u) (density for the normalised surface measure; u has density rho / 2)."""
    a = np.asarray(a, dtype=np.float64)
    return legendre_table(a.shape[-1] - 1, np.ravel(u))[0] @ a.T


def cdf(a: np.ndarray, u: np.ndarray) -> np.ndarray:
    """P(height <= u) = (1/2) int_{-1}^{u} rho, from int_{-1}^{u} P_l = (P_{l+1} - P_{l-1}) / (2 l + 1)."""
    a = np.asarray(a, dtype=np.float64)
    L = a.shape[-1] - 1
    u = np.ravel(np.asarray(u, dtype=np.float64))
    P, _ = legendre_table(L + 1, u)
    integral = np.empty((u.size, L + 1))
    integral[:, 0] = u + 1
    ls = np.arange(1, L + 1)
    integral[:, 1:] = (P[:, 2:] - P[:, :-2]) / (2 * ls + 1)
    return 0.5 * integral @ a.T


def moments(a: np.ndarray, ls: np.ndarray | list[int]) -> np.ndarray:
    """The zonal moments E[P_l(u)] = a_l / (2 l + 1) for the degrees ``ls``; ``a`` ``(..., L + 1)``."""
    ls = np.asarray(ls, dtype=np.int64)
    return np.asarray(a)[..., ls] / (2 * ls + 1)


def particle_moments(x: np.ndarray, ls: np.ndarray | list[int]) -> np.ndarray:
    """(1/n) sum_j P_l(<x_j, e_3>) for points ``x`` ``(..., n, 3)``: ``(..., len(ls))``."""
    ls = np.asarray(ls, dtype=np.int64)
    u = np.clip(np.asarray(x)[..., 2], -1.0, 1.0)
    P, _ = legendre_table(int(ls.max()), u.ravel())
    return P[:, ls].reshape(*u.shape, len(ls)).mean(-2)


def sample(a: np.ndarray, uniforms: np.ndarray, *, grid: int = 4097) -> np.ndarray:
    """Points on S^2 from ``uniforms`` ``(..., 2)`` in [0, 1)^2: the height by inverse transform of :func:`cdf`
    (monotone interpolation on a fine grid, then two Newton steps), the azimuth 2 pi times the second coordinate. Returns ``(..., 3)``."""
    q = np.asarray(uniforms, dtype=np.float64)
    if q.shape[-1] != 2 or not ((q >= 0) & (q <= 1)).all():
        raise ValueError(f"uniforms must have shape (..., 2) with entries in [0, 1]; got shape {q.shape}.")
    # Chebyshev-spaced grid: fine near the poles, where caps put their mass
    grid_u = -np.cos(np.linspace(0, math.pi, grid))
    F = np.maximum.accumulate(np.clip(cdf(a, grid_u), 0, 1))
    F[0], F[-1] = 0.0, 1.0
    u = np.interp(q[..., 0], F, grid_u)
    for _ in range(2):  # Newton steps on cdf(u) = q remove the interpolation error
        flat = u.ravel()
        rho = np.maximum(density(a, flat), 1e-300)
        flat = np.clip(flat - (cdf(a, flat) - q[..., 0].ravel()) / (rho / 2), -1.0, 1.0)
        u = flat.reshape(u.shape)
    phi = 2 * math.pi * q[..., 1]
    s = np.sqrt(np.clip(1 - u * u, 0, None))
    return np.stack([s * np.cos(phi), s * np.sin(phi), u], -1)
