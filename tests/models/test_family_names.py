"""models/ decides nothing by a family's name (issue 48 item 2): what differs between families is a trait of the
family's row (:mod:`attndyn.models.families`), read by the readers. This test reads the source of every module
of ``attndyn.models`` and fails on a comparison or membership test of a family's name: ``fam.name == ...``,
``arch == ...``, ``meta["arch"] == ...``, ``decoder.arch in (...)``, or any value compared with a family name,
``model_type`` or GGUF architecture string. The registry's own lookups (``t in f.model_types``,
``a in f.gguf_archs``) are how a name finds its row, not a decision by it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import attndyn.models
from attndyn.models.families import FAMILIES

MODELS = Path(attndyn.models.__file__).parent
# every spelling of a family: its row's name, Hugging Face model_type values and GGUF architectures
WORDS = frozenset({f.name for f in FAMILIES.values()} | {t for f in FAMILIES.values() for t in (*f.model_types, *f.gguf_archs)})
NAME_ATTRS = ("name",)  # on a row (fam, family, row)
ROW_NAMES = ("fam", "family", "row")
LOOKUPS = ("model_types", "gguf_archs")

# (module, the compared expression): why it is not a decision by a family's name
EXCEPTIONS = {
    ("tokenizers.py", "model"): "GGUF's tokenizer.ggml.model names the tokenizer's kind (llama.cpp's words 'gpt2' for "
    "byte-level BPE, 'llama' for SentencePiece), whatever the family of the model",
    ("tokenizers.py", "rule"): "the pre-tokenizer split rule named by tokenizer.ggml.pre ('gpt2' is GPT-2's regex), a tokenizer kind, not a family",
}


def _names_a_family(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "arch":
        return True
    if isinstance(node, ast.Attribute) and node.attr in NAME_ATTRS and isinstance(node.value, ast.Name) and node.value.id in ROW_NAMES:
        return True
    if isinstance(node, ast.Name) and node.id in ("arch", "model_type"):
        return True
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "arch":
        return True
    if isinstance(node, ast.Call):  # str(arch).lower(), arch.lower()
        inner = [node.func.value] if isinstance(node.func, ast.Attribute) else []
        return any(_names_a_family(a) for a in [*inner, *node.args])
    return False


def _is_a_family_word(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in WORDS
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_a_family_word(e) for e in node.elts)
    return False


def name_tests(source: str) -> list[tuple[int, str, str]]:
    """``(line, the compared expression, the comparison)`` of every test of a family's name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not all(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
            continue
        sides = [node.left, *node.comparators]
        if any(isinstance(s, ast.Attribute) and s.attr in LOOKUPS for s in sides):
            continue  # the registry's lookup of a row by one of its names
        if any(_names_a_family(s) for s in sides) or any(_is_a_family_word(s) for s in sides):
            other = [s for s in sides if not _is_a_family_word(s)] or sides
            found.append((node.lineno, ast.unparse(other[0]), ast.unparse(node)))
    return found


def all_name_tests() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted(MODELS.glob("*.py")):
        for line, subject, text in name_tests(path.read_text()):
            out.setdefault((path.name, subject), []).append(f"{path.name}:{line}: {text}")
    return out


def test_no_reader_compares_a_family_s_name():
    found = all_name_tests()
    bad = [hit for key, hits in found.items() if key not in EXCEPTIONS for hit in hits]
    assert not bad, "decisions by a family's name (make them a trait of the row):\n" + "\n".join(bad)


def test_every_exception_is_still_needed_and_says_why():
    found = all_name_tests()
    stale = [key for key in EXCEPTIONS if key not in found]
    assert not stale, f"exceptions no longer needed: {stale}"
    assert all(len(why) > 40 for why in EXCEPTIONS.values())


def test_the_scan_sees_every_form_of_a_name_test():
    source = "\n".join(
        [
            'if fam.name == "gemma2": pass',
            'if meta["arch"] != "llama": pass',
            'if arch in ("qwen2", "qwen3"): pass',
            "if decoder.arch == x: pass",
            "if str(model_type).lower() == y: pass",
            'if kind == "gpt_neox": pass',
            'if "phi3" in names: pass',
        ]
    )
    assert [line for line, _, _ in name_tests(source)] == [1, 2, 3, 4, 5, 6, 7]
    clean = "\n".join(["if t in f.model_types: pass", "if a in f.gguf_archs: pass", 'if fam.norm == "layer": pass', 'if f.name in ("W_q",): pass'])
    assert name_tests(clean) == []
