"""Causal position bias: the Cesaro matrix at beta = 0, and the U-shaped influence on the last token
(arXiv 2502.01951, 2603.10123)."""

from __future__ import annotations

import math

import numpy as np
import torch

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every_within, report
from attndyn.theory import causal_attention
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="causal-position-bias",
    paper_ref="arXiv:2502.01951 and arXiv:2603.10123 (position bias of causal attention)",
    title="Causal position bias: the exact Cesaro flow at beta = 0 and the U-shaped influence on the last token",
    statement=(
        "At beta = 0 the causal softmax is the Cesaro matrix C (C_ij = 1/i for j <= i), so with V = I the flow is linear: "
        "x(t) = e^{tC} x(0), and residual layers of step dt give exactly (I + dt C)^k. Depth-H rollout with residual weight a "
        "(row n of (aI + (1-a)C)^H) gives the last token a^H plus a logarithmic primacy tail. Judged: the engine's causal "
        "mode equals these exact solutions (Euler steps and RK4 steps to rounding, the adaptive flow to its error budget), and "
        "the rollout of the engine's own attention matrices (n = 2000, H = 6, a = 1/2) equals row n of (aI + (1-a)C)^H "
        "computed in the run, and its last weight the closed form (a + (1-a)/n)^H, to rounding. Reported: at beta > 0 the influence "
        "of token j on the last token (the rollout along the trajectory) and its U shape; the same rollout of a trained "
        "decoder's attention maps when one is installed."
    ),
    hypotheses="R^d, d = 3, V = I (Q = K = I, irrelevant at beta = 0), n = 64 tokens for the flows; rollouts at n = 2000, H = 6, a = 1/2.",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 64
    d: int = 3
    layers: int = 12
    dt: float = 0.5
    T: float = 3.0
    bias_n: int = 256
    bias_d: int = 16
    bias_betas: list[float] = [0.0, 1.0, 4.0]
    bias_seeds: int = 8
    trained_prompts: int = 4
    # the beta of the exact checks: 0 is the claim; the sensitivity tests set 1e-6, which must fail them
    beta: float = 0.0


QUICK = {"bias_seeds": 4, "trained_prompts": 2}
# the claim's rollout setting (arXiv 2502.01951): n = 2000 tokens, depth H = 6, residual weight a = 1/2; the
# reference weights are computed from it in each run (row n of (a I + (1 - a) C)^H, and the last token's
# closed form (a + (1 - a)/n)^H), never typed
REFERENCE_N, REFERENCE_H, REFERENCE_A = 2000, 6, 0.5
# the rollout of the engine's attention uses these (the claim's setting; the sensitivity tests change them)
ROLLOUT_N, ROLLOUT_H, ROLLOUT_A = REFERENCE_N, REFERENCE_H, REFERENCE_A
EPS = float(np.finfo(np.float64).eps)
ROUNDING = 16.0  # rounding budget per multiply-add chain, in units of eps * steps * n * max|x|
DETECTS_BETA = "beta = 1e-6 instead of 0 (attention no longer exactly Cesaro)"


def _rk4_polynomial(A: np.ndarray) -> np.ndarray:
    """One RK4 step of x' = Ax as a matrix: the degree-4 Taylor polynomial I + A + A^2/2 + A^3/6 + A^4/24."""
    eye = np.eye(len(A))
    A2 = A @ A
    return eye + A + A2 / 2 + A2 @ A / 6 + A2 @ A2 / 24


def _model(config: Config, **kw) -> ad.Model:
    return ad.Model(ad.Weights.identity(config.d), beta=config.beta, mask="causal", **kw)


def rollout(As: list[np.ndarray], a: float) -> np.ndarray:
    """Row n of prod_k (a I + (1 - a) A_k) (layer 1 applied first): the weights of x_j(0) in the last token."""
    row = np.zeros(As[0].shape[-1])
    row[-1] = 1.0
    for A in reversed(As):
        row = a * row + (1 - a) * row @ A
    return row


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    n, d, k, dt = config.n, config.d, config.layers, config.dt
    x0 = rng.normal(size=(n, d))
    C = causal_attention.cesaro(n)
    model = _model(config)
    ts = np.arange(k + 1) * dt
    euler = ad.simulate(model, x0, ts, solver=ad.Euler(), step=ad.FixedStep(dt)).xs.numpy()
    rk4 = ad.simulate(model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(dt)).xs.numpy()
    arrays = {"x0": x0, "euler": euler, "rk4": rk4}
    arrays["euler_exact"] = np.stack([np.linalg.matrix_power(np.eye(n) + dt * C, j) @ x0 for j in range(k + 1)])
    R = _rk4_polynomial(dt * C)
    arrays["rk4_exact"] = np.stack([np.linalg.matrix_power(R, j) @ x0 for j in range(k + 1)])
    flow_ts = np.linspace(0.0, config.T, 7)
    arrays["flow_ts"] = flow_ts
    for name, rtol in (("flow", 1e-12), ("flow_fine", 1e-13)):
        arrays[name] = ad.simulate(model, x0, flow_ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=rtol, atol=rtol * 1e-2)).xs.numpy()
    arrays["flow_exact"] = np.stack([causal_attention.causal_flow(x0, t) for t in flow_ts])
    # the rollout of the engine's own attention at beta (= 0: the Cesaro matrix) on a long sequence
    xr = rng.normal(size=(ROLLOUT_N, 2))
    A = ad.attention_matrix(ad.Model(ad.Weights.identity(2), beta=config.beta, mask="causal"), xr)[0].numpy()
    arrays["rollout"] = rollout([A] * ROLLOUT_H, ROLLOUT_A)
    arrays["rollout_exact"] = causal_attention.rollout_weights(REFERENCE_N, REFERENCE_H, REFERENCE_A)
    arrays |= position_bias(config, rng)
    arrays |= trained_rollout(config)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def position_bias(config: Config, rng: np.random.Generator) -> dict:
    """Influence of x_j(0) on the last token after H residual layers x <- a x + (1 - a) A(x) x of the
    engine's causal attention (Q = K = I, V = I, tokens N(0, I/d)), averaged over seeds, per beta."""
    n, d, H, a = config.bias_n, config.bias_d, ROLLOUT_H, ROLLOUT_A
    out = np.zeros((len(config.bias_betas), n))
    for b, beta in enumerate(config.bias_betas):
        model = ad.Model(ad.Weights.identity(d), beta=beta, mask="causal")
        x = torch.as_tensor(rng.normal(size=(config.bias_seeds, n, d)) / math.sqrt(d))
        As = []
        for _ in range(H):
            A = ad.attention_matrix(model, x)[:, 0]
            As.append(A.numpy())
            x = a * x + (1 - a) * A @ x
        out[b] = np.mean([rollout([Ak[s] for Ak in As], a) for s in range(config.bias_seeds)], 0)
    return {"bias_betas": np.array(config.bias_betas), "bias_influence": out}


def trained_rollout(config: Config) -> dict:
    """The same rollout of SmolLM2's real attention maps (head-averaged), when the model is installed."""
    from attndyn.models.decoder_files import smollm2_available

    if config.trained_prompts < 1 or not smollm2_available()[0]:
        return {}
    from attndyn.models.decoder import forward
    from attndyn.models.decoder_files import load_decoder
    from attndyn.models.prompts import PROMPTS

    dec = load_decoder("smollm2")
    rows = []
    for text in PROMPTS[: config.trained_prompts]:
        att = forward(dec, dec.encode(text), dtype=torch.float32).attentions.double().mean(1).numpy()  # (L, n, n)
        rows.append(rollout(list(att), ROLLOUT_A))
    n = min(len(r) for r in rows)
    return {"trained_influence": np.mean([r[:n] for r in rows], 0)}


def _relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per save: max |a - b| / max |b|."""
    axes = tuple(range(1, a.ndim))
    return np.abs(a - b).max(axes) / np.abs(b).max(axes)


def u_shape(w: np.ndarray) -> tuple[float, float]:
    """``(first / median, last / median)`` of influence weights over positions."""
    med = float(np.median(w))
    return float(w[0] / med), float(w[-1] / med)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    n, k = config.n, config.layers
    eps = float(np.finfo(np.float64).eps)
    rounding = ROUNDING * eps * k * n
    checks = {}
    for name, label in (("euler", "Euler steps = (I + dt C)^k x(0)"), ("rk4", "RK4 steps = (Taylor_4(dt C))^k x(0)")):
        err = _relative(arrays[name], arrays[f"{name}_exact"])
        checks[f"beta = 0: {label}, relative error at every layer"] = every_within(
            err, 0.0, rounding, f"rounding budget {ROUNDING:g} eps k n", cases=[f"layer {j}" for j in range(len(err))], detects=DETECTS_BETA
        )
    flow, fine, exact = arrays["flow"], arrays["flow_fine"], arrays["flow_exact"]
    budget = max(3.0 * float(_relative(flow, fine).max()), rounding)
    err = _relative(flow, exact)
    checks["beta = 0: adaptive flow = e^{tC} x(0), relative error at every save"] = every_within(
        err,
        0.0,
        budget,
        "budget: 3 x the difference to a run at 10x tighter tolerance (Dopri5 rtol 1e-12 vs 1e-13), at least the rounding budget",
        cases=[f"t = {t:g}" for t in arrays["flow_ts"]],
        detects=DETECTS_BETA,
    )
    roll, ref = arrays["rollout"], arrays["rollout_exact"]
    n, H, a = REFERENCE_N, REFERENCE_H, REFERENCE_A
    # every weight against row n of (a I + (1 - a) C)^H, and the last token's weight (and the exact row's)
    # against the closed form (a + (1 - a)/n)^H; budget: the rounding of H chains of n multiply-adds
    last = (a + (1 - a) / n) ** H
    dev = np.abs(roll / ref - 1) if roll.shape == ref.shape else np.full(1, np.inf)
    dev = np.append(dev, [abs(roll[-1] / last - 1), abs(ref[-1] / last - 1)])
    budget = ROUNDING * H * n * EPS
    checks["rollout of the engine's attention = exact rollout weights, max relative error"] = every_within(
        dev,
        0.0,
        budget,
        f"n = {n}, H = {H}, a = {a:g}: every j against row n of (aI + (1-a)C)^H, the last token and the exact row's last "
        f"against (a + (1-a)/n)^H = {last:.6g}; budget {ROUNDING:g} eps H n",
        cases=[f"j = {j}" for j in range(1, dev.size - 1)] + ["j = n vs (a + (1-a)/n)^H", "exact row's j = n vs (a + (1-a)/n)^H"],
        detects="a = 0.51 instead of 1/2, or H = 5 layers",
    )
    js = np.array([10, 100, 1000])
    js = js[js < roll.size]
    tail = causal_attention.primacy_tail(js, roll.size, ROLLOUT_H, ROLLOUT_A)
    checks["primacy-tail formula vs exact rollout: max relative error for j in {10, 100, 1000}"] = report(
        float(np.abs(tail / ref[js - 1] - 1).max()) if js.size else float("nan"), "an asymptotic formula; accurate for j >~ 10"
    )
    for b, beta in enumerate(arrays["bias_betas"]):
        first, last = u_shape(arrays["bias_influence"][b])
        checks[f"beta = {beta:g}: influence on the last token, first / median and last / median"] = report(first, f"last / median = {last:.3g}")
    if "trained_influence" in arrays:
        first, last = u_shape(arrays["trained_influence"])
        checks["SmolLM2-135M attention rollout: first / median and last / median"] = report(first, f"last / median = {last:.3g}")
    return checks, {}


def figures(result: Result) -> dict:
    a = result.arrays
    series = {}
    for b, beta in enumerate(a["bias_betas"]):
        w = a["bias_influence"][b]
        series[f"particles, beta = {beta:g}"] = (np.arange(1, w.size + 1), w)
    if "trained_influence" in a:
        w = a["trained_influence"]
        series["SmolLM2-135M (real attention)"] = (np.arange(1, w.size + 1), w)
    w = a["rollout_exact"]
    series[f"exact beta = 0, n = {w.size}"] = (np.arange(1, w.size + 1), w)
    fig = plots.curves(
        np.arange(1),
        series,
        xlabel="position j",
        ylabel="weight of x_j(0) in the last token",
        title="causal position bias: influence on the last token after H layers",
        logx=True,
        logy=True,
    )
    return {"influence": fig}
