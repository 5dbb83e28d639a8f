"""The noisy USA transformer's phase transition on S^{d-1} (arXiv 2606.05140 for every d; 2604.16288 for d = 2).

Contract
--------
Convention (the `noisy` claim's): dX_i = P_{X_i}((1/n) sum_j e^{beta <X_i, X_j>} X_j) dt + sqrt(2 / kappa) dW_i. The
stationary mean-field densities are rho ∝ exp((kappa / beta) int e^{beta <x, y>} rho(dy)). With K_l(beta) the
Funk-Hecke coefficient of e^{beta <x, y>} (normalised measure, ``kernel_coefficient``), a degree-l harmonic of the
uniform state grows at l (l + d - 2)(K_l / beta - 1 / kappa); the l = 1 harmonic goes first (K_l ∝ I_{l + d/2 - 1}
and I_nu decreases in nu), at

    kappa_lin(beta) = beta / K_1 = beta^{d/2} / (2^{d/2 - 1} Gamma(d/2) I_{d/2}(beta))       (:func:`kappa_lin`),

twice the paper's K_#(beta) = beta^{d/2} / (2^{d/2} Gamma(d/2) I_{d/2}(beta)): at beta -> 0 the paper's tends to d / 2,
ours to d (2 on the circle, the noisy Kuramoto threshold of the ``noisy`` claim), so kappa = 2 K.

* :func:`noisy_critical_beta` - beta*(d), the root of I_{d/2+1}(beta) / I_{d/2}(beta) = 1 / d (float d >= 2).
* :func:`landau_coefficient` - c in kappa(h) = kappa_lin (1 + c h^2 + O(h^4)) along the bifurcating zonal branch
  (h the first harmonic's field): reducing the self-consistency to the degrees 1 and 2 gives
  c = (1 - d r) / ((1 - r) d (d + 2)), r = K_2 / K_1 = I_{d/2+1} / I_{d/2}; c < 0 (subcritical, a
  discontinuous transition) exactly when r > 1 / d, i.e. beta > beta*(d).
* :func:`zonal_branch` - the branch itself by continuation of the truncated self-consistency
  m_l = <P_l>_h, h_l = (kappa / beta) K_l N_l m_l (l = 1..L, Gegenbauer P_l with P_l(1) = 1, N_l = 1 / <P_l^2>),
  parametrised by h_1: returns kappa(h_1) and the order parameter m_1 = <u>; independent of the closed forms above.
* :func:`kappa_sn` - the lower edge of the hysteresis window, min over the branch of kappa (a saddle-node), with
  the difference between two resolutions as its precision.
* :func:`particles_circle` - n particles of the same SDE on S^1 (Euler-Maruyama in the angles), several systems at
  once; :func:`stable_m1` - the order parameter of the branch's stable (upper) part at a given kappa, to set beside
  the particles' R = |(1/n) sum_j e^{i theta_j}|.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq, minimize_scalar
from scipy.special import eval_jacobi, ive, roots_jacobi

from attndyn.theory.closed_forms import kernel_coefficient


def _check_d(d: object, *, integer: bool = False) -> float:
    if isinstance(d, bool) or not isinstance(d, int | float | np.integer | np.floating):
        raise TypeError(f"d = {d!r} must be a number (the sphere S^(d-1) lives in R^d).")
    d = float(d)
    if not (math.isfinite(d) and d >= 2):
        raise ValueError(f"d = {d!r} must be a finite number >= 2 (the sphere S^(d-1) needs d >= 2).")
    if integer and d != int(d):
        raise ValueError(f"d = {d!r} must be an integer here (the zonal quadrature needs a sphere S^(d-1)).")
    return d


def noisy_critical_beta(d: float) -> float:
    """beta*(d) > 0 with I_{d/2+1}(beta*) / I_{d/2}(beta*) = 1 / d (arXiv 2606.05140, abstract; unique: the ratio
    increases from 0 to 1). Float d >= 2 is accepted; anything else is refused with the reason."""
    d = _check_d(d)

    def f(b: float) -> float:
        return ive(d / 2 + 1, b) / ive(d / 2, b) - 1 / d

    hi = 1.0
    while f(hi) < 0:
        hi *= 2
    return float(brentq(f, 1e-8, hi, xtol=1e-15, rtol=1e-15, maxiter=500))


def kappa_lin(beta: float, d: float) -> float:
    """The linear threshold beta / K_1(beta) in the `noisy` claim's convention (d at beta = 0)."""
    d = _check_d(d)
    if beta == 0:
        return d
    log = (d / 2) * math.log(beta) - (d / 2 - 1) * math.log(2) - math.lgamma(d / 2) - math.log(ive(d / 2, beta)) - beta
    return math.exp(log)


def landau_coefficient(beta: float, d: float) -> float:
    """c(beta) = (1 - d r) / ((1 - r) d (d + 2)), r = I_{d/2+1}(beta) / I_{d/2}(beta) (see the module docstring)."""
    d = _check_d(d)
    r = ive(d / 2 + 1, beta) / ive(d / 2, beta)
    return float((1 - d * r) / ((1 - r) * d * (d + 2)))


class _Zonal:
    """Quadrature of zonal integrals on S^{d-1}: u = <x, e> has weight (1 - u^2)^{(d-3)/2}."""

    def __init__(self, d: int, L: int, nodes: int, beta: float, *, kernel_normalised: bool = False):
        a = (d - 3) / 2
        self.u, w = roots_jacobi(nodes, a, a)
        self.w = w / w.sum()
        ls = np.arange(1, L + 1)
        P = np.stack([eval_jacobi(int(k), a, a, self.u) / eval_jacobi(int(k), a, a, 1.0) for k in ls])
        self.P = P  # (L, nodes), P_l(1) = 1
        self.N = 1.0 / (P**2 @ self.w)  # the harmonics' dimensions N_l
        K = np.array([kernel_coefficient(int(k), beta, d) for k in ls])
        if kernel_normalised:  # the mistake a power test makes: SA's K_l / K_0 in place of USA's K_l
            K = K / kernel_coefficient(0, beta, d)
        self.K, self.beta = K, beta

    def moments(self, h: np.ndarray) -> np.ndarray:
        e = h @ self.P
        p = self.w * np.exp(e - e.max())
        return self.P @ p / p.sum()


def zonal_branch(
    beta: float, d: int, h1: np.ndarray, *, L: int = 40, nodes: int = 400, kernel_normalised: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(kappa, m1)`` along the bifurcating zonal branch at the first-harmonic fields ``h1`` (> 0), by fixed-point
    iteration of the higher fields h_2..h_L from the previous point (continuation in h_1)."""
    d = int(_check_d(d, integer=True))
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta = {beta!r} must be a finite number > 0.")
    z = _Zonal(d, L, nodes, beta, kernel_normalised=kernel_normalised)
    h = np.zeros(L)
    kappas, m1s = [], []
    for x in np.asarray(h1, dtype=np.float64):
        h[0] = x
        for _ in range(10_000):
            m = z.moments(h)
            kappa = x * beta / (z.K[0] * z.N[0] * m[0])
            new = (kappa / beta) * z.K[1:] * z.N[1:] * m[1:]
            if np.abs(new - h[1:]).max() <= 1e-15 * max(1.0, np.abs(new).max()):
                h[1:] = new
                break
            h[1:] = new
        else:
            raise RuntimeError(f"the zonal self-consistency did not converge at h_1 = {x:g} (beta = {beta:g}, d = {d}).")
        m = z.moments(h)
        kappas.append(x * beta / (z.K[0] * z.N[0] * m[0]))
        m1s.append(m[0])
    return np.array(kappas), np.array(m1s)


def landau_from_branch(beta: float, d: int, *, hs: tuple[float, float] = (0.02, 0.01), **kw) -> float:
    """c from the branch: (kappa(h) / kappa(0) - 1) / h^2 at two small h, Richardson-extrapolated (the O(h^4) term).
    kappa(0) is the branch's own limit (the same extrapolation), so nothing of the closed form enters."""
    h = np.array([hs[0], hs[1], hs[1] / 2])
    k, _ = zonal_branch(beta, d, h, **kw)
    # kappa(h) = k0 + a h^2 + b h^4: three points give k0, a
    A = np.stack([np.ones(3), h**2, h**4], 1)
    k0, a, _ = np.linalg.solve(A, k)
    return float(a / k0)


def kappa_sn(beta: float, d: int, *, L: int = 40, nodes: int = 400, h_max: float = 10.0) -> tuple[float, float, float]:
    """``(kappa_sn, m1 at the fold, precision)``: the minimum of kappa over the branch (kappa_lin when the branch is
    supercritical), located by a bounded scalar minimisation in h_1 (xatol 1e-9) after a coarse scan; the precision
    is the difference from a run at a finer resolution (degree L + 20, twice the quadrature nodes)."""

    def at(Lq: int, nq: int) -> tuple[float, float]:
        hs = np.linspace(1e-3, h_max, 41)
        ks, _ = zonal_branch(beta, d, hs, L=Lq, nodes=nq)
        k = int(np.argmin(ks))
        if k == 0:  # supercritical: kappa increases along the branch, whose infimum is its start (h_1 -> 0)
            kk, mm = zonal_branch(beta, d, np.array([1e-4]), L=Lq, nodes=nq)  # c h^2 ~ 1e-10 c; m_1 = 5e-5 keeps 1e-12
            return float(kk[0]), float(mm[0])
        lo, hi = hs[max(k - 1, 0)], hs[min(k + 1, len(hs) - 1)]

        def f(x: float) -> float:
            return float(zonal_branch(beta, d, np.array([x]), L=Lq, nodes=nq)[0][0])

        res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-9})
        return float(res.fun), float(zonal_branch(beta, d, np.array([res.x]), L=Lq, nodes=nq)[1][0])

    k1, m1 = at(L, nodes)
    k2, _ = at(L + 20, 2 * nodes)
    return k1, m1, abs(k1 - k2)


def _interaction_coefficients(beta: float, tol: float = 1e-12) -> np.ndarray:
    """c_k with e^{beta cos(phi)} sin(phi) = sum_{k >= 1} c_k sin(k phi), c_k = 2 k I_k(beta) / beta (from
    d/dphi e^{beta cos(phi)} = -2 sum_k k I_k(beta) sin(k phi)), up to the last k whose term exceeds ``tol`` of the
    largest."""
    ks = np.arange(1, 200)
    c = 2 * ks * ive(ks, beta) * math.exp(beta) / beta
    keep = c > tol * c.max()
    return c[: int(np.nonzero(keep)[0].max()) + 1]


def particles_circle(
    theta: np.ndarray, beta: float, kappa: float | np.ndarray, T: float, dt: float, rng: np.random.Generator, *, record_every: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """d theta_i = (1/n) sum_j e^{beta cos(theta_j - theta_i)} sin(theta_j - theta_i) dt + sqrt(2 / kappa) dW_i: the
    ``noisy`` claim's SDE on S^1 (X = e^{i theta}), whose drift is the tangential part of (1/n) sum_j e^{beta <X_i, X_j>} X_j.
    The drift is the gradient of (1 / (2 n beta)) sum_{i,j} e^{beta cos(theta_i - theta_j)}, so the SDE is overdamped
    Langevin dynamics at temperature 1 / kappa; the step is Leimkuhler and Matthews' (theta += f dt + sqrt(2 dt / kappa)
    (xi_n + xi_{n+1}) / 2), whose stationary law is second-order accurate in dt where Euler-Maruyama's is first-order
    (at beta = 6 and dt = 2e-3 Euler-Maruyama's clustered R was 0.77 against 0.84 at dt = 1e-3; this step gives 0.87-0.89
    at dt = 1e-3 to 4e-3, the branch 0.872). The interaction runs through its Fourier series
    (:func:`_interaction_coefficients`): drift_i = sum_k c_k Im(e^{-i k theta_i} Z_k), Z_k = (1/n) sum_j e^{i k theta_j}, O(n K) a step. ``theta``:
    ``(systems, n)`` start angles; ``kappa``: one value, or one per system. Returns the final angles and
    R(t) = |Z_1| every ``record_every`` steps, ``(steps // record_every, systems)``."""
    theta = np.array(theta, dtype=np.float64, copy=True)
    if theta.ndim != 2:
        raise ValueError(f"theta has shape {theta.shape}; expected (systems, n)")
    kappa = np.broadcast_to(np.asarray(kappa, dtype=np.float64), theta.shape[:1])
    if not (beta > 0 and np.all(kappa > 0) and dt > 0 and T > 0):
        raise ValueError(f"beta = {beta!r}, kappa = {kappa!r}, dt = {dt!r} and T = {T!r} must all be > 0")
    c = _interaction_coefficients(beta)
    ks = np.arange(1, len(c) + 1)
    steps = int(round(T / dt))
    noise = np.sqrt(2 * dt / kappa)[:, None]
    R = []
    shape = (*theta.shape, len(ks))
    xi_prev = rng.standard_normal(theta.shape)
    for step in range(steps):
        e = np.cumprod(np.broadcast_to(np.exp(1j * theta)[..., None], shape), axis=-1)  # e^{i k theta}, (systems, n, K)
        Z = e.mean(-2)  # (systems, K)
        # sum_k c_k Im(e^{-i k theta} Z_k) = sum_k c_k (Re e Im Z_k - Im e Re Z_k)
        drift = np.einsum("snk,sk->sn", e.real, c * Z.imag) - np.einsum("snk,sk->sn", e.imag, c * Z.real)
        xi = rng.standard_normal(theta.shape)
        theta += drift * dt + noise * 0.5 * (xi_prev + xi)  # Leimkuhler-Matthews: the noises of two steps averaged
        xi_prev = xi
        if (step + 1) % record_every == 0:
            R.append(np.abs(Z[:, 0]))
    return theta, np.array(R)


def stable_m1(beta: float, kappa: float, *, h_max: float = 60.0, points: int = 600) -> float:
    """m_1 on the stable (upper) part of the zonal branch on S^1 at ``kappa``: past the fold where the branch is
    subcritical, past its start where it is supercritical; NaN below the branch's lowest kappa (no clustered state)."""
    hs = np.linspace(1e-3, h_max, points)
    k, m = zonal_branch(beta, 2, hs)
    fold = int(np.argmin(k))
    k, m = k[fold:], m[fold:]
    if not (k[0] <= kappa <= k[-1]) or np.any(np.diff(k) <= 0):
        return math.nan
    return float(np.interp(kappa, k, m))
