"""Attention sinks as a leader with no value: how a key bias on the first token slows clustering
under softmax and not under the unnormalised model (Gu et al., arXiv 2410.10781)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, every_within, report
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="sinks",
    paper_ref="Gu et al., arXiv:2410.10781 (attention sinks; sigmoid attention without normalisation forms none)",
    title="Attention sinks: a key bias on the first token slows clustering under softmax, not under USA",
    statement=(
        "In trained decoders most heads put much of their attention on the first token, whose value is small: a sink. In the "
        "particle model this is a leader with no value: token 0 sits at e_4, the value matrix V = diag(1, 1, 1, 0) sends it "
        "to zero, and a key bias b is added to every query's logit for it. With the causal mask the sink never moves. Under "
        "softmax the bias takes attention from the other tokens, so they cluster later; under the unnormalised model (USA) the "
        "other weights do not change, so their trajectories are exactly those of b = 0. Judged (exact identities, to rounding: "
        "64 eps): under USA the other tokens' paths at every b equal b = 0's at every save and system; under both flows and "
        "every b the sink never moves. Reported, per b: the sink rate (the "
        "fraction of systems whose mean attention share on token 0 exceeds 0.3, Gu et al.'s threshold), the mean attention "
        "entropy, and the median time t* until the other tokens form one cluster (1 - cos < 1e-3 for every pair)."
    ),
    hypotheses=(
        "S^3 (post-LN), causal mask, Q = K = I, V = diag(1, 1, 1, 0), beta = 1, n = 24 tokens uniform on the S^2 of e_4's complement plus the sink."
    ),
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 24
    systems: int = 16
    beta: float = 1.0
    biases: list[float] = [0.0, 1.0, 2.0, 3.0, 4.0]
    T: float = 120.0
    saves: int = 241
    cluster_tol: float = 1e-3
    sink_threshold: float = 0.3
    # the perturbations the sensitivity tests make: the sink's value (V's last diagonal entry; the claim's is 0) and the mask
    sink_value: float = Field(0.0, ge=0)
    mask: str = Field("causal", pattern="^(causal|full)$")


QUICK = {"systems": 8}
FLOWS = ("softmax", "unnormalized")
ROUNDING = 64 * float(np.finfo(np.float64).eps)  # the identities are exact: their budget is rounding on unit tokens
DETECTS_USA = "a sink value of 1e-9 (V = diag(1, 1, 1, 1e-9))"
NOTE_USA = "exact: the sink has no value and USA takes no weight from the others"
NOTE_SINK = "exact: under the causal mask token 0 attends only to itself, and V x_0 = 0"
DETECTS_SINK = "the full mask in place of the causal one (the sink then attends to the others)"


def starts(config: Config, rng: np.random.Generator) -> np.ndarray:
    y = rng.normal(size=(config.systems, config.n, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    x0 = np.zeros((config.systems, config.n + 1, 4))
    x0[:, 1:, :3] = y
    x0[:, 0, 3] = 1.0
    return x0


def model(config: Config, flow: str, b: float) -> ad.Model:
    W = ad.Weights(np.eye(4), np.eye(4), np.diag([1.0, 1.0, 1.0, config.sink_value]))
    return ad.Model(W, beta=config.beta, geometry="sphere", mask=config.mask, normalization=flow, sink_bias=b)


def first_cluster_time(ts: np.ndarray, xs: np.ndarray, tol: float) -> np.ndarray:
    """Per system: the first save at which every pair of the other tokens has 1 - cos < tol (inf if none)."""
    others = xs[:, :, 1:]
    G = np.einsum("tsid,tsjd->tsij", others, others)
    diam = (1 - G).max((-1, -2))
    hit = diam < tol
    return np.where(hit.any(0), ts[hit.argmax(0)], np.inf)


def shares(A: np.ndarray) -> np.ndarray:
    """Per system: the mean over queries i >= 1 of the share of row i's attention on token 0."""
    rows = A[:, 1:, :]
    return (rows[..., 0] / rows.sum(-1)).mean(-1)


def entropy(A: np.ndarray) -> np.ndarray:
    """Per system: the mean over queries i >= 1 of the entropy of row i (rows normalised to shares)."""
    P = A[:, 1:, :] / A[:, 1:, :].sum(-1, keepdims=True)
    logs = np.log(np.where(P > 0, P, 1.0))
    return -(P * logs).sum(-1).mean(-1)


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    x0 = starts(config, rng)
    ts = np.linspace(0.0, config.T, config.saves)
    arrays = {"biases": np.array(config.biases), "ts": ts}
    for flow in FLOWS:
        tstar, share0, ent0, drift, sink = [], [], [], [], []
        base = None
        for b in config.biases:
            m = model(config, flow, b)
            xs = ad.simulate(m, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-9, atol=1e-11), max_steps=10_000_000).xs.numpy()
            tstar.append(first_cluster_time(ts, xs, config.cluster_tol))
            A = ad.attention_matrix(m, x0)[:, 0].numpy()
            share0.append(shares(A))
            ent0.append(entropy(A))
            base = xs if base is None else base
            drift.append(float(np.abs(xs[:, :, 1:] - base[:, :, 1:]).max()))
            sink.append(float(np.abs(xs[:, :, 0] - x0[:, 0]).max()))
        arrays[f"tstar_{flow}"] = np.array(tstar)
        arrays[f"share_{flow}"] = np.array(share0)
        arrays[f"entropy_{flow}"] = np.array(ent0)
        arrays[f"drift_{flow}"] = np.array(drift)
        arrays[f"sink_{flow}"] = np.array(sink)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    checks = {}
    for flow in FLOWS:
        name = "softmax" if flow == "softmax" else "USA"
        tstar = arrays[f"tstar_{flow}"]
        t0 = float(np.median(tstar[0]))
        for k, b in enumerate(arrays["biases"]):
            rate = float((arrays[f"share_{flow}"][k] > config.sink_threshold).mean())
            med = float(np.median(tstar[k]))
            checks[f"{name}, b = {b:g}: median t* / median t* at b = 0"] = report(
                med / t0 if np.isfinite(med) and np.isfinite(t0) else float("inf"),
                f"t* = {med:.3g} (inf: not one cluster by T); sink rate {rate:.2f}; entropy {float(arrays[f'entropy_{flow}'][k].mean()):.3g}",
            )
        cases = [f"b = {b:g}" for b in arrays["biases"]]
        if flow == "unnormalized":
            checks["USA: max |x_i(t; b) - x_i(t; 0)| over the other tokens, saves and systems, every b"] = every_within(
                arrays[f"drift_{flow}"],
                0.0,
                ROUNDING,
                "exact: the sink has no value and USA takes no weight from the others",
                cases=cases,
                detects=DETECTS_USA,
            )
        else:
            checks[f"{name}: largest change of the other tokens' trajectories over b"] = report(
                float(arrays[f"drift_{flow}"].max()), "nonzero under softmax: the bias takes weight from the others"
            )
        checks[f"{name}: the sink never moves: max |x_0(t) - x_0(0)| over saves and systems, every b"] = every_within(
            arrays[f"sink_{flow}"],
            0.0,
            ROUNDING,
            "exact: under the causal mask token 0 attends only to itself, and V x_0 = 0",
            cases=cases,
            detects=DETECTS_SINK,
        )
    return checks, {}


def figures(result: Result) -> dict:
    a = result.arrays
    b = a["biases"]
    t_series, s_series = {}, {}
    for flow in FLOWS:
        name = "softmax" if flow == "softmax" else "USA (unnormalised)"
        t = np.median(a[f"tstar_{flow}"], 1)
        t_series[name] = np.where(np.isfinite(t), t, np.nan)
        s_series[name] = a[f"share_{flow}"].mean(1)
    return {
        "cluster_time": plots.curves(
            b,
            t_series,
            xlabel="key bias b on the first token",
            ylabel="median time to one cluster t*",
            title="a sink slows clustering under softmax only",
        ),
        "sink_share": plots.curves(
            b,
            s_series,
            xlabel="key bias b on the first token",
            ylabel="mean attention share on the sink at t = 0",
            title="the sink's share of attention",
            hlines={"0.3 (sink threshold)": 0.3},
        ),
    }
