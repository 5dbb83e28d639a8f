"""Rank collapse of pure attention, by mask; LayerNorm's equilibria that do not collapse; the
quarter-circle bulk of random softmax attention (Wu, Ajorlou, Wang, Jegelka, Jadbabaie,
arXiv 2405.18781; Nait Saada, Naderi, Tanner, arXiv 2410.07799)."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import t as student

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, at_most, every, every_within, report
from attndyn.core.attention import weights_from_scores
from attndyn.theory import random_attention
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="rank-collapse",
    paper_ref="arXiv:2405.18781 (Wu, Ajorlou, Wang, Jegelka, Jadbabaie) and arXiv:2410.07799 (Nait Saada, Naderi, Tanner)",
    title="Rank collapse of pure attention for every connected mask, windows slower; LayerNorm equilibria that do not collapse",
    statement=(
        "Pure attention layers X <- A(X) X collapse to rank one, mu(X) = |X - 1 gamma^T| -> 0 exponentially, for every mask "
        "whose graph is quasi-strongly connected (full, causal, sliding window), and local windows slow the rate. With "
        "LayerNorm (post-LN, tokens on the sphere) there are equilibria of higher rank: n tokens on a regular polygon of a "
        "great circle do not move. The singular values of sqrt(n) A for row-softmax A of i.i.d. N(0, sigma^2) logits, the "
        "top one excluded, follow the quarter-circle law on [0, 2s], s^2 = e^{sigma^2} - 1. Judged: collapse below 1e-8 for "
        "every system and mask; the median rates ordered full < causal < window 8 < window 4; the polygon's velocity zero "
        "to rounding and the flow from it at rest; the bulk's second and fourth moments within their standard errors "
        "(after removing the O(1/n) finite-size term by Richardson extrapolation from n/2 to n)."
    ),
    hypotheses=(
        "Layers: n = 32, d = 8, beta = 1, random Q, K (entries N(0, 1/d)), V = I, tokens N(0, I/d), 80 layers, 16 systems. "
        "Sphere: V = -I, Q = K = I, beta = 1, n = 8 on S^1. Spectra: sigma = 0.5 and 1, n = 600 (and 300), the engine's softmax."
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
    # turns token 0 of the polygon by this angle (0 is the claim; the sensitivity test sets 1e-3)
    polygon_shift: float = 0.0
    # multiplies sigma in the drawn logits only (1 is the claim; the sensitivity test sets 1.02)
    sigma_factor: float = 1.0


QUICK = {"systems": 12, "spectrum_seeds": 12}
ROUNDING = 64 * float(np.finfo(np.float64).eps)


def mu(X: np.ndarray) -> np.ndarray:
    """|X - 1 gamma^T|_F with gamma the token mean, per system."""
    return np.linalg.norm(X - X.mean(-2, keepdims=True), axis=(-2, -1))


def masks(config: Config) -> list[tuple[str, dict]]:
    return [("full", {"mask": "full"}), ("causal", {"mask": "causal"})] + [(f"window {w}", {"mask": "window", "window": w}) for w in config.windows]


def layers(model: ad.Model, x0: np.ndarray, L: int, self_attending: list[int]) -> np.ndarray:
    """mu(X_k) for k = 0..L under X <- A(X) X with the engine's attention matrix; ``(L + 1, systems)``."""
    x = torch.as_tensor(x0)
    out = [mu(x0)]
    for _ in range(L):
        A = ad.attention_matrix(model, x)[:, 0]
        for i in self_attending:
            A[:, i] = 0.0
            A[:, i, i] = 1.0
        x = A @ x
        out.append(mu(x.numpy()))
    return np.array(out)


def effective_rate(ratio: np.ndarray, floor: float) -> np.ndarray:
    """Per system: log(mu_K / mu_0) / K at the first layer K where the ratio is below ``floor`` (or the last)."""
    L = ratio.shape[0] - 1
    below = ratio < floor
    K = np.where(below.any(0), below.argmax(0), L)
    K = np.maximum(K, 1)
    return np.log(np.maximum(ratio[K, np.arange(ratio.shape[1])], 1e-300)) / K


def polygon(n: int) -> np.ndarray:
    th = 2 * math.pi * np.arange(n) / n
    return np.stack([np.cos(th), np.sin(th)], -1)


def transverse_rate(n: int, beta: float) -> float:
    """How fast rounding off the sphere grows at the regular n-gon under post-LN attention with V = -I.

    With a_i = -sum_j P_ij x_j and v_i = a_i - <x_i, a_i> x_i, the radius obeys d|x_i|^2/dt =
    2 <x_i, a_i> (1 - |x_i|^2), so a radial error grows at the rate gamma = -2 <x_i, a_i> =
    2 sum_k e^{beta cos u_k} cos u_k / sum_k e^{beta cos u_k}, u_k = 2 pi k / n (the sphere is
    transversally unstable for V = -I). Within the circle the polygon is stable, but the radial error
    feeds back into the angles, so every coordinate's rounding may grow like e^{gamma t}.
    """
    u = 2 * math.pi * np.arange(n) / n
    h = np.exp(beta * np.cos(u))
    return float(2 * (h * np.cos(u)).sum() / h.sum())


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
        arrays[f"mu{k}"] = layers(ad.Model(W, beta=1.0, **kw), x0, config.layers, config.self_attending)
    # the sphere: a regular polygon on a great circle of S^1 is an equilibrium of post-LN attention with V = -I
    X = polygon(config.polygon_n)
    c, s = math.cos(config.polygon_shift), math.sin(config.polygon_shift)
    X[0] = X[0] @ np.array([[c, s], [-s, c]])
    sphere = ad.Model(ad.Weights(np.eye(2), np.eye(2), -np.eye(2)), beta=1.0, geometry="sphere")
    arrays["polygon"] = X
    arrays["polygon_velocity"] = ad.velocity(0.0, X, sphere)
    ts = np.linspace(0.0, config.polygon_T, 11)
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
    rates = []
    for k, label in enumerate(labels):
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
        rates.append(float(np.median(effective_rate(ratio, config.collapse_below))) if ratio.size else float("nan"))
    ordered = [rates[i] < rates[i + 1] for i in range(len(rates) - 1)]
    checks["median collapse rates ordered " + " < ".join(labels) + " (faster first)"] = every(
        ordered,
        "rates: " + ", ".join(f"{r:.3g}" for r in rates),
        cases=[f"{labels[i]} vs {labels[i + 1]}" for i in range(len(ordered))],
        detects="a window as wide as the sequence (w = n acts as the causal mask)",
    )
    v = float(np.abs(arrays["polygon_velocity"]).max())
    checks["post-LN, V = -I: velocity at the regular polygon (an equilibrium of rank 2)"] = at_most(
        v, ROUNDING, "rounding budget 64 eps", n=arrays["polygon"].shape[0], detects="one token of the polygon turned by 1e-3"
    )
    drift = float(np.abs(arrays["polygon_flow"] - arrays["polygon_flow"][0]).max())
    growth = math.exp(transverse_rate(arrays["polygon"].shape[0], 1.0) * config.polygon_T)
    checks[f"post-LN, V = -I: max |x(t) - x(0)| from the polygon over t <= {config.polygon_T:g}"] = at_most(
        drift,
        ROUNDING * growth,
        f"rounding (64 eps) grown by e^(gamma T) = {growth:.3g}, gamma the sphere's transverse instability at the polygon",
        n=arrays["polygon"].shape[0],
        detects="one token of the polygon turned by 1e-3",
    )
    pl = arrays["polygon_layers"]
    checks["the same polygon without LayerNorm: mu after 20 pure attention layers / mu(X_0)"] = report(float(pl[-1] / pl[0]), "collapses")
    info = {"rates": rates}
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
    labels = [label for label, _ in masks(Config(**result.params))]
    series = {}
    for k, label in enumerate(labels):
        m = a[f"mu{k}"]
        series[label] = np.median(m / m[0], 1)
    pl = a["polygon_layers"]
    series["polygon, pure attention (no LayerNorm)"] = (np.arange(pl.size), pl / pl[0])
    fig = plots.curves(
        np.arange(a["mu0"].shape[0]),
        series,
        xlabel="layer k",
        ylabel=r"$\mu(X_k) / \mu(X_0)$ (median over systems)",
        title="rank collapse of pure attention by mask",
        logy=True,
        hlines={"1e-8": 1e-8},
    )
    return {"collapse": fig}
