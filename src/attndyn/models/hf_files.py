"""Hugging Face folders of the rows whose reader is ``"files"`` (LLaMA, Gemma 3, GPT-2): ``config.json`` and
``*.safetensors`` read as untrusted files, every key typed and every tensor's shape checked.

* ``read_hf_llama(folder)`` reads a ``LlamaForCausalLM``, Gemma 3 (``gemma3_text``) or ``GPT2LMHeadModel``
  folder; :func:`attndyn.models.architectures.read_folder` takes it for the rows whose every trait it
  reads (:func:`~attndyn.models.family_checks.files_reader_reads`), the family reader for the others.
* GPT-2's ``Conv1D`` maps (:func:`_gpt2`) serve folders and live models alike.

Moved here from :mod:`attndyn.models.decoder_files` (which re-exports ``read_hf_llama``) so that the family
readers above it import it without importing the GGUF reader that imports them: it imports the registry
(:mod:`attndyn.models.families`), the file checks, the tokenizers and the decoder description only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attndyn.models import file_checks as fc
from attndyn.models.decoder import Decoder, DecoderLayer, LazyLayers
from attndyn.models.families import FAMILIES, family_of_model_type
from attndyn.models.file_checks import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, Flag, Int, ModelFileError, Real, Text
from attndyn.models.tokenizers import _folder_tokenizer, check_tokenizer

# Gemma 3's layer pattern (not in its GGUF metadata, read here and by the GGUF reader): layer k is global when
# (k + 1) % 6 == 0; its local layers' RoPE base
GEMMA3_GLOBAL_EVERY = 6
GEMMA3_LOCAL_ROPE_BASE = 10000.0


HF_LAYER_KEYS = {
    "attn_norm": "input_layernorm",
    "W_q": "self_attn.q_proj",
    "W_k": "self_attn.k_proj",
    "W_v": "self_attn.v_proj",
    "W_o": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}


GEMMA3_HF_KEYS = {
    "attn_norm": "input_layernorm",
    "W_q": "self_attn.q_proj",
    "W_k": "self_attn.k_proj",
    "W_v": "self_attn.v_proj",
    "W_o": "self_attn.o_proj",
    "post_attn_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffn_norm": "post_feedforward_layernorm",
    "q_norm": "self_attn.q_norm",
    "k_norm": "self_attn.k_norm",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}


LLAMA_SPEC = {
    "num_attention_heads": Int(1, MAX_HEADS),
    "num_key_value_heads": Int(1, MAX_HEADS, required=False),
    "hidden_size": Int(1, MAX_WIDTH),
    "head_dim": Int(1, MAX_WIDTH, required=False),
    "num_hidden_layers": Int(1, MAX_LAYERS),
    "intermediate_size": Int(1, MAX_WIDTH, required=False),
    "vocab_size": Int(1, MAX_VOCAB, required=False),
    "max_position_embeddings": Int(1, MAX_CONTEXT, required=False),
    "rms_norm_eps": Real(above=0.0, hi=1.0),
    "rope_theta": Real(above=1.0, required=False),
    "tie_word_embeddings": Flag(default=False),
    "attention_bias": Flag(default=False),
    "mlp_bias": Flag(default=False),
    "hidden_act": Text(default="silu"),
}
GEMMA3_SPEC = LLAMA_SPEC | {
    "tie_word_embeddings": Flag(default=True),
    "hidden_act": Text(),
    "hidden_activation": Text(default="gelu_pytorch_tanh"),
    "query_pre_attn_scalar": Real(required=False),
    "sliding_window": Int(1, MAX_CONTEXT, required=False),
    "sliding_window_pattern": Int(1, MAX_LAYERS, required=False),
    "_sliding_window_pattern": Int(1, MAX_LAYERS, required=False),
    "rope_local_base_freq": Real(above=1.0, required=False),
    "bos_token_id": Int(0, MAX_VOCAB, required=False),
}
GPT2_SPEC = {
    "n_head": Int(1, MAX_HEADS),
    "n_embd": Int(1, MAX_WIDTH),
    "n_layer": Int(1, MAX_LAYERS),
    "n_positions": Int(1, MAX_CONTEXT, required=False),
    "vocab_size": Int(1, MAX_VOCAB, required=False),
    "layer_norm_epsilon": Real(above=0.0, hi=1.0, required=False, default=1e-5),
    "activation_function": Text(default="gelu_new"),
    "tie_word_embeddings": Flag(default=True),
    "scale_attn_weights": Flag(default=True),
    "scale_attn_by_inverse_layer_idx": Flag(default=False),
    "add_cross_attention": Flag(default=False),
    "reorder_and_upcast_attn": Flag(default=False),
}


def _rope(config: dict, where: str, kind: str = "full_attention", fallback_key: str = "rope_theta", default: float = 10000.0) -> float:
    """A RoPE base from ``rope_theta`` (or ``fallback_key``) or ``rope_parameters`` (flat, or per layer kind),
    finite and above 1; scaled RoPE (a ``rope_type`` other than default) is refused."""
    params = config.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise ModelFileError(f"{where}: rope_parameters = {params!r} is not an object")
    params = params or {}
    if kind in params:
        params = params[kind]
        if not isinstance(params, dict):
            raise ModelFileError(f"{where}: rope_parameters[{kind!r}] is not an object")
    for block, name in ((params, "rope_parameters"), (config.get("rope_scaling") or {}, "rope_scaling")):
        if not isinstance(block, dict):
            raise ModelFileError(f"{where}: {name} = {block!r} is not an object")
        rope_type = block.get("rope_type", block.get("type", "default"))
        if rope_type != "default":
            raise ModelFileError(f"{where}: {name}.rope_type = {rope_type!r} (scaled RoPE) is not supported by the forward pass")
    value = params.get("rope_theta", config.get(fallback_key))
    return default if value is None else fc.as_real(value, where, f"{fallback_key} (rope_theta)", 1.0)


def _gemma3_hf_extra(config: dict, c: dict, where: str, L: int, d: int, hd: int) -> dict:
    """The Gemma 3 options of a Hugging Face config (``gemma3_text``), refusing what the forward pass lacks."""
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if config.get(key) is not None:
            raise ModelFileError(f"{where}: {key} = {config[key]} is not supported by the forward pass")
    if c["query_pre_attn_scalar"] not in (None, float(hd)):
        scalar = c["query_pre_attn_scalar"]
        raise ModelFileError(f"{where}: query_pre_attn_scalar = {scalar} differs from head_dim = {hd} (the forward pass assumes them equal)")
    if c["hidden_activation"] != "gelu_pytorch_tanh" or c["hidden_act"] not in (None, "gelu_pytorch_tanh"):
        raise ModelFileError(f"{where}: hidden_activation {c['hidden_activation']!r} is not supported (only gelu_pytorch_tanh)")
    every = c["_sliding_window_pattern"] or c["sliding_window_pattern"] or GEMMA3_GLOBAL_EVERY
    types = config.get("layer_types")
    if types is None:
        types = ["full_attention" if (k + 1) % every == 0 else "sliding_attention" for k in range(L)]
    if not isinstance(types, list) or len(types) != L or not set(types) <= {"full_attention", "sliding_attention"}:
        raise ModelFileError(f"{where}: layer_types is not a list of {L} entries 'full_attention' or 'sliding_attention'")
    full = _rope(config, where, "full_attention", "rope_theta", 1e6)
    local = _rope(config, where, "sliding_attention", "rope_local_base_freq", GEMMA3_LOCAL_ROPE_BASE)
    window = c["sliding_window"]
    return {
        "arch": "gemma3",
        "embed_scale": d**0.5,
        "activation": "gelu_tanh",
        "windows": tuple(None if t == "full_attention" else window for t in types),
        "rope_bases": tuple(full if t == "full_attention" else local for t in types),
        "bos_id": c["bos_token_id"],
        "add_bos": c["bos_token_id"] is not None,
    }


def _gpt2(folder: Path, config: dict, arrays: dict[str, np.ndarray], *, lazy: bool = False) -> Decoder:
    """A ``GPT2LMHeadModel`` folder as a :class:`Decoder`. GPT-2's maps are ``Conv1D`` (``y = x W + b``, W stored
    as (in, out)): the reader transposes them into the Hugging Face linear layout and splits the fused
    query/key/value map. ``lazy``: each layer is built (transposed, split) from ``arrays`` when it runs."""
    where = str(folder / "config.json")
    c = fc.typed(config, GPT2_SPEC, where)
    act = c["activation_function"]
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ModelFileError(f"{where}: activation_function {act!r} is not supported (only the tanh GELU: gelu_new, gelu_pytorch_tanh)")
    for key in ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention", "reorder_and_upcast_attn"):
        if c[key] != (key == "scale_attn_weights"):
            raise ModelFileError(f"{where}: {key} = {c[key]} is not supported by the forward pass")
    pre = "transformer." if "transformer.wte.weight" in arrays else ""

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if pre + name not in arrays:
            raise ModelFileError(f"{folder}: the tensor {pre + name!r} is missing")
        a = fc.check_tensor(np.asarray(arrays[pre + name]), f"{folder}: tensor {pre + name!r}", shape)
        return torch.from_numpy(a.astype(np.float64))

    H, d, L = c["n_head"], c["n_embd"], c["n_layer"]
    if d % H:
        raise ModelFileError(f"{where}: n_embd = {d} does not split into n_head = {H} heads")
    wte = arrays.get(pre + "wte.weight")
    vocab = c["vocab_size"] or (wte.shape[0] if wte is not None and wte.ndim == 2 else 1)
    ctx = c["n_positions"] or (arrays[pre + "wpe.weight"].shape[0] if pre + "wpe.weight" in arrays and arrays[pre + "wpe.weight"].ndim == 2 else 1)
    fc_w = arrays.get(pre + "h.0.mlp.c_fc.weight")
    f = fc_w.shape[1] if fc_w is not None and fc_w.ndim == 2 else 4 * d

    def layer(k: int) -> DecoderLayer:
        b = f"h.{k}."
        qkv, qkv_b = get(b + "attn.c_attn.weight", (d, 3 * d)), get(b + "attn.c_attn.bias", (3 * d,))
        W_q, W_k, W_v = (qkv[:, i * d : (i + 1) * d].T.contiguous() for i in range(3))
        b_q, b_k, b_v = (qkv_b[i * d : (i + 1) * d] for i in range(3))
        return DecoderLayer(
            attn_norm=get(b + "ln_1.weight", (d,)),
            W_q=W_q,
            W_k=W_k,
            W_v=W_v,
            W_o=get(b + "attn.c_proj.weight", (d, d)).T.contiguous(),
            ffn_norm=get(b + "ln_2.weight", (d,)),
            gate=None,
            up=get(b + "mlp.c_fc.weight", (d, f)).T.contiguous(),
            down=get(b + "mlp.c_proj.weight", (f, d)).T.contiguous(),
            attn_norm_bias=get(b + "ln_1.bias", (d,)),
            ffn_norm_bias=get(b + "ln_2.bias", (d,)),
            b_q=b_q,
            b_k=b_k,
            b_v=b_v,
            b_o=get(b + "attn.c_proj.bias", (d,)),
            b_up=get(b + "mlp.c_fc.bias", (f,)),
            b_down=get(b + "mlp.c_proj.bias", (d,)),
        )

    layers = LazyLayers(L, layer) if lazy else tuple(layer(k) for k in range(L))
    embed = get("wte.weight", (vocab, d))
    tied_head_agrees(c["tie_word_embeddings"], arrays["lm_head.weight"] if "lm_head.weight" in arrays else None, embed, str(folder))
    head = get("lm_head.weight", (vocab, d)) if "lm_head.weight" in arrays and not c["tie_word_embeddings"] else embed
    tokenizer = _folder_tokenizer(folder)
    check_tokenizer(tokenizer, vocab, str(folder))
    return Decoder(
        fc.display_name(folder.name), str(folder), embed, layers, get("ln_f.weight", (d,)), head, H, H, d // H, 0.0,
        c["layer_norm_epsilon"], tokenizer, arch="gpt2", activation="gelu_tanh",
        norm_kind="layer", norm_bias=get("ln_f.bias", (d,)), positions="learned", pos_embed=get("wpe.weight", (ctx, d)),
    )  # fmt: skip


def read_hf_llama(folder: str | Path, *, lazy: bool = True) -> Decoder:
    """A ``LlamaForCausalLM``, Gemma 3 (``gemma3_text``) or ``GPT2LMHeadModel`` folder (config.json +
    *.safetensors) as a :class:`Decoder`, in float64 (float16 and bfloat16 weights widened exactly). Every
    config key is typed and every tensor's shape checked against it (:mod:`attndyn.models.file_checks`);
    a file that is a symlink out of the folder is refused, and a tensor defined in two shards. Gemma's
    RMSNorm multiplies by ``1 + w``: the reader adds the 1.

    ``lazy``: the files are memory-mapped and each layer is built from them when it runs
    (:class:`~attndyn.models.decoder.LazyLayers`), its matrices, the embeddings and the head in the file's
    precision widened exactly to float32 (float64 stays) rather than copied to float64: the forward pass casts
    them to its dtype, which gives the same numbers as the float64 copies (a float32 value is exact in
    float64). The Gemma norms' ``+ 1`` is added in float64, as the eager path does."""
    folder = Path(folder)
    config = fc.read_json(fc.model_file(folder, "config.json"))
    where = str(folder / "config.json")
    arch = config.get("architectures")
    arch = arch[0] if isinstance(arch, list) and arch else "?"
    model_type = config.get("model_type")
    fam = family_of_model_type(model_type, where=f"{folder}: ")
    if fam.reader != "files":
        files = sorted(t for f in FAMILIES.values() if f.reader == "files" for t in f.model_types)
        raise ModelFileError(f"{folder}: model_type {model_type!r} ({arch}) is not read by this reader (only {', '.join(files)})")
    gemma, gpt2 = fam.embed_scaled, fam.layout == "conv1d"
    c = None if gpt2 else fc.typed(config, GEMMA3_SPEC if gemma else LLAMA_SPEC, where)  # before any tensor is read
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelFileError(f"{folder} has no *.safetensors file (pickled .bin checkpoints are not read)")
    shards = [fc.model_file(folder, f.name) for f in files]
    arrays = fc.map_safetensors_shards(shards) if lazy else fc.read_safetensors_shards(shards)
    if gpt2:
        return _gpt2(folder, config, arrays, lazy=lazy)
    if not gemma and c["hidden_act"] != "silu":
        raise ModelFileError(f"{where}: hidden_act {c['hidden_act']!r} is not supported (LLaMA: silu)")
    for key in ("attention_bias", "mlp_bias"):
        if c[key]:
            raise ModelFileError(f"{where}: {key} = true is not supported by the forward pass (no biases in LLaMA's maps)")
    H, d, L = c["num_attention_heads"], c["hidden_size"], c["num_hidden_layers"]
    KV = c["num_key_value_heads"] or H
    if c["head_dim"] is None and d % H:
        raise ModelFileError(f"{where}: hidden_size = {d} does not split into num_attention_heads = {H} heads")
    hd = c["head_dim"] or d // H
    emb = arrays.get("model.embed_tokens.weight")
    vocab = c["vocab_size"] or (emb.shape[0] if emb is not None and emb.ndim == 2 else 1)
    up = arrays.get("model.layers.0.mlp.up_proj.weight")
    f = c["intermediate_size"] or (up.shape[0] if up is not None and up.ndim == 2 else 1)
    shapes = {
        "W_q": (H * hd, d), "W_k": (KV * hd, d), "W_v": (KV * hd, d), "W_o": (d, H * hd), "gate": (f, d), "up": (f, d), "down": (d, f),
        "q_norm": (hd,), "k_norm": (hd,),
    }  # fmt: skip

    def get(name: str, shape: tuple[int, ...], *, wide: bool = True) -> torch.Tensor:
        """The tensor, checked; float64 (eager, or ``wide``), else the file's float32/float64 (a view of the map)."""
        if name not in arrays:
            raise ModelFileError(f"{folder}: the tensor {name!r} is missing")
        a = fc.check_tensor(np.asarray(arrays[name]), f"{folder}: tensor {name!r}", shape)
        return torch.from_numpy(a.astype(np.float64) if wide or not lazy else a)

    keys = GEMMA3_HF_KEYS if gemma else HF_LAYER_KEYS

    def weight(k: int, key: str, hf: str) -> torch.Tensor:
        plus = gemma and key.endswith("norm")
        w = get(f"model.layers.{k}.{hf}.weight", shapes.get(key, (d,)), wide=plus)
        return w + 1.0 if plus else w

    def layer(k: int) -> DecoderLayer:
        return DecoderLayer(**{key: weight(k, key, hf) for key, hf in keys.items()})

    layers = LazyLayers(L, layer) if lazy else tuple(layer(k) for k in range(L))
    embed = get("model.embed_tokens.weight", (vocab, d), wide=False)
    tied_head_agrees(c["tie_word_embeddings"], arrays["lm_head.weight"] if "lm_head.weight" in arrays else None, embed, where)
    head = embed if c["tie_word_embeddings"] or "lm_head.weight" not in arrays else get("lm_head.weight", (vocab, d), wide=False)
    final_norm = get("model.norm.weight", (d,)) + (1.0 if gemma else 0.0)
    extra = _gemma3_hf_extra(config, c, where, L, d, hd) if gemma else {}
    rope = _rope(config, where) if not gemma else extra["rope_bases"][0]
    tokenizer = _folder_tokenizer(folder)
    check_tokenizer(tokenizer, vocab, str(folder))
    return Decoder(
        fc.display_name(folder.name), str(folder), embed, layers, final_norm, head, H, KV, hd, rope, c["rms_norm_eps"], tokenizer,
        context=c["max_position_embeddings"], **extra,
    )  # fmt: skip


def tied_head_agrees(
    tied: bool, head: torch.Tensor | np.ndarray | None, embed: torch.Tensor | np.ndarray, where: str, name: str = "lm_head.weight"
) -> None:
    """A config that ties the head to the embeddings (``tied``) while the file holds a different ``head`` (None: no
    separate head) is refused: readers disagree on which of the two a tied model uses (transformers' logits and ours
    were 0.86 apart on such a folder). Every reader calls this one check."""
    if not tied or head is None:
        return
    head = head if isinstance(head, torch.Tensor) else torch.as_tensor(np.asarray(head))
    if not torch.equal(head.to(torch.float64), torch.as_tensor(embed).to(torch.float64)):  # False for another shape too
        raise ModelFileError(
            f"{where}: tie_word_embeddings is true but the file holds an {name} that differs from the embeddings; "
            "set tie_word_embeddings to false to use the separate head, or remove it"
        )
