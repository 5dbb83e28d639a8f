"""Tokenizers of trained decoders: rebuilt from a GGUF file's metadata, or read from a folder's ``tokenizer.json``.

Moved here from :mod:`attndyn.models.decoder_files`, which imports them (nothing here imports it back). The GGUF readers take the file's
``gguf.GGUFReader`` and check every list before it is used; every refusal is a
:class:`~attndyn.models.file_checks.ModelFileError` naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attndyn.models import file_checks as fc
from attndyn.models.file_checks import ModelFileError

if TYPE_CHECKING:
    import gguf


def check_tokenizer(tokenizer: object, vocab: int, where: str) -> None:
    """A tokenizer whose ids all index the embedding (``vocab`` rows)."""
    if tokenizer is None:
        return
    n = int(tokenizer.get_vocab_size(with_added_tokens=True))
    if n > vocab:
        raise ModelFileError(f"{where}: the tokenizer has {n} tokens but the embedding only {vocab} rows; ids past it would be read")


def _strings(value, path: Path, key: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise ModelFileError(f"{path}: {key} is not a non-empty list of strings")
    return value


def _numbers(value, path: Path, key: str, n: int, *, integer: bool = False) -> np.ndarray:
    ok = isinstance(value, list) and len(value) == n
    ok = ok and all(fc.is_int(x) if integer else isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    if not ok:
        raise ModelFileError(f"{path}: {key} is not a list of {n} {'integers' if integer else 'numbers'} (one per token)")
    a = np.asarray(value, dtype=np.int64 if integer else np.float64)
    if not np.isfinite(a).all():
        raise ModelFileError(f"{path}: {key} holds non-finite values")
    return a


# The split rules (pre-tokenizers) of byte-level BPE vocabularies, by the GGUF ``tokenizer.ggml.pre`` value.
# Each regex is the one the vocabulary's merges were learned with (the model's published tokenizer.json and
# llama.cpp's table agree on them); letters and digits are Unicode classes.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (  # as llama-bpe, but one digit per piece
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BPE_SPLITS = {"gpt2": "gpt2", "smollm": "gpt2+digits", "llama-bpe": LLAMA3_SPLIT, "llama3": LLAMA3_SPLIT, "qwen2": QWEN2_SPLIT}
SPM_PRE = ("default",)  # SentencePiece vocabularies (Gemma): no split rule, spaces are pieces
CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types
TOKENIZER_CACHE = "tokenizer2"  # the cached tokenizer's name: 2 = split by tokenizer.ggml.pre, control tokens special


def pre_tokenizer_name(reader: gguf.GGUFReader, path: Path, model: str) -> str:
    """The file's ``tokenizer.ggml.pre`` (absent: ``gpt2`` for byte-level BPE, ``default`` for SentencePiece);
    ModelFileError naming a value this module has no split rule for."""
    pre = fc.gguf_values(reader, path, ["tokenizer.ggml.pre"]).get("tokenizer.ggml.pre")
    if pre is None:
        return "gpt2" if model == "gpt2" else "default"
    known = BPE_SPLITS if model == "gpt2" else SPM_PRE
    if not isinstance(pre, str) or pre not in known:
        raise ModelFileError(
            f"{path}: tokenizer.ggml.pre = {str(pre)[:40]!r} has no split rule here (known for tokenizer.ggml.model {model!r}: {', '.join(known)})"
        )
    return pre


def _gguf_tokenizer(reader, path: Path):
    """The tokenizer of a GGUF file: byte-level BPE (``gpt2`` model, split by the file's ``tokenizer.ggml.pre``)
    or SentencePiece (``llama`` model, rebuilt by :func:`_spm_tokenizer`); None for other tokenizer models. Every
    list is checked (tokens strings, merges pairs of tokens, scores numbers, types integers) before it is used."""
    model = fc.gguf_values(reader, path, ["tokenizer.ggml.model"]).get("tokenizer.ggml.model")
    if model not in ("llama", "gpt2"):
        return None
    pre = pre_tokenizer_name(reader, path, model)
    try:
        if model == "llama":
            return _spm_tokenizer(reader, path)
        return _bpe_tokenizer(reader, path, pre)
    except ModelFileError:
        raise
    except Exception as err:  # the tokenizers library refusing what passed the checks
        why = " ".join(str(err).split())[:120]
        raise ModelFileError(f"{path}: the tokenizer cannot be built from its metadata ({type(err).__name__}: {why})") from None


def _bpe_tokenizer(reader, path: Path, pre: str = "gpt2"):
    """Byte-level BPE from the vocabulary and merges, split by the rule of ``pre`` (:data:`BPE_SPLITS`); the
    control tokens (chat markers such as ``<|im_start|>``) special and the user-defined ones added, both matched
    whole in the raw text. A control token spelled outside the byte alphabet cannot be one of the vocabulary's
    byte strings and is left out, as ``transformers`` does."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens = _strings(fc.gguf_field(reader, path, "tokenizer.ggml.tokens"), path, "tokenizer.ggml.tokens")
    merges = fc.gguf_field(reader, path, "tokenizer.ggml.merges")
    if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
        raise ModelFileError(f"{path}: tokenizer.ggml.merges is not a list of strings")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = []
    for k, m in enumerate(merges):
        pair = tuple(m.split(" ", 1))
        if len(pair) != 2 or pair[0] not in vocab or pair[1] not in vocab or pair[0] + pair[1] not in vocab:
            raise ModelFileError(f"{path}: tokenizer.ggml.merges[{k}] = {m[:40]!r} is not two tokens of the vocabulary whose join is one")
        pairs.append(pair)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    rule = BPE_SPLITS[pre]
    if rule == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif rule == "gpt2+digits":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
    else:
        split = pre_tokenizers.Split(Regex(rule), behavior="isolated")
        tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    types = fc.gguf_field(reader, path, "tokenizer.ggml.token_type", [])
    if types:
        types = _numbers(types, path, "tokenizer.ggml.token_type", len(tokens), integer=True)
        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        control = [tokens[i] for i in np.flatnonzero(types == CONTROL) if set(tokens[i]) <= alphabet]
        tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
        tok.add_tokens([AddedToken(tokens[i], normalized=False, special=False) for i in np.flatnonzero(types == USER_DEFINED)])
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

    tokens = _strings(fc.gguf_field(reader, path, "tokenizer.ggml.tokens"), path, "tokenizer.ggml.tokens")
    scores = _numbers(fc.gguf_field(reader, path, "tokenizer.ggml.scores"), path, "tokenizer.ggml.scores", len(tokens))
    types = _numbers(fc.gguf_field(reader, path, "tokenizer.ggml.token_type"), path, "tokenizer.ggml.token_type", len(tokens), integer=True)
    prefix = fc.gguf_field(reader, path, "tokenizer.ggml.add_space_prefix", False)
    if not isinstance(prefix, bool):
        raise ModelFileError(f"{path}: tokenizer.ggml.add_space_prefix = {prefix!r} is not true or false")
    if prefix:
        raise ModelFileError(f"{path}: SentencePiece vocabularies with a prefix space are not supported yet")
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
    unk_key = "tokenizer.ggml.unknown_token_id"
    unk = fc.as_int(fc.gguf_field(reader, path, unk_key, 0), str(path), unk_key, 0, len(tokens) - 1)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for _, _, a, b in merges], byte_fallback=True, fuse_unk=True, unk_token=tokens[unk]))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_tokens([AddedToken(tokens[i], normalized=False, special=False) for i in np.flatnonzero(types == SPM_USER_DEFINED)])
    tok.add_special_tokens([AddedToken(tokens[i], normalized=False, special=True) for i in np.flatnonzero(types == SPM_CONTROL)])
    return tok


def _folder_tokenizer(folder: Path):
    """``tokenizer.json`` of the folder (a regular file inside it), or None."""
    path = folder / "tokenizer.json"
    if not path.exists() and not path.is_symlink():
        return None
    fc.model_file(folder, "tokenizer.json")
    size = path.stat().st_size
    if size > fc.MAX_TOKENIZER_BYTES:
        raise ModelFileError(f"{path} has {size} bytes, more than {fc.MAX_TOKENIZER_BYTES >> 20} MiB")
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on a malformed file
        raise ModelFileError(f"{path} is not a readable tokenizer ({' '.join(str(err).split())[:120]})") from None
