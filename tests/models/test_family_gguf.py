"""GGUF files of every family llama.cpp writes (issue 37): each equals transformers in float64.

The tiny random models of ``test_families`` are written as GGUF files the way llama.cpp's
``convert_hf_to_gguf.py`` writes them, described here from the installed ``gguf`` package (not from
attndyn's own name table):

* names: ``gguf.get_tensor_name_map(arch, L).get_name(hf)``, the map the converter itself calls;
* metadata: the keys each converter class writes (``gguf.GGUFWriter.add_*``); a key the converter
  does not write is not written (GPT-NeoX's and Gemma 2's RoPE base, Gemma 2's query scale), so those
  models take llama.cpp's defaults (base 10000, scale hd^-1/2);
* what the converter changes in the tensors:
  - Mistral is written as ``llama`` (gguf has no ``mistral`` architecture; ``MistralForCausalLM`` is a
    ``LlamaModel`` in the converter), with each head's query/key rows permuted for llama.cpp's
    normal-RoPE pairing (``LlamaModel.permute``, written out below) and no sliding window;
  - Gemma 2: every norm weight stored as ``1 + w`` (``data_torch + 1``), ``lm_head`` dropped;
  - GPT-NeoX: the fused query/key/value rows, per head ``(H, 3, hd)`` in transformers, restacked as
    ``(3, H, hd)`` (``GPTNeoXModel.modify_tensors``), weights and biases;
  - GPT-2 (``GPT2Model``): each ``Conv1D`` weight, stored (in, out) by transformers, transposed to (out, in)
    (``c_attn``, both ``c_proj``, ``c_fc``); the token embedding written a second time as ``output.weight``
    (tied in the model); ``feed_forward_length`` is ``4 * n_embd`` and the context ``n_positions``;
  - OLMo-2, Phi-3 (fused ``qkv_proj`` -> ``attn_qkv``, ``gate_up_proj`` -> ``ffn_up``), GPT-NeoX and
    Gemma 2 run NEOX RoPE in llama.cpp: no permutation.

Where transformers has a GGUF loader for the architecture (llama, phi3, gemma2, gpt2), it reads the written file
back to exactly the model's weights: an independent check of the writer's names and changes. For each
family, leaving out one converter change (the permutation, the ``+ 1``, the restacking, a transpose) makes the
oracle miss by more than 1e-3: the oracle sees each mapping.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndyn.models.decoder import forward
from attndyn.models.decoder_files import load_decoder
from tests.models.test_decoders import tiny_gpt2
from tests.models.test_families import CONFIGS, IDS, differences, exact_reference, reference, tiny

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

ROPE_10K = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
# the family, the GGUF architecture llama.cpp writes it as, and what the tiny model changes for GGUF
GGUF_FAMILIES = {
    "mistral": ("llama", {"sliding_window": None}),  # llama.cpp's llama architecture has no sliding window
    "olmo2": ("olmo2", {}),
    "gpt_neox": ("gptneox", {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}}),
    "phi3": ("phi3", {}),
    "gemma2": ("gemma2", ROPE_10K | {"query_pre_attn_scalar": 8}),  # the converter writes neither; llama.cpp's defaults
    "gpt2": ("gpt2", {}),  # test_decoders.tiny_gpt2 with GPT2 below
}
GPT2 = {"vocab_size": 64, "n_positions": 64}  # the vocabulary of the other tiny models; a context that holds the CLI's prompts
BREAKS = {
    "mistral": "permute",
    "gemma2": "plus_one",
    "gpt_neox": "restack",
    "phi3": "swap_gate_up",
    "olmo2": "swap_post_norms",
    "gpt2": "keep_c_proj",  # the attention's square output map left (in, out): the shapes still fit
}


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows (first half, second half) interleaved."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def on_grid(model) -> None:
    """Norm weights on a 2^-16 grid, so that the converter's float32 ``1 + w`` (Gemma) is exact; the norms'
    epsilons rounded to float32, as GGUF stores them (left at 1e-5 in float64, LayerNorm's epsilon alone
    moves GPT-NeoX's residual by 4.8e-12 relative)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.round(p * 2**16) / 2**16)
    for m in model.modules():
        for attr in ("variance_epsilon", "eps"):
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, float(np.float32(getattr(m, attr))))


def write_like_llama_cpp(
    model, path, arch: str, *, skip: str = "", tokens: list[str] | None = None, raw: dict | None = None, extra: dict | None = None
) -> None:
    """The model as convert_hf_to_gguf.py writes it (module docstring); ``skip`` leaves one change out;
    ``raw``: GGUF name -> (bytes, tensor type) written in place of the model's tensor (the quantization tests)."""
    if arch == "gpt2":
        return write_gpt2_like_llama_cpp(model, path, skip=skip, tokens=tokens)
    cfg = model.config
    L, H, d = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size
    KV = getattr(cfg, "num_key_value_heads", None) or H
    hd = getattr(cfg, "head_dim", None) or d // H
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[{"gptneox": "GPTNEOX"}.get(arch, arch.upper())], L)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(d)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(H)
    rope = cfg.rope_parameters
    rope = rope.get("full_attention", rope)  # Gemma 3: the global layers' base is the file's
    if arch == "gptneox":  # GPTNeoXModel.set_gguf_parameters
        w.add_rope_dimension_count(int(rope["partial_rotary_factor"] * hd))
        w.add_parallel_residual(cfg.use_parallel_residual)
        w.add_layer_norm_eps(cfg.layer_norm_eps)
    else:
        w.add_head_count_kv(KV)
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if arch in ("llama", "olmo2", "phi3", "qwen2", "qwen3", "gemma3"):
        w.add_rope_freq_base(rope["rope_theta"])
    if arch == "llama":
        w.add_rope_dimension_count(hd)
    if arch == "phi3":  # Phi3MiniModel.set_gguf_parameters
        w.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 1.0) * d) // H)
        w.add_sliding_window(cfg.sliding_window or 0)
    if arch in ("gemma2", "gemma3"):  # Gemma2Model / Gemma3Model.set_gguf_parameters
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_sliding_window(cfg.sliding_window)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    if tokens:  # a byte-level BPE vocabulary (tokenizer.ggml.model "gpt2"), for the command line
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_merges(["t h"])
    for name, t in model.state_dict().items():
        a = t.float().numpy()
        if arch in ("gemma2", "gemma3") and name == "lm_head.weight":
            continue  # dropped by the converter (tied)
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight") and skip != "plus_one":
            a = a + np.float32(1.0)
        if arch == "llama" and skip != "permute" and name.endswith(("q_proj.weight", "k_proj.weight")):
            a = permute(a, H if "q_proj" in name else KV)
        if arch == "gptneox" and skip != "restack" and "query_key_value" in name:
            a = a.reshape(H, 3, hd, *a.shape[1:]).swapaxes(0, 1).reshape(a.shape)
        if skip == "swap_gate_up" and "gate_up_proj" in name:  # a reader that took up for gate would see this
            a = np.concatenate([a[a.shape[0] // 2 :], a[: a.shape[0] // 2]])
        g = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert g is not None, name
        if skip == "swap_post_norms":  # post_attention_norm <-> post_ffw_norm
            g = g.replace("post_attention_norm", "@").replace("post_ffw_norm", "post_attention_norm").replace("@", "post_ffw_norm")
        if raw and g in raw:
            data, qtype = raw[g]
            w.add_tensor(g, data, raw_dtype=qtype)
            continue
        w.add_tensor(g, np.ascontiguousarray(a))
    for name, a in (extra or {}).items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gpt2_like_llama_cpp(model, path, *, skip: str = "", tokens: list[str] | None = None) -> None:
    """convert_hf_to_gguf.py's GPT2Model: its metadata keys, each Conv1D weight transposed, the token embedding
    written again as ``output.weight``; ``skip="keep_c_proj"`` leaves the attention's output map untransposed."""
    cfg = model.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT2, cfg.n_layer)
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_block_count(cfg.n_layer)
    w.add_context_length(cfg.n_positions)  # the converter reads config.json's n_ctx, which GPT-2's hub configs set to n_positions
    w.add_embedding_length(cfg.n_embd)
    w.add_feed_forward_length(4 * cfg.n_embd)
    w.add_head_count(cfg.n_head)
    w.add_layer_norm_eps(cfg.layer_norm_epsilon)
    if tokens:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_merges(["t h"])
    for name, t in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied: not in the model's safetensors file
        a = t.float().numpy()
        if name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")) and not (skip == "keep_c_proj" and "attn.c_proj" in name):
            a = a.T
        g = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert g is not None, name
        w.add_tensor(g, np.ascontiguousarray(a))
        if g == "token_embd.weight":
            w.add_tensor("output.weight", np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny_gguf(family: str, tmp_path, *, skip: str = "", **more):
    arch, override = GGUF_FAMILIES[family]
    model, folder = tiny_gpt2(tmp_path, **GPT2) if family == "gpt2" else tiny(family, tmp_path, **(override | more))
    on_grid(model)
    path = tmp_path / f"{family}{'-' + skip if skip else ''}.gguf"
    write_like_llama_cpp(model, path, arch, skip=skip)
    return model, folder, path


def oracle(model):
    """transformers' model with its float32 islands widened (test_families.exact_reference); GPT-2 has none
    but the attention softmax, which reference() widens (its positions are learned, its LayerNorm float64)."""
    return model if model.config.model_type == "gpt2" else exact_reference(model)


VARIANTS = {"gpt_neox sequential": ("gpt_neox", {"use_parallel_residual": False}), "phi3 no window": ("phi3", {"sliding_window": None})}


@pytest.mark.parametrize("family", [*GGUF_FAMILIES, *VARIANTS])
def test_family_gguf_equals_transformers_in_float64(tmp_path, monkeypatch, family):
    """Every layer's residual (the last through the final norm), every attention map and the logits within 1e-10;
    also GPT-NeoX without the parallel residual, and Phi-3 without a window (the converter writes 0)."""
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    family, more = VARIANTS.get(family, (family, {}))
    model, _, path = tiny_gguf(family, tmp_path, **more)
    dec = load_decoder(path)
    assert dec.arch == ("llama" if family == "mistral" else family)
    d = differences(dec, forward(dec, IDS, dtype=torch.float64), reference(oracle(model), IDS))
    print(f"\n{family} (GGUF {GGUF_FAMILIES[family][0]}): largest difference to transformers {d}")
    assert max(d.values()) < 1e-10, d


def test_what_the_gguf_families_switch_on(tmp_path, monkeypatch):
    """The oracle above exercises what makes each family different, read from the GGUF metadata."""
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    decs = {f: load_decoder(tiny_gguf(f, tmp_path)[2]) for f in GGUF_FAMILIES}
    assert decs["gemma2"].windows == (4, None)
    assert (decs["gemma2"].attn_softcap, decs["gemma2"].final_softcap) == (2.0, 3.0)
    assert decs["phi3"].windows == (4, 4)
    assert decs["phi3"].rotary_dim == 4
    assert decs["gpt_neox"].parallel_residual
    assert decs["gpt_neox"].rotary_dim == 4
    assert decs["gpt_neox"].norm_kind == "layer"
    assert not decs["olmo2"].pre_norm
    assert decs["olmo2"].qk_norm_full
    assert decs["mistral"].windows is None
    assert (decs["gpt2"].positions, decs["gpt2"].norm_kind, decs["gpt2"].pos_embed.shape) == ("learned", "layer", (64, 32))
    assert load_decoder(tiny_gguf("phi3", tmp_path / "w0", sliding_window=None)[2]).windows is None
    assert not load_decoder(tiny_gguf("gpt_neox", tmp_path / "seq", use_parallel_residual=False)[2]).parallel_residual
    assert len(IDS) > 4


@pytest.mark.parametrize("family", ["mistral", "phi3", "gemma2", "gpt2"])
def test_transformers_gguf_loader_reads_the_written_file_back_to_the_model(tmp_path, family):
    """An independent reader of the same file (transformers' GGUF loader undoes the permutation and the
    ``+ 1`` itself): the written names and changes are llama.cpp's."""
    model, _, path = tiny_gguf(family, tmp_path)
    # transformers maps gpt2.context_length to n_ctx, not to n_positions (wpe's rows), which it leaves at 1024
    extra = {"phi3": {}, "gpt2": {"n_positions": 64}}.get(family, {"head_dim": 8})
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=path.name, dtype=torch.float32, vocab_size=64, pad_token_id=0, **extra
    )
    want = model.state_dict()
    for name, t in theirs.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), want[name].float().numpy(), err_msg=name)


@pytest.mark.parametrize("family", list(GGUF_FAMILIES))
def test_each_mapping_left_out_is_seen_by_the_oracle(tmp_path, monkeypatch, family):
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    model, _, path = tiny_gguf(family, tmp_path, skip=BREAKS[family])
    dec = load_decoder(path)
    d = differences(dec, forward(dec, IDS, dtype=torch.float64), reference(oracle(model), IDS))
    assert max(d.values()) > 1e-3, d


def test_a_gguf_file_with_scaled_rope_is_refused_naming_the_tensor(tmp_path, monkeypatch):
    """Phi-3.5's and Phi-4-mini's files carry LongRoPE factors, Llama 3.1's rope_freqs: the forward pass has no scaled RoPE."""
    from attndyn.models.bert import CheckpointError

    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    model, _ = tiny("phi3", tmp_path)
    path = tmp_path / "longrope.gguf"
    write_like_llama_cpp(model, path, "phi3", extra={"rope_factors_long.weight": np.ones(2, dtype=np.float32)})
    with pytest.raises(CheckpointError, match="'rope_factors_long.weight' scales RoPE"):
        load_decoder(path)


# --- attndyn checkpoint on a tiny model of each family, as a folder and as a GGUF file ---------------------

WORDS = "the cat sat on a mat and looked at birds"
PROMPTS = [WORDS, " ".join(reversed(WORDS.split()))]
# a byte-level vocabulary of the prompts' characters: letters are themselves, the space is "Ġ"
TOKENS = ["<unk>", "\u0120", "th", *"abcdefghijklmnopqrstuvwxyz"]
CLI_GGUF = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3"} | {f: a for f, (a, _) in GGUF_FAMILIES.items()}
# layers, heads, key/value heads of each tiny model
SHAPES = {f: (2, 4, 4 if f == "gpt_neox" else 2) for f in CONFIGS} | {"gpt2": (2, 4, 4), "gemma3": (7, 4, 2)}
CLI_FOLDERS = ["llama", "mistral", "qwen2", "qwen3", "olmo2", "gemma2", "gemma3", "gpt_neox", "gpt2", "phi3"]


def _cli_model(family: str, tmp_path):
    if family == "gemma3":
        from tests.models.test_gemma3 import tiny_gemma3

        return tiny_gemma3(tmp_path)
    if family == "gpt2":
        return tiny_gpt2(tmp_path, **GPT2, n_layer=2)
    override = GGUF_FAMILIES.get(family, ("", {}))[1] | ({"use_sliding_window": False} if family == "qwen2" else {})
    model, folder = tiny(family, tmp_path, **override)
    on_grid(model)
    return model, folder


def _run_checkpoint(path, tmp_path) -> dict:
    import json

    from attndyn.app.cli import entry

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n\n".join(PROMPTS) + "\n")
    out = tmp_path / "page"
    assert entry(["checkpoint", str(path), "--prompts", str(prompts), "--out", str(out), "--regime-layers", "0"]) == 0
    return json.loads((out / "decoder.json").read_text())


@pytest.mark.slow  # about 3 s each: the whole page on two prompts
@pytest.mark.parametrize("family", CLI_FOLDERS)
def test_attndyn_checkpoint_reads_a_folder_of_each_family(tmp_path, monkeypatch, one_worker, family):
    from tests.models.test_families import _word_tokenizer

    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    _, folder = _cli_model(family, tmp_path)
    _word_tokenizer(folder)
    record = _run_checkpoint(folder, tmp_path)
    assert (record["layers"], record["heads"], record["kv_heads"]) == SHAPES[family]
    assert record["quantisation"] == "safetensors"


@pytest.mark.slow  # about 3 s each: the whole page on two prompts
@pytest.mark.parametrize("family", list(CLI_GGUF))
def test_attndyn_checkpoint_reads_a_gguf_file_of_each_family(tmp_path, monkeypatch, one_worker, family):
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    model, _ = _cli_model(family, tmp_path)
    path = tmp_path / f"{family}.gguf"
    write_like_llama_cpp(model, path, CLI_GGUF[family], tokens=TOKENS)
    record = _run_checkpoint(path, tmp_path)
    assert (record["layers"], record["heads"], record["kv_heads"]) == SHAPES[family]
    assert record["source"] == str(path)


def test_a_gpt2_gguf_file_without_its_context_length_is_refused_naming_the_key(tmp_path, monkeypatch):
    """GPT-2's learned positions have one row per position: the file's context length sets position_embd's shape."""
    from attndyn.models.bert import CheckpointError

    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf.GGUFWriter, "add_context_length", lambda self, n: None)
    _, _, path = tiny_gguf("gpt2", tmp_path)
    with pytest.raises(CheckpointError, match="'gpt2.context_length' is missing"):
        load_decoder(path)
