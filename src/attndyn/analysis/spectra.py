"""Which result of the paper applies to (Q, K, V), why, and what it predicts.

Contract
--------
``regime(weights)`` returns a :class:`Regime` whose ``name`` is one of ``REGIMES``, chosen by
this precedence (the most specific proven result first):

1. ``boolean-1d``: d = 1, V > 0, QK > 0 (Thm 2.1);
2. ``polytope``: V = lambda I (lambda > 0), Q^T K symmetric positive definite (Thm 3.1);
3. ``collapse``: V = -lambda I, Q^T K = c I (lambda, c > 0) (t:cas-Idintro);
4. ``polytope-subspace``: V paranormal with dim F >= 2, Q^T K SPD (Thm 5.2);
5. ``hyperplanes``: a good triple (Def. 4.1, with the unsymmetrized <Q phi_1, K phi_1>) (Thm 4.2);
6. ``relaxed``: V satisfies the hypotheses of 2, 4 or 5 but (Q, K) does not (§2.8, observed only);
7. ``codimension-conjecture``: k >= 1 eigenvalues with Re > 0, all simple, and the eigenvalue of
   largest modulus real (Conj. 4.3; with a complex leading pair the paper expects no clustering);
8. ``none``.

``Regime.also`` lists the conjecture's prediction where it applies beside a proven result
(e.g. Vc, a good triple with k = 2). The conjecture is not applied when a positive-real-part
eigenvalue is repeated: V = I is a counterexample to its literal statement (Conjecture 4.3 of arXiv 2305.05465).
``head_spectra(weights)`` gives per-head spectra, good-triple flags and an effective beta.
Multi-head and feed-forward weights fall under no theorem of the paper: ``none`` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attndyn.analysis.geometry import EIG_RTOL, eigenvalues, left_eigenvector, paranormal_split, top_eigen_status
from attndyn.core.weights import Weights, to_numpy

REGIMES = (
    "boolean-1d",
    "polytope",
    "collapse",
    "hyperplanes",
    "polytope-subspace",
    "codimension-conjecture",
    "relaxed",
    "none",
)
# Relative tolerance for "this matrix is symmetric / a multiple of the identity".
MATRIX_RTOL = 1e-10


@dataclass(frozen=True)
class Regime:
    name: str
    reason: str
    prediction: str
    variable: str  # "x", "z" or "" (no prediction)
    reference: str
    also: tuple[str, ...] = field(default_factory=tuple)


def scalar_identity(M: np.ndarray) -> float | None:
    c = M[0, 0]
    scale = max(np.abs(M).max(), 1e-300)
    return float(c) if np.abs(M - c * np.eye(len(M))).max() <= MATRIX_RTOL * scale else None


def is_spd(M: np.ndarray) -> bool:
    scale = max(np.abs(M).max(), 1e-300)
    if np.abs(M - M.T).max() > MATRIX_RTOL * scale:
        return False
    return bool(np.linalg.eigvalsh((M + M.T) / 2).min() > MATRIX_RTOL * scale)


def _unstable_eigs(V: np.ndarray) -> tuple[int, bool]:
    """(k, simple): the number of eigenvalues with Re > 0, and whether they are all simple."""
    w = eigenvalues(V)
    pos = w[w.real > EIG_RTOL * max(np.abs(w).max(), 1e-300)]
    k = len(pos)
    scale = max(np.abs(w).max(), 1e-300)
    simple = all(np.abs(pos[i] - pos[j]) > 1e-7 * scale for i in range(k) for j in range(i + 1, k))
    return k, simple


def _conjecture(V: np.ndarray) -> str | None:
    k, simple = _unstable_eigs(V)
    w = eigenvalues(V)
    lead = w[np.argmax(np.abs(w))]
    # With a complex leading eigenvalue the paper expects no clustering at all (arXiv 2305.05465 §4, and its
    # `none` example in §2.6a), so the conjecture is applied only when the leading eigenvalue is real.
    if abs(lead.imag) > EIG_RTOL * max(abs(lead), 1e-300):
        return None
    if k >= 1 and simple:
        return f"Conj. 4.3 (k = {k}): at most 3 parallel affine subspaces of codimension {k}, in z"
    return None


def regime(weights: Weights, *, beta: float = 1.0) -> Regime:
    """Name the result of the paper that applies to ``weights`` (see the module docstring)."""
    if not isinstance(weights, Weights):
        raise TypeError(f"regime takes attndyn.Weights, not {type(weights).__name__}.")
    if weights.heads > 1:
        return Regime("none", f"{weights.heads} heads: the paper proves nothing for multi-head dynamics (§2.8, open problem 3)", "", "", "§12")
    if weights.ff is not None:
        return Regime("none", "a feed-forward map: an open problem of the paper (§2.8, open problem 2)", "", "", "eq: mlp.transfo")
    V = to_numpy(weights.V[0])
    B = beta * to_numpy(weights.bilinear()[0])
    d = V.shape[0]
    spd = is_spd(B)

    if d == 1:
        v, q = V[0, 0], B[0, 0]
        if v > 0 and q > 0:
            return Regime(
                "boolean-1d",
                f"d = 1 with V = {v:.4g} > 0 and QK = {q:.4g} > 0",
                "P(t) -> a Boolean matrix with leaders the extreme tokens, rank 1 or 2 generically (at most one non-Boolean row); "
                "z_i -> gamma_i in {a, 0, b}",
                "z",
                "Theorem 2.1 (§2)",
            )
    lam = scalar_identity(V)
    if lam is not None and lam > 0 and spd:
        return Regime(
            "polytope",
            f"V = {lam:.4g} I and Q^T K is symmetric positive definite",
            "each z_i converges to 0 or to a point of the boundary of a convex polytope (generically a vertex)",
            "z",
            "Theorem 3.1 (§3)",
        )
    if lam is not None and lam < 0:
        c = scalar_identity(B)
        if c is not None and c > 0:
            return Regime(
                "collapse",
                f"V = {lam:.4g} I and Q^T K = {c:.4g} I",
                "every x_i -> 0 (algebraically, ~t^(-1/2)) and P -> (1/n) 1 1^T",
                "x",
                "the case V = -I (§3, proof in §8)",
            )
    split = paranormal_split(V)
    conj = _conjecture(V)
    if split is not None and split.dim_F >= 2 and lam is None and spd:
        return Regime(
            "polytope-subspace",
            f"V is paranormal: V|_F = {split.lam:.4g} I with dim F = {split.dim_F}, rho(V|_G) = {split.rho_G:.4g}; Q^T K is SPD",
            "pi_F z_i -> the boundary of a convex polytope in F (or 0); the G-component is free",
            "z",
            "Theorem 5.2 (§5)",
            (conj,) if conj else (),
        )
    top_ok, top_why = top_eigen_status(V)
    qk = None
    if top_ok:
        _, _, phi = left_eigenvector(V)
        qk = float(phi @ B @ phi)
        if qk > 0:
            return Regime(
                "hyperplanes",
                f"good triple: {top_why}; <Q phi_1, K phi_1> = {qk:.4g} > 0",
                "phi_1*(z_i) converges to {a, 0, b}: at most 3 parallel hyperplanes orthogonal to phi_1*, in z",
                "z",
                "Theorem 4.2 (§4)",
                (conj,) if conj else (),
            )
    # Here V meets the hypothesis of Thm 3.1, 5.2 or 4.2 only if (Q, K) failed its part of it.
    if lam is not None and lam > 0:
        relaxed_why = f"V = {lam:.4g} I but Q^T K is not symmetric positive definite"
    elif split is not None and split.dim_F >= 2:
        relaxed_why = f"V is paranormal (dim F = {split.dim_F}) but Q^T K is not symmetric positive definite"
    elif qk is not None:
        relaxed_why = f"V satisfies Def. 4.1 (i) but <Q phi_1, K phi_1> = {qk:.4g} <= 0"
    else:
        relaxed_why = None
    if relaxed_why is not None:
        return Regime(
            "relaxed",
            relaxed_why,
            "few clusters are observed numerically (§2.8, open problem 1); nothing is proven",
            "z",
            "§12 (sec: first.new)",
            (conj,) if conj else (),
        )
    if conj is not None:
        return Regime("codimension-conjecture", f"none of the theorems applies; {top_why}", conj, "z", "Conjecture 4.3 (§4)")
    return Regime("none", f"no result of the paper applies: {top_why}", "", "", "")


@dataclass(frozen=True)
class HeadSpectrum:
    head: int
    eig_V: np.ndarray
    eig_sym_QK: np.ndarray
    top_real_positive_simple: bool
    qk_phi1: float | None
    good_triple: bool
    effective_beta: float
    regime: str


def head_spectra(weights: Weights, *, beta: float = 1.0) -> list[HeadSpectrum]:
    """Per head: eigenvalues of V, of the symmetric part of beta Q^T K, Def. 4.1 flags (unsymmetrized
    <Q phi_1, K phi_1>), effective beta = beta ||Q^T K||_2 (the inverse temperature felt by unit-norm
    tokens), and the head's regime on its own."""
    out = []
    for h in range(weights.heads):
        V = to_numpy(weights.V[h])
        B = beta * to_numpy(weights.bilinear()[h])
        top_ok, _ = top_eigen_status(V)
        qk = None
        if top_ok:
            _, _, phi = left_eigenvector(V)
            qk = float(phi @ B @ phi)
        one = Weights(weights.Q[h], weights.K[h], weights.V[h])
        out.append(
            HeadSpectrum(
                h,
                eigenvalues(V),
                np.linalg.eigvalsh((B + B.T) / 2),
                top_ok,
                qk,
                bool(top_ok and qk is not None and qk > 0),
                float(np.linalg.norm(B, 2)),
                regime(one, beta=beta).name,
            )
        )
    return out
