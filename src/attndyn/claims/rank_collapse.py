"""Rank collapse of pure attention, by mask; LayerNorm's equilibria that do not collapse; the
quarter-circle bulk of random softmax attention (Wu, Ajorlou, Wang, Jegelka, Jadbabaie,
arXiv 2405.18781; Nait Saada, Naderi, Tanner, arXiv 2410.07799)."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import t as student

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, at_most, every_within, report
from attndyn.core.attention import weights_from_scores
from attndyn.theory import random_attention
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="rank-collapse",
    paper_ref="arXiv:2405.18781 (Wu, Ajorlou, Wang, Jegelka, Jadbabaie) and arXiv:2410.07799 (Nait Saada, Naderi, Tanner)",
    title="Rank collapse of pure attention for every connected mask, windows delay it (late rate ln 1/2); LayerNorm equilibria that do not collapse",
    statement=(
        "Pure attention layers X <- A(X) X collapse to rank one, mu(X) = |X - 1 gamma^T| -> 0 exponentially, for every mask "
        "whose graph is quasi-strongly connected (full, causal, sliding window). Local windows delay the collapse; they do not "
        "slow its late rate: near consensus A(X) tends to the uniform matrix U on the mask, whose second eigenvalue is 1/2 for "
        "the causal mask and every window w >= 2 (U is lower triangular with diagonal 1/min(i, w)), so mu falls by 1/2 a layer "
        "(the full mask: U = 1 1^T / n, eigenvalue 0, collapse in a few layers). With LayerNorm (post-LN, tokens on the sphere) "
        "and V = -I there are equilibria of higher rank: n tokens on a regular polygon of a great circle, which a perturbed "
        "polygon returns to (with V = +I it leaves them: the polygon is an equilibrium for every V = cI). The singular values "
        "of sqrt(n) A for row-softmax A of i.i.d. N(0, sigma^2) logits, the top one excluded, follow the quarter-circle law on "
        "[0, 2s], s^2 = e^{sigma^2} - 1. Judged: collapse below 1e-8 for every system and mask; for causal and each window "
        "the late per-layer rate ln(mu_(K+1) / mu_K) (median over systems, at the last layer K with mu_K / mu_0 >= 1e-10, "
        "away from rounding) equals ln |lambda_2(U)| computed from U, within the rate's own change over the 4 layers before "
        "plus rounding; the first layer's rate ln(mu_1 / mu_0) equals the one of A_0 = A(X_0) computed by separate code, "
        "to rounding; from a perturbed polygon the gaps' deviation from 2 pi / n at T is at most its start times "
        "e^{lambda T}, lambda the largest non-rotation eigenvalue of the polygon's exact (circulant) Jacobian; the bulk's "
        "second and fourth moments within their standard errors (after removing the O(1/n) finite-size term by Richardson "
        "extrapolation from n/2 to n). Reported: the layers each mask takes to reach 1e-8 (the delay), its effective rate "
        "log(mu_K / mu_0) / K there (it depends on the 1e-8 floor), the velocity at the exact polygon."
    ),
    hypotheses=(
        "Layers: n = 32, d = 8, beta = 1, random Q, K (entries N(0, 1/d)), V = I, tokens N(0, I/d), 80 layers, 16 systems. "
        "Sphere: V = -I, Q = K = I, beta = 1, n = 8 on S^1, angles perturbed by 1e-4 N(0, 1), T = 10. Spectra: sigma = 0.5 "
        "and 1, n = 600 (and 300), the engine's softmax."
    ),
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 32
    d: int = 8
    layers: int = 80
    systems: int = 16
    windows: list[int] = [8, 4]
    collapse_below: float = 1e-8
    polygon_n: int = 8
    polygon_T: float = 10.0
    spectrum_n: int = 600
    spectrum_sigmas: list[float] = [0.5, 1.0]
    spectrum_seeds: int = 24
    family_alpha: float = 1e-3
    # tokens whose attention row is replaced by the token itself: the claim has none; two of them
    # disconnect the graph (the sensitivity test), and then nothing collapses
    self_attending: list[int] = []
    # the polygon's angles are perturbed by polygon_shift * N(0, 1); polygon_V is c in V = c I (-1 is the claim;
    # the sensitivity test sets +1, whose polygon is an equilibrium too, but unstable)
    polygon_shift: float = 1e-4
    polygon_V: float = -1.0
    # each layer X <- (1 - residual) A(X) X + residual X: 0 is the claim; the sensitivity test sets 0.1 (rate ln 0.55)
    residual: float = 0.0
    # the late rate is measured at the last layer whose median mu_K / mu_0 is at least this (away from rounding)
    late_above: float = 1e-10
    # multiplies sigma in the drawn logits only (1 is the claim; the sensitivity test sets 1.02)
    sigma_factor: float = 1.0


QUICK = {"systems": 12, "spectrum_seeds": 12}
ROUNDING = 64 * float(np.finfo(np.float64).eps)
POLYGON_V = -1.0  # the claim's V = c I on the sphere (the judged decay rate is this c's)
# slack on the linear decay bound for the nonlinear terms, O(perturbation) = O(1e-4) relative times the
# field's second derivatives (O(1) at beta = 1): 1e-2 leaves a factor 100
POLYGON_NONLINEAR = 1e-2


def mu(X: np.ndarray) -> np.ndarray:
    """|X - 1 gamma^T|_F with gamma the token mean, per system."""
    return np.linalg.norm(X - X.mean(-2, keepdims=True), axis=(-2, -1))


def masks(config: Config) -> list[tuple[str, dict]]:
    return [("full", {"mask": "full"}), ("causal", {"mask": "causal"})] + [(f"window {w}", {"mask": "window", "window": w}) for w in config.windows]


def layers(model: ad.Model, x0: np.ndarray, L: int, self_attending: list[int], residual: float = 0.0) -> np.ndarray:
    """mu(X_k) for k = 0..L under X <- (1 - residual) A(X) X + residual X with the engine's attention matrix;
    ``(L + 1, systems)``."""
    x = torch.as_tensor(x0)
    out = [mu(x0)]
    for _ in range(L):
        A = ad.attention_matrix(model, x)[:, 0]
        for i in self_attending:
            A[:, i] = 0.0
            A[:, i, i] = 1.0
        x = (1 - residual) * (A @ x) + residual * x
        out.append(mu(x.numpy()))
    return np.array(out)


def mask_matrix(n: int, kw: dict) -> np.ndarray:
    """1 where token i attends to token j (separate code from the engine's masks): all, j <= i, or i - w < j <= i."""
    i, j = np.indices((n, n))
    if kw["mask"] == "full":
        return np.ones((n, n))
    allowed = j <= i
    if kw["mask"] == "window":
        allowed &= j > i - kw["window"]
    return allowed.astype(np.float64)


def uniform_on_mask(n: int, kw: dict) -> np.ndarray:
    """The limit of A(X) near consensus: each row uniform on the tokens the mask allows."""
    m = mask_matrix(n, kw)
    return m / m.sum(1, keepdims=True)


def second_eigenvalue(U: np.ndarray) -> float:
    """|lambda_2| of the row-stochastic U (the top eigenvalue is 1, for the constant vector)."""
    return float(np.sort(np.abs(np.linalg.eigvals(U)))[-2])


def softmax_rows(x: np.ndarray, W: ad.Weights, beta: float, kw: dict) -> np.ndarray:
    """A(X) by separate code: row softmax of beta <Q x_i, K x_j> over the mask, the row maximum subtracted."""
    Q, K = np.asarray(W.Q, dtype=np.float64)[0], np.asarray(W.K, dtype=np.float64)[0]
    logits = beta * (x @ Q.T) @ np.swapaxes(x @ K.T, -1, -2)
    logits = np.where(mask_matrix(x.shape[-2], kw) > 0, logits, -np.inf)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def effective_rate(ratio: np.ndarray, floor: float) -> np.ndarray:
    """Per system: log(mu_K / mu_0) / K at the first layer K where the ratio is below ``floor`` (or the last)."""
    L = ratio.shape[0] - 1
    below = ratio < floor
    K = np.where(below.any(0), below.argmax(0), L)
    K = np.maximum(K, 1)
    return np.log(np.maximum(ratio[K, np.arange(ratio.shape[1])], 1e-300)) / K


def onset(ratio: np.ndarray, floor: float) -> np.ndarray:
    """Per system: the first layer where mu_K / mu_0 < ``floor`` (L + 1 when it never is)."""
    below = ratio < floor
    return np.where(below.any(0), below.argmax(0), ratio.shape[0])


def late_rate(ratio: np.ndarray, above: float) -> tuple[float, float, int]:
    """The median over systems of ln(mu_(K+1) / mu_K) at the last layer K whose median ratio is >= ``above``,
    the same 4 layers before (their difference bounds the transient still left), and K (-1: no such layer)."""
    med = np.median(ratio, 1)
    ok = np.flatnonzero(med[:-1] >= above)
    if ok.size == 0 or ok[-1] < 4:
        return float("nan"), float("nan"), -1
    K = int(ok[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.log(ratio[1:] / ratio[:-1])
    return float(np.median(step[K])), float(np.median(step[K - 4])), K


def polygon(n: int) -> np.ndarray:
    th = 2 * math.pi * np.arange(n) / n
    return np.stack([np.cos(th), np.sin(th)], -1)


def polygon_jacobian_eigenvalues(n: int, beta: float, c: float) -> np.ndarray:
    """Eigenvalues of the exact Jacobian of the angles' flow at the regular n-gon (post-LN, Q = K = I, V = c I, S^1).

    theta_i' = c sum_j P_ij sin(theta_j - theta_i), P_ij = h(u_ij) / sum_k h(u_ik), h(u) = e^{beta cos u},
    u_ij = theta_j - theta_i. At the polygon sum_j h(u_ij) sin(u_ij) = 0, so d theta_i' / d theta_j =
    c g'(u_ij) / Z (j != i) with g(u) = h(u) sin u, g'(u) = h(u) (cos u - beta sin^2 u), Z = sum_k h(u_k): a
    symmetric circulant with eigenvalues c / Z sum_{k != 0} g'(u_k) (cos(2 pi m k / n) - 1), m = 0..n-1
    (m = 0: the rotation, 0).
    """
    u = 2 * math.pi * np.arange(n) / n
    h = np.exp(beta * np.cos(u))
    gp = h * (np.cos(u) - beta * np.sin(u) ** 2)
    m = np.arange(n)[:, None]
    return c / h.sum() * (gp[None, 1:] * (np.cos(2 * math.pi * m * np.arange(1, n)[None, :] / n) - 1)).sum(1)


def gap_deviation(x: np.ndarray) -> np.ndarray:
    """|gaps - 2 pi / n| (Euclidean norm over the gaps) of tokens on S^1, per save; ``x`` ``(..., n, 2)``."""
    th = np.sort(np.mod(np.arctan2(x[..., 1], x[..., 0]), 2 * math.pi), -1)
    n = th.shape[-1]
    gaps = np.diff(np.concatenate([th, th[..., :1] + 2 * math.pi], -1), axis=-1)
    return np.linalg.norm(gaps - 2 * math.pi / n, axis=-1)


def spectrum_moments(sigma: float, n: int, seeds: int, rng: np.random.Generator) -> np.ndarray:
    """Per seed: the mean of s_k^2 and of s_k^4 over the singular values of sqrt(n) A but the top one."""
    out = []
    for _ in range(seeds):
        L = torch.as_tensor(sigma * rng.normal(size=(n, n)))
        A = weights_from_scores(L, weighting="softmax", causal=False).numpy()
        s = np.linalg.svd(math.sqrt(n) * A, compute_uv=False)[1:]
        out.append([(s**2).mean(), (s**4).mean()])
    return np.array(out)


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    d = config.d
    W = ad.Weights(rng.normal(size=(d, d)) / math.sqrt(d), rng.normal(size=(d, d)) / math.sqrt(d), np.eye(d))
    x0 = rng.normal(size=(config.systems, config.n, d)) / math.sqrt(d)
    arrays: dict[str, np.ndarray] = {}
    for k, (_, kw) in enumerate(masks(config)):
        arrays[f"mu{k}"] = layers(ad.Model(W, beta=1.0, **kw), x0, config.layers, config.self_attending, config.residual)
        # the first layer by separate code (A_0 = A(X_0) computed in NumPy), without the perturbations
        arrays[f"first{k}"] = mu(softmax_rows(x0, W, 1.0, kw) @ x0)
    # the sphere: a regular polygon on a great circle of S^1 is an equilibrium of post-LN attention for every
    # V = c I; with V = -I a perturbed polygon returns to equal gaps, with V = +I it leaves them
    n = config.polygon_n
    th = 2 * math.pi * np.arange(n) / n + config.polygon_shift * rng.normal(size=n)
    X = np.stack([np.cos(th), np.sin(th)], -1)
    sphere = ad.Model(ad.Weights(np.eye(2), np.eye(2), config.polygon_V * np.eye(2)), beta=1.0, geometry="sphere")
    arrays["polygon"] = X
    arrays["polygon_velocity"] = ad.velocity(0.0, polygon(n), sphere)
    ts = np.linspace(0.0, config.polygon_T, 11)
    arrays["polygon_ts"] = ts
    arrays["polygon_flow"] = ad.simulate(sphere, X, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-10, atol=1e-12)).xs.numpy()
    # without the normalisation, the same start collapses under pure attention layers
    arrays["polygon_layers"] = layers(ad.Model(ad.Weights(np.eye(2), np.eye(2), np.eye(2)), beta=1.0), X[None], 20, [])[:, 0]
    for k, sigma in enumerate(config.spectrum_sigmas):
        s = sigma * config.sigma_factor
        arrays[f"spec{k}"] = spectrum_moments(s, config.spectrum_n, config.spectrum_seeds, rng)
        arrays[f"spec_half{k}"] = spectrum_moments(s, config.spectrum_n // 2, 2 * config.spectrum_seeds, rng)
    arrays["sigmas"] = np.array(config.spectrum_sigmas)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def richardson(full: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """2 M(n) - M(n/2) and its standard error (per column), and the smaller sample's degrees of freedom."""
    est = 2 * full.mean(0) - half.mean(0)
    se = np.sqrt(4 * full.var(0, ddof=1) / len(full) + half.var(0, ddof=1) / len(half))
    return est, se, min(len(full), len(half)) - 1


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    checks = {}
    labels = [label for label, _ in masks(config)]
    n = config.n
    eff, onsets, late = [], [], {}
    for k, (label, kw) in enumerate(masks(config)):
        m = arrays[f"mu{k}"]
        ratio = m / m[0]
        checks[f"{label}: mu(X_L) / mu(X_0) after {m.shape[0] - 1} pure attention layers, every system"] = every_within(
            ratio[-1],
            0.0,
            config.collapse_below,
            "collapse to rank one (1e-8: far above rounding, far below any plateau)",
            cases=[f"system {s}" for s in range(ratio.shape[1])],
            detects="two tokens that attend only to themselves (a disconnected mask)",
        )
        # the first layer against A_0 = A(X_0) computed by separate code: both ln(mu_1 / mu_0), to rounding
        first = np.log(m[1] / m[0]) if m.shape[0] > 1 else np.zeros(0)
        exact = np.log(arrays[f"first{k}"] / m[0])
        checks[f"{label}: first layer's rate ln(mu_1 / mu_0) - the same from A_0 computed exactly, every system"] = every_within(
            np.abs(first - exact),
            0.0,
            ROUNDING * n,
            f"A_0 = row softmax of <Q x_i, K x_j> on the mask, in NumPy; budget 64 eps n = {ROUNDING * n:.2g}",
            cases=[f"system {s}" for s in range(first.size)],
            detects="a residual weight 0.1 in the layer, or two tokens that attend only to themselves",
        )
        eff.append(float(np.median(effective_rate(ratio, config.collapse_below))) if ratio.size else float("nan"))
        onsets.append(float(np.median(onset(ratio, config.collapse_below))) if ratio.size else float("nan"))
        if kw["mask"] == "full":
            continue  # U = 1 1^T / n: lambda_2 = 0, no late rate (collapse to rounding in a few layers)
        lam2 = second_eigenvalue(uniform_on_mask(n, kw))
        r, r_before, K = late_rate(ratio, config.late_above)
        # rounding: mu_K carries about 64 eps mu_0 of it, so each ratio mu_(K+1)/mu_K about 2 * 64 eps / (mu_K / mu_0)
        budget = abs(r - r_before) + 2 * ROUNDING / config.late_above
        late[label] = (r, math.log(lam2), K)
        checks[f"{label}: late rate ln(mu_(K+1) / mu_K) - ln |lambda_2(U)|, U uniform on the mask"] = at_most(
            abs(r - math.log(lam2)) if K >= 0 else math.inf,
            budget if K >= 0 else 0.0,
            f"median over systems at K = {K} (the last layer with median mu_K / mu_0 >= {config.late_above:g}); rate {r:.5f}, "
            f"ln |lambda_2| = {math.log(lam2):.5f} (lambda_2 = {lam2:.4g}); budget: the rate's change over the 4 layers before "
            f"(the transient still left, decaying by more than 2 in 4 layers) + rounding 2 x 64 eps / {config.late_above:g}",
            n=ratio.shape[1],
            detects="a residual weight 0.1 in the layer (late rate ln 0.55)",
        )
    checks["layers to reach mu_K / mu_0 < 1e-8 (median over systems), by mask"] = report(
        onsets[-1] if onsets else float("nan"),
        ", ".join(f"{lab}: {o:g}" for lab, o in zip(labels, onsets, strict=True)) + " (windows delay collapse)",
    )
    checks["effective rates log(mu_K / mu_0) / K at the 1e-8 floor (median), by mask"] = report(
        eff[-1] if eff else float("nan"),
        ", ".join(f"{lab}: {r:.4g}" for lab, r in zip(labels, eff, strict=True)) + " (depend on the floor: not judged)",
    )
    checks["post-LN: velocity at the exact regular polygon (an equilibrium for every V = c I)"] = report(
        float(np.abs(arrays["polygon_velocity"]).max()), "zero to rounding for every V = c I, so it cannot tell V = -I from V = +I"
    )
    flow = arrays["polygon_flow"]
    npoly = flow.shape[-2]
    lam = float(np.sort(polygon_jacobian_eigenvalues(npoly, 1.0, POLYGON_V))[-2])  # the largest but the rotation's 0
    T = float(arrays["polygon_ts"][-1])
    g = gap_deviation(flow)
    bound = g[0] * math.exp(lam * T) * (1 + POLYGON_NONLINEAR)
    checks[f"post-LN, V = -I, perturbed polygon: |gaps - 2 pi / n| at T = {T:g} / its start"] = at_most(
        float(g[-1] / g[0]),
        bound / g[0],
        f"e^(lambda T) = {math.exp(lam * T):.3g}, lambda = {lam:.4f} the largest non-rotation eigenvalue of the exact circulant "
        f"Jacobian at the polygon (linear decay of the gap vector, a normal matrix); times 1 + {POLYGON_NONLINEAR:g} for the "
        f"O(perturbation) nonlinear terms; start {g[0]:.3g}",
        n=npoly,
        detects="V = +I (the polygon is an equilibrium there too, but the gaps grow)",
    )
    pl = arrays["polygon_layers"]
    checks["the same perturbed polygon without LayerNorm: mu after 20 pure attention layers / mu(X_0)"] = report(float(pl[-1] / pl[0]), "collapses")
    rates = eff
    info = {"rates": rates, "onsets": onsets, "late": {k: list(v) for k, v in late.items()}}
    S = len(arrays["sigmas"])
    for k, sigma in enumerate(arrays["sigmas"]):
        full, half = arrays[f"spec{k}"], arrays[f"spec_half{k}"]
        target = np.array(random_attention.quarter_circle_moments(float(sigma)))
        if len(full) < 2 or len(half) < 2:
            z, dof = np.zeros(0), 1
        else:
            est, se, dof = richardson(full, half)
            z = np.abs(est - target) / se
        band = float(student.ppf(1.0 - config.family_alpha / (2.0 * 2 * S), max(dof, 1)))
        checks[f"sigma = {sigma:g}: bulk moments E[s^2], E[s^4] vs the quarter-circle law, |z|"] = every_within(
            z,
            0.0,
            band,
            f"Richardson n/2 -> n = {config.spectrum_n}; band: Student-t at family-wise {config.family_alpha:g}",
            cases=["E[s^2]", "E[s^4]"][: z.size],
            detects="sigma off by 3 % in the logits",
        )
    return checks, info


def figures(result: Result) -> dict:
    a = result.arrays
    config = Config(**result.params)
    series = {}
    onsets = result.info.get("onsets", [])
    for k, (label, kw) in enumerate(masks(config)):
        m = a[f"mu{k}"]
        lam = "" if kw["mask"] == "full" else f", late rate ln {second_eigenvalue(uniform_on_mask(config.n, kw)):.3g}"
        when = f", 1e-8 at layer {onsets[k]:g}" if k < len(onsets) else ""
        series[f"{label} (n = {config.n}{lam}{when})"] = np.median(m / m[0], 1)
    pl = a["polygon_layers"]
    series[f"perturbed {pl.size and config.polygon_n}-gon, pure attention (no LayerNorm)"] = (np.arange(pl.size), pl / pl[0])
    fig = plots.curves(
        np.arange(a["mu0"].shape[0]),
        series,
        xlabel="layer k",
        ylabel=r"$\mu(X_k) / \mu(X_0)$ (median over systems)",
        title="pure attention collapses for every mask; windows delay it, the late rate is ln 1/2 for causal and windows",
        logy=True,
        hlines={"1e-8": 1e-8},
    )
    return {"collapse": fig}
