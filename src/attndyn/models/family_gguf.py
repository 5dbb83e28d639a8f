"""GGUF files of the registry's families other than llama and gemma3: llama.cpp's tensor names per family
(:func:`gguf_name`), what its converter changed undone, and the file read as a folder is
(:func:`decoder_from_gguf`); GPT-2's files by :func:`gpt2_from_gguf`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attndyn.models.architectures import read_hf_family
from attndyn.models.decoder import Decoder, DecoderLayer, LazyLayers
from attndyn.models.errors import CheckpointError
from attndyn.models.families import family_of_gguf
from attndyn.models.tokenizers import check_tokenizer

# llama.cpp's tensor names for the Hugging Face ones: the names gguf's TensorNameMap gives them
# (gguf/tensor_mapping.py, what convert_hf_to_gguf.py writes), per family; a test writes files with gguf's map
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_ATTN_FFN = {k: v for k, v in GGUF_LAYER_NAMES.items() if "layernorm" not in k}
GGUF_LAYERS: dict[str, dict[str, str]] = {
    "llama": GGUF_LAYER_NAMES,
    "qwen2": GGUF_LAYER_NAMES,
    "qwen3": GGUF_LAYER_NAMES,
    # OLMo-2: norms after the sub-layers only
    "olmo2": _ATTN_FFN | {"post_attention_layernorm": "post_attention_norm", "post_feedforward_layernorm": "post_ffw_norm"},
    # Gemma 2: sandwich norms (pre_feedforward_layernorm is llama.cpp's ffn_norm)
    "gemma2": _ATTN_FFN
    | {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "post_attention_norm",
        "pre_feedforward_layernorm": "ffn_norm",
        "post_feedforward_layernorm": "post_ffw_norm",
    },
    # Phi-3: fused q, k, v and gate-up maps, stored as they are
    "phi3": {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.qkv_proj": "attn_qkv",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    },
    "gpt_neox": {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "attention.query_key_value": "attn_qkv",
        "attention.dense": "attn_output",
        "mlp.dense_h_to_4h": "ffn_up",
        "mlp.dense_4h_to_h": "ffn_down",
    },
}
GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
GGUF_GLOBALS = {
    "gpt_neox": {
        "gpt_neox.embed_in.weight": "token_embd.weight",
        "gpt_neox.final_layer_norm.weight": "output_norm.weight",
        "gpt_neox.final_layer_norm.bias": "output_norm.bias",
        "embed_out.weight": "output.weight",
    }
}
_LAYER_PREFIX = {"gpt_neox": ["gpt_neox", "layers"]}


def gguf_name(hf: str, family: str = "llama") -> str | None:
    """llama.cpp's name of a Hugging Face tensor name of ``family``, or None when it has none here."""
    names = GGUF_GLOBALS.get(family, GGUF_NAMES)
    if hf in names:
        return names[hf]
    parts = hf.split(".")
    if len(parts) < 5 or parts[:2] != _LAYER_PREFIX.get(family, ["model", "layers"]):
        return None
    mapped = GGUF_LAYERS.get(family, GGUF_LAYER_NAMES).get(".".join(parts[3:-1]))
    return None if mapped is None else f"blk.{parts[2]}.{mapped}.{parts[-1]}"


def decoder_from_gguf(arrays: dict, meta: dict, *, source: str, tokenizer: object, lazy: bool = False) -> Decoder:
    """A GGUF file of a registry family other than llama and gemma3, from its dequantized tensors and
    metadata, its tensors renamed from llama.cpp's names (:func:`gguf_name`) and read as a folder is.

    What llama.cpp's converter changed is undone here: none of these families has its query/key rows
    reordered (llama.cpp runs them with NEOX RoPE, pairing ``(i, i + rot/2)`` as transformers does);
    Gemma 2's norm weights are stored as ``1 + w`` (1 is taken off, in float64, so the reader adds it
    back exactly); GPT-NeoX's fused query/key/value rows, laid out per head ``(H, 3, hd)`` by
    transformers, are stored as all query rows, then key, then value rows ``(3, H, hd)``. The rest comes
    from the metadata: the rotary width (``rope.dimension_count``), the parallel residual, LayerNorm's
    epsilon, soft-capping and the sliding window; Gemma 2's query scale, which the file does not store,
    is llama.cpp's rule."""
    fam = family_of_gguf(meta.get("arch"), where=f"{source}: ")
    if fam.layout == "conv1d":
        return gpt2_from_gguf(arrays, meta, source=source, tokenizer=tokenizer, lazy=lazy)
    H, d = meta["heads"], meta["d"]
    hd = meta.get("head_dim") or d // H
    config = {
        "model_type": fam.model_types[0],
        "num_attention_heads": H,
        "num_key_value_heads": meta["kv_heads"],
        "hidden_size": d,
        "head_dim": hd,
        "num_hidden_layers": meta["layers"],
        "rms_norm_eps": meta["eps"],
        "layer_norm_eps": meta["eps"],
        "rope_theta": meta["rope_base"],
        "max_position_embeddings": meta.get("context") or None,
        "tie_word_embeddings": "output.weight" not in arrays,
    }
    rope_dims = meta.get("rope_dims")
    if rope_dims is not None:
        if rope_dims > hd or rope_dims % 2:
            raise CheckpointError(f"{source}: {meta['arch']}.rope.dimension_count = {rope_dims} is not an even number up to the head dimension {hd}")
        config["partial_rotary_factor"] = rope_dims / hd
        if int(hd * config["partial_rotary_factor"]) != rope_dims:
            raise CheckpointError(f"{source}: {meta['arch']}.rope.dimension_count = {rope_dims} is not a fraction of {hd} the reader can represent")
    if fam.gguf_config is not None:
        config |= fam.gguf_config(meta)
    if fam.sliding_window != "none" and meta.get("window"):
        config["sliding_window"] = meta["window"]

    def get(name: str) -> torch.Tensor | None:
        g = gguf_name(name, fam.name)
        if g is None or g not in arrays:
            return None
        a = np.asarray(arrays[g], dtype=np.float32)
        if fam.norm_offset and name.endswith("norm.weight"):  # stored as offset + w
            return torch.from_numpy(a.astype(np.float64)) - fam.norm_offset
        if fam.layout == "neox" and ".query_key_value." in name:  # (3, H, hd) rows back to (H, 3, hd)
            return torch.from_numpy(np.ascontiguousarray(a.reshape(3, H, hd, *a.shape[1:]).swapaxes(0, 1).reshape(a.shape)))
        # a lazily read cache's float32 tensor is the (copy-on-write) map's own pages: no copy (a 0.5B model's
        # embeddings and output head are 1.1 GiB); an eager read, or a dequantized array, is the reader's own
        return torch.from_numpy(a if lazy and a.flags.writeable else a.copy())

    return read_hf_family(fam, config, get, name=meta.get("name", Path(source).stem), source=source, tokenizer=tokenizer, lazy=lazy)


def gpt2_from_gguf(arrays: dict, meta: dict, *, source: str, tokenizer: object, lazy: bool = False) -> Decoder:
    """A GGUF file of architecture ``gpt2`` (llama.cpp's ``GPT2Model`` converter). The converter transposes
    GPT-2's ``Conv1D`` maps (stored (in, out) by transformers) into the (out, in) layout of a linear map,
    which is the decoder's, so they are read as they are; the fused ``attn_qkv`` rows are all query rows,
    then key, then value rows; every map and both LayerNorms carry biases; ``position_embd`` holds the
    learned positions, one row per position of ``context_length``; the tanh GELU. A file without
    ``output.weight`` ties the output head to the token embedding, as llama.cpp does."""
    H, d, L = meta["heads"], meta["d"], meta["layers"]
    if meta["kv_heads"] != H:
        raise CheckpointError(f"{source}: gpt2.attention.head_count_kv = {meta['kv_heads']}; GPT-2 has no grouped-query attention (head_count = {H})")

    def get(name: str) -> torch.Tensor:
        return torch.from_numpy(np.asarray(arrays[name], dtype=np.float32).copy())

    def layer(k: int) -> DecoderLayer:
        b = f"blk.{k}."
        fused = {"W": get(b + "attn_qkv.weight"), "b": get(b + "attn_qkv.bias")}  # rows: all q, then k, then v
        qkv = {f"{kind}_{m}": t[i * d : (i + 1) * d] for kind, t in fused.items() for i, m in enumerate("qkv")}
        return DecoderLayer(
            **qkv,
            attn_norm=get(b + "attn_norm.weight"),
            W_o=get(b + "attn_output.weight"),
            ffn_norm=get(b + "ffn_norm.weight"),
            gate=None,
            up=get(b + "ffn_up.weight"),
            down=get(b + "ffn_down.weight"),
            attn_norm_bias=get(b + "attn_norm.bias"),
            ffn_norm_bias=get(b + "ffn_norm.bias"),
            b_o=get(b + "attn_output.bias"),
            b_up=get(b + "ffn_up.bias"),
            b_down=get(b + "ffn_down.bias"),
        )

    layers = LazyLayers(L, layer) if lazy else tuple(layer(k) for k in range(L))
    embed = get("token_embd.weight")
    head = get("output.weight") if "output.weight" in arrays else embed
    check_tokenizer(tokenizer, int(embed.shape[0]), source)
    pos = get("position_embd.weight")
    return Decoder(
        meta.get("name", Path(source).stem), source, embed, layers, get("output_norm.weight"), head, H, H, d // H, 0.0,
        meta["eps"], tokenizer, arch="gpt2", activation="gelu_tanh", norm_kind="layer", norm_bias=get("output_norm.bias"),
        positions="learned", pos_embed=pos, context=int(pos.shape[0]),
    )  # fmt: skip
