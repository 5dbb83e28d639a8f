"""Closed forms and reduced ODEs that the claims compare particle runs with (the paper's successors, cited per function). No torch.

Contract
--------
* ``equiangular_rhs(rho, beta, n, usa=False)`` and ``equiangular(beta, n, ts, usa=False)``: the
  pairwise cosine rho(t) of n pairwise orthogonal tokens on the sphere with Q = K = V = I
  (eq: ybeta of GLPR, arXiv 2312.10794): rho' = 2 (1 - rho)((n - 1) rho + 1) e^{beta rho} / Z,
  Z = e^beta + (n - 1) e^{beta rho} for SA and Z = n for USA, rho(0) = 0.
* ``equiangular_beta0(n, ts)``: the closed form at beta = 0 (SA and USA agree there),
  rho(t) = 1 - n / (n - 1 + e^{2t}) (derivation in the function's docstring).
* ``k_point_rhs(y, masses, beta, usa=False)`` and ``k_point(y0, masses, beta, ts, usa=False)``: k
  clusters as point masses on the sphere (GLPR, arXiv 2312.10794; arXiv 2410.06833): centre a moves by
  y_a' = P_{y_a}(sum_b m_b e^{beta <y_a, y_b>} y_b / Z_a), Z_a = sum_b m_b e^{beta <y_a, y_b>} (SA)
  or Z_a = 1 (USA), masses m_a = cluster size / n. Exact for clusters of zero diameter.

* ``kernel_coefficient(degree, beta, d)``: the Funk-Hecke eigenvalue K_l(beta) of the kernel
  e^{beta <x, y>} on degree-l spherical harmonics of S^{d-1} (normalised measure; arXiv 2410.23228):
  Gamma(d/2) (2/beta)^{d/2-1} I_{l+d/2-1}(beta) (I_l(beta) on the circle).
* ``growth_rates(beta, d, ls, usa=False)``: the rates lambda_l = l (l + d - 2) K_l / beta (USA) and
  l (l + d - 2) K_l / (beta K_0) (SA) at which a degree-l perturbation of the uniform measure grows;
  ``fastest_mode(beta, d)``: k_max, the number of clusters that first emerge.
* ``kuramoto_order(t, R0)``: beta = 0 on the circle from a wrapped-Cauchy start (Ott-Antonsen,
  Ott-Antonsen): R(t) = R0 e^{t/2} / sqrt(1 + R0^2 (e^t - 1)).
* ``pairing_cosine(s, c0)``: the closest pair's cosine in rescaled time at large beta (arXiv 2410.06833,
  equal masses): tanh(2 s + artanh c0). ``staircase_levels(n)``: the plateaus sum_a m_a^2 of the
  normalised energy over every partition of n tokens into clusters.
* ``pair_log_time(beta, c0, ma, mb, u_end, n, usa=False)``: ln of the time two isolated point clusters
  (ma and mb tokens of n) take to go from cosine c0 to 1 - u_end, and ``pair_cosine_exact(s, c0, beta)``:
  an equal-mass pair's cosine in the rescaled time s of the pairing law, both from the exact two-cluster
  ODE c' = (1 - c^2)(A_ab + A_ba) (the plateau lengths e^{beta (1 - cos theta)} of arXiv 2410.06833, with
  their prefactor and finite-beta corrections).
* ``one_layer_cosine(n, rho, beta)``: the exact pairwise cosine of the outputs y_i = sum_j P_ij x_j
  of one attention layer on equiangular unit inputs <x_i, x_j> = rho (Chen, Lin, Polyanskiy, Rigollet, arXiv 2510.05554), and
  ``one_layer_cosine_limit(rho, gamma)``: its n -> infinity limit at beta = gamma log n.

All integrations use ``scipy.integrate.solve_ivp(DOP853)`` at tight tolerances. Sources: GLPR
(arXiv 2312.10794), Bruno-Pasqualotto-Agazzi (2410.23228), Geshkovski-Koubbi-Polyanskiy-Rigollet
(2410.06833), Chen-Lin-Polyanskiy-Rigollet (2510.05554).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import quad, solve_ivp
from scipy.special import gammaln, ive

ODE_TOL = {"rtol": 1e-12, "atol": 1e-13}


def equiangular_rhs(rho: float, beta: float, n: int, *, usa: bool = False) -> float:
    """d rho / dt of the equiangular model (eq: ybeta), written with e^{-beta(1 - rho)} so it never overflows."""
    growth = 2.0 * (1.0 - rho) * ((n - 1) * rho + 1.0)
    if usa:
        return growth * np.exp(beta * rho) / n
    return growth / (np.exp(beta * (1.0 - rho)) + n - 1)


def equiangular(beta: float, n: int, ts: np.ndarray, *, usa: bool = False) -> np.ndarray:
    """rho(t) at the times ``ts`` (ts[0] = 0, rho(0) = 0)."""
    ts = np.asarray(ts, dtype=np.float64)
    sol = solve_ivp(lambda t, r: [equiangular_rhs(r[0], beta, n, usa=usa)], (0.0, float(ts[-1])), [0.0], t_eval=ts, method="DOP853", **ODE_TOL)
    return sol.y[0]


def equiangular_beta0(n: int, ts: np.ndarray) -> np.ndarray:
    """Closed form at beta = 0: rho' = 2 (1 - rho)((n - 1) rho + 1) / n.

    With u = 1 - rho the equation is u' = -(2/n) u (n - (n - 1) u), a logistic equation, so
    u(t) = n / ((n - 1) + e^{2 t}) (u(0) = 1), i.e. rho(t) = 1 - n / (n - 1 + e^{2t}).
    """
    ts = np.asarray(ts, dtype=np.float64)
    return 1.0 - n / (n - 1.0 + np.exp(2.0 * ts))


def k_point_rhs(y: np.ndarray, masses: np.ndarray, beta: float, *, usa: bool = False) -> np.ndarray:
    """Velocities ``(k, d)`` of k point clusters at unit positions ``y`` ``(k, d)`` with masses ``m`` (sum 1)."""
    G = y @ y.T
    # weights m_b e^{beta <y_a, y_b>}; shifted by the row maximum for SA (it cancels in the ratio)
    logits = beta * G
    if usa:
        W = masses[None, :] * np.exp(logits)
    else:
        W = masses[None, :] * np.exp(logits - logits.max(1, keepdims=True))
        W = W / W.sum(1, keepdims=True)
    v = W @ y
    return v - (v * y).sum(1, keepdims=True) * y


def k_point(y0: np.ndarray, masses: np.ndarray, beta: float, ts: np.ndarray, *, usa: bool = False) -> np.ndarray:
    """Positions ``(T, k, d)`` of k point clusters at the times ``ts`` (``ts[0]`` is the start)."""
    y0 = np.asarray(y0, dtype=np.float64)
    masses = np.asarray(masses, dtype=np.float64)
    if y0.ndim != 2 or masses.shape != (len(y0),):
        raise ValueError(f"y0 must be (k, d) and masses (k,); got {y0.shape} and {masses.shape}.")
    if abs(masses.sum() - 1.0) > 1e-12 or (masses <= 0).any():
        raise ValueError(f"masses must be positive and sum to 1; got {masses.tolist()}.")
    k, d = y0.shape
    ts = np.asarray(ts, dtype=np.float64)

    def f(t, flat):
        return k_point_rhs(flat.reshape(k, d), masses, beta, usa=usa).ravel()

    sol = solve_ivp(f, (float(ts[0]), float(ts[-1])), y0.ravel(), t_eval=ts, method="DOP853", **ODE_TOL)
    if not sol.success:
        raise RuntimeError(f"the k-point ODE failed: {sol.message}")
    return sol.y.T.reshape(len(ts), k, d)


def kernel_coefficient(degree: int, beta: float, d: int) -> float:
    """K_l(beta) = Gamma(d/2) (2/beta)^{d/2 - 1} I_{l + d/2 - 1}(beta) (beta > 0); K_l(0) = [l = 0].

    Computed from the exponentially scaled Bessel function, so it overflows only when e^beta does.
    """
    if degree < 0 or d < 2:
        raise ValueError(f"need a degree >= 0 and d >= 2; got degree = {degree}, d = {d}.")
    if beta == 0:
        return 1.0 if degree == 0 else 0.0
    nu = degree + d / 2 - 1
    log_pref = gammaln(d / 2) + (d / 2 - 1) * math.log(2 / beta)
    return float(math.exp(log_pref + beta) * ive(nu, beta))


def growth_rates(beta: float, d: int, ls: np.ndarray | list[int], *, usa: bool = False) -> np.ndarray:
    """Linear growth rates lambda_l of degree-l perturbations of the uniform measure (Bruno, Pasqualotto, Agazzi, arXiv 2410.23228)."""
    ls = np.asarray(ls, dtype=np.int64)
    if beta <= 0:
        raise ValueError(f"beta = {beta} must be > 0 (at beta = 0 the kernel has no l >= 1 part).")
    nu = ls + d / 2 - 1
    lap = ls * (ls + d - 2)
    if usa:
        return lap * np.array([kernel_coefficient(int(k), beta, d) for k in ls]) / beta
    # SA: K_l / K_0 = I_{l + d/2 - 1} / I_{d/2 - 1}, a ratio of scaled Bessel functions (no overflow)
    return lap * ive(nu, beta) / ive(d / 2 - 1, beta) / beta


def fastest_mode(beta: float, d: int, l_max: int | None = None) -> int:
    """k_max(beta) = argmax_l l (l + d - 2) I_{l + d/2 - 1}(beta): the number of clusters that first emerge."""
    l_max = l_max or int(10 + 4 * math.sqrt(2 * beta + 1))
    ls = np.arange(1, l_max + 1)
    return int(ls[np.argmax(ls * (ls + d - 2) * ive(ls + d / 2 - 1, beta))])


def kuramoto_order(t: np.ndarray | float, R0: float) -> np.ndarray:
    """R(t) = R0 e^{t/2} / sqrt(1 + R0^2 (e^t - 1)) for beta = 0 on the circle (wrapped-Cauchy start)."""
    if not 0 < R0 < 1:
        raise ValueError(f"R0 = {R0} must be in (0, 1).")
    t = np.asarray(t, dtype=np.float64)
    # written with e^{-t} so that large t does not overflow
    return R0 / np.sqrt(np.exp(-t) + R0**2 * (1 - np.exp(-t)))


def pairing_cosine(s: np.ndarray | float, c0: float) -> np.ndarray:
    """The closest pair's cosine c(s) = tanh(2 s + artanh c0), solving c' = 2 (1 - c^2) (equal masses)."""
    return np.tanh(2 * np.asarray(s, dtype=np.float64) + np.arctanh(c0))


def staircase_levels(n: int) -> list[float]:
    """Every plateau sum_a m_a^2 (m_a = cluster size / n) over the partitions of n tokens, increasing."""

    def partitions(total: int, largest: int):
        if total == 0:
            yield ()
            return
        for k in range(min(total, largest), 0, -1):
            for rest in partitions(total - k, k):
                yield (k, *rest)

    return sorted({round(sum((k / n) ** 2 for k in p), 12) for p in partitions(n, n)})


def one_layer_cosine(n: int, rho: float, beta: float) -> float:
    """Exact cosine between two outputs of one attention layer (Q = K = V = I, no residual) on n
    unit inputs with pairwise inner products rho (Chen, Lin, Polyanskiy, Rigollet, arXiv 2510.05554).

    P has two entries: a on the diagonal and b = a e^{-beta (1 - rho)} off it, a = 1 / (1 + (n - 1) e^{-beta (1 - rho)}).
    With S = sum_k x_k, y_i = (a - b) x_i + b S, <x_i, S> = 1 + (n - 1) rho and |S|^2 = n (1 + (n - 1) rho), so
    <y_i, y_j> = (a - b)^2 rho + 2 (a - b) b (1 + (n - 1) rho) + b^2 |S|^2 and |y_i|^2 is the same with 1 for rho.
    """
    if not (0 <= rho < 1) or n < 2:
        raise ValueError(f"need n >= 2 and 0 <= rho < 1; got n = {n}, rho = {rho}.")
    q = math.exp(-beta * (1 - rho))
    a = 1.0 / (1.0 + (n - 1) * q)
    b = a * q
    inner = 1 + (n - 1) * rho
    common = 2 * (a - b) * b * inner + b * b * n * inner
    return ((a - b) ** 2 * rho + common) / ((a - b) ** 2 + common)


def one_layer_cosine_limit(rho: float, gamma: float) -> float:
    """The n -> infinity limit at beta = gamma log n: 1 below gamma = 1/(1 - rho), 4 rho / (1 + 3 rho) at it, rho above."""
    critical = 1 / (1 - rho)
    if math.isclose(gamma, critical, rel_tol=1e-12):
        return 4 * rho / (1 + 3 * rho)
    return 1.0 if gamma < critical else rho


def wendel(n: int, d: int) -> float:
    """Wendel's probability that n i.i.d. uniform points on S^{d-1} lie in one open hemisphere:
    2^{-(n-1)} sum_{k < d} C(n-1, k) (GLPR, arXiv 2312.10794); exact rational arithmetic, returned as a float."""
    if n < 1 or d < 1:
        raise ValueError(f"need n >= 1 and d >= 1; got n = {n}, d = {d}.")
    from fractions import Fraction

    return float(Fraction(sum(math.comb(n - 1, k) for k in range(min(d, n))), 2 ** (n - 1)))


def _pair_weights(u: float, beta: float, ma: float, mb: float) -> float:
    """e^{beta u} (A_ab + A_ba) for SA: A_ab = mb e^{-beta u} / (ma + mb e^{-beta u}), u = 1 - c."""
    e = math.exp(-beta * u)
    return mb / (ma + mb * e) + ma / (mb + ma * e)


def pair_log_time(beta: float, c0: float, ma: float, mb: float, *, u_end: float, n: int, usa: bool = False) -> float:
    """ln t for two point clusters of ma and mb tokens (of n) on the sphere, Q = K = V = I, to go from cosine c0
    to 1 - u_end, ignoring every other cluster: t = int du / (u (2 - u) (A_ab + A_ba)) over [u_end, 1 - c0], with
    A_ab = mb e^{beta c} / (ma e^beta + mb e^{beta c}) (SA) or mb e^{beta c} / n (USA). Quadrature in w = ln u with
    e^{beta (1 - c0)} factored out, so plateaus up to e^{700} cost nothing.
    """
    u0 = 1.0 - c0
    if not (0 < u_end < u0 <= 2):
        raise ValueError(f"need 0 < u_end < 1 - c0 <= 2; got u_end = {u_end}, c0 = {c0}.")
    if usa:
        f = lambda w: math.exp(beta * (math.exp(w) - u0)) / (2 - math.exp(w))  # noqa: E731
        prefactor = -beta + math.log(n / (ma + mb))
    else:
        f = lambda w: math.exp(beta * (math.exp(w) - u0)) / ((2 - math.exp(w)) * _pair_weights(math.exp(w), beta, ma, mb))  # noqa: E731
        prefactor = 0.0
    w0, w1 = math.log(u_end), math.log(u0)
    points = [w1 - x / max(beta * u0, 1.0) for x in (1.0, 5.0, 20.0, 60.0) if w1 - x / max(beta * u0, 1.0) > w0]
    value, _ = quad(f, w0, w1, points=points or None, limit=400, epsabs=0.0, epsrel=1e-12)
    return beta * u0 + prefactor + math.log(value)


def pair_cosine_exact(s: np.ndarray, c0: float, beta: float) -> np.ndarray:
    """An isolated equal-mass pair's cosine (SA) in the pairing clock s = int e^{-beta (1 - c)} dt:
    dc/ds = 2 (1 - c^2) / (1 + e^{-beta (1 - c)}), the pairing law tanh(2 s + artanh c0) with its finite-beta factor."""
    s = np.asarray(s, dtype=np.float64)
    rhs = lambda _, c: [2.0 * (1.0 - c[0] ** 2) / (1.0 + math.exp(-beta * (1.0 - c[0])))]  # noqa: E731
    sol = solve_ivp(rhs, (float(s[0]), float(s[-1])), [c0], t_eval=s, method="DOP853", **ODE_TOL)
    return sol.y[0]
