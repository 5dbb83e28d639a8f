"""The reference pages (issue 52 item 4): the configuration reference is generated from the config schema
and the command-line reference from the Typer commands (docs/generate.py); every config key and every
command option has its row and a line of meaning, and both pages are in the site's navigation."""

from __future__ import annotations

import importlib.util
import re

import pytest
import typer
from pydantic import BaseModel, Field

from tests.helpers import ROOT


@pytest.fixture(scope="module")
def generate():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(page: str) -> dict[str, str]:
    """The table rows of a page: the first cell's code (a key, an option, an ARGUMENT) -> the row's last cell."""
    found = {}
    for line in page.splitlines():
        m = re.match(r"^\| `([^`]+)`[^|]*\|.*\| ([^|]*) \|$", line)
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


def config_problems(generate, simulation=None, meanfield=None) -> list[str]:
    from attndyn.workflow.schema import MeanFieldConfig, SimulationConfig

    simulation, meanfield = simulation or SimulationConfig, meanfield or MeanFieldConfig
    page = rows(generate.config_reference(simulation, meanfield))
    keys, first = [], {}
    for model, prefix in generate.config_tables(simulation):
        first.setdefault(model, prefix)  # a table used in several places has its rows once, under its first name
        keys += [(f"{first[model]}{name}", field) for name, field in model.model_fields.items()]
    keys += list(meanfield.model_fields.items())
    problems = [f"{key}: no description in the schema" for key, field in keys if not (field.description or "").strip()]
    return problems + [f"{key}: no row with a meaning" for key, _ in keys if not page.get(key)]


def cli_problems(generate, app=None) -> list[str]:
    page = rows(generate.cli_reference(app))
    problems = []
    for name, command in generate.cli_commands(app):
        if name != "attndyn" and not (command.help or "").strip():
            problems.append(f"{name}: no help line")
        for p in command.params:
            if p.hidden or p.name == "help":
                continue
            label = p.opts[0] if p.opts[0].startswith("-") else p.name.upper()
            if not (p.help or "").strip():
                problems.append(f"{name} {label}: no help text")
            elif not page.get(label):
                problems.append(f"{name} {label}: no row")
    return problems


def test_every_config_key_has_its_row_and_meaning(generate):
    assert config_problems(generate) == []
    page = generate.config_reference()
    for key in ("model.beta", "solver.max_pairs", "init.gram_scale", "weights.Q.dist", "weights.feedforward.sigma", "cfl"):
        assert f"| `{key}` |" in page, key
    # the row says what the schema says: a default, a range
    assert "| `solver.max_pairs` | number | `1e13` | > 0 |" in page
    assert "| `init.gram_scale` | number | `1.0` | >= 0, <= 1, finite |" in page


def test_every_command_option_has_its_row_and_meaning(generate):
    assert cli_problems(generate) == []
    page = generate.cli_reference()
    for heading in ("## `attndyn simulate`", "## `attndyn sweep`", "## `attndyn judge`", "## Global options"):
        assert heading in page, heading
    assert "| `--out` | path | `report` | Report folder. |" in page  # reproduce's default, as its --help says


def test_a_key_or_option_without_a_meaning_is_caught(generate):
    """Sensitivity: a config key without a description, and an option without help, are named."""

    class Inner(BaseModel):
        size: int = Field(default=1, description="A size.")
        colour: str = "red"

    class Outer(BaseModel):
        seed: int = Field(description="A seed.")
        inner: Inner = Field(default=Inner(), description="A table.")

    assert config_problems(generate, Outer, Inner) == [
        "inner.colour: no description in the schema",
        "colour: no description in the schema",
        "inner.colour: no row with a meaning",
        "colour: no row with a meaning",
    ]

    toy = typer.Typer()

    @toy.command()
    def run(path: str = typer.Argument(..., help="A path."), fast: bool = typer.Option(False, "--fast")) -> None:
        """Run it."""

    @toy.command()
    def other() -> None:
        """Another."""

    assert cli_problems(generate, toy) == ["attndyn run --fast: no help text"]


def test_the_reference_pages_are_in_the_navigation_and_generated():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "reference/config.md" in nav
    assert "reference/cli.md" in nav
    generator = (ROOT / "docs" / "generate.py").read_text()
    assert '"reference" / "config.md"' in generator
    assert '"reference" / "cli.md"' in generator
