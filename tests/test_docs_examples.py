"""The documentation's examples run (issue 35): every fenced Python block of README.md and docs/, and
every shell line that calls ``attndyn``.

* Python blocks of one page run in order in one namespace, in a temporary working folder, as a
  reader pasting them would. A page whose blocks continue another page's says so with
  ``<!-- continues: docs/getting-started.md -->`` (that page's blocks run first, in the same
  namespace).
* A shell line starting with ``attndyn`` (or ``.venv/bin/attndyn``) is checked against
  ``attndyn COMMAND --help`` (``--version`` as it is): the command exists, and every ``--option`` the
  line uses is one its help lists.
* Every shell line of a page then runs for real, in order, in one scratch folder per page (with the
  repository's ``configs/`` in it), as a reader who has run ``make demo`` and activated the
  environment would type it; each must exit 0. A line that does not run here carries a marker just
  before its block, ``<!-- long: PREFIX | reason -->`` (minutes of work, or it needs the output of a
  long line), ``<!-- network: PREFIX | reason -->`` (a download) or ``<!-- own: PREFIX | reason -->``
  (the reader's own files, shell or machine), where PREFIX starts the line; the reason is required,
  and a marker that starts no line of its block fails. What runs is chosen to finish in seconds: the
  whole file takes 45 s of CPU, 2 minutes of wall time on a loaded 2-core machine (2026-12-05).
* The comment line just before a block may say ``<!-- no-run: reason -->`` (the block is not run;
  the reason is required) or ``<!-- needs: module -->`` (the block runs when ``module`` can be
  imported: an optional extra or model package, skipped otherwise).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
MARKER = re.compile(r"^<!--\s*(no-run|needs|continues|long|network|own):\s*(.*?)\s*-->\s*$")
LINE_KINDS = ("long", "network", "own")  # markers of single lines that do not run here
SHELL = ("", "bash", "sh", "shell", "console")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    markers: dict[str, str]
    not_run: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, line prefix, reason)

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
        markers, not_run, j = {}, [], start - 1
        while j >= 0 and (lines[j].strip() == "" or MARKER.match(lines[j].strip())):
            if lines[j].strip():
                kind, value = MARKER.match(lines[j].strip()).groups()
                if kind in LINE_KINDS:
                    prefix, _, reason = value.partition("|")
                    not_run.insert(0, (kind, prefix.strip(), reason.strip()))
                else:
                    markers[kind] = value
            j -= 1
        out.append(Block(page, start + 1, lang, "\n".join(body), markers, not_run))
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


# README.md is written by the project's lead, not by the sessions that change this test: its line markers
# stand here until the page carries them (the same three comment lines, before the blocks they mark)
README_MARKERS = [
    ("long", "make demo", "creates .venv, installs and reproduces every claim at quick sizes (minutes)"),
    ("long", "make test", "the whole test suite, about 10 minutes"),
    ("long", "attndyn checkpoint gemma3", "the 270M decoder's twelve prompts: about 2 minutes on 2 cores"),
]


def page_blocks(page: Path) -> list[Block]:
    """The page's blocks, README.md's with the markers of README_MARKERS that start one of their lines."""
    found = blocks(page)
    if page == ROOT / "README.md":
        for block in found:
            lines = shell_lines(block) if block.lang in SHELL else []
            known = {prefix for _, prefix, _ in block.not_run}
            block.not_run += [m for m in README_MARKERS if m[1] not in known and any(line.startswith(m[1]) for line in lines)]
    return found


def shell_lines(block: Block) -> list[str]:
    """The command lines of a shell block (not blank, not a comment)."""
    return [line.strip() for line in block.code.splitlines() if line.strip() and not line.strip().startswith("#")]


def why_not_run(block: Block, line: str) -> str | None:
    """Why a shell line does not run here (None: it runs): its block's marker, or a line marker."""
    why = skipped(block)
    if why:
        return why
    return next((f"{kind}: {reason}" for kind, prefix, reason in block.not_run if line.startswith(prefix)), None)


SHELL_PAGES = [p for p in PAGES if any(b.lang in SHELL and shell_lines(b) for b in blocks(p))]


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


def run_shell_lines(page: Path, capsys) -> int:
    """Run the page's shell lines in order in the working folder; returns how many ran."""
    from attndyn.app.cli import entry

    ran = 0
    for block in page_blocks(page):
        if block.lang not in SHELL:
            continue
        lines = shell_lines(block)
        for kind, prefix, reason in block.not_run:
            assert reason, f"{block.where}: the {kind} marker of {prefix!r} needs a reason"
            assert any(line.startswith(prefix) for line in lines), f"{block.where}: the {kind} marker {prefix!r} starts no line of its block"
        for line in lines:
            if why_not_run(block, line):
                continue
            argv = shlex.split(line, comments=True)
            assert argv[0] in ("attndyn", ".venv/bin/attndyn"), f"{block.where}: {line!r} does not run here and carries no marker saying why"
            capsys.readouterr()
            code = entry(argv[1:])
            err = capsys.readouterr().err
            assert code == 0, f"{block.where}: `{line}` exited with {code}: {err.strip()[-1500:]}"
            ran += 1
    return ran


@pytest.mark.parametrize("page", SHELL_PAGES, ids=[str(p.relative_to(ROOT)) for p in SHELL_PAGES])
def test_shell_lines_run_as_printed(page, tmp_path, monkeypatch, capsys):
    # a scratch folder standing for the clone: the configs the lines name, nothing else
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNDYN_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    run_shell_lines(page, capsys)


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


def test_a_failing_or_unmarked_shell_line_is_caught(tmp_path, monkeypatch, capsys):
    """Sensitivity of the shell run: a line that exits non-zero fails its page, a line that cannot run
    here without a marker fails, a marker needs a reason and must start a line of its block, and a
    marked line is not run."""
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "page.md"
    cases = {
        "```\nattndyn analyze no-such-run\n```\n": "exited with 2",
        "```\nmake demo\n```\n": "carries no marker",
        "<!-- long: make demo -->\n```\nmake demo\n```\n": "needs a reason",
        "<!-- long: make test | minutes -->\n```\nmake demo\n```\n": "starts no line",
    }
    for text, needle in cases.items():
        page.write_text(text)
        with pytest.raises(AssertionError, match=needle):
            run_shell_lines(page, capsys)
    marked = "<!-- long: make demo | minutes -->\n<!-- own: attndyn analyze | your own run -->\n"
    page.write_text(marked + "```\nmake demo\nattndyn analyze x\nattndyn --version\n```\n")
    assert run_shell_lines(page, capsys) == 1
    assert [kind for kind, _, _ in blocks(page)[0].not_run] == ["long", "own"]


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
