"""The entropy of random attention (arXiv 2505.24333): logits i.i.d. N(0, sigma^2) over n keys give
E[H(softmax)] = ln n - sigma^2 / 2 to leading order below the freezing scale sigma_c = sqrt(2 ln n).

The 1/n correction follows from the delta method on H = ln Z - sum_j w_j g_j / Z (w_j = e^{g_j}, Z = sum_j w_j):
E[H] = ln n - sigma^2 / 2 + [sigma^2 e^{sigma^2} - (e^{sigma^2} - 1) / 2] / n + O(e^{c sigma^2} / n^2); it is an
expansion in e^{sigma^2} / n, so it holds only while e^{sigma^2} << n. Reported (this claim judges nothing: the
remainder's bound is not derived here): the mean entropy over rows with its standard error, the law with and
without the correction, and the deviation in standard errors.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="random-attention-entropy",
    paper_ref="arXiv 2505.24333 (the entropy of softmax over i.i.d. Gaussian logits, a random-energy-model law)",
    title="Random attention's entropy: ln n - sigma^2 / 2 below the freezing scale, and where the 1/n correction holds",
    statement=(
        "For logits i.i.d. N(0, sigma^2) over n keys, E[H] = ln n - sigma^2 / 2 + [sigma^2 e^{sigma^2} - (e^{sigma^2} - 1) / 2] / n "
        "+ O(n^-2) while e^{sigma^2} << n (delta method); near sigma_c = sqrt(2 ln n) the expansion fails. Reported: the mean "
        "entropy over independent rows with its standard error against both forms of the law."
    ),
    hypotheses="n = 4096 keys, 4096 independent rows per sigma (quick: 1024), float64, softmax with the row max subtracted.",
    kind="report",
)


class Config(ExperimentConfig):
    n: int = Field(4096, ge=2)
    rows: int = Field(4096, ge=2)
    sigmas: list[float] = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0]


QUICK = {"rows": 1024}


def law(sigma: float, n: int, *, corrected: bool = True) -> float:
    s2 = sigma * sigma
    base = math.log(n) - s2 / 2
    return base + ((s2 * math.exp(s2) - math.expm1(s2) / 2) / n if corrected else 0.0)


def entropies(g: np.ndarray) -> np.ndarray:
    """H of the row softmax of logits ``g`` ``(rows, n)`` (row max subtracted)."""
    g = g - g.max(-1, keepdims=True)
    w = np.exp(g)
    Z = w.sum(-1)
    return np.log(Z) - (w * g).sum(-1) / Z


def run(config: Config) -> Result:
    rng = np.random.default_rng(config.seed)
    H = np.empty((len(config.sigmas), config.rows))
    for k, s in enumerate(config.sigmas):
        for lo in range(0, config.rows, 256):
            hi = min(lo + 256, config.rows)
            H[k, lo:hi] = entropies(s * rng.standard_normal((hi - lo, config.n)))
    arrays = {"sigmas": np.array(config.sigmas), "H": H}
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    sig, H = np.asarray(arrays["sigmas"]), np.asarray(arrays["H"])
    mean, se = H.mean(-1), H.std(-1, ddof=1) / math.sqrt(H.shape[-1])
    lead = np.array([law(s, config.n, corrected=False) for s in sig])
    corr = np.array([law(s, config.n) for s in sig])
    ratio = np.exp(sig**2) / config.n
    z = (mean - corr) / se
    checks = {
        "deviation from ln n - sigma^2 / 2 + the 1/n term, in standard errors (largest |z| where e^{sigma^2} / n <= 0.01)": report(
            float(np.abs(z[ratio <= 0.01]).max()) if (ratio <= 0.01).any() else math.nan,
            ", ".join(
                f"sigma = {s:g} (e^s^2 / n = {r:.2g}): {m:.4f} +- {e:.4f} vs {c:.4f} (leading {lo:.4f}), z = {zz:+.1f}"
                for s, r, m, e, c, lo, zz in zip(sig, ratio, mean, se, corr, lead, z, strict=True)
            ),
        ),
        "freezing scale sigma_c = sqrt(2 ln n)": report(math.sqrt(2 * math.log(config.n))),
    }
    return checks, {"mean": mean.tolist(), "se": se.tolist(), "law": corr.tolist(), "leading": lead.tolist()}


def figures(result: Result) -> dict:
    n = result.params["n"]
    s = np.linspace(0.0, math.sqrt(2 * math.log(n)), 200)
    sig = result.arrays["sigmas"]
    return {
        "entropy_vs_sigma": plots.curves(
            s,
            {"ln n - sigma^2 / 2": [law(x, n, corrected=False) for x in s], "with the 1/n term": [law(x, n) for x in s]},
            xlabel=r"$\sigma$",
            ylabel="mean attention entropy",
            title=f"i.i.d. N(0, sigma^2) logits, n = {n}",
            points={"measured (row mean)": (sig, result.info["mean"])},
        )
    }
