"""Random decoders at initialisation: where they collapse, for the trainability diagram (arXiv 2505.24333).

Contract
--------
* ``random_state(shape, qk_scale, residual_scale, seed)``: the state dict of a random decoder of the LLaMA
  architecture (RMSNorm before each sub-layer, RoPE, SwiGLU, grouped-query attention) of width ``d``: every
  map's entries N(0, 1 / fan_in), the query and key maps' multiplied by ``qk_scale`` and the two maps that write
  into the residual stream (attention's output map, the feed-forward's down map) by ``residual_scale``, so each
  layer computes x + residual_scale * branch(x) with logits of spread about ``qk_scale**2`` on independent tokens;
  embeddings N(0, 1); norm weights 1. One draw per seed, the same standard normals for every scale:
  ``rescaled(random_state(shape, 1, 1, seed), a, b)`` equals ``random_state(shape, a, b, seed)``.
* ``collapse(state, shape)``: the decoder read from the state by the LLaMA row of the family registry, run on its
  ``n`` distinct tokens in float64: the mean pairwise cosine of the tokens after the last layer (rank collapse
  when it nears 1), the last layer's attention entropy over rows with at least ``min_keys`` visible keys, as a
  share of ln(keys) (entropy collapse when it nears 0), and the mean logit spread of those rows (the standard
  deviation of log P over the visible keys) in the first and in the last layer.
* ``freezing_qk_scale(n)``: (2 ln n)^{1/4}, the ``qk_scale`` at which the first layer's logits on independent tokens
  reach the freezing scale sqrt(2 ln n) of the random-energy-model law: past it the law ln n - sigma^2 / 2 no longer
  holds and the entropy falls fast, but it is not yet collapsed there (on 64 i.i.d. Gaussian logits the entropy is
  0.45 ln n at this scale, 0.32 ln n at qk_scale 2 and 0.2 ln n near 2.45).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attndyn.models.decoder import Decoder, forward


@dataclass(frozen=True)
class Shape:
    """A random decoder's size: width ``d``, ``heads`` query heads over ``kv_heads`` key/value heads, ``layers``
    layers, ``n`` tokens (each distinct, one per vocabulary entry)."""

    d: int = 128
    heads: int = 4
    kv_heads: int = 2
    layers: int = 12
    n: int = 64

    def __post_init__(self) -> None:
        if self.d % self.heads or self.heads % self.kv_heads or (self.d // self.heads) % 2:
            raise ValueError(f"{self}: the width must split into heads of even size, and the heads into key/value groups")
        if min(self.layers, self.n - 1) < 1:
            raise ValueError(f"{self}: needs at least one layer and two tokens")

    @property
    def ffn(self) -> int:
        return 8 * ((8 * self.d // 3 + 7) // 8)  # about 8/3 d, a multiple of 8 (SmolLM2: 1536 for 576)

    def config(self) -> dict:
        return {
            "model_type": "llama",
            "vocab_size": self.n,
            "hidden_size": self.d,
            "intermediate_size": self.ffn,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "max_position_embeddings": self.n,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        }


def random_state(shape: Shape, qk_scale: float, residual_scale: float, seed: int) -> dict[str, torch.Tensor]:
    """The state dict of one random decoder (module docstring), float64."""
    if not (math.isfinite(qk_scale) and qk_scale >= 0 and math.isfinite(residual_scale) and residual_scale >= 0):
        raise ValueError(f"qk_scale {qk_scale!r} and residual_scale {residual_scale!r} must be finite and >= 0")
    d, f, hd = shape.d, shape.ffn, shape.d // shape.heads
    g = torch.Generator().manual_seed(seed)

    def normal(rows: int, cols: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(rows, cols, generator=g, dtype=torch.float64) / math.sqrt(cols) * scale  # as rescaled() scales

    sd = {
        "model.embed_tokens.weight": torch.randn(shape.n, d, generator=g, dtype=torch.float64),
        "model.norm.weight": torch.ones(d, dtype=torch.float64),
    }
    for k in range(shape.layers):
        p = f"model.layers.{k}."
        sd |= {
            p + "input_layernorm.weight": torch.ones(d, dtype=torch.float64),
            p + "post_attention_layernorm.weight": torch.ones(d, dtype=torch.float64),
            p + "self_attn.q_proj.weight": normal(shape.heads * hd, d, qk_scale),
            p + "self_attn.k_proj.weight": normal(shape.kv_heads * hd, d, qk_scale),
            p + "self_attn.v_proj.weight": normal(shape.kv_heads * hd, d),
            p + "self_attn.o_proj.weight": normal(d, shape.heads * hd, residual_scale),
            p + "mlp.gate_proj.weight": normal(f, d),
            p + "mlp.up_proj.weight": normal(f, d),
            p + "mlp.down_proj.weight": normal(d, f, residual_scale),
        }
    return sd


def rescaled(base: dict[str, torch.Tensor], qk_scale: float, residual_scale: float) -> dict[str, torch.Tensor]:
    """``base`` (a :func:`random_state` at scales 1, 1) at other scales: equal to drawing them with the same seed."""
    scale = {"q_proj": qk_scale, "k_proj": qk_scale, "o_proj": residual_scale, "down_proj": residual_scale}
    return {k: v * next((s for part, s in scale.items() if f".{part}." in k), 1.0) for k, v in base.items()}


def decoder_of(state: dict[str, torch.Tensor], shape: Shape) -> Decoder:
    """attndyn's decoder of ``state``, read by the LLaMA row's reader (no transformers)."""
    from attndyn.models.architectures import read_hf_family
    from attndyn.models.families import FAMILIES

    return read_hf_family(FAMILIES["llama"], shape.config(), state.get, name="random-llama", source="a random LLaMA state dict", tokenizer=None)


def _rows(A: torch.Tensor, min_keys: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Over one layer's causal maps ``A`` ``(H, n, n)``, rows with >= ``min_keys`` visible keys: entropy, ln(keys), spread."""
    n = A.shape[-1]
    rows = torch.arange(min_keys - 1, n)
    keys = (rows + 1).to(A.dtype)
    P = A[:, rows, :]
    visible = torch.arange(n)[None, :] <= rows[:, None]
    logP = torch.log(torch.where(visible, P.clamp_min(1e-300), torch.ones((), dtype=A.dtype)))
    H = -torch.where(visible, P * logP, 0.0).sum(-1)
    mean = torch.where(visible, logP, 0.0).sum(-1) / keys
    spread = torch.sqrt(torch.where(visible, (logP - mean[..., None]) ** 2, 0.0).sum(-1) / keys)
    return H, torch.log(keys).expand_as(H), spread


def collapse(state: dict[str, torch.Tensor], shape: Shape, *, min_keys: int = 16) -> dict[str, float]:
    """Rank and entropy collapse of one random decoder on its ``n`` distinct tokens (module docstring)."""
    if not 2 <= min_keys <= shape.n:
        raise ValueError(f"min_keys {min_keys} must lie in [2, n = {shape.n}]")
    out = forward(decoder_of(state, shape), list(range(shape.n)), dtype=torch.float64, logits=False)
    x = out.hidden[-1]
    u = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    G = u @ u.T
    n = shape.n
    cosine = float((G.sum() - G.diagonal().sum()) / (n * (n - 1)))
    H, logk, spread = _rows(out.attentions[-1], min_keys)
    _, _, spread0 = _rows(out.attentions[0], min_keys)
    return {"cosine": cosine, "entropy": float((H / logk).mean()), "spread": float(spread.mean()), "spread0": float(spread0.mean())}


def freezing_qk_scale(n: int) -> float:
    """(2 ln n)^{1/4}: the first layer's logit spread qk_scale**2 reaches sqrt(2 ln n) there (where the random law stops)."""
    if n < 2:
        raise ValueError(f"n {n!r} must be >= 2")
    return (2 * math.log(n)) ** 0.25
