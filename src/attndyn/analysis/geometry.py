"""Limiting geometry: hull vertices, support functions, left eigenvectors, invariant subspaces.

Contract
--------
Pure functions on host arrays (NumPy/SciPy); no I/O.

* ``hull_vertices(points)``: indices of the vertices of the convex hull, in any dimension,
  including degenerate sets (collinear, coplanar in 3-D, d = 1, duplicates): the points are
  reduced to their affine hull first.
* ``distance_to_vertices(points, vertices)``, ``support_function(points, directions)``
  (arXiv 2305.05465, p:noninc).
* ``left_eigenvector(V)``: ``(phi_star, lambda_1, phi)`` with phi_star(V z) = lambda_1 phi_star(z)
  and phi_star(phi) = 1; raises unless the top eigenvalue (largest modulus) is real, simple and
  positive (Def. 4.1 (i)).
* ``hyperplane_coordinates(z, V)``: c_i = phi_star(z_i) (Thm 4.2).
* ``unstable_projection(z, V)``: coordinates of z in the invariant subspace of eigenvalues with
  positive real part, projected along the complementary invariant subspace (real Schur bases;
  Conj. 4.3).
* ``paranormal_split(V)``: Def. 5.1 (ii): V|_F = lambda I, rho(V|_G) < lambda; with the projection
  pi_F along G (Thm 5.2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from scipy.spatial import ConvexHull

from attndyn.analysis.clusters import as_points

# Relative size below which a singular value of the centred points means "flat" (affine rank).
AFFINE_RANK_RTOL = 1e-10
# Relative tolerance on eigenvalues: imaginary parts, gaps, equalities.
EIG_RTOL = 1e-9


def as_matrix(V: np.ndarray, name: str = "V") -> np.ndarray:
    a = np.asarray(V.detach().cpu() if hasattr(V, "detach") else V)
    if a.dtype.kind == "c":
        raise TypeError(f"{name} has complex dtype {a.dtype}; a real matrix is needed.")
    a = a.astype(np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ValueError(f"{name} must be a square (d, d) matrix; got shape {a.shape}.")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} (shape {a.shape}) contains non-finite values.")
    return a


def affine_coordinates(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates of the points in an orthonormal basis of their affine hull, and the basis."""
    a = as_points(points)
    centered = a - a.mean(0)
    if len(a) == 1:
        return np.zeros((1, 0)), np.zeros((a.shape[1], 0))
    _, s, vt = np.linalg.svd(centered, full_matrices=False)
    rank = int((s > AFFINE_RANK_RTOL * max(s[0], 1e-300)).sum()) if s[0] > 0 else 0
    basis = vt[:rank].T
    return centered @ basis, basis


def hull_vertices(points: np.ndarray) -> np.ndarray:
    """Sorted indices of the convex-hull vertices (one index per distinct vertex position)."""
    coords, _ = affine_coordinates(points)
    r = coords.shape[1]
    if r == 0:
        return np.array([0])
    if r == 1:
        c = coords[:, 0]
        return np.unique([int(np.argmin(c)), int(np.argmax(c))])
    hull = ConvexHull(coords)
    return np.unique(hull.vertices)


def distance_to_vertices(points: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """Distance from each point to the nearest of ``vertices`` (coordinates ``(k, d)``)."""
    a = as_points(points)
    v = as_points(vertices, "vertices")
    if v.shape[1] != a.shape[1]:
        raise ValueError(f"vertices have d = {v.shape[1]} but points have d = {a.shape[1]}.")
    return np.linalg.norm(a[:, None, :] - v[None, :, :], axis=-1).min(1)


def support_function(points: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """h_u = max_i <u, x_i> for each direction; ``points`` ``(..., n, d)``, result ``(..., k)``."""
    p = np.asarray(points.detach().cpu() if hasattr(points, "detach") else points, dtype=np.float64)
    u = np.asarray(directions, dtype=np.float64)
    if u.ndim != 2 or p.ndim < 2 or p.shape[-1] != u.shape[1]:
        raise ValueError(f"need points (..., n, d) and directions (k, d) with the same d; got {p.shape} and {u.shape}.")
    if not (np.isfinite(p).all() and np.isfinite(u).all()):
        raise ValueError("points or directions contain non-finite values.")
    return (p @ u.T).max(axis=-2)


def random_directions(d: int, k: int, rng: np.random.Generator) -> np.ndarray:
    u = rng.normal(size=(k, d))
    return u / np.linalg.norm(u, axis=1, keepdims=True)


LOW_RANK_FROM = 64  # matrices from this size on are tried for low rank (a trained head's V = W_O W_V has rank d_head)
LOW_RANK_TOL = 1e-12  # the range basis must reproduce the matrix to this relative Frobenius error


@functools.lru_cache(maxsize=32)
def _range_basis_of(shape: tuple[int, ...], data: bytes) -> np.ndarray | None:
    a = np.frombuffer(data, dtype=np.float64).reshape(shape)
    d = shape[0]
    if len(shape) != 2 or shape[1] != d or d < LOW_RANK_FROM:
        return None
    omega = np.random.default_rng(0).standard_normal((d, d // 2))  # a fixed sketch: the same basis every call
    U, _ = np.linalg.qr(a @ omega)
    norm = np.linalg.norm(a)
    if norm == 0 or np.linalg.norm(a - U @ (U.T @ a)) > LOW_RANK_TOL * norm:
        return None
    U.setflags(write=False)
    return U


def range_basis(a: np.ndarray) -> np.ndarray | None:
    """An orthonormal ``U`` (d x d/2) whose span holds the column space of the square matrix ``a`` (so
    ``a = U U^T a`` to 1e-12 relative), found from a fixed random sketch, or None when ``a`` is small or
    its rank exceeds d/2. Then the non-zero eigenvalues of ``a`` are those of ``U^T a U`` (d/2 x d/2),
    and the rest are 0: a trained head's V = W_O W_V (rank d_head) costs an eighth of a dense eigensolve."""
    a = np.ascontiguousarray(a, dtype=np.float64)
    return _range_basis_of(a.shape, a.tobytes())


@functools.lru_cache(maxsize=32)
def _eigvals_of(shape: tuple[int, ...], data: bytes) -> np.ndarray:
    a = np.frombuffer(data, dtype=np.float64).reshape(shape)
    U = _range_basis_of(shape, data)
    if U is None:
        w = np.linalg.eigvals(a)
    else:
        w = np.concatenate([np.linalg.eigvals(U.T @ a @ U), np.zeros(shape[0] - U.shape[1])])
    w.setflags(write=False)
    return w


def eigenvalues(a: np.ndarray) -> np.ndarray:
    """The eigenvalues of a float64 matrix (``np.linalg.eigvals``, or the reduced problem of
    :func:`range_basis` for a low-rank one), memoised by content (the regime tests ask for the spectrum
    of the same V several times; a 384 x 384 eigensolve is not free). Read-only result."""
    a = np.ascontiguousarray(a, dtype=np.float64)
    return _eigvals_of(a.shape, a.tobytes())


def _eig_sorted(V):
    """Eigenvalues by decreasing modulus with left and right eigenvectors (columns). For a low-rank V
    (:func:`range_basis`): with M = U^T V and C = M U, a right eigenvector of C gives U u for V and a left
    one z gives M^T z, for the same non-zero eigenvalue; the zero eigenvalues come last, without vectors
    (their columns are zero: callers use the top eigenpair)."""
    U = range_basis(V)
    if U is None:
        w, vl, vr = sla.eig(V, left=True, right=True)
    else:
        M = U.T @ V
        c, zl, zr = sla.eig(M @ U, left=True, right=True)
        d, k = V.shape[0], len(c)
        w = np.concatenate([c, np.zeros(d - k)])
        vr = np.concatenate([U @ zr, np.zeros((d, d - k))], 1)
        vl = np.concatenate([M.T @ zl, np.zeros((d, d - k))], 1)
    order = np.argsort(-np.abs(w), kind="stable")
    return w[order], vl[:, order], vr[:, order]


def top_eigen_status(V: np.ndarray) -> tuple[bool, str]:
    """Whether the eigenvalue of largest modulus is real, positive and simple, with the reason if not."""
    a = as_matrix(V)
    w = eigenvalues(a)
    w = w[np.argsort(-np.abs(w), kind="stable")]
    lam = w[0]
    scale = max(abs(lam), 1e-300)
    if abs(lam.imag) > EIG_RTOL * scale:
        return False, f"the eigenvalue of largest modulus {lam:.4g} is complex"
    if lam.real <= 0:
        return False, f"the eigenvalue of largest modulus {lam.real:.4g} is not positive"
    if len(w) > 1 and abs(w[1]) >= abs(lam) * (1 - EIG_RTOL):
        return False, f"the largest modulus {abs(lam):.4g} is shared by {w[1]:.4g}: lambda_1 is not simple or not strictly dominant"
    return True, f"lambda_1 = {lam.real:.4g} is real, positive, simple and strictly dominant (next |lambda| = {abs(w[1]) if len(w) > 1 else 0:.4g})"


def left_eigenvector(V: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """``(phi_star, lambda_1, phi)``: phi unit-norm right eigenvector (largest entry positive), phi_star(phi) = 1."""
    a = as_matrix(V)
    ok, why = top_eigen_status(a)
    if not ok:
        raise ValueError(f"left_eigenvector needs a real, simple, positive top eigenvalue: {why}.")
    w, vl, vr = _eig_sorted(a)
    phi = vr[:, 0].real
    phi /= np.linalg.norm(phi)
    if phi[np.argmax(np.abs(phi))] < 0:
        phi = -phi
    phi_star = vl[:, 0].real
    phi_star /= phi_star @ phi
    return phi_star, float(w[0].real), phi


def hyperplane_coordinates(z: np.ndarray, V: np.ndarray) -> np.ndarray:
    """c_i = phi_star(z_i) for z ``(..., n, d)``: constant on the hyperplanes of Thm 4.2."""
    phi_star, _, _ = left_eigenvector(V)
    zz = np.asarray(z.detach().cpu() if hasattr(z, "detach") else z, dtype=np.float64)
    if zz.shape[-1] != len(phi_star):
        raise ValueError(f"z has d = {zz.shape[-1]} but V is {len(phi_star)} x {len(phi_star)}.")
    return zz @ phi_star


def invariant_split(V: np.ndarray, select: str) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal bases of the invariant subspaces of the eigenvalues with ``select(re, im)`` true / false."""
    a = as_matrix(V)
    _, Z1, k = sla.schur(a, output="real", sort=lambda re, im: bool(select(re, im)))
    _, Z2, k2 = sla.schur(a, output="real", sort=lambda re, im: not bool(select(re, im)))
    return Z1[:, :k], Z2[:, :k2]


def unstable_projection(z: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Coordinates ``(..., n, k)`` of z in the unstable invariant subspace (Re lambda > 0), projected along the rest."""
    a = as_matrix(V)
    U, S = invariant_split(a, lambda re, im: re > 0)
    k = U.shape[1]
    zz = np.asarray(z.detach().cpu() if hasattr(z, "detach") else z, dtype=np.float64)
    if k == 0:
        return np.zeros((*zz.shape[:-1], 0))
    B = np.hstack([U, S])
    coords = np.linalg.solve(B, zz.reshape(-1, a.shape[0]).T).T
    return coords[:, :k].reshape(*zz.shape[:-1], k)


@dataclass(frozen=True)
class ParanormalSplit:
    """R^d = F (+) G, V|_F = lam I, rho(V|_G) < lam; ``pi_F`` projects onto F along G."""

    lam: float
    F: np.ndarray
    G: np.ndarray
    pi_F: np.ndarray
    rho_G: float

    @property
    def dim_F(self) -> int:
        return self.F.shape[1]


def paranormal_split(V: np.ndarray) -> ParanormalSplit | None:
    """Def. 5.1 (ii) for V, or ``None`` when V is not paranormal."""
    a = as_matrix(V)
    d = a.shape[0]
    w = eigenvalues(a)
    w = w[np.argsort(-np.abs(w), kind="stable")]
    lam = w[0]
    scale = max(abs(lam), 1e-300)
    if abs(lam.imag) > EIG_RTOL * scale or lam.real <= 0:
        return None
    lam = lam.real
    same = np.abs(w - lam) <= 1e-7 * scale
    p = int(same.sum())
    rest = w[~same]
    rho = float(np.abs(rest).max()) if rest.size else 0.0
    if rho >= lam * (1 - EIG_RTOL):
        return None
    M = a - lam * np.eye(d)
    F = sla.null_space(M, rcond=1e-8)
    if F.shape[1] != p:
        return None  # lam is not semisimple: V|_F is a Jordan block, not lam I
    G = sla.orth(M, rcond=1e-8) if p < d else np.zeros((d, 0))
    B = np.hstack([F, G])
    if np.linalg.matrix_rank(B) < d:
        return None
    proj = np.diag([1.0] * p + [0.0] * (d - p))
    pi_F = B @ proj @ np.linalg.inv(B)
    return ParanormalSplit(lam, F, G, pi_F, rho)


def boundary_distance(points: np.ndarray) -> np.ndarray:
    """Distance of each point to the boundary of the convex hull of ``points`` (0 for points on it)."""
    coords, _ = affine_coordinates(points)
    if coords.shape[1] < points.shape[1] or len(points) <= points.shape[1]:
        return np.zeros(len(points))  # a flat hull: every point is on its (relative) boundary
    hull = ConvexHull(points)
    # facet equations a.x + b <= 0 inside, |a| = 1: the distance to the boundary is the smallest |a.x + b|
    return np.abs(points @ hull.equations[:, :-1].T + hull.equations[:, -1]).min(1)
