"""Bad configs and tensors of the decoder families, and what ``from_transformers`` cannot read (issue 51 items 5, 6 and 8).

Two tables generate the tests. :data:`FOLDER_CASES`: each row takes a tiny Hugging Face folder of one family
(written by ``transformers``' ``save_pretrained``, tests/models/test_families.py), changes one config value or
one tensor, and runs ``attndyn checkpoint FOLDER`` in-process: exit 2, one line naming the key (or tensor) and
its value, no traceback, no page. :data:`LIVE_CASES`: each row gives ``from_transformers`` (and the forward
pass) something it cannot read: one :class:`CheckpointError` whose one line names what. The untouched folder
of every family in the table is read and run (the null: each refusal is the change's).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings

import pytest
import torch

from attndyn.app.cli import entry
from attndyn.models.bert import CheckpointError

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.helpers import refused_in_one_line  # noqa: E402
from tests.models.test_families import IDS, _word_tokenizer, tiny  # noqa: E402 (after the skips)


def config(**change):
    return ("config", change)


def tensor(name: str, value):
    return ("tensor", (name, value))


QKV = "gpt_neox.layers.1.attention.query_key_value"
# (id, family, change, the words the one line holds); d = 32, 4 heads, 2 layers (test_families.COMMON)
FOLDER_CASES = [
    # rope_scaling / rope_parameters that are not mappings (was AttributeError, exit 1, in 4 families)
    ("qwen2-rope_scaling-string", "qwen2", config(rope_scaling="linear"), "rope_scaling = 'linear' is not a mapping"),
    ("phi3-rope_scaling-list", "phi3", config(rope_scaling=[1, 2]), "rope_scaling = [1, 2] is not a mapping"),
    ("gemma2-rope_scaling-string", "gemma2", config(rope_scaling="dynamic"), "rope_scaling = 'dynamic' is not a mapping"),
    ("gpt_neox-rope_scaling-list", "gpt_neox", config(rope_scaling=["linear"]), "rope_scaling = ['linear'] is not a mapping"),
    ("mistral-rope_parameters-list", "mistral", config(rope_parameters=[500.0]), "rope_parameters = [500.0] is not a mapping"),
    ("olmo2-rope_parameters-string", "olmo2", config(rope_parameters="default"), "rope_parameters = 'default' is not a mapping"),
    # the entries of rope_parameters, typed by name (was "could not convert string to float", or a derived rotary_dim)
    ("qwen2-rope_theta-string", "qwen2", config(rope_parameters={"rope_type": "default", "rope_theta": "x"}), "rope_parameters.rope_theta = 'x'"),
    ("qwen3-rope_theta-0", "qwen3", config(rope_parameters={"rope_type": "default", "rope_theta": 0}), "rope_parameters.rope_theta = 0"),
    (
        "phi3-partial_rotary_factor-0",
        "phi3",
        config(rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0}),
        "rope_parameters.partial_rotary_factor = 0",
    ),
    (
        "gpt_neox-partial_rotary_factor-3",
        "gpt_neox",
        config(rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 3}),
        "rope_parameters.partial_rotary_factor = 3",
    ),
    ("qwen2-rope_type-list", "qwen2", config(rope_parameters={"rope_type": ["default"]}), "rope_parameters.rope_type = ['default'] is not a string"),
    ("gpt_neox-rotary_emb_base-string", "gpt_neox", config(rotary_emb_base="big"), "rotary_emb_base = 'big' is not a number"),
    ("gpt_neox-rotary_emb_base-0", "gpt_neox", config(rotary_emb_base=0), "rotary_emb_base = 0 is outside"),
    # heads (was ZeroDivisionError, exit 1, in Qwen2, Phi-3 and GPT-NeoX)
    ("qwen2-heads-0", "qwen2", config(num_attention_heads=0), "num_attention_heads = 0 is outside"),
    ("phi3-heads-0", "phi3", config(num_attention_heads=0), "num_attention_heads = 0 is outside"),
    ("gpt_neox-heads-0", "gpt_neox", config(num_attention_heads=0), "num_attention_heads = 0 is outside"),
    ("qwen2-heads-2.5", "qwen2", config(num_attention_heads=2.5), "num_attention_heads = 2.5 is not an integer"),
    ("qwen3-kv_heads-true", "qwen3", config(num_key_value_heads=True), "num_key_value_heads = True is not an integer"),
    # Gemma 2's scalars and soft-caps (a scalar 0 or -8 was exit 1; a soft-cap 0 was read)
    ("gemma2-query_pre_attn_scalar-0", "gemma2", config(query_pre_attn_scalar=0), "query_pre_attn_scalar = 0 is outside"),
    ("gemma2-query_pre_attn_scalar--8", "gemma2", config(query_pre_attn_scalar=-8), "query_pre_attn_scalar = -8 is outside"),
    ("gemma2-attn_softcap-0", "gemma2", config(attn_logit_softcapping=0), "attn_logit_softcapping = 0 is outside"),
    ("gemma2-final_softcap-0", "gemma2", config(final_logit_softcapping=0), "final_logit_softcapping = 0 is outside"),
    ("gemma2-attn_softcap-string", "gemma2", config(attn_logit_softcapping="2"), "attn_logit_softcapping = '2' is not a number"),
    # declared sizes against the documented bounds, before any allocation (hidden_size 10^12 asked for 8 TB)
    ("gemma2-hidden_size-10^12", "gemma2", config(hidden_size=10**12), "hidden_size = 1000000000000 is outside"),
    ("olmo2-layers-10^12", "olmo2", config(num_hidden_layers=10**12), "num_hidden_layers = 1000000000000 is outside 1..1024"),
    ("gemma2-vocab-10^9", "gemma2", config(vocab_size=10**9), "vocab_size = 1000000000 is outside"),
    # windows: integers >= 1 (0 was read as none, 2.5 as 2, a string named neither key nor file)
    ("mistral-window-0", "mistral", config(sliding_window=0), "sliding_window = 0 is outside"),
    ("phi3-window-2.5", "phi3", config(sliding_window=2.5), "sliding_window = 2.5 is not an integer"),
    ("qwen2-window-string", "qwen2", config(sliding_window="4"), "sliding_window = '4' is not an integer"),
    ("qwen2-layer_types-string", "qwen2", config(layer_types="full"), "layer_types = 'full' is not a list of 2 entries"),
    ("qwen2-layer_types-short", "qwen2", config(layer_types=["full_attention"]), "layer_types = ['full_attention'] is not a list of 2"),
    ("qwen2-layer_types-number", "qwen2", config(layer_types=["sliding_attention", 3]), "layer_types = ['sliding_attention', 3]"),
    # epsilons in (0, 1] (0 was read), no truthy strings, no bools as ints (true ran one layer)
    ("qwen3-eps-0", "qwen3", config(rms_norm_eps=0), "rms_norm_eps = 0 is outside (0, 1]"),
    ("qwen3-eps-string", "qwen3", config(rms_norm_eps="1e-6"), "rms_norm_eps = '1e-6' is not a number"),
    ("olmo2-eps-2", "olmo2", config(rms_norm_eps=2), "rms_norm_eps = 2 is outside (0, 1]"),
    ("gpt_neox-eps-string", "gpt_neox", config(layer_norm_eps="1e-5"), "layer_norm_eps = '1e-5' is not a number"),
    ("olmo2-layers-true", "olmo2", config(num_hidden_layers=True), "num_hidden_layers = True is not an integer"),
    ("gpt_neox-parallel-no", "gpt_neox", config(use_parallel_residual="no"), "use_parallel_residual = 'no' is not true or false"),
    ("qwen2-tie-string", "qwen2", config(tie_word_embeddings="false"), "tie_word_embeddings = 'false' is not true or false"),
    ("qwen2-hidden_act-list", "qwen2", config(hidden_act=["silu"]), "hidden_act = ['silu'] is not a string"),
    # tensors: shapes before a fused map is reshaped (was exit 1), dtypes float only (int8 was read as its raw numbers)
    ("gpt_neox-qkv-wrong-size", "gpt_neox", tensor(QKV + ".weight", torch.zeros(95, 32)), f"'{QKV}.weight' has shape (95, 32), expected (96, 32)"),
    ("gpt_neox-qkv-bias-wrong-size", "gpt_neox", tensor(QKV + ".bias", torch.zeros(97)), f"'{QKV}.bias' has shape (97,), expected (96,)"),
    ("qwen2-int8-weights", "qwen2", tensor("model.layers.0.self_attn.q_proj.weight", torch.ones(32, 32, dtype=torch.int8)), "torch.int8"),
    ("gpt_neox-bool-bias", "gpt_neox", tensor("gpt_neox.layers.0.attention.query_key_value.bias", torch.ones(96, dtype=torch.bool)), "torch.bool"),
    ("llama-attention_bias-without-biases", "llama", config(attention_bias=True), "'model.layers.0.self_attn.q_proj.bias' (or k, v) is missing"),
]
FAMILIES_USED = sorted({case[1] for case in FOLDER_CASES})


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One untouched tiny folder per family, written once; each case edits a copy."""
    root = tmp_path_factory.mktemp("families")
    built: dict[str, object] = {}

    def get(family: str):
        if family not in built:
            built[family] = tiny(family, root / family)[1]
            _word_tokenizer(built[family])  # a complete folder: a refusal is never the missing tokenizer's
        return built[family]

    return get


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))


def _apply(folder, change) -> None:
    kind, what = change
    if kind == "config":
        path = folder / "config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | what))
    else:
        name, value = what
        path = folder / "model.safetensors"
        tensors = safetensors_torch.load_file(str(path))
        assert name in tensors, name  # the case changes a tensor the folder has
        tensors[name] = value
        safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize(("case", "family", "change", "expected"), FOLDER_CASES, ids=[c[0] for c in FOLDER_CASES])
def test_a_bad_config_or_tensor_exits_2_naming_the_key_and_value(tmp_path, capsys, folders, case, family, change, expected):
    folder = tmp_path / f"tiny-{family}"
    shutil.copytree(folders(family), folder)
    _apply(folder, change)
    out = tmp_path / "out"
    capsys.readouterr()  # the fixture's progress bars (save_pretrained) are not the command's
    code = entry(["checkpoint", str(folder), "--out", str(out)])
    line = refused_in_one_line(case, code, *capsys.readouterr(), expected, out)
    assert str(folder) in line, f"{case}: {line!r} does not name the folder"


@pytest.mark.parametrize("family", FAMILIES_USED)
def test_the_untouched_folders_are_read_and_run(folders, family):
    """The null of the table: every family's folder without the change is read and its forward pass runs."""
    from attndyn.models.decoder import forward
    from attndyn.models.decoder_files import load_decoder

    run = forward(load_decoder(folders(family)), IDS)
    assert bool(torch.isfinite(run.logits).all())


# --- from_transformers: what it cannot read (issue 51 item 6) ------------------------------------------------


def _meta(model):
    with torch.device("meta"):
        return type(model)(model.config)


def _half_loaded(model):
    half = type(model)(model.config).float()
    half.model.layers[1].mlp.down_proj.to("meta")  # one module never received its weights
    return half


def _quantized(model):
    with warnings.catch_warnings():  # torch deprecates its eager quantization in favour of torchao; still how such models are made
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(type(model)(model.config).float(), {torch.nn.Linear}, dtype=torch.qint8)


def _int8_parameter(model):
    model.model.layers[0].mlp.up_proj.weight = torch.nn.Parameter(torch.ones(48, 32, dtype=torch.int8), requires_grad=False)
    return model


def _nan_softcap_config(model):
    model.config.attn_logit_softcapping = float("nan")
    return model


def _overflowing_scores(model):
    with torch.no_grad():  # finite weights whose scores overflow float64 in layer 1: the softmax gives NaN
        model.model.layers[1].self_attn.q_proj.weight.mul_(1e160)
        model.model.layers[1].self_attn.k_proj.weight.mul_(1e160)
    return model


# (id, family, what from_transformers is given: model -> (model, tokenizer) or a decoder's change, expected words)
LIVE_CASES = [
    ("not-a-model-object", "qwen2", lambda m: (object(), None), "a object is not a loaded transformers model"),
    ("not-a-model-linear", "qwen2", lambda m: (torch.nn.Linear(2, 2), None), "a Linear is not a loaded transformers model"),
    ("not-a-model-config", "qwen2", lambda m: (m.config, None), "a Qwen2Config is not a loaded transformers model"),
    ("not-a-model-class", "qwen2", lambda m: (type(m), None), "a type is not a loaded transformers model"),
    ("meta-device", "qwen2", lambda m: (_meta(m), None), "is on the meta device"),
    ("half-loaded", "qwen2", lambda m: (_half_loaded(m), None), "'model.layers.1.mlp.down_proj.weight' is on the meta device"),
    ("dynamically-quantized", "qwen2", lambda m: (_quantized(m), None), "quantized"),
    ("int8-parameter", "qwen2", lambda m: (_int8_parameter(m), None), "'model.layers.0.mlp.up_proj.weight' has dtype torch.int8"),
    ("tokenizer-a-string", "qwen2", lambda m: (m, "gpt2"), "the tokenizer, a str, is neither"),
    ("nan-softcap-config", "gemma2", lambda m: (_nan_softcap_config(m), None), "attn_logit_softcapping = nan is not finite"),
    ("nan-softcap-decoder", "gemma2", {"attn_softcap": float("nan")}, "attn_softcap = nan is not finite"),
    ("negative-scale-decoder", "gemma2", {"attn_scale": -0.5}, "attn_scale = -0.5 is outside"),
    ("non-finite-forward", "llama", lambda m: (_overflowing_scores(m), None), "the residual stream after layer 1 is not finite"),
]


@pytest.mark.parametrize(("case", "family", "give", "expected"), LIVE_CASES, ids=[c[0] for c in LIVE_CASES])
def test_from_transformers_refuses_what_it_cannot_read_in_one_sentence(tmp_path, case, family, give, expected):
    import attndyn.models
    from attndyn.models.decoder import forward

    model, _ = tiny(family, tmp_path)
    if isinstance(give, dict):  # a decoder read from the live model, then given a value no file may hold
        dec = attndyn.models.from_transformers(model)
        read = lambda: dataclasses.replace(dec, **give)  # noqa: E731
    else:
        read = lambda: forward(attndyn.models.from_transformers(*give(model)), IDS)  # noqa: E731
    with pytest.raises(CheckpointError) as caught:
        read()
    message = str(caught.value)
    assert expected in message, f"{case}: {message!r}"
    assert "\n" not in message
