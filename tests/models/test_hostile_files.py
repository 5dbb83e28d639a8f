"""Hostile model files (issues 35 and 38): every case exits 2 with one line naming the file and the field.

The cases are generated from one table. Each builds a tiny model file itself (the ``gguf`` package's
writer for GGUF, ``safetensors`` for Hugging Face and BERT folders, damaged headers written by hand),
changes one thing, and runs ``attndyn checkpoint PATH --out DIR`` in-process: the exit status is 2,
stderr is one line that names the field (and the file), and no traceback is printed. The untouched
baseline of every kind is read without error (so each refusal is the change's). A bfloat16 (and a
float16) LLaMA folder is compared with transformers on the same rounded weights.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from attndyn.app.cli import entry
from tests.helpers import refused_in_one_line

gguf = pytest.importorskip("gguf")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
pytest.importorskip("tokenizers")

D, H, KV, HD, F, V, L, CTX = 16, 4, 2, 4, 24, 32, 2, 64
WORDS = "the cat sat on a mat and looked at birds in an old garden while rain fell".split()
DELETE = object()


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def llama_gguf_tensors() -> dict[str, np.ndarray]:
    r = _rng(1)
    w = lambda *s: (0.2 * r.standard_normal(s)).astype(np.float32)  # noqa: E731
    t = {"token_embd.weight": w(V, D), "output_norm.weight": 1 + w(D), "output.weight": w(V, D)}
    for k in range(L):
        t |= {
            f"blk.{k}.attn_norm.weight": 1 + w(D), f"blk.{k}.attn_q.weight": w(H * HD, D), f"blk.{k}.attn_k.weight": w(KV * HD, D),
            f"blk.{k}.attn_v.weight": w(KV * HD, D), f"blk.{k}.attn_output.weight": w(D, H * HD), f"blk.{k}.ffn_norm.weight": 1 + w(D),
            f"blk.{k}.ffn_gate.weight": w(F, D), f"blk.{k}.ffn_up.weight": w(F, D), f"blk.{k}.ffn_down.weight": w(D, F),
        }  # fmt: skip
    return t


# a byte-level BPE vocabulary of V tokens: letters, their pairs in order, the space marker
GGUF_TOKENS = [chr(c) for c in range(ord("a"), ord("a") + 20)] + ["Ġ"] + [a + b for a, b in zip("abcdefghijk", "bcdefghijkl", strict=True)]
GGUF_MERGES = [f"{a} {b}" for a, b in zip("abcdefghijk", "bcdefghijkl", strict=True)]


def llama_gguf_meta() -> dict:
    return {
        "general.name": "tiny",
        "llama.block_count": L,
        "llama.embedding_length": D,
        "llama.feed_forward_length": F,
        "llama.attention.head_count": H,
        "llama.attention.head_count_kv": KV,
        "llama.rope.freq_base": 500.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.context_length": CTX,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": GGUF_TOKENS,
        "tokenizer.ggml.merges": GGUF_MERGES,
    }


def _vtype(value):
    T = gguf.GGUFValueType
    if isinstance(value, bool):
        return T.BOOL
    if isinstance(value, int):
        return T.UINT32 if 0 <= value < 2**32 else T.INT64
    if isinstance(value, float):
        return T.FLOAT32
    if isinstance(value, str):
        return T.STRING
    raise TypeError(value)


def write_gguf(path: Path, meta: dict, tensors: dict, tensor_types: dict | None = None) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in meta.items():
        if isinstance(value, list):
            w.add_key_value(key, value, gguf.GGUFValueType.ARRAY, _vtype(value[0]))
        else:
            w.add_key_value(key, value, _vtype(value))
    for name, a in tensors.items():
        w.add_tensor(name, a, raw_dtype=(tensor_types or {}).get(name))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def hf_llama_tensors() -> dict[str, np.ndarray]:
    r = _rng(2)
    w = lambda *s: (0.2 * r.standard_normal(s)).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": w(V, D), "model.norm.weight": 1 + w(D), "lm_head.weight": w(V, D)}
    for k in range(L):
        p = f"model.layers.{k}."
        t |= {
            p + "input_layernorm.weight": 1 + w(D), p + "post_attention_layernorm.weight": 1 + w(D),
            p + "self_attn.q_proj.weight": w(H * HD, D), p + "self_attn.k_proj.weight": w(KV * HD, D),
            p + "self_attn.v_proj.weight": w(KV * HD, D), p + "self_attn.o_proj.weight": w(D, H * HD),
            p + "mlp.gate_proj.weight": w(F, D), p + "mlp.up_proj.weight": w(F, D), p + "mlp.down_proj.weight": w(D, F),
        }  # fmt: skip
    return t


LLAMA_CONFIG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
    "num_attention_heads": H, "num_key_value_heads": KV, "max_position_embeddings": CTX, "rms_norm_eps": 1e-5, "rope_theta": 500.0,
    "vocab_size": V, "tie_word_embeddings": False,
}  # fmt: skip


def gpt2_tensors(positions: int = 16) -> dict[str, np.ndarray]:
    r = _rng(3)
    w = lambda *s: (0.2 * r.standard_normal(s)).astype(np.float32)  # noqa: E731
    t = {"wte.weight": w(V, D), "wpe.weight": w(positions, D), "ln_f.weight": 1 + w(D), "ln_f.bias": w(D)}
    for k in range(L):
        p = f"h.{k}."
        t |= {
            p + "ln_1.weight": 1 + w(D), p + "ln_1.bias": w(D), p + "ln_2.weight": 1 + w(D), p + "ln_2.bias": w(D),
            p + "attn.c_attn.weight": w(D, 3 * D), p + "attn.c_attn.bias": w(3 * D), p + "attn.c_proj.weight": w(D, D),
            p + "attn.c_proj.bias": w(D), p + "mlp.c_fc.weight": w(D, F), p + "mlp.c_fc.bias": w(F), p + "mlp.c_proj.weight": w(F, D),
            p + "mlp.c_proj.bias": w(D),
        }  # fmt: skip
    return t


GPT2_CONFIG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": D, "n_head": H, "n_layer": L, "n_positions": 16, "vocab_size": V}


def bert_tensors(arch: str) -> dict[str, np.ndarray]:
    r = _rng(4)
    w = lambda *s: (0.2 * r.standard_normal(s)).astype(np.float32)  # noqa: E731
    e = 8 if arch == "albert" else D
    t = {
        "embeddings.word_embeddings.weight": w(V, e), "embeddings.position_embeddings.weight": w(CTX, e),
        "embeddings.token_type_embeddings.weight": w(2, e), "embeddings.LayerNorm.weight": 1 + w(e), "embeddings.LayerNorm.bias": w(e),
    }  # fmt: skip
    names = {
        "Wq": ("attention.self.query.weight", (D, D)), "bq": ("attention.self.query.bias", (D,)),
        "Wk": ("attention.self.key.weight", (D, D)), "bk": ("attention.self.key.bias", (D,)),
        "Wv": ("attention.self.value.weight", (D, D)), "bv": ("attention.self.value.bias", (D,)),
        "Wo": ("attention.output.dense.weight", (D, D)), "bo": ("attention.output.dense.bias", (D,)),
        "g1": ("attention.output.LayerNorm.weight", (D,)), "h1": ("attention.output.LayerNorm.bias", (D,)),
        "W1": ("intermediate.dense.weight", (F, D)), "b1": ("intermediate.dense.bias", (F,)),
        "W2": ("output.dense.weight", (D, F)), "b2": ("output.dense.bias", (D,)),
        "g2": ("output.LayerNorm.weight", (D,)), "h2": ("output.LayerNorm.bias", (D,)),
    }  # fmt: skip
    from attndyn.models.bert import ALBERT_NAMES, ALBERT_PREFIX

    if arch == "bert":
        for k in range(L):
            t |= {f"encoder.layer.{k}.{name}": w(*shape) for name, shape in names.values()}
    else:
        t |= {ALBERT_PREFIX + ALBERT_NAMES[key]: w(*shape) for key, (_, shape) in names.items()}
        t |= {"encoder.embedding_hidden_mapping_in.weight": w(D, e), "encoder.embedding_hidden_mapping_in.bias": w(D)}
    return t


def bert_config(arch: str) -> dict:
    c = {"model_type": arch, "hidden_size": D, "num_attention_heads": H, "num_hidden_layers": L, "intermediate_size": F, "vocab_size": V}
    c |= {"max_position_embeddings": CTX, "type_vocab_size": 2}
    return c | ({"embedding_size": 8} if arch == "albert" else {})


def word_tokenizer(path: Path, words=WORDS) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(path))


def write_folder(folder: Path, config: dict, tensors: dict, *, tokenizer: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    safetensors_numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(folder / "model.safetensors"))
    if tokenizer:
        word_tokenizer(folder / "tokenizer.json")
    return folder


def safetensors_bytes(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


# --- the table --------------------------------------------------------------------------------------
# (id, category, kind, change, expected words in the one line); kind: gguf, llama, gpt2, bert, albert.
# change(ctx) edits ctx.meta / ctx.config / ctx.tensors, or damages ctx.path after writing (ctx.after).


class Ctx:
    def __init__(self, kind: str, root: Path):
        self.kind, self.root = kind, root
        self.after = None
        self.argv_extra: list[str] = []
        if kind == "gguf":
            self.meta, self.tensors, self.types = llama_gguf_meta(), llama_gguf_tensors(), {}
        elif kind == "llama":
            self.config, self.tensors = dict(LLAMA_CONFIG), hf_llama_tensors()
        elif kind == "gpt2":
            self.config, self.tensors = dict(GPT2_CONFIG), gpt2_tensors()
        else:
            self.config, self.tensors = bert_config(kind), bert_tensors(kind)

    def build(self) -> Path:
        if self.kind == "gguf":
            meta = {k: v for k, v in self.meta.items() if v is not DELETE}
            tensors = {k: v for k, v in self.tensors.items() if v is not DELETE}
            self.path = write_gguf(self.root / "tiny.gguf", meta, tensors, self.types)
        else:
            config = {k: v for k, v in self.config.items() if v is not DELETE}
            tensors = {k: v for k, v in self.tensors.items() if v is not DELETE}
            self.path = write_folder(self.root / f"tiny-{self.kind}", config, tensors, tokenizer=True)
        if self.after is not None:
            self.after(self)
        return self.path


def meta(**changes):
    def change(c):
        for k, v in changes.items():
            c.meta[k.replace("__", ".")] = v

    return change


def config(**changes):
    def change(c):
        c.config.update(changes)

    return change


def tensor(name, value):
    def change(c):
        c.tensors[name] = value(c.tensors[name]) if callable(value) else value

    return change


def after(fn):
    def change(c):
        c.after = fn

    return change


def both(*changes):
    def change(c):
        for ch in changes:
            ch(c)

    return change


def _gguf_header(count_tensors: int | None = None, count_kv: int | None = None):
    def damage(c):
        data = bytearray(c.path.read_bytes())
        if count_tensors is not None:
            data[8:16] = struct.pack("<Q", count_tensors)
        if count_kv is not None:
            data[16:24] = struct.pack("<Q", count_kv)
        c.path.write_bytes(bytes(data))

    return damage


def _st(header_fn):
    """Replace the folder's model.safetensors by a hand-written one: header_fn(tensors) -> (header, data)."""

    def damage(c):
        header, data = header_fn(c.tensors)
        (c.path / "model.safetensors").write_bytes(safetensors_bytes(header, data))

    return damage


def _st_entries(tensors, *, dtype="F32", edit=None):
    """A valid header and data for ``tensors`` (float32), then ``edit(header)`` damages it."""
    header, data, off = {}, b"", 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        data, off = data + b, off + len(b)
    if edit is not None:
        edit(header)
    return header, data


def _overlap(h):
    names = list(h)
    h[names[1]]["data_offsets"] = [
        h[names[0]]["data_offsets"][0],
        h[names[0]]["data_offsets"][0] + (h[names[1]]["data_offsets"][1] - h[names[1]]["data_offsets"][0]),
    ]


def _past_eof(h):
    last = list(h)[-1]
    a, b = h[last]["data_offsets"]
    h[last]["data_offsets"] = [a + 4096, b + 4096]


def _huge_header(c):
    (c.path / "model.safetensors").write_bytes(struct.pack("<Q", 2**62) + b"{}")


def _second_shard(c):
    """A second shard that redefines a tensor (issue 38: the later one silently won)."""
    name = "model.layers.0.self_attn.q_proj.weight"
    safetensors_numpy.save_file({name: np.zeros((H * HD, D), np.float32)}, str(c.path / "model-2.safetensors"))


def _int64_weight(c):
    name = "model.layers.0.self_attn.q_proj.weight"
    t = dict(c.tensors)
    t[name] = np.arange(H * HD * D, dtype=np.int64).reshape(H * HD, D)
    safetensors_numpy.save_file(t, str(c.path / "model.safetensors"))


def _link_out(name):
    def damage(c):
        outside = c.root / f"outside-{name}"
        shutil.move(c.path / name, outside)
        (c.path / name).symlink_to(outside)

    return damage


def _garbage_tokenizer(c):
    (c.path / "tokenizer.json").write_text('{"model": {"type": "nonsense"}, "version": 7}')


def _big_tokenizer(c):
    word_tokenizer(c.path / "tokenizer.json", words=[f"w{k}" for k in range(V + 10)])


def _pickle_only(c):
    (c.path / "model.safetensors").unlink()
    (c.path / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")


def _long_prompts(n):
    def damage(c):
        (c.root / "prompts.txt").write_text(" ".join(WORDS[k % len(WORDS)] for k in range(n)))
        c.argv_extra = ["--prompts", str(c.root / "prompts.txt")]

    return damage


def _dev_zero_prompts(c):
    c.argv_extra = ["--prompts", "/dev/zero"]


def _zero_row(row: int = 0):
    def change(a):
        b = a.copy()
        b[row] = 0
        return b

    return change


def _pad_for_unknown(text: str, flag: str = "--prompts"):
    """Issue 51 item 7: a word-level tokenizer whose unknown token is the padding id 0 (whose embedding row
    the case zeroes), and a prompt (or BERT's text; None: the shipped prompts) of words it does not know."""

    def damage(c):
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from tokenizers.pre_tokenizers import Whitespace

        if c.kind != "bert":
            tok = Tokenizer(WordLevel({w: i for i, w in enumerate(["[PAD]", *WORDS])}, unk_token="[PAD]"))
            tok.pre_tokenizer = Whitespace()
            tok.save(str(c.path / "tokenizer.json"))
        if text is not None and flag == "--prompts":
            (c.root / "prompts.txt").write_text(text)
            c.argv_extra = ["--prompts", str(c.root / "prompts.txt")]
        elif text is not None:
            c.argv_extra = [flag, text]

    return damage


def _wrong(shape):
    return lambda a: np.zeros(shape, np.float32)


def _nan(a):
    b = a.copy()
    b.flat[3] = np.nan
    return b


Q0 = "blk.0.attn_q.weight"
CASES = [
    # GGUF metadata missing (today: "'GGUFReader' object has no attribute 'path'")
    ("gguf-block_count-missing", "gguf metadata", "gguf", meta(llama__block_count=DELETE), "llama.block_count"),
    ("gguf-embedding_length-missing", "gguf metadata", "gguf", meta(llama__embedding_length=DELETE), "llama.embedding_length"),
    ("gguf-rms_eps-missing", "gguf metadata", "gguf", meta(llama__attention__layer_norm_rms_epsilon=DELETE), "layer_norm_rms_epsilon"),
    # GGUF metadata wrong
    ("gguf-head_count-0", "gguf metadata", "gguf", meta(llama__attention__head_count=0), "head_count"),
    ("gguf-head_count-3", "gguf metadata", "gguf", meta(llama__attention__head_count=3), "head_count"),
    ("gguf-head_count-2^31", "gguf metadata", "gguf", meta(llama__attention__head_count=2**31), "head_count"),
    ("gguf-head_count-2.7", "gguf metadata", "gguf", meta(llama__attention__head_count=2.7), "head_count"),
    ("gguf-head_count-true", "gguf metadata", "gguf", meta(llama__attention__head_count=True), "head_count"),
    ("gguf-head_count-string", "gguf metadata", "gguf", meta(llama__attention__head_count="4"), "head_count"),
    ("gguf-block_count-1e9", "gguf metadata", "gguf", meta(llama__block_count=10**9), "block_count"),
    ("gguf-eps-nan", "gguf metadata", "gguf", meta(llama__attention__layer_norm_rms_epsilon=math.nan), "layer_norm_rms_epsilon"),
    ("gguf-eps-negative", "gguf metadata", "gguf", meta(llama__attention__layer_norm_rms_epsilon=-1e-5), "layer_norm_rms_epsilon"),
    ("gguf-freq_base-0", "gguf metadata", "gguf", meta(llama__rope__freq_base=0.0), "freq_base"),
    ("gguf-freq_base-inf", "gguf metadata (silent)", "gguf", meta(llama__rope__freq_base=math.inf), "freq_base"),
    ("gguf-context-0", "gguf metadata", "gguf", meta(llama__context_length=0), "context_length"),
    # GGUF tensors
    ("gguf-weights-nan", "gguf tensors", "gguf", tensor(Q0, _nan), Q0),
    ("gguf-q-wrong-shape", "gguf tensors", "gguf", tensor(Q0, _wrong((H * HD, D + 1))), Q0),
    ("gguf-ffn-wrong-shape", "gguf tensors", "gguf", tensor("blk.1.ffn_down.weight", _wrong((D, F + 2))), "blk.1.ffn_down.weight"),
    ("gguf-embed-wrong-width", "gguf tensors", "gguf", tensor("token_embd.weight", _wrong((V, D + 2))), "token_embd.weight"),
    ("gguf-output-head-10-rows", "gguf tensors (silent)", "gguf", tensor("output.weight", _wrong((10, D))), "output.weight"),
    ("gguf-tensor-missing", "gguf tensors", "gguf", tensor("blk.1.ffn_up.weight", DELETE), "blk.1.ffn_up.weight"),
    ("gguf-int32-tensor", "gguf tensors", "gguf", tensor("output_norm.weight", lambda a: np.ones(D, np.int32)), "output_norm.weight"),
    ("gguf-tensor-count-2^40", "gguf header", "gguf", after(_gguf_header(count_tensors=2**40)), "tensors"),
    ("gguf-kv-count-2^40", "gguf header", "gguf", after(_gguf_header(count_kv=2**40)), "metadata keys"),
    # GGUF tokenizer
    ("gguf-tokens-past-embedding", "tokenizer", "gguf", meta(tokenizer__ggml__tokens=GGUF_TOKENS + [f"x{k}" for k in range(8)]), "embedding"),
    ("gguf-integer-tokens", "tokenizer", "gguf", meta(tokenizer__ggml__tokens=list(range(V))), "tokenizer.ggml.tokens"),
    ("gguf-merge-malformed", "tokenizer", "gguf", meta(tokenizer__ggml__merges=["a b", "nospace"]), "tokenizer.ggml.merges"),
    ("gguf-merge-unknown", "tokenizer", "gguf", meta(tokenizer__ggml__merges=["a zz"]), "tokenizer.ggml.merges"),
    (
        "gguf-spm-scores-strings",
        "tokenizer",
        "gguf",
        meta(tokenizer__ggml__model="llama", tokenizer__ggml__scores=["1.0"] * len(GGUF_TOKENS), tokenizer__ggml__token_type=[1] * len(GGUF_TOKENS)),
        "tokenizer.ggml.scores",
    ),
    (
        "gguf-spm-types-short",
        "tokenizer",
        "gguf",
        meta(tokenizer__ggml__model="llama", tokenizer__ggml__scores=[0.0] * len(GGUF_TOKENS), tokenizer__ggml__token_type=[1, 1]),
        "tokenizer.ggml.token_type",
    ),
    # Hugging Face LLaMA configs
    ("llama-heads-missing", "hf config", "llama", config(num_attention_heads=DELETE), "num_attention_heads"),
    ("llama-heads-string", "hf config", "llama", config(num_attention_heads="4"), "num_attention_heads"),
    ("llama-heads-2.7", "hf config (silent)", "llama", config(num_attention_heads=2.7), "num_attention_heads"),
    ("llama-heads-true", "hf config (silent)", "llama", config(num_attention_heads=True), "num_attention_heads"),
    ("llama-heads-0", "hf config", "llama", config(num_attention_heads=0), "num_attention_heads"),
    ("llama-heads-10^4-d200", "allocation", "llama", config(num_attention_heads=10**4, hidden_size=200), "num_attention_heads"),
    ("llama-layers-1e9", "hf config", "llama", config(num_hidden_layers=1e9), "num_hidden_layers"),
    ("llama-eps-missing", "hf config", "llama", config(rms_norm_eps=DELETE), "rms_norm_eps"),
    ("llama-eps-string", "hf config", "llama", config(rms_norm_eps="1e-5"), "rms_norm_eps"),
    ("llama-rope-inf", "hf config (silent)", "llama", config(rope_theta=1e400), "rope_theta"),
    ("llama-rope-scaled", "hf config (silent)", "llama", config(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "rope_type"),
    ("llama-vocab-mismatch", "hf tensors", "llama", config(vocab_size=V + 1), "model.embed_tokens.weight"),
    ("llama-config-list", "hf config", "llama", after(lambda c: (c.path / "config.json").write_text("[1, 2]")), "config.json"),
    ("llama-head-wrong-shape", "hf tensors (silent)", "llama", tensor("lm_head.weight", _wrong((10, D))), "lm_head.weight"),
    ("llama-q-wrong-shape", "hf tensors", "llama", tensor("model.layers.1.self_attn.q_proj.weight", _wrong((H * HD + 1, D))), "q_proj"),
    ("llama-weights-nan", "hf tensors", "llama", tensor("model.norm.weight", _nan), "model.norm.weight"),
    ("llama-int64-weights", "hf tensors (silent)", "llama", after(_int64_weight), "int64"),
    ("llama-shard-redefines", "hf tensors (silent)", "llama", after(_second_shard), "defined again"),
    # damaged safetensors headers (today: SafetensorError passed through, or the wrong tensor read)
    ("st-huge-header", "safetensors header", "llama", after(_huge_header), "header length"),
    ("st-overlap", "safetensors header", "llama", after(_st(lambda t: _st_entries(t, edit=_overlap))), "overlap"),
    ("st-past-eof", "safetensors header", "llama", after(_st(lambda t: _st_entries(t, edit=_past_eof))), "past the end"),
    ("st-unknown-dtype", "safetensors header", "llama", after(_st(lambda t: _st_entries(t, dtype="F8_E9M9"))), "dtype"),
    ("st-bool-dtype", "safetensors header", "llama", after(_st(lambda t: _st_entries(t, dtype="BOOL"))), "BOOL"),
    # files of the folder
    ("llama-config-symlink-out", "folder links", "llama", after(_link_out("config.json")), "symlink"),
    ("llama-weights-symlink-out", "folder links", "llama", after(_link_out("model.safetensors")), "symlink"),
    ("llama-tokenizer-symlink-out", "folder links", "llama", after(_link_out("tokenizer.json")), "symlink"),
    ("llama-tokenizer-garbage", "tokenizer", "llama", after(_garbage_tokenizer), "tokenizer.json"),
    ("llama-tokenizer-past-embedding", "tokenizer", "llama", after(_big_tokenizer), "embedding"),
    ("llama-prompt-past-context", "allocation", "llama", both(config(max_position_embeddings=8), after(_long_prompts(40))), "context"),
    ("prompts-dev-zero", "allocation", "llama", after(_dev_zero_prompts), "/dev/zero"),
    # GPT-2
    ("gpt2-prompt-past-positions", "prompts", "gpt2", after(_long_prompts(40)), "context of 16"),
    # tokens whose input vector is zero: no direction, so no cosine (was exit 1, "SVD did not converge")
    (
        "llama-prompt-all-unknown-zero-pad-row",
        "prompts",
        "llama",
        both(tensor("model.embed_tokens.weight", _zero_row(0)), after(_pad_for_unknown("zzz qqq xxx yyy"))),
        "prompt 1 ('zzz qqq xxx yyy'...): 4 of its 4 tokens have a zero input vector in tiny-llama, the first token 0 '[PAD]' (id 0: its "
        "embedding row is all zeros)",
    ),
    (
        "llama-prompt-one-unknown-zero-pad-row",
        "prompts",
        "llama",
        both(tensor("model.embed_tokens.weight", _zero_row(0)), after(_pad_for_unknown("the cat zzz sat on a mat\n\nthe cat sat"))),
        "prompt 1 ('the cat zzz sat on a mat'...): 1 of its 7 tokens have a zero input vector in tiny-llama, the first token 2 '[PAD]'",
    ),
    (
        "llama-shipped-prompts-zero-pad-row",
        "prompts",
        "llama",
        both(tensor("model.embed_tokens.weight", _zero_row(0)), after(_pad_for_unknown(None))),
        "zero input vector in tiny-llama, the first token 0 '[PAD]' (id 0: its embedding row is all zeros), so their cosines and the "
        "effective rank are undefined; give prompts its tokenizer knows with --prompts",
    ),
    (
        "bert-text-zero-input-vectors",
        "prompts",
        "bert",
        both(
            tensor("embeddings.LayerNorm.weight", lambda a: np.zeros_like(a)),
            tensor("embeddings.LayerNorm.bias", lambda a: np.zeros_like(a)),
            after(_pad_for_unknown("zzz qqq xxx yyy", "--text")),
        ),
        "the text ('zzz qqq xxx yyy'...): 4 of its 4 tokens have a zero input vector in tiny-bert, the first token 0 '[UNK]'",
    ),
    ("gpt2-heads-string", "hf config", "gpt2", config(n_head="4"), "n_head"),
    ("gpt2-eps-negative", "hf config", "gpt2", config(layer_norm_epsilon=-1.0), "layer_norm_epsilon"),
    ("gpt2-wpe-wrong-width", "hf tensors", "gpt2", tensor("wpe.weight", _wrong((16, D + 1))), "wpe.weight"),
    # BERT / ALBERT
    ("bert-heads-missing", "bert config", "bert", config(num_attention_heads=DELETE), "num_attention_heads"),
    ("bert-heads-string", "bert config", "bert", config(num_attention_heads="4"), "num_attention_heads"),
    ("bert-heads-0", "bert config", "bert", config(num_attention_heads=0), "num_attention_heads"),
    ("bert-heads-2.7", "bert config (silent)", "bert", config(num_attention_heads=2.7), "num_attention_heads"),
    ("bert-eps-nan", "bert config", "bert", config(layer_norm_eps=math.nan), "layer_norm_eps"),
    ("bert-tokenizer-symlink-out", "folder links", "bert", after(_link_out("tokenizer.json")), "symlink"),
    ("bert-tokenizer-garbage", "tokenizer", "bert", after(_garbage_tokenizer), "tokenizer.json"),
    ("bert-pickle-only", "folder links", "bert", after(_pickle_only), "allow-pickle"),
    ("albert-layers-1e9", "allocation", "albert", config(num_hidden_layers=1e9), "num_hidden_layers"),
    ("albert-layers-10^9", "allocation", "albert", config(num_hidden_layers=10**9), "num_hidden_layers"),
    ("albert-st-huge-header", "safetensors header", "albert", after(_huge_header), "header length"),
]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize(("case", "category", "kind", "change", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_hostile_model_file_exits_2_with_one_line_naming_the_field(tmp_path, capsys, case, category, kind, change, expected):
    c = Ctx(kind, tmp_path)
    change(c)
    path = c.build()
    out = tmp_path / "out"
    quick = ["--twin-layers", "0", "--regime-layers", "0"] if kind in ("gguf", "llama") else []
    code = entry(["checkpoint", str(path), "--out", str(out), *quick, *c.argv_extra])
    refused_in_one_line(f"{case} ({category})", code, *capsys.readouterr(), expected, out)


@pytest.mark.parametrize("kind", ["gguf", "llama", "gpt2", "bert", "albert"])
def test_the_untouched_baselines_are_read(tmp_path, kind):
    """The null of the table: each kind's file without the change is read, so a refusal is the change's."""
    from attndyn.models.bert import load_checkpoint
    from attndyn.models.decoder_files import load_decoder

    path = Ctx(kind, tmp_path).build()
    if kind in ("bert", "albert"):
        assert len(load_checkpoint(path).layers) == L
    else:
        dec = load_decoder(path)
        assert (len(dec.layers), dec.heads, dec.d_model) == (L, H, D)


def test_the_table_covers_every_category():
    cats = {c[1].split(" (")[0] for c in CASES}
    assert {"gguf metadata", "gguf tensors", "gguf header", "tokenizer", "hf config", "hf tensors", "safetensors header"} <= cats
    assert {"folder links", "allocation", "prompts", "bert config"} <= cats
    assert len(CASES) >= 70


def test_a_zero_embedding_row_under_learned_positions_is_not_refused(tmp_path, capsys):
    """The null of the zero-input rows: GPT-2 adds its learned positions to the zero row of the padding
    token, so the input vectors have directions and the page is written (cosines finite)."""
    c = Ctx("gpt2", tmp_path)
    both(tensor("wte.weight", _zero_row(0)), after(_pad_for_unknown("zzz qqq xxx yyy")))(c)
    path = c.build()
    out = tmp_path / "out"
    assert entry(["checkpoint", str(path), "--out", str(out), *c.argv_extra]) == 0, capsys.readouterr().err
    rows = json.loads((out / "decoder.json").read_text())["per_layer"]
    assert all(math.isfinite(r["mean_cosine"]) for r in rows)


def test_a_refused_prompt_leaves_the_previous_page_as_it_was(tmp_path, capsys):
    """The prompts are checked before the output folder is claimed and cleared: a page written with prompts
    the tokenizer knows stays, byte for byte, when the next run is refused for a zero input vector."""
    c = Ctx("llama", tmp_path)
    both(tensor("model.embed_tokens.weight", _zero_row(0)), after(_pad_for_unknown("the cat sat on a mat\n\nbirds in an old garden")))(c)
    path = c.build()
    out, quick = tmp_path / "out", ["--twin-layers", "0", "--regime-layers", "0"]
    assert entry(["checkpoint", str(path), "--out", str(out), *quick, *c.argv_extra]) == 0, capsys.readouterr().err
    before = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()}
    (tmp_path / "unknown.txt").write_text("zzz qqq xxx yyy")
    capsys.readouterr()
    assert entry(["checkpoint", str(path), "--out", str(out), *quick, "--prompts", str(tmp_path / "unknown.txt")]) == 2
    assert "zero input vector" in capsys.readouterr().err
    assert {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()} == before
    assert not (out / ".previous").exists()


def test_a_prompt_too_large_for_the_memory_is_refused_before_the_forward_pass(tmp_path, monkeypatch):
    from attndyn.core import reading
    from attndyn.models import decoder as decoder_module
    from attndyn.models.decoder_files import load_decoder

    dec = load_decoder(Ctx("llama", tmp_path).build())
    monkeypatch.setattr(reading, "available_memory", lambda: 10_000)
    with pytest.raises(decoder_module.PromptError, match="GiB"):
        decoder_module.forward(dec, [1, 2, 3, 4, 5, 6, 7, 8])
    monkeypatch.setattr(reading, "available_memory", lambda: 10**9)
    assert decoder_module.forward(dec, [1, 2, 3]).logits.shape == (3, V)


# --- names and token strings in pages and figures ----------------------------------------------------

HOSTILE = ["<script>alert(1)</script>", 'say"hi"', "</td>", "two\nlines", "\u202eevil", "a'b"]


def test_hostile_token_strings_are_shown_escaped(tmp_path, capsys):
    """A BERT folder whose tokenizer turns plain words into tokens that are markup, quotes, a newline and a
    right-to-left override: the page shows them escaped (no raw markup, no control or bidirectional characters)."""
    from tokenizers import AddedToken, Tokenizer, normalizers

    path = Ctx("bert", tmp_path).build()
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.normalizer = normalizers.Sequence([normalizers.Replace(f"w{k}", h) for k, h in enumerate(HOSTILE)])
    tok.add_tokens([AddedToken(h, normalized=True) for h in HOSTILE])
    tok.save(str(path / "tokenizer.json"))
    text = " ".join(f"w{k}" for k in range(len(HOSTILE)))  # the user's text is plain; the tokens come from the file
    assert tok.encode(text).tokens[: len(HOSTILE)] == HOSTILE or set(HOSTILE) <= set(tok.encode(text).tokens)
    out = tmp_path / "page"
    assert entry(["checkpoint", str(path), "--text", text, "--out", str(out)]) == 0, capsys.readouterr().err
    page = (out / "index.html").read_text()
    tokens = json.loads((out / "checkpoint.json").read_text())["tokens"]
    assert "\u202e" not in page
    assert "\u202e" not in "".join(tokens)
    assert not any("\n" in t for t in tokens)
    assert "<script>alert" not in page
    assert "\\u202eevil" in tokens  # shown as an escape, not dropped
    assert "<script>alert(1)</script>" in tokens  # html-escaped by the page, kept in the record


def test_a_model_name_with_tex_is_drawn_literally(tmp_path, capsys, one_worker):
    """A GGUF general.name that matplotlib's mathtext cannot parse, with a newline and an RTL override:
    the page is written (exit 0), the name shown as text."""
    c = Ctx("llama", tmp_path)
    path = c.build()
    named = path.with_name("$\\frac{$ tiny\u202e")
    path.rename(named)
    (tmp_path / "p.txt").write_text(" ".join(WORDS[:10]) + "\n\n" + " ".join(WORDS[5:]))
    out = tmp_path / "page"
    code = entry(["checkpoint", str(named), "--prompts", str(tmp_path / "p.txt"), "--twin-layers", "0", "--regime-layers", "0", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    page = (out / "index.html").read_text()
    assert "\u202e" not in page
    assert "$\\frac{$ tiny" in page
    assert (out / "figures" / "ranks.png").is_file()


# --- bfloat16 and float16 folders -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_llama_folder_equals_transformers(tmp_path, dtype):
    """A LLaMA folder stored in bfloat16 (as most published checkpoints ship) or float16 is read, widened
    exactly, and computed in float64: every layer and the logits equal transformers' run of the same
    rounded weights (in float64 to 1e-10 with its float32 RoPE and norms made float64, and in float32 to 1e-4)."""
    transformers = pytest.importorskip("transformers")
    from attndyn.models.decoder import forward
    from attndyn.models.decoder_files import read_hf_llama
    from tests.models.test_decoders import IDS, assert_matches, float64_reference, reference, tiny_llama

    model, folder = tiny_llama(tmp_path, heads=4, kv_heads=2)
    shutil.rmtree(folder)
    model.to(dtype).save_pretrained(folder, safe_serialization=True)
    header = json.loads(
        (folder / "model.safetensors").read_bytes()[8 : 8 + int.from_bytes((folder / "model.safetensors").read_bytes()[:8], "little")]
    )
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16" if dtype == torch.bfloat16 else "F16"}
    dec = read_hf_llama(folder)
    ours = forward(dec, IDS, dtype=torch.float64)
    theirs = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    assert_matches(forward(dec, IDS, dtype=torch.float32), reference(theirs, IDS), 1e-4)
    assert_matches(ours, reference(float64_reference(theirs.double()), IDS), 1e-10)
