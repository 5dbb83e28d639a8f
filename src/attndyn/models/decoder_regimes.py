"""The paper's regime of each trained head, on the map the network applies, with the margins that decide it.

Contract
--------
* ``folded_head(decoder, layer, head)``: the head as the particle model's weights on the unit sphere,
  with the pre-attention norm folded in as the twin folds it: the tokens the head reads are
  ``RMSNorm(x) = sqrt(d) w * x / |x|``, so ``Q = W_q,h diag(w) sqrt(d)``, ``K = W_k,g diag(w) sqrt(d)``,
  ``V = W_o,h W_v,g diag(w) sqrt(d)``, and beta = 1/sqrt(hd) is then the inverse temperature at the
  tokens' actual norm (Gemma's per-head query/key norm weights scale Q and K; its per-head
  normalisation itself is not linear and is left out).
* ``deciding_quantities(...)``: Def. 4.1's quantities (arXiv 2305.05465 §4) by modulus: the eigenvalue of V of
  largest modulus ``lambda_1`` (its real part and imaginary part over its modulus), the relative
  modulus gap to the next eigenvalue (0: not simple or a complex pair), and the cosine of
  ``<Q phi_1, K phi_1>`` (phi_1 the right eigenvector, as :func:`attndyn.analysis.spectra.regime`
  uses it), from hd x hd problems (V has rank hd: its non-zero eigenvalues are those of
  ``W_v,g diag(w) sqrt(d) W_o,h``). ``Q^T K`` has rank hd < d, so it is never positive definite:
  Theorems 3.1 and 5.2 cannot apply to a head of a trained decoder.
* ``label(q)``: the regime from the deciding quantities (the decision of ``regime()`` for heads of rank
  hd < d, from hd x hd problems; the tests check it equals ``regime()``).
* ``quantisation_step(W)``: per entry, the step of a 4-bit block quantiser over blocks of 32 entries
  along the input dimension, ``(max - min) / 15`` of the block (Q4_1's step; Q4_K's sub-blocks of 32
  have the same 4 bits). ``head_regimes(decoder, layers)``: per head the label of
  :func:`~attndyn.analysis.spectra.regime` on the folded weights, the deciding quantities, and whether
  the label is *determined*: the deciding signs (lambda_1 real or not, its sign, the sign of the
  cosine) stay the same under ``draws`` (8) perturbations of the four weight matrices by uniform noise of
  half a step (what rounding to the quantiser's grid can move), and each margin exceeds the largest
  shift the perturbations produced; the same decision over each half of the draws
  (``determined_groups``) gives the undetermined count's spread over draws.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attndyn.core.weights import Weights
from attndyn.models.decoder import Decoder

EIG_REAL = 1e-9  # an eigenvalue is real when |Im| <= EIG_REAL |lambda| (analysis.geometry's EIG_RTOL scale)
HYPOTHESES = (
    "The theorems' hypotheses, none of which a trained decoder layer meets: one head (here 9 or 4 heads are summed); "
    "no mask (here causal); no normalisation beyond the projection on the sphere (here RMSNorm with a per-dimension gain, "
    "folded into Q, K and V); no positions (RoPE left out); no feed-forward block; the same weights for all time and t -> infinity "
    "(here one layer is one step). Q^T K has rank hd < d, so it is never positive definite (Theorems 3.1 and 5.2 cannot apply). "
    "The counts are formal: they say which theorem's algebraic conditions the head's own matrices satisfy."
)


def _fold(decoder: Decoder, layer: int) -> torch.Tensor:
    gain = decoder.layers[layer].attn_norm
    if gain is None:  # no norm before the sub-layer (OLMo-2): nothing to fold
        return torch.ones(decoder.d_model, dtype=torch.float64)
    return gain.double() * math.sqrt(decoder.d_model)


def _slices(decoder: Decoder, layer: int, head: int, mats: dict | None = None) -> tuple[torch.Tensor, ...]:
    L, hd, g = decoder.layers[layer], decoder.head_dim, head // decoder.group
    m = mats or {"W_q": L.W_q.double(), "W_k": L.W_k.double(), "W_v": L.W_v.double(), "W_o": L.W_o.double()}
    Q = m["W_q"][head * hd : (head + 1) * hd]
    K = m["W_k"][g * hd : (g + 1) * hd]
    if L.q_norm is not None:  # the head's RMSNorm gain (OLMo-2: the head's slice of the all-head norm)
        Q = (L.q_norm[head * hd : (head + 1) * hd] if decoder.qk_norm_full else L.q_norm).double()[:, None] * Q
    if L.k_norm is not None:
        K = (L.k_norm[g * hd : (g + 1) * hd] if decoder.qk_norm_full else L.k_norm).double()[:, None] * K
    Wv = m["W_v"][g * hd : (g + 1) * hd]
    Wo = m["W_o"][:, head * hd : (head + 1) * hd]
    w = _fold(decoder, layer)
    return Q * w, K * w, Wv * w, Wo


def folded_head(decoder: Decoder, layer: int, head: int) -> Weights:
    """The head with the pre-attention norm folded in (module docstring)."""
    Q, K, Wv, Wo = _slices(decoder, layer, head)
    return Weights(Q, K, Wo @ Wv)


EIGVEC_SEPARATION = 1e-6  # below this distance to the nearest other eigenvalue (over |lambda|): LAPACK's eig
EIGVEC_STEP = 1e-14  # inverse iteration stops when two successive unit iterates differ by this little
EIGVEC_RESIDUAL = 1e-10  # |M u - lambda u| / |lambda| of its result, else LAPACK's eig


def _eigenvector(M: np.ndarray, lam: float, separation: float) -> np.ndarray:
    """The right eigenvector (unit norm) of the real eigenvalue ``lam`` of ``M``, whose distance to the
    nearest other eigenvalue is ``separation |lam|``: inverse iteration with the shift ``lam (1 + 1e-12)``,
    whose error shrinks by about ``1e-12 / separation`` a solve, until two successive iterates agree to
    :data:`EIGVEC_STEP` (at least two solves). LAPACK's full ``eig`` instead where the separation is below
    :data:`EIGVEC_SEPARATION` (there a mixture of the two close eigenvectors has a tiny residual, so no
    residual test could tell it from the eigenvector), where a solve fails, or where the iterates do not
    settle or leave a residual above :data:`EIGVEC_RESIDUAL`, or where the arithmetic overflows (a tiny
    ``lam``)."""
    if separation >= EIGVEC_SEPARATION:
        n = len(M)
        A = M - lam * (1 + 1e-12) * np.eye(n)
        u = np.ones(n) / math.sqrt(n)
        scale = max(abs(lam), 1e-300)
        try:
            # at a tiny lambda_1 (|lambda_1| below about 1e-142) the solves overflow: then LAPACK, silently
            with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
                for k in range(8):
                    v = np.linalg.solve(A, u)
                    v = v / np.linalg.norm(v)
                    v = v if v @ u >= 0 else -v
                    settled = k >= 1 and np.linalg.norm(v - u) <= EIGVEC_STEP
                    u = v
                    if settled:
                        if np.linalg.norm(M @ u - lam * u) <= EIGVEC_RESIDUAL * scale:
                            return u
                        break
        except (np.linalg.LinAlgError, FloatingPointError):
            pass
    w, vr = np.linalg.eig(M)
    return vr[:, int(np.argmin(np.abs(w - lam)))].real


def deciding_quantities(Q: torch.Tensor, K: torch.Tensor, Wv: torch.Tensor, Wo: torch.Tensor) -> dict:
    """Def. 4.1's quantities by modulus for V = Wo Wv (rank hd) and the bilinear form Q^T K (module docstring)."""
    M = (Wv @ Wo).numpy()
    w = np.linalg.eigvals(M)  # the eigenvector of lambda_1 alone is needed: _eigenvector (a third less than eig's all)
    w = w[np.argsort(-np.abs(w), kind="stable")]
    lam = w[0]
    mod = max(abs(lam), 1e-300)
    gap = (abs(lam) - abs(w[1])) / mod if len(w) > 1 else 1.0
    real = abs(lam.imag) <= EIG_REAL * mod
    qk_cos = float("nan")
    if real:
        separation = float(np.min(np.abs(w[1:] - lam))) / mod if len(w) > 1 else 1.0
        phi = Wo.numpy() @ _eigenvector(M, float(lam.real), separation)  # V phi = lambda phi: phi = Wo u with M u = lambda u
        a, b = Q.numpy() @ phi, K.numpy() @ phi
        qk_cos = float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))
    return {
        "lambda1_abs": float(abs(lam)),
        "lambda1_real": float(lam.real / mod),
        "lambda1_imag": float(abs(lam.imag) / mod),
        "modulus_gap": float(gap),
        "qk_cos": qk_cos,
        "unstable": int((w.real > EIG_REAL * mod).sum()),
    }


def _signs(q: dict) -> tuple:
    """The signs that decide the label: lambda_1 real and strictly dominant, its sign, and the cosine's sign."""
    real = q["lambda1_imag"] <= EIG_REAL and q["modulus_gap"] > EIG_REAL
    return (real, real and q["lambda1_real"] > 0, bool(real and q["lambda1_real"] > 0 and q["qk_cos"] > 0))


def label(q: dict) -> str:
    """:func:`attndyn.analysis.spectra.regime`'s decision for a head whose V has rank < d and whose Q^T K
    is not positive definite (every head of a decoder with hd < d), from the deciding quantities: a good
    triple with <Q phi_1, K phi_1> > 0 is Theorem 4.2's hyperplanes, with <= 0 the relaxed case; otherwise
    a real leading eigenvalue with k >= 1 eigenvalues of positive real part is Conjecture 4.3's case;
    a complex leading pair is no case of the paper. (A top eigenvalue repeated exactly, dim F >= 2, would be
    relaxed; a trained head's never is.)"""
    real, positive, qk = _signs(q)
    if positive:
        return "hyperplanes" if qk else "relaxed"
    if q["lambda1_imag"] <= EIG_REAL and q["unstable"] >= 1:
        return "codimension-conjecture"
    return "none"


def _margin_ok(q: dict, shift: dict) -> bool:
    """Each quantity that decides the label is further from its threshold than quantisation moved it."""
    real, positive, _ = _signs(q)
    if not real:
        return q["lambda1_imag"] > shift["lambda1_imag"] or q["modulus_gap"] > shift["modulus_gap"]
    ok = q["modulus_gap"] > shift["modulus_gap"]
    return ok and (not positive or abs(q["qk_cos"]) > shift["qk_cos"])


def _largest_shift(values: list[float], base: float) -> float:
    """The largest |value - base|; infinite when a value is defined on one side only (the cosine of a
    perturbed head whose leading eigenvalue turned complex)."""
    out = 0.0
    for v in values:
        if np.isfinite(v) != np.isfinite(base):
            return float("inf")
        if np.isfinite(v):
            out = max(out, abs(v - base))
    return out


def quantisation_step(W: torch.Tensor, block: int = 32, levels: int = 15) -> torch.Tensor:
    """Per entry, ``(max - min) / levels`` of its block of ``block`` entries along the last axis."""
    rows, cols = W.shape
    pad = (-cols) % block
    X = torch.nn.functional.pad(W.double(), (0, pad), value=float("nan")) if pad else W.double()
    B = X.view(rows, -1, block)
    step = (torch.nan_to_num(B, nan=-math.inf).amax(-1) - torch.nan_to_num(B, nan=math.inf).amin(-1)) / levels
    return step.repeat_interleave(block, dim=1)[:, :cols]


REGIME_DRAWS = 8  # perturbation draws per layer; the undetermined count is also given for each half (its draw-to-draw spread)
REGIME_GROUPS = 2


def head_regimes(
    decoder: Decoder, layers: tuple[int, ...], *, draws: int = REGIME_DRAWS, groups: int | None = None, seed: int = 0, check_labels: bool = False
) -> list[dict]:
    """Per head of ``layers``: the regime of the folded head, its deciding quantities, and whether the
    label is determined under quantisation-sized perturbations (module docstring). ``determined`` is over
    all ``draws``; ``determined_groups`` the same decision over each of ``groups`` disjoint sets of the draws
    (how much the undetermined count moves from one set of draws to another)."""
    from attndyn.analysis.spectra import regime
    from attndyn.models.decoder_geometry import spectral_norm

    if groups is None:  # halves where the draws split evenly, else one group
        groups = REGIME_GROUPS if draws % REGIME_GROUPS == 0 else 1
    if draws and (groups < 1 or draws % groups):
        raise ValueError(f"head_regimes: draws = {draws} cannot be split into {groups} equal groups")
    rng = torch.Generator().manual_seed(seed)
    beta = 1.0 / math.sqrt(decoder.head_dim)
    size = draws // groups if draws else 0
    out = []
    for layer in layers:
        L = decoder.layers[layer]
        mats = {k: getattr(L, k).double() for k in ("W_q", "W_k", "W_v", "W_o")}
        steps = {k: quantisation_step(v) for k, v in mats.items()}
        noisy = [{k: v + (torch.rand(v.shape, generator=rng, dtype=torch.float64) - 0.5) * steps[k] for k, v in mats.items()} for _ in range(draws)]
        for head in range(decoder.heads):
            Q, K, Wv, Wo = _slices(decoder, layer, head, mats)
            q = deciding_quantities(Q, K, Wv, Wo)
            _, R = torch.linalg.qr(Q.T)
            row = {"layer": layer, "head": head, "effective_beta_folded": beta * spectral_norm(R @ K), **q}
            shifted = [deciding_quantities(*_slices(decoder, layer, head, m)) for m in noisy]

            def decided(sel: list[dict], q: dict = q) -> tuple[bool, dict]:
                shift = {k: _largest_shift([s[k] for s in sel], q[k]) for k in ("modulus_gap", "qk_cos", "lambda1_imag")}
                return bool(all(label(s) == label(q) for s in sel) and _margin_ok(q, shift)), shift

            determined, shift = decided(shifted)
            row |= {"regime": label(q), "determined": determined, "perturbation_draws": draws}
            row["determined_groups"] = [decided(shifted[g * size : (g + 1) * size])[0] for g in range(groups)] if draws else []
            row |= {f"quant_shift_{k}": v for k, v in shift.items()}
            if check_labels:  # the engine's own regime() on the d x d folded head (0.1 s a head at d = 576)
                row["regime_engine"] = regime(Weights(Q, K, Wo @ Wv), beta=beta).name
            out.append(row)
    return out
