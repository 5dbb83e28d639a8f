"""One registry of the trained-model families: what each one is, and how its weights become a :class:`~attndyn.models.decoder.Decoder`.

Contract
--------
* :data:`FAMILIES` maps a family's name to a :class:`Family`: the Hugging Face ``model_type`` values
  and GGUF ``general.architecture`` names it serves, and how its weights map onto attndyn's decoder
  description (norm kind and placement, biases, rotary fraction, grouped-query attention, parallel
  residual, soft-capping, sliding windows, QK-norm, tied embeddings, fused maps). The CLI
  (``attndyn checkpoint``), :func:`~attndyn.models.decoder_files.load_decoder`, the refusal of an
  unknown architecture and the table in ``docs/guide/trained-models.md`` all read it: adding a family
  is one entry here and its reader.
* ``family_of_model_type(t)`` / ``family_of_gguf(a)``: the family, or :class:`CheckpointError` naming
  ``t`` and listing the supported ones.
* ``read_folder(folder)``: a Hugging Face folder (``config.json`` + ``*.safetensors``, sharded or not);
  ``from_transformers(model, tokenizer=None)``: a loaded ``PreTrainedModel``, its parameters used as
  they are (no copy; the forward pass casts one layer at a time).
* GGUF files of the families other than llama and gemma3: :mod:`attndyn.models.family_gguf`
  (llama.cpp's names per family, what its converter changed undone, read as a folder is). Mistral has
  no GGUF architecture of its own: llama.cpp writes it as ``llama`` (``Family.gguf_as``).
* The checks of a row and its config before any tensor is read: :mod:`attndyn.models.family_checks`
  (typed values, the shared list of forward-changing keys, the traits each layout reads).
* ``twin_refusal(decoder)``: one line saying why the particle twin is not offered for this decoder
  (LayerNorm, a parallel residual, norms after the sub-layers, soft-capped scores), or None.
* ``default_twin_layers(L)``: the twin layers that fit a model of L layers (never the last one).

Every reader reads the row (no reader tests a family's name): the folder reader of
:mod:`attndyn.models.decoder_files` takes the rows whose traits it reads (LLaMA, Gemma 3, GPT-2), every
other row and option goes to :func:`read_hf_family` here. The BERT-family encoders are listed
(``kind="encoder"``) and read by :mod:`attndyn.models.bert`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from attndyn.models.decoder import Decoder, DecoderLayer, LazyLayers
from attndyn.models.errors import CheckpointError
from attndyn.models.family_checks import check_config, check_layout, files_reader_reads


@dataclass(frozen=True)
class Family:
    """One architecture family and how its weights map onto the decoder description."""

    name: str
    model_types: tuple[str, ...]  # Hugging Face config.json model_type values
    gguf_archs: tuple[str, ...] = ()  # GGUF general.architecture values attndyn reads
    kind: str = "decoder"  # or "encoder" (BERT family, read by attndyn.models.bert)
    norm: str = "rms"  # "rms" or "layer"
    norm_placement: str = "pre"  # "pre", "post" (after each sub-layer, OLMo-2) or "sandwich" (both, Gemma)
    biases: str = "none"  # "none", "qkv" (Qwen2), "all" (GPT-2, GPT-NeoX), "optional" (config's attention_bias)
    rotary: str = "full"  # "full", "partial" (a fraction of each head), "learned" (absolute positions)
    gqa: bool = True
    parallel_residual: bool = False
    softcap: bool = False
    sliding_window: str = "none"  # "none", "all" (every layer), "alternating" / "pattern" (local and global)
    qk_norm: str = "none"  # "none", "head" (per head, Qwen3, Gemma 3), "full" (all heads at once, OLMo-2)
    tied: str = "config"  # where tie_word_embeddings comes from
    fused: str = "none"  # "qkv", "qkv+gate_up"
    gated_ffn: bool = True
    reader: str = "family"  # "files" (decoder_files.read_hf_llama), "family" (read_hf_family), "bert"
    layout: str = "split"  # tensor layout: "split" (model.layers.*, q/k/v apart), "neox" (gpt_neox.layers.*, fused per head), "conv1d" (GPT-2)
    norm_offset: float = 0.0  # Gemma's RMSNorm multiplies by (offset + w): 1.0, added in float64 when read (llama.cpp stores offset + w)
    embed_scaled: bool = False  # the embeddings multiplied by sqrt(d) and a BOS token prepended (Gemma)
    act_key: str = "hidden_act"  # the config key of the feed-forward activation
    acts: tuple[tuple[str, str], ...] = (("silu", "silu"),)  # its accepted values (first: the default) and the decoder's names
    gguf_qk_permuted: bool = False  # llama.cpp's converter reorders each head's query/key rows (LLaMA): undone when read
    gguf_config: Callable[[dict], dict] | None = None  # hook: the config entries a GGUF file's metadata gives (beyond the common ones)
    gguf_as: str = ""  # the GGUF architecture llama.cpp writes this family as, when it is another family's
    example: str = ""

    @property
    def implements(self) -> frozenset[str]:
        """The forward-changing config keys (:data:`FORWARD_KEYS`) this family's reader implements, from its traits."""
        return frozenset(
            key
            for key, on in (
                ("attention_bias", self.kind == "decoder" and self.biases in ("optional", "all")),
                ("use_parallel_residual", self.parallel_residual),
                ("attn_logit_softcapping", self.softcap),
                ("final_logit_softcapping", self.softcap),
                ("sliding_window", self.sliding_window != "none"),
            )
            if on
        )

    @property
    def twin(self) -> str | None:
        """Why the particle twin is not offered for this family (one line, every reason), or None when it is."""
        if self.kind == "encoder":
            return "encoders take the BERT page (Post-LN), not the decoder twin"
        reasons = [
            why
            for flag, why in (
                (self.norm == "layer", "LayerNorm removes the mean and adds a bias, which is not the twin's projection on the sphere"),
                (
                    self.parallel_residual,
                    "its parallel residual adds attention and feed-forward of the same state, which the twin's one step does not",
                ),
                (self.norm_placement == "post", "it normalises after the sub-layers, while the twin is Pre-LN"),
                (self.softcap, "its soft-capped attention scores are not the twin's softmax of a bilinear form"),
            )
            if flag
        ]
        return "; ".join(reasons) or None


GEMMA_ACTS = (("gelu_pytorch_tanh", "gelu_tanh"),)
GEMMA2_27B_LAYERS = 46  # llama.cpp scales Gemma 2 27B's queries by (d / H)^-1/2, the others by hd^-1/2 (llama-model.cpp)


def _gemma2_gguf_config(meta: dict) -> dict:
    """Gemma 2's soft-caps and BOS from a GGUF file; its query scale, which the file does not store, is llama.cpp's rule."""
    H, d = meta["heads"], meta["d"]
    return {
        "attn_logit_softcapping": meta.get("attn_softcap"),
        "final_logit_softcapping": meta.get("final_softcap"),
        "query_pre_attn_scalar": d / H if meta["layers"] == GEMMA2_27B_LAYERS else meta.get("head_dim") or d // H,
        "bos_token_id": meta["bos"] if meta.get("bos", -1) >= 0 else None,
    }


def _neox_gguf_config(meta: dict) -> dict:
    return {"use_parallel_residual": bool(meta.get("parallel_residual", True)), "hidden_act": "gelu"}


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("llama", ("llama",), ("llama",), biases="optional", reader="files", gguf_qk_permuted=True, example="SmolLM2, Llama 3, TinyLlama"),
        Family("mistral", ("mistral",), sliding_window="all", gguf_as="llama", example="Mistral 7B"),
        Family("qwen2", ("qwen2",), ("qwen2",), biases="qkv", sliding_window="pattern", example="Qwen2, Qwen2.5"),
        Family("qwen3", ("qwen3",), ("qwen3",), qk_norm="head", sliding_window="pattern", biases="optional", example="Qwen3"),
        Family("olmo2", ("olmo2",), ("olmo2",), norm_placement="post", qk_norm="full", biases="optional", example="OLMo-2"),
        Family(
            "gemma2",
            ("gemma2",),
            ("gemma2",),
            norm_placement="sandwich",
            biases="optional",
            softcap=True,
            sliding_window="alternating",
            tied="always",
            norm_offset=1.0,
            embed_scaled=True,
            act_key="hidden_activation",
            acts=GEMMA_ACTS,
            gguf_config=_gemma2_gguf_config,
            example="Gemma 2",
        ),
        Family(
            "gemma3",
            ("gemma3_text",),
            ("gemma3",),
            norm_placement="sandwich",
            sliding_window="pattern",
            qk_norm="head",
            biases="optional",
            tied="always",
            reader="files",
            norm_offset=1.0,
            embed_scaled=True,
            act_key="hidden_activation",
            acts=GEMMA_ACTS,
            example="Gemma 3 (270M, 1B)",
        ),
        Family(
            "gpt_neox",
            ("gpt_neox",),
            ("gptneox",),
            norm="layer",
            biases="all",
            rotary="partial",
            gqa=False,
            parallel_residual=True,
            fused="qkv",
            gated_ffn=False,
            layout="neox",
            acts=(("gelu", "gelu"), ("gelu_new", "gelu_tanh"), ("gelu_pytorch_tanh", "gelu_tanh")),
            gguf_config=_neox_gguf_config,
            example="Pythia, GPT-NeoX",
        ),
        Family(
            "gpt2",
            ("gpt2",),
            ("gpt2",),
            norm="layer",
            biases="all",
            rotary="learned",
            gqa=False,
            fused="qkv",
            gated_ffn=False,
            reader="files",
            layout="conv1d",
            example="GPT-2, DistilGPT2",
        ),
        Family("phi3", ("phi3",), ("phi3",), rotary="partial", sliding_window="all", fused="qkv+gate_up", example="Phi-3, Phi-3.5, Phi-4-mini"),
        Family(
            "bert",
            ("bert", "albert"),
            kind="encoder",
            norm="layer",
            norm_placement="post",
            biases="all",
            rotary="learned",
            gqa=False,
            gated_ffn=False,
            reader="bert",
            example="BERT, MiniLM, ALBERT",
        ),
    )
}


def decoder_model_types() -> tuple[str, ...]:
    """Every Hugging Face model_type a decoder family serves."""
    return tuple(t for f in FAMILIES.values() if f.kind == "decoder" for t in f.model_types)


def gguf_architectures() -> tuple[str, ...]:
    return tuple(a for f in FAMILIES.values() for a in f.gguf_archs)


def encoder_model_types() -> tuple[str, ...]:
    return tuple(t for f in FAMILIES.values() if f.kind == "encoder" for t in f.model_types)


def family_of_model_type(model_type: object, *, where: str = "") -> Family:
    for f in FAMILIES.values():
        if f.kind == "decoder" and model_type in f.model_types:
            return f
    raise CheckpointError(
        f"{where}model_type {model_type!r} is not supported; supported decoders: {', '.join(decoder_model_types())}; "
        f"encoders: {', '.join(encoder_model_types())}"
    )


def family_of_gguf(arch: object, *, where: str = "") -> Family:
    for f in FAMILIES.values():
        if arch in f.gguf_archs:
            return f
    raise CheckpointError(f"{where}GGUF architecture {arch!r} is not supported; supported: {', '.join(gguf_architectures())}")


def twin_refusal(decoder: Decoder) -> str | None:
    """Why the particle twin is not offered for ``decoder`` (one line), or None."""
    fam = FAMILIES.get(decoder.arch)
    if fam is not None and fam.twin is not None:
        return fam.twin
    if decoder.norm_kind != "rms" or decoder.parallel_residual or not decoder.pre_norm or decoder.attn_softcap is not None:
        return "the twin is Pre-LN on the sphere (RMSNorm) with one softmax attention step, which this decoder is not"
    return None


def default_twin_layers(L: int) -> tuple[int, ...]:
    """Spread over the depth, each with a next layer to compare with: none for a one-layer model."""
    return tuple(sorted(k for k in {0, L // 4, L // 2, (3 * L) // 4, L - 2} if 0 <= k < L - 1))


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
    from attndyn.models import decoder_files

    folder = Path(folder)
    config = read_config(folder)
    fam = family_of_model_type(config.get("model_type"), where=f"{folder}: ")
    check_layout(fam)
    check_config(fam, config, f"{folder}/config.json: ")
    if files_reader_reads(fam) and not _files_reader_lacks(config):
        return decoder_files.read_hf_llama(folder, lazy=lazy)  # llama, gemma3_text and gpt2
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

    tokenizer = decoder_files._folder_tokenizer(folder)
    return read_hf_family(fam, config, get, name=folder.name, source=str(folder), tokenizer=tokenizer, lazy=lazy)


def _files_reader_lacks(config: dict) -> bool:
    """Options a family implements that :func:`~attndyn.models.decoder_files.read_hf_llama` does not: biases on the
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
        from attndyn.models.decoder_files import _gpt2

        dec = _gpt2(Path(name), config, {k: v.cpu().numpy() for k, v in params.items()})
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
    head = embed if tied else need("lm_head.weight")
    windows = _windows(fam, config, L)
    extra: dict = {}
    if per_type is not None:  # Gemma: a base per layer type
        types = config.get("layer_types") or ["full_attention"] * L
        extra["rope_bases"] = tuple(float(per_type.get(t, per_type.get("full_attention", {})).get("rope_theta", base)) for t in types)
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


def family_table() -> str:
    """The families as a Markdown table (docs/guide/trained-models.md holds it; a test checks it is this one)."""
    rows = [
        "| family | model_type (Hugging Face) | GGUF | what differs | forward | geometry | twin | e.g. |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in FAMILIES.values():
        traits = [
            t
            for flag, t in (
                (f.norm == "layer", "LayerNorm"),
                (f.norm_placement == "post", "norms after sub-layers"),
                (f.norm_placement == "sandwich", "sandwich norms"),
                (f.biases == "qkv", "q/k/v biases"),
                (f.biases == "all", "biases"),
                (f.rotary == "partial", "partial rotary"),
                (f.rotary == "learned", "learned positions"),
                (f.parallel_residual, "parallel residual"),
                (f.softcap, "soft-capping"),
                (f.sliding_window == "all", "sliding window"),
                (f.sliding_window in ("pattern", "alternating"), "local/global layers"),
                (f.qk_norm == "head", "QK-norm"),
                (f.qk_norm == "full", "QK-norm (all heads)"),
                (f.fused != "none", f"fused {f.fused}"),
                (f.gqa and f.kind == "decoder", "GQA"),
            )
            if flag
        ]
        decoder = f.kind == "decoder"
        gguf = ", ".join(f.gguf_archs) or (f"as {f.gguf_as} (llama.cpp writes it so)" if f.gguf_as else "-")
        rows.append(
            f"| {f.name} | {', '.join(f.model_types)} | {gguf} | {', '.join(traits)} | "
            f"{'yes' if decoder else 'encoder page'} | {'yes' if decoder else '-'} | {'yes' if f.twin is None else 'no'} | {f.example} |"
        )
    return "\n".join(rows)
