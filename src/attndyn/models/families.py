"""The registry of the trained-model families: what each one is, one row each.

Contract
--------
* :data:`FAMILIES` maps a family's name to a :class:`Family`: the Hugging Face ``model_type`` values
  and GGUF ``general.architecture`` names it serves, and how its weights map onto attndyn's decoder
  description (norm kind and placement, biases, rotary fraction, grouped-query attention, parallel
  residual, soft-capping, sliding windows, QK-norm, tied embeddings, fused maps). The CLI
  (``attndyn checkpoint``), :func:`~attndyn.models.decoder_files.load_decoder`, the refusal of an
  unknown architecture and the table in ``docs/guide/trained-models.md`` all read it: adding a family
  is one entry here (the readers of :mod:`attndyn.models.architectures` read its traits).
* ``family_of_model_type(t)`` / ``family_of_encoder(t)`` / ``family_of_gguf(a)``: the family, or :class:`CheckpointError` naming
  ``t`` and listing the supported ones.
* ``twin_refusal(decoder)``: one line saying why the particle twin is not offered for this decoder
  (LayerNorm, a parallel residual, norms after the sub-layers, soft-capped scores), or None.
* ``default_twin_layers(L)``: the twin layers that fit a model of L layers (never the last one).
* ``family_table()``: the families as the Markdown table of ``docs/guide/trained-models.md``.

A leaf of :mod:`attndyn.models`: it imports the decoder description and the errors only, so every reader
and every check (:mod:`~attndyn.models.family_checks`, :mod:`~attndyn.models.hf_files`,
:mod:`~attndyn.models.architectures`, :mod:`~attndyn.models.family_gguf`, :mod:`~attndyn.models.decoder_files`)
imports it without a circle. :mod:`attndyn.models.architectures` re-exports its names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from attndyn.models.decoder import Decoder
from attndyn.models.errors import CheckpointError


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
    layout: str = "split"  # tensor layout: "split" (model.layers.*, q/k/v apart), "neox" (gpt_neox.layers.*, fused per head), "conv1d" (GPT-2);
    # encoders: "encoder" (encoder.layer.{i}.*, BERT) or "encoder_groups" (encoder.albert_layer_groups.*, ALBERT)
    shared_layers: bool = False  # encoders: one layer's weights serve every layer (ALBERT)
    factorized_embedding: bool = False  # encoders: the embeddings have their own width (embedding_size), mapped to the hidden one
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
                ("use_qkv_bias", self.kind == "decoder" and self.biases in ("qkv", "all")),
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


# the encoder reader's activations (the first: a config's default when it names none), by their config names
ENCODER_ACTS = (("gelu", "gelu"), ("gelu_new", "gelu_new"), ("gelu_pytorch_tanh", "gelu_pytorch_tanh"), ("relu", "relu"))
BERT = Family(
    "bert",
    ("bert",),
    kind="encoder",
    norm="layer",
    norm_placement="post",
    biases="all",
    rotary="learned",
    gqa=False,
    gated_ffn=False,
    reader="bert",
    layout="encoder",
    acts=ENCODER_ACTS,
    example="BERT, MiniLM",
)

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
        BERT,
        replace(
            BERT,
            name="albert",
            model_types=("albert",),
            layout="encoder_groups",
            shared_layers=True,
            factorized_embedding=True,
            acts=(ENCODER_ACTS[1], ENCODER_ACTS[0], *ENCODER_ACTS[2:]),  # transformers' AlbertConfig defaults to gelu_new
            example="ALBERT",
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


def family_of_encoder(model_type: object, *, where: str = "") -> Family:
    """The encoder row serving ``model_type``, or :class:`CheckpointError` naming it and the supported encoders."""
    for f in FAMILIES.values():
        if f.kind == "encoder" and model_type in f.model_types:
            return f
    raise CheckpointError(f"{where}unsupported architecture model_type={model_type!r}; supported encoders: {', '.join(encoder_model_types())}")


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
                (f.shared_layers, "one layer shared by all"),
                (f.factorized_embedding, "factorized embedding"),
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
