"""GGUF tokenizers split by the file's own pre-tokenizer (``tokenizer.ggml.pre``), against ``transformers``.

Oracle: ``transformers``' own GGUF tokenizer load (``get_gguf_tokenizer`` + ``convert_gguf_tokenizer``, the path
``from_pretrained(..., gguf_file=)`` takes), an independent rebuild from the same metadata, must give the same
ids on every string of :func:`oracle_strings` (>= 200: digits, code with indentation and newlines, CJK, emoji,
mixed scripts, leading spaces, ChatML). The real files: SmolLM2 (``smollm``), Qwen2.5-Coder-0.5B (``qwen2``),
Gemma-3 (SentencePiece, ``default``); ``gpt2`` and ``llama-bpe``: Qwen's vocabulary and merges written into a
metadata-only GGUF with that ``pre`` value (the split rule is what is tested; the merges are Qwen's).
"""

from __future__ import annotations

import itertools
import random
import warnings

import pytest

from attndyn.models.file_checks import ModelFileError

pytestmark = [pytest.mark.checkpoint, pytest.mark.slow, pytest.mark.filterwarnings("ignore")]

BASE = [
    "The quick brown fox jumps over the lazy dog.",
    "1234567890 and 3.14159, 1,000,000 or 0x1F; 2026-12-04 12:30:45",
    "def f(x):\n    return x + 1\n\n\nclass A:\n\tdef g(self):\n\t\treturn [i ** 2 for i in range(10)]\n",
    'if (a && b) {\n        printf("%d\\n", a);\n    }\n',
    "    indented four\n        eight\n\n  two\r\nwindows line\r\n",
    "中文的句子，包含标点。日本語の文章です。한국어 문장입니다.",
    "emoji 😀👍🏽🇫🇷 and 👨‍👩‍👧 family ✨",
    "Mixed: naïve café Ωμέγα Привет мир مرحبا שלום हिन्दी",
    "   three leading spaces",
    " one leading space",
    "\ttab first",
    "\n\nnewlines first",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|fim_prefix|>def <|fim_suffix|>\n<|fim_middle|>",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "don't I'LL we've they'RE it's",
    "a  b   c    d     e",
    "trailing spaces   ",
    "URL https://example.com/path?q=1&r=2#frag and email a.b@c.org",
    "$$\\frac{a}{b}$$ ∑_{i=1}^{n} x_i² ≤ ∞",
    "snake_case camelCase PascalCase SCREAMING_CASE kebab-case",
    "!!!???...,,,;;;:::'''\"\"\"",
    "",
]


def oracle_strings() -> list[str]:
    """>= 200 deterministic strings: each base string, with leading spaces / newlines, and seeded mixtures."""
    out = list(BASE)
    for s, lead in itertools.product(BASE[:12], [" ", "  ", "\n", "\t "]):
        out.append(lead + s)
    rng = random.Random(49)
    pieces = [w for s in BASE for w in s.replace("\n", " \n ").split(" ") if w] + ["\n", "    ", "\t", "123", "٣٤٥", "①②"]
    for _ in range(160):
        out.append(rng.choice(["", " ", "  "]).join(rng.choice(pieces) for _ in range(rng.randint(1, 12))))
    return out


def _ours(path):
    import gguf

    from attndyn.models.tokenizers import _gguf_tokenizer

    return _gguf_tokenizer(gguf.GGUFReader(str(path)), path)


def _theirs(path):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arch, tok_dict, _ = get_gguf_tokenizer(str(path))
        return convert_gguf_tokenizer(arch, tok_dict)[0]


def _compare(path, *, published_smollm_rule: bool = False, strings=None) -> tuple[int, list]:
    ours, theirs = _ours(path), _theirs(path)
    if published_smollm_rule:  # SmolLM2's own tokenizer.json: digits one by one, then GPT-2's byte-level split
        from tokenizers import pre_tokenizers

        theirs.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
    strings = oracle_strings() if strings is None else strings
    bad = [(s, a, b) for s in strings if (a := ours.encode(s, add_special_tokens=False).ids) != (b := theirs.encode(s, add_special_tokens=False).ids)]
    return len(strings), bad


def _path(name):
    if name == "smollm2":
        from attndyn.models.decoder_files import smollm2_available, smollm2_path

        ok, why = smollm2_available()
        return smollm2_path() if ok else pytest.skip(why)
    if name == "gemma3":
        from attndyn.models.decoder_files import gemma3_available, gemma3_path

        ok, why = gemma3_available()
        return gemma3_path() if ok else pytest.skip(why)
    from attndyn.models import named

    ok, why = named.available(name)
    return named.named_path(name) if ok else pytest.skip(why)


@pytest.fixture(scope="module")
def qwen_vocab(tmp_path_factory):
    """Qwen2.5's vocabulary, merges and token types written into metadata-only GGUFs with another ``pre`` value."""
    import gguf

    src = gguf.GGUFReader(str(_path("qwen2.5-0.5b")))
    values = {k: src.fields[k].contents() for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")}
    files = {}
    for pre in ("gpt2", "llama-bpe", "qwen2"):
        path = tmp_path_factory.mktemp("vocab") / f"{pre}.gguf"
        w = gguf.GGUFWriter(str(path), "qwen2")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(values["tokenizer.ggml.tokens"])
        w.add_token_merges(values["tokenizer.ggml.merges"])
        w.add_token_types(values["tokenizer.ggml.token_type"])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        files[pre] = path
    return files


@pytest.mark.parametrize("name", ["smollm2", "qwen2.5-0.5b", "gemma3"])
def test_ids_equal_transformers_on_the_real_files(name):
    """SmolLM2: transformers' GGUF load has no rule for ``smollm`` and falls back to GPT-2's, so its pre-tokenizer
    is set to the one SmolLM2's own tokenizer.json (and llama.cpp's ``smollm`` entry) uses; vocabulary, merges and
    special tokens stay transformers' own."""
    n, bad = _compare(_path(name), published_smollm_rule=name == "smollm2")
    assert n >= 200
    assert not bad, f"{len(bad)} of {n} strings differ, first: {bad[0]!r}"


@pytest.mark.parametrize("pre", ["gpt2", "llama-bpe"])
def test_ids_equal_transformers_by_split_rule(qwen_vocab, pre):
    n, bad = _compare(qwen_vocab[pre])
    assert n >= 200
    assert not bad, f"{len(bad)} of {n} strings differ, first: {bad[0]!r}"


def test_smollm_differs_from_transformers_gguf_fallback_only_on_digits():
    """transformers' own smollm fallback (GPT-2's rule) differs from SmolLM2's rule only where digits are."""
    n, bad = _compare(_path("smollm2"))
    assert bad, "the digit rule should show on the oracle's digit strings"
    assert all(any(c.isdigit() for c in s) for s, _, _ in bad)
    digit_free = [s for s in oracle_strings() if not any(c.isdigit() for c in s)]
    assert _compare(_path("smollm2"), strings=digit_free)[1] == []


def test_the_split_rules_differ_where_they_should(qwen_vocab):
    """The three rules on one vocabulary: Qwen2 splits digits one by one, llama-bpe in threes, GPT-2 not at all."""
    toks = {pre: _ours(path) for pre, path in qwen_vocab.items()}
    pieces = {pre: [p for p, _ in t.pre_tokenizer.pre_tokenize_str("x 1234567")] for pre, t in toks.items()}
    assert pieces["qwen2"][-7:] == list("1234567")
    assert pieces["llama-bpe"][-3:] == ["123", "456", "7"]
    assert pieces["gpt2"][-1] == "Ġ1234567"


def test_chatml_markers_are_single_special_tokens():
    tok = _ours(_path("qwen2.5-0.5b"))
    enc = tok.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)
    assert enc.tokens[0] == "<|im_start|>"
    assert enc.tokens[-1] == "<|im_end|>"
    assert enc.ids[0] == tok.token_to_id("<|im_start|>")


def test_an_unknown_pre_tokenizer_is_refused_by_name(tmp_path):
    import gguf

    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("made-up-pre")
    w.add_token_list(["a", "b", "ab"])
    w.add_token_merges(["a b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelFileError, match="tokenizer.ggml.pre = 'made-up-pre' has no split rule"):
        _ours(path)
