"""The documentation's examples run (issue 35): every fenced Python block of README.md and docs/, and
every shell line that calls ``attndyn``.

* Python blocks of one page run in order in one namespace, in a temporary working folder, as a
  reader pasting them would. A page whose blocks continue another page's says so with
  ``<!-- continues: docs/getting-started.md -->`` (that page's blocks run first, in the same
  namespace).
* A shell line starting with ``attndyn`` (or ``.venv/bin/attndyn``) runs as ``attndyn COMMAND
  --help`` (``--version`` as it is): the command exists, and every ``--option`` the line uses is one
  its help lists.
* The comment line just before a block may say ``<!-- no-run: reason -->`` (the block is not run;
  the reason is required) or ``<!-- needs: module -->`` (the block runs when ``module`` can be
  imported: an optional extra or model package, skipped otherwise).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
MARKER = re.compile(r"^<!--\s*(no-run|needs|continues):\s*(.*?)\s*-->\s*$")
SHELL = ("", "bash", "sh", "shell", "console")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    markers: dict[str, str]

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, with the markers of the comment lines just before each."""
    lines = page.read_text().splitlines()
    out, k = [], 0
    while k < len(lines):
        m = FENCE.match(lines[k].strip())
        if not m:
            k += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), k
        body = []
        k += 1
        while k < len(lines) and not lines[k].strip().startswith(fence):
            body.append(lines[k])
            k += 1
        markers, j = {}, start - 1
        while j >= 0 and (lines[j].strip() == "" or MARKER.match(lines[j].strip())):
            if lines[j].strip():
                kind, value = MARKER.match(lines[j].strip()).groups()
                markers[kind] = value
            j -= 1
        out.append(Block(page, start + 1, lang, "\n".join(body), markers))
        k += 1
    return out


def page_markers(page: Path) -> dict[str, str]:
    """Markers that stand alone on a page (``continues``), wherever they are."""
    found = {}
    for line in page.read_text().splitlines():
        m = MARKER.match(line.strip())
        if m and m.group(1) == "continues":
            found["continues"] = m.group(2)
    return found


def skipped(block: Block) -> str | None:
    """Why a block does not run here (None: it runs)."""
    import importlib.util

    if "no-run" in block.markers:
        assert block.markers["no-run"], f"{block.where}: a no-run marker needs a reason"
        return f"no-run: {block.markers['no-run']}"
    needs = block.markers.get("needs")
    if needs and importlib.util.find_spec(needs) is None:
        return f"needs {needs}, which is not installed"
    return None


PYTHON_PAGES = [p for p in PAGES if any(b.lang in ("python", "py") for b in blocks(p))]
SHELL_LINES = [
    (b, line.strip())
    for p in PAGES
    for b in blocks(p)
    if b.lang in SHELL
    for line in b.code.splitlines()
    if re.match(r"^(\.venv/bin/)?attndyn(\s|$)", line.strip())
]


def run_page(page: Path, namespace: dict) -> None:
    follows = page_markers(page).get("continues")
    if follows:
        run_page(ROOT / follows, namespace)
    for block in blocks(page):
        if block.lang not in ("python", "py"):
            continue
        why = skipped(block)
        if why:
            if "needs" in block.markers:
                pytest.skip(f"{block.where}: {why}")
            continue
        code = compile(block.code, block.where, "exec")
        with contextlib.redirect_stdout(io.StringIO()):
            exec(code, namespace)


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[str(p.relative_to(ROOT)) for p in PYTHON_PAGES])
def test_python_blocks_run_in_order(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNDYN_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    run_page(page, {"__name__": "__docs__"})


def command_path(argv: list[str]) -> list[str]:
    """The command (and subcommand) words of an ``attndyn`` argument list."""
    import typer.main

    from attndyn.app.cli import app

    group = typer.main.get_command(app)
    path = []
    for word in argv:
        commands = getattr(group, "commands", None)
        if not commands or word not in commands:
            break
        path.append(word)
        group = commands[word]
    return path


@pytest.mark.parametrize(("block", "line"), SHELL_LINES, ids=[f"{b.where}:{line.split('#')[0].strip()}" for b, line in SHELL_LINES])
def test_shell_lines_name_commands_and_options_that_exist(block, line, capsys):
    from attndyn.app.cli import entry

    why = skipped(block)
    if why:
        pytest.skip(f"{block.where}: {why}")
    argv = shlex.split(line, comments=True)[1:]
    if argv == ["--version"]:
        assert entry(argv) == 0
        assert capsys.readouterr().out.startswith("attndyn ")
        return
    path = command_path(argv)
    assert path, f"{block.where}: {line!r} names no attndyn command"
    capsys.readouterr()
    assert entry([*path, "--help"]) == 0, f"{block.where}: `attndyn {' '.join(path)} --help` failed"
    help_text = capsys.readouterr().out
    for option in (a.partition("=")[0] for a in argv if a.startswith("--")):
        assert option in help_text, f"{block.where}: {line!r} uses {option}, which `attndyn {' '.join(path)} --help` does not list"


def test_the_reader_finds_the_blocks_and_markers(tmp_path):
    """The block reader itself: fences, languages, markers before a block, and a no-run without a reason."""
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- no-run: downloads a model -->\n```python\nraise SystemExit\n```\n\n"
        "<!-- needs: no_such_module_x -->\n```python\nimport no_such_module_x\n```\n\n```\nattndyn list --bogus\n```\n"
    )
    found = blocks(page)
    assert [(b.lang, b.markers) for b in found] == [
        ("python", {"no-run": "downloads a model"}),
        ("python", {"needs": "no_such_module_x"}),
        ("", {}),
    ]
    assert skipped(found[0]).startswith("no-run")
    assert skipped(found[1]).startswith("needs")
    assert skipped(found[2]) is None
    assert command_path(["judge", "x"]) == ["judge"]
    assert command_path(["nope"]) == []


def test_a_failing_block_and_an_unknown_option_are_caught(tmp_path, monkeypatch, capsys):
    """Sensitivity: a Python block that raises fails its page, and a line with an option that its
    command does not have fails its check."""
    page = tmp_path / "bad.md"
    page.write_text("```python\nfrom attndyn import checkpoints as ck\n```\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ImportError):
        run_page(page, {})
    bad = Block(page, 1, "", "attndyn list --colour red", {})
    with pytest.raises(AssertionError, match="--colour"):
        test_shell_lines_name_commands_and_options_that_exist(bad, bad.code, capsys)


def test_every_page_with_examples_is_found():
    names = {str(p.relative_to(ROOT)) for p in PYTHON_PAGES}
    assert {"README.md", "docs/getting-started.md", "docs/guide/engine.md", "docs/guide/trained-models.md"} <= names
    assert len(SHELL_LINES) >= 20


def test_pages_write_the_command_one_way_and_say_how_to_activate():
    # one form everywhere: `attndyn ...` in the activated environment, which README and getting-started say how to enter
    for page in PAGES:
        for number, text in enumerate(page.read_text().splitlines(), 1):
            assert ".venv/bin/attndyn " not in text or "activat" in text, f"{page.relative_to(ROOT)}:{number} writes .venv/bin/attndyn"
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        assert "source .venv/bin/activate" in page.read_text(), page


def test_make_demo_ends_by_saying_how_to_activate_and_make_check_is_documented():
    import subprocess

    # make's dry run prints the recipes as they would run: the demo's last line is the activation hint
    # (under a parent make, as in CI's `make test`, make adds its own "make[1]: Entering/Leaving directory" lines)
    demo = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    recipe = [line for line in demo.strip().splitlines() if not line.startswith("make[")]
    assert "source .venv/bin/activate" in recipe[-1]
    check = subprocess.run(["make", "-n", "check"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "pytest" in check
    assert "not slow" in check
    assert "make check" in (ROOT / "README.md").read_text()
