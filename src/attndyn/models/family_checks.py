"""The checks every family's configuration passes before a tensor is read, from the family's row.

* :data:`CONFIG_SPEC`: every value a family config declares, typed and bounded (heads >= 1, epsilons in
  (0, 1], windows integers >= 1, sizes within :mod:`~attndyn.models.file_checks`' documented bounds), and
  :data:`ROPE_SPEC` the entries of ``rope_parameters`` / ``rope_scaling``; ``layer_types`` one known kind per layer.
* :data:`FORWARD_KEYS`: the config keys that change the forward pass, each with the test of its *effective*
  value; :func:`check_config` refuses, by name, one that is on while the row does not implement it
  (:attr:`~attndyn.models.families.Family.implements`).
* :data:`LAYOUT_READS` / :func:`check_layout`: the traits each tensor layout's reader reads; a row claiming
  another value is refused naming the trait. :func:`files_reader_reads`: whether the LLaMA/Gemma 3 folder
  reader of :mod:`~attndyn.models.hf_files` reads every trait of a row (else the family reader does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from attndyn.models import file_checks as fc
from attndyn.models.errors import CheckpointError

if TYPE_CHECKING:
    from attndyn.models.families import Family

# --- the configuration: every value typed where the row declares it, every forward-changing key refused unless implemented


def _flag(key: str) -> Callable[[dict], bool]:
    return lambda c: c.get(key) is True


# config keys that change the forward pass when their *effective* value is on (not when merely present: published
# Qwen2 configs carry sliding_window with use_sliding_window false, GPT-2's carry scale_attn_weights true), and
# what they do; a family implements those :meth:`Family.implements` lists, any other one is refused by name
FORWARD_KEYS: dict[str, tuple[str, Callable[[dict], bool]]] = {
    "attention_bias": ("biases on the attention maps", _flag("attention_bias")),
    "use_qkv_bias": ("biases on the query, key and value maps", _flag("use_qkv_bias")),  # StableLM's key
    "mlp_bias": ("biases on the feed-forward maps", _flag("mlp_bias")),
    "qk_layernorm": ("LayerNorm of queries and keys", _flag("qk_layernorm")),
    "use_qk_norm": ("a norm of queries and keys", _flag("use_qk_norm")),
    "use_parallel_residual": ("a parallel residual", _flag("use_parallel_residual")),
    "parallel_attn": ("a parallel residual", _flag("parallel_attn")),
    "alibi": ("ALiBi position biases", _flag("alibi")),
    "attn_logit_softcapping": ("soft-capped attention scores", lambda c: c.get("attn_logit_softcapping") is not None),
    "final_logit_softcapping": ("soft-capped logits", lambda c: c.get("final_logit_softcapping") is not None),
    "sliding_window": (
        "a sliding attention window",
        lambda c: c.get("sliding_window") is not None and c.get("use_sliding_window") is not False,
    ),
    "scale_attn_weights": ("unscaled attention scores", lambda c: c.get("scale_attn_weights") is False),
    "scale_attn_by_inverse_layer_idx": ("scores scaled by the layer's index", _flag("scale_attn_by_inverse_layer_idx")),
    "reorder_and_upcast_attn": ("upcast attention", _flag("reorder_and_upcast_attn")),
}

# every value a family's config declares, typed and bounded before any tensor is read or allocated
CONFIG_SPEC = {
    "num_attention_heads": fc.Int(1, fc.MAX_HEADS, required=False),
    "num_key_value_heads": fc.Int(1, fc.MAX_HEADS, required=False),
    "hidden_size": fc.Int(1, fc.MAX_WIDTH, required=False),
    "head_dim": fc.Int(1, fc.MAX_WIDTH, required=False),
    "intermediate_size": fc.Int(1, fc.MAX_WIDTH, required=False),
    "num_hidden_layers": fc.Int(1, fc.MAX_LAYERS, required=False),
    "vocab_size": fc.Int(1, fc.MAX_VOCAB, required=False),
    "max_position_embeddings": fc.Int(1, fc.MAX_CONTEXT, required=False),
    "sliding_window": fc.Int(1, fc.MAX_CONTEXT, required=False),
    "max_window_layers": fc.Int(0, fc.MAX_LAYERS, required=False),
    "rms_norm_eps": fc.Real(above=0.0, hi=1.0, required=False),
    "layer_norm_eps": fc.Real(above=0.0, hi=1.0, required=False),
    "rope_theta": fc.Real(above=1.0, required=False),
    "rotary_emb_base": fc.Real(above=1.0, required=False),
    "partial_rotary_factor": fc.Real(above=0.0, hi=1.0, required=False),
    "rotary_pct": fc.Real(above=0.0, hi=1.0, required=False),
    "attn_logit_softcapping": fc.Real(above=0.0, required=False),
    "final_logit_softcapping": fc.Real(above=0.0, required=False),
    "query_pre_attn_scalar": fc.Real(above=0.0, required=False),
    "hidden_act": fc.Text(),
    "hidden_activation": fc.Text(),
} | {
    key: fc.Flag()
    for key in (
        "tie_word_embeddings", "use_sliding_window", "attention_bias", "use_qkv_bias", "mlp_bias", "qk_layernorm", "use_qk_norm",
        "use_parallel_residual", "parallel_attn", "alibi", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
        "reorder_and_upcast_attn",
    )
}  # fmt: skip


# the entries of a rope_parameters / rope_scaling mapping (flat, or one mapping per layer type) the readers read
ROPE_SPEC = {
    "rope_type": fc.Text(),
    "type": fc.Text(),
    "rope_theta": fc.Real(above=1.0, required=False),
    "partial_rotary_factor": fc.Real(above=0.0, hi=1.0, required=False),
}
LAYER_TYPES = ("full_attention", "sliding_attention")


def _check_rope(config: dict, where: str) -> None:
    """``rope_scaling`` and ``rope_parameters``: mappings (of mappings, one per layer type), their entries typed by name."""
    for key in ("rope_scaling", "rope_parameters"):
        block = config.get(key)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise CheckpointError(f"{where}: {key} = {block!r} is not a mapping (only a mapping of the default RoPE is read)")
        nested = bool(block) and all(isinstance(v, dict) for v in block.values())
        for name, entry in ((f"{key}[{t!r}]", v) for t, v in block.items()) if nested else ((key, block),):
            fc.typed({f"{name}.{k}": v for k, v in entry.items()}, {f"{name}.{k}": spec for k, spec in ROPE_SPEC.items()}, where)


def _check_layer_types(config: dict, where: str) -> None:
    """``layer_types``: a list of one known kind per layer (``num_hidden_layers`` of them)."""
    types = config.get("layer_types")
    if types is None:
        return
    L = config.get("num_hidden_layers")
    if not isinstance(types, list) or not all(isinstance(t, str) and t in LAYER_TYPES for t in types) or fc.is_int(L) and len(types) != L:
        raise CheckpointError(
            f"{where}: layer_types = {types!r} is not a list of {L if fc.is_int(L) else 'num_hidden_layers'} entries "
            f"{' or '.join(map(repr, LAYER_TYPES))}"
        )


# what each tensor layout's reader reads: a row claiming another value of one of these traits is refused by name
_FUSED_LN = {"norm_placement": ("pre",), "qk_norm": ("none",), "gated_ffn": (False,), "norm_offset": (0.0,), "embed_scaled": (False,),
             "gqa": (False,), "sliding_window": ("none",), "softcap": (False,)}  # fmt: skip
LAYOUT_READS: dict[str, dict[str, tuple]] = {
    # the split reader reads no norm biases: a LayerNorm row (whose norms carry them) takes another layout
    "split": {"fused": ("none", "qkv+gate_up"), "rotary": ("full", "partial"), "norm": ("rms",)},
    "neox": _FUSED_LN | {"fused": ("qkv",), "norm": ("layer",), "biases": ("all",), "rotary": ("full", "partial")},
    "conv1d": _FUSED_LN | {"fused": ("qkv",), "norm": ("layer",), "biases": ("all",), "rotary": ("learned",), "reader": ("files",)},
}
# the rows decoder_files.read_hf_llama reads (LLaMA, Gemma 3); a "files" row with other traits takes read_hf_family
FILES_READS = (
    {"biases": "optional", "norm": "rms", "norm_placement": "pre", "qk_norm": "none", "norm_offset": 0.0, "embed_scaled": False, "softcap": False,
     "sliding_window": "none", "fused": "none", "gated_ffn": True, "parallel_residual": False, "rotary": "full", "gqa": True,
     "tied": "config", "acts": (("silu", "silu"),), "act_key": "hidden_act"},
    {"biases": "optional", "norm": "rms", "norm_placement": "sandwich", "qk_norm": "head", "norm_offset": 1.0, "embed_scaled": True, "softcap": False,
     "sliding_window": "pattern", "fused": "none", "gated_ffn": True, "parallel_residual": False, "rotary": "full", "gqa": True,
     "tied": "always", "acts": (("gelu_pytorch_tanh", "gelu_tanh"),), "act_key": "hidden_activation"},
)  # fmt: skip


def check_layout(fam: Family) -> None:
    """Refuse a row whose traits its layout's reader does not read (:data:`LAYOUT_READS`), naming the trait."""
    if fam.layout not in LAYOUT_READS:
        raise CheckpointError(f"the {fam.name} row: layout {fam.layout!r} is not one of {', '.join(LAYOUT_READS)}")
    for trait, allowed in LAYOUT_READS[fam.layout].items():
        if getattr(fam, trait) not in allowed:
            raise CheckpointError(
                f"the {fam.name} row: {trait} = {getattr(fam, trait)!r} is not read in the {fam.layout} layout "
                f"(it reads {', '.join(map(repr, allowed))})"
            )


def files_reader_reads(fam: Family) -> bool:
    """Whether :func:`~attndyn.models.hf_files.read_hf_llama` reads every trait of ``fam`` as the row says."""
    return fam.reader == "files" and (fam.layout == "conv1d" or any(all(getattr(fam, k) == v for k, v in p.items()) for p in FILES_READS))


def check_config(fam: Family, config: dict, where: str) -> None:
    """Refuse, naming the key, a config value of the wrong type or out of range (:data:`CONFIG_SPEC`), a
    ``rope_scaling`` / ``rope_parameters`` that is not a mapping, and a forward-changing key
    (:data:`FORWARD_KEYS`) whose effective value is on while ``fam`` does not implement it."""
    where = where.rstrip(": ")
    fc.typed(config, CONFIG_SPEC, where)
    _check_rope(config, where)
    _check_layer_types(config, where)
    for key, (what, on) in FORWARD_KEYS.items():
        if on(config) and key not in fam.implements:
            supported = ", ".join(sorted(fam.implements)) or "none of them"
            raise CheckpointError(
                f"{where}: {key} = {config[key]!r} ({what}) is not implemented for the {fam.name} family "
                f"(of the forward-changing keys it implements: {supported})"
            )
