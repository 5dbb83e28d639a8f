"""How a family's weights become a :class:`~attndyn.models.decoder.Decoder`: the readers of Hugging Face folders
and live ``transformers`` models, driven by the family's row.

Contract
--------
* The rows themselves (:data:`FAMILIES`, :class:`Family`, ``family_of_model_type``, ``family_of_gguf``,
  ``twin_refusal``, ``default_twin_layers``, ``family_table``) are in :mod:`attndyn.models.families`, and
  re-exported here for the importers of their first home.
* ``read_folder(folder)``: a Hugging Face folder (``config.json`` + ``*.safetensors``, sharded or not);
  ``from_transformers(model, tokenizer=None)``: a loaded ``PreTrainedModel``, its parameters used as
  they are (no copy; the forward pass casts one layer at a time).
* GGUF files of the families other than llama and gemma3: :mod:`attndyn.models.family_gguf`
  (llama.cpp's names per family, what its converter changed undone, read as a folder is). Mistral has
  no GGUF architecture of its own: llama.cpp writes it as ``llama`` (``Family.gguf_as``).
* The checks of a row and its config before any tensor is read: :mod:`attndyn.models.family_checks`
  (typed values, the shared list of forward-changing keys, the traits each layout reads).

Every reader reads the row (no reader tests a family's name): the folder reader of
:mod:`attndyn.models.hf_files` takes the rows whose traits it reads (LLaMA, Gemma 3, GPT-2), every
other row and option goes to :func:`read_hf_family` here. The BERT-family encoders are listed
(``kind="encoder"``) and read by :mod:`attndyn.models.bert`. Imports the registry, the checks and the
folder reader below it; nothing it imports imports it back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from attndyn.models import hf_files
from attndyn.models.decoder import Decoder, DecoderLayer, LazyLayers
from attndyn.models.errors import CheckpointError
from attndyn.models.families import (  # noqa: F401 (the registry's names, re-exported for the importers of their first home)
    FAMILIES,
    GEMMA2_27B_LAYERS,
    GEMMA_ACTS,
    Family,
    decoder_model_types,
    default_twin_layers,
    encoder_model_types,
    family_of_gguf,
    family_of_model_type,
    family_table,
    gguf_architectures,
    twin_refusal,
)
from attndyn.models.family_checks import check_config, check_layout, files_reader_reads
from attndyn.models.tokenizers import _folder_tokenizer

# --- Hugging Face folders and live models ----------------------------------------------------------------


def read_config(folder: Path) -> dict:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{folder}/config.json is not readable ({type(err).__name__})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{folder}/config.json is not a JSON object")
    return config


# the tensors kept in the file's precision (widened exactly to float32) by a lazy read: nothing is added to them
TABLES = frozenset({"model.embed_tokens.weight", "lm_head.weight", "gpt_neox.embed_in.weight", "embed_out.weight"})


def read_folder(folder: str | Path, *, lazy: bool = True) -> Decoder:
    """A Hugging Face folder of any decoder family in :data:`FAMILIES`, in float64. ``lazy``: the layers are read
    from the memory-mapped files one at a time when they run (in float64, as the eager read holds them), the
    embeddings and the head kept in the file's precision (float32 at most: the forward pass casts them)."""
    folder = Path(folder)
    config = read_config(folder)
    fam = family_of_model_type(config.get("model_type"), where=f"{folder}: ")
    check_layout(fam)
    check_config(fam, config, f"{folder}/config.json: ")
    if files_reader_reads(fam) and not _files_reader_lacks(config):
        return hf_files.read_hf_llama(folder, lazy=lazy)  # llama, gemma3_text and gpt2
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder} has no *.safetensors file (pickled .bin checkpoints are not read)")
    from safetensors import safe_open

    try:
        handles = [safe_open(str(f), "pt") for f in files]  # memory-mapped; bfloat16 too
    except Exception as err:  # safetensors raises its own SafetensorError on a damaged header
        raise CheckpointError(f"{folder}: a *.safetensors file is not readable ({type(err).__name__}: {err})") from None
    where = {key: h for h in handles for key in h.keys()}  # noqa: SIM118 (safe_open has no iteration)

    def get(name: str) -> torch.Tensor | None:
        h = where.get(name)
        if h is None:
            return None
        t = h.get_tensor(name)
        if not t.is_floating_point():  # an integer (int8, quantized) or bool tensor would be read as its raw numbers
            raise CheckpointError(f"{folder}: the tensor {name!r} has dtype {t.dtype}; weights must be floating point (give the float model)")
        return t.to(torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype) if lazy and name in TABLES else t.to(torch.float64)

    tokenizer = _folder_tokenizer(folder)
    return read_hf_family(fam, config, get, name=folder.name, source=str(folder), tokenizer=tokenizer, lazy=lazy)


def _files_reader_lacks(config: dict) -> bool:
    """Options a family implements that :func:`~attndyn.models.hf_files.read_hf_llama` does not: biases on the
    attention maps, a query scale other than the head dimension's (Gemma 3); such folders take :func:`read_hf_family`."""
    H, d = config.get("num_attention_heads"), config.get("hidden_size")
    hd = config.get("head_dim") or (d // H if isinstance(d, int) and isinstance(H, int) and H > 0 else None)
    scalar = config.get("query_pre_attn_scalar")
    return config.get("attention_bias") is True or (scalar is not None and hd is not None and float(scalar) != float(hd))


def from_transformers(model: object, tokenizer: object = None) -> Decoder:
    """A loaded ``transformers`` causal LM (``PreTrainedModel``) as a :class:`Decoder`, reading its
    parameters in place (no copy: the forward pass casts one layer at a time). ``tokenizer``: a
    ``transformers`` fast tokenizer or a ``tokenizers.Tokenizer`` (its backend is kept)."""
    what = type(model).__name__
    if not callable(getattr(getattr(model, "config", None), "to_dict", None)) or not callable(getattr(model, "state_dict", None)):
        raise CheckpointError(f"a {what} is not a loaded transformers model (a PreTrainedModel with a config and a state_dict)")
    config = model.config.to_dict()
    fam = family_of_model_type(config.get("model_type"), where=f"{what}: ")
    params = {k: v.detach() for k, v in model.state_dict(keep_vars=True).items() if isinstance(v, torch.Tensor)}
    for key, t in params.items():
        if t.is_meta:
            raise CheckpointError(f"{what}: the tensor {key!r} is on the meta device (a model loaded without its weights, or half-loaded)")
        if not t.is_floating_point() or t.is_quantized:
            raise CheckpointError(f"{what}: the tensor {key!r} has dtype {t.dtype}; quantized or integer weights are not read (give the float model)")
    packed = [k for k in model.state_dict() if "_packed_params" in k]
    if packed:
        raise CheckpointError(f"{what}: {packed[0]!r} belongs to a quantized module; quantized models are not read (give the float model)")
    tok = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if tok is not None and not all(callable(getattr(tok, m, None)) for m in ("encode", "decode", "get_vocab_size")):
        raise CheckpointError(
            f"{what}: the tokenizer, a {type(tokenizer).__name__}, is neither a transformers fast tokenizer nor a tokenizers.Tokenizer"
        )
    name = str(config.get("_name_or_path") or type(model).__name__)
    if fam.layout == "conv1d":
        dec = hf_files._gpt2(Path(name), config, {k: v.cpu().numpy() for k, v in params.items()})
        return _with(dec, tokenizer=tok)

    def get(key: str) -> torch.Tensor | None:
        return params.get(key)

    return read_hf_family(fam, config, get, name=name, source=f"transformers {type(model).__name__}", tokenizer=tok)


def _with(dec: Decoder, **changes) -> Decoder:
    import dataclasses

    return dataclasses.replace(dec, **changes)


def _rope(config: dict, where: str) -> tuple[float, float, dict | None]:
    """RoPE's base, the rotary fraction, and Gemma-style per-layer-type parameters (or None)."""
    params = config.get("rope_parameters") or {}
    per_type = None
    if params and all(isinstance(v, dict) for v in params.values()):
        per_type, params = params, next(iter(params.values()))
    for p in [params] + ([config["rope_scaling"]] if config.get("rope_scaling") else []):
        kind = p.get("rope_type", p.get("type", "default"))
        if kind != "default":
            raise CheckpointError(f"{where}RoPE type {kind!r} is not supported (only the default, unscaled RoPE)")
    base = params.get("rope_theta", config.get("rope_theta", config.get("rotary_emb_base", 10000.0)))
    fraction = params.get("partial_rotary_factor", config.get("partial_rotary_factor", config.get("rotary_pct", 1.0)))
    return float(base), float(fraction if fraction is not None else 1.0), per_type


def read_hf_family(
    fam: Family, config: dict, get: Callable[[str], torch.Tensor | None], *, name: str, source: str, tokenizer: object, lazy: bool = False
) -> Decoder:
    """The decoder of family ``fam`` from its Hugging Face config and a tensor getter (None when absent).
    ``lazy``: each layer is built with ``get`` when it runs (:class:`~attndyn.models.decoder.LazyLayers`): the
    family's mapping (fused maps split, norms' ``+ 1``) is applied to that layer then."""
    where = f"{source}: "

    def need(key: str) -> torch.Tensor:
        t = get(key)
        if t is None:
            raise CheckpointError(f"{where}the tensor {key!r} is missing")
        return t

    try:
        check_layout(fam)
        check_config(fam, config, where)
        if fam.layout == "neox":
            return _gpt_neox(fam, config, need, get, name=name, source=source, tokenizer=tokenizer, lazy=lazy)
        return _llama_like(fam, config, need, get, name=name, source=source, tokenizer=tokenizer, lazy=lazy)
    except (KeyError, TypeError) as err:
        raise CheckpointError(f"{where}the config lacks or misstates {err}") from None
    except ValueError as err:
        raise CheckpointError(str(err)) from None


def _windows(fam: Family, config: dict, L: int) -> tuple[int | None, ...] | None:
    w = config.get("sliding_window")
    if fam.sliding_window == "none" or not w or config.get("use_sliding_window") is False:
        return None
    types = config.get("layer_types")
    if types:
        return tuple(int(w) if t == "sliding_attention" else None for t in types)
    if fam.sliding_window == "alternating":  # Gemma 2: even layers local
        return tuple(int(w) if k % 2 == 0 else None for k in range(L))
    if config.get("max_window_layers") is not None:  # Qwen2/3 configs without layer_types: local from that layer on
        return tuple(int(w) if k >= int(config["max_window_layers"]) else None for k in range(L))
    return (int(w),) * L


def _check_shape(fam: Family, where: str, H: int, KV: int, fraction: float) -> None:
    """The row's grouped-query and rotary traits against the config: refused, naming the key, when the row lacks them."""
    if KV != H and not fam.gqa:
        raise CheckpointError(
            f"{where}num_key_value_heads = {KV} differs from num_attention_heads = {H}; the {fam.name} family has no grouped-query attention"
        )
    if fraction != 1.0 and fam.rotary != "partial":
        raise CheckpointError(f"{where}a partial rotary fraction {fraction:g} is not part of the {fam.name} family (its rotary is {fam.rotary!r})")
    if fam.rotary == "learned":
        raise CheckpointError(f"{where}learned positions are read only in the conv1d layout (GPT-2), not {fam.layout!r}")


def _check_act(config: dict, where: str, key: str, allowed: dict[str, str]) -> str:
    act = config.get(key) or next(iter(allowed))
    if act not in allowed:
        raise CheckpointError(f"{where}{key} {act!r} is not supported (only {', '.join(allowed)})")
    return allowed[act]


def _llama_like(fam: Family, config: dict, need, get, *, name: str, source: str, tokenizer, lazy: bool = False) -> Decoder:
    """llama, mistral, qwen2, qwen3, olmo2, phi3, gemma2 (and gemma3 from a live model)."""
    where = f"{source}: "
    H = int(config["num_attention_heads"])
    KV = int(config.get("num_key_value_heads") or H)
    d = int(config["hidden_size"])
    hd = int(config.get("head_dim") or d // H)
    L = int(config["num_hidden_layers"])
    act = _check_act(config, where, fam.act_key, dict(fam.acts))
    base, fraction, per_type = _rope(config, where)
    _check_shape(fam, where, H, KV, fraction)
    plus = fam.norm_offset

    def fold(t: torch.Tensor) -> torch.Tensor:
        """A norm weight with the row's offset added in float64 (exact for a bf16/fp16/f32 weight), or as it is."""
        return t.to(torch.float64) + plus if plus else t

    def layer(k: int) -> DecoderLayer:
        p = f"model.layers.{k}."
        if fam.fused == "qkv+gate_up":  # Phi-3: q, k, v rows stacked; gate then up
            qkv = need(p + "self_attn.qkv_proj.weight")
            W_q, W_k, W_v = qkv[: H * hd], qkv[H * hd : (H + KV) * hd], qkv[(H + KV) * hd :]
            gu = need(p + "mlp.gate_up_proj.weight")
            f2 = gu.shape[0] // 2
            gate, up = (gu[:f2], gu[f2:]) if fam.gated_ffn else (None, gu)
        else:
            W_q, W_k, W_v = (need(p + f"self_attn.{m}_proj.weight") for m in "qkv")
            gate, up = need(p + "mlp.gate_proj.weight") if fam.gated_ffn else None, need(p + "mlp.up_proj.weight")
        ones = torch.ones(d, dtype=W_q.dtype)
        if fam.norm_placement == "post":  # OLMo-2: norms after the sub-layers only
            norms = {
                "attn_norm": ones,
                "ffn_norm": ones,
                "post_attn_norm": need(p + "post_attention_layernorm.weight"),
                "post_ffn_norm": need(p + "post_feedforward_layernorm.weight"),
            }
        elif fam.norm_placement == "sandwich":
            norms = {
                "attn_norm": fold(need(p + "input_layernorm.weight")),
                "ffn_norm": fold(need(p + "pre_feedforward_layernorm.weight")),
                "post_attn_norm": fold(need(p + "post_attention_layernorm.weight")),
                "post_ffn_norm": fold(need(p + "post_feedforward_layernorm.weight")),
            }
        else:
            norms = {"attn_norm": need(p + "input_layernorm.weight"), "ffn_norm": need(p + "post_attention_layernorm.weight")}
        if fam.qk_norm != "none":
            norms["q_norm"] = fold(need(p + "self_attn.q_norm.weight"))
            norms["k_norm"] = fold(need(p + "self_attn.k_norm.weight"))
        biases = {f"b_{m}": get(p + f"self_attn.{m}_proj.bias") if fam.biases != "none" else None for m in "qkvo"}
        if (fam.biases == "qkv" or config.get("attention_bias") is True) and any(biases[f"b_{m}"] is None for m in "qkv"):
            raise CheckpointError(f"{where}the tensor {p + 'self_attn.q_proj.bias'!r} (or k, v) is missing")
        return DecoderLayer(
            W_q=W_q,
            W_k=W_k,
            W_v=W_v,
            W_o=need(p + "self_attn.o_proj.weight"),
            gate=gate,
            up=up,
            down=need(p + "mlp.down_proj.weight"),
            **norms,
            **biases,
        )

    layers = LazyLayers(L, layer) if lazy else tuple(layer(k) for k in range(L))
    embed = need("model.embed_tokens.weight")
    tied = fam.tied == "always" or config.get("tie_word_embeddings", False) or get("lm_head.weight") is None
    hf_files.tied_head_agrees(tied and fam.tied != "always", get("lm_head.weight"), embed, where.rstrip(": "))
    head = embed if tied else need("lm_head.weight")
    windows = _windows(fam, config, L)
    extra: dict = {}
    if per_type is not None:  # Gemma: a base per layer type
        types = config.get("layer_types") or ["full_attention"] * L
        extra["rope_bases"] = tuple(float(per_type.get(t, per_type.get("full_attention", {})).get("rope_theta", base)) for t in types)
    elif config.get("rope_local_base_freq") is not None:  # the hub's flat form: the sliding layers' own base beside rope_theta
        from attndyn.models.file_checks import as_real

        local = as_real(config["rope_local_base_freq"], where.rstrip(": "), "rope_local_base_freq", 1.0)
        extra["rope_bases"] = tuple(base if w is None else local for w in (windows or (None,) * L))
    if fam.embed_scaled:
        extra |= {"embed_scale": d**0.5, "bos_id": config.get("bos_token_id"), "add_bos": config.get("bos_token_id") is not None}
        scalar = config.get("query_pre_attn_scalar")
        if scalar is not None and float(scalar) != float(hd):
            extra["attn_scale"] = float(scalar) ** -0.5
    if fam.softcap:
        extra["attn_softcap"] = config.get("attn_logit_softcapping")
        extra["final_softcap"] = config.get("final_logit_softcapping")
    rotary_dim = int(hd * fraction)
    return Decoder(
        name, source, embed, layers, fold(need("model.norm.weight")), head, H, KV, hd, base, float(config["rms_norm_eps"]), tokenizer,
        arch=fam.name, activation=act, windows=windows, rotary_dim=None if rotary_dim == hd else rotary_dim,
        pre_norm=fam.norm_placement != "post", qk_norm_full=fam.qk_norm == "full", norm_kind=fam.norm,
        parallel_residual=fam.parallel_residual,
        context=config.get("max_position_embeddings"), **extra,
    )  # fmt: skip


def _shaped(t: torch.Tensor, key: str, shape: tuple[int, ...], where: str) -> torch.Tensor:
    """``t`` when it has ``shape`` (a fused map is split by reshaping it, which needs the declared size); else refused naming the tensor."""
    if tuple(t.shape) != shape:
        raise CheckpointError(f"{where}the tensor {key!r} has shape {tuple(t.shape)}, expected {shape} from the config")
    return t


def _gpt_neox(fam: Family, config: dict, need, get, *, name: str, source: str, tokenizer, lazy: bool = False) -> Decoder:
    """GPT-NeoX / Pythia: LayerNorm, the fused query/key/value map laid out per head ``(H, 3, hd)``,
    biases everywhere, partial rotary, the exact GELU, and (``use_parallel_residual``) a parallel residual."""
    where = f"{source}: "
    H, d, L = int(config["num_attention_heads"]), int(config["hidden_size"]), int(config["num_hidden_layers"])
    if d % H:
        raise CheckpointError(f"{where}hidden_size = {d} does not split into num_attention_heads = {H} heads")
    hd = d // H
    _check_shape(fam, where, H, int(config.get("num_key_value_heads") or H), _rope(config, where)[1])
    act = _check_act(config, where, fam.act_key, dict(fam.acts))
    base, fraction, _ = _rope(config, where)

    def layer(k: int) -> DecoderLayer:
        p = f"gpt_neox.layers.{k}."
        qkv = _shaped(need(p + "attention.query_key_value.weight"), p + "attention.query_key_value.weight", (3 * d, d), where)
        qkv = qkv.reshape(H, 3, hd, d)
        qkv_b = get(p + "attention.query_key_value.bias")
        qkv_b = _shaped(qkv_b, p + "attention.query_key_value.bias", (3 * d,), where).reshape(H, 3, hd) if qkv_b is not None else None
        split = [qkv[:, i].reshape(H * hd, d) for i in range(3)]
        bsplit = [qkv_b[:, i].reshape(H * hd) if qkv_b is not None else None for i in range(3)]
        return DecoderLayer(
            attn_norm=need(p + "input_layernorm.weight"), attn_norm_bias=need(p + "input_layernorm.bias"),
            W_q=split[0], W_k=split[1], W_v=split[2], b_q=bsplit[0], b_k=bsplit[1], b_v=bsplit[2],
            W_o=need(p + "attention.dense.weight"), b_o=get(p + "attention.dense.bias"),
            ffn_norm=need(p + "post_attention_layernorm.weight"), ffn_norm_bias=need(p + "post_attention_layernorm.bias"),
            gate=None, up=need(p + "mlp.dense_h_to_4h.weight"), b_up=need(p + "mlp.dense_h_to_4h.bias"),
            down=need(p + "mlp.dense_4h_to_h.weight"), b_down=need(p + "mlp.dense_4h_to_h.bias"),
        )  # fmt: skip

    layers = LazyLayers(L, layer) if lazy else tuple(layer(k) for k in range(L))
    embed = need("gpt_neox.embed_in.weight")
    # the files call the head embed_out; a live model of transformers 5 calls it lm_head
    head = (
        embed
        if fam.tied == "always" or config.get("tie_word_embeddings")
        else (get("embed_out.weight") if get("embed_out.weight") is not None else need("lm_head.weight"))
    )
    rotary_dim = int(hd * fraction)
    return Decoder(
        name, source, embed, layers, need("gpt_neox.final_layer_norm.weight"), head, H, H, hd, base,
        float(config.get("layer_norm_eps", 1e-5)), tokenizer, arch=fam.name, activation=act, norm_kind=fam.norm,
        norm_bias=need("gpt_neox.final_layer_norm.bias"), rotary_dim=None if rotary_dim == hd else rotary_dim,
        parallel_residual=bool(config.get("use_parallel_residual", fam.parallel_residual)), context=config.get("max_position_embeddings"),
    )  # fmt: skip
