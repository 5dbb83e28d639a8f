"""Write the pages of the docs site that are generated from the code (run by `make docs`).

* ``docs/claims.md``: the catalogue of claims (statement, reference, hypotheses, kind, quick
  sizes), read from :mod:`attndyn.claims` (nothing is run);
* ``docs/reference/config.md``: every key of a simulation and a mean-field config (type, default,
  range, meaning), read from the pydantic schema of :mod:`attndyn.workflow.schema`;
* ``docs/reference/cli.md``: every command of ``attndyn`` with its arguments and options, read from
  the Typer app of :mod:`attndyn.app.cli`;
* ``docs/notebooks/*.ipynb``: copies of ``examples/*.ipynb`` (mkdocs-jupyter renders and executes them).
"""

from __future__ import annotations

import inspect
import re
import shutil
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from attndyn.claims import EXPERIMENTS, load

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent


def catalogue() -> str:
    lines = [
        "# Claims catalogue",
        "",
        "Every claim `attndyn reproduce` checks, in the order of the report. *pass/fail* claims have judged",
        "checks (see [how a verdict is judged](guide/claims.md)); *report* claims show values and figures.",
        "",
        "| claim | kind | reference |",
        "|---|---|---|",
    ]
    for cid in EXPERIMENTS:
        info = load(cid).CLAIM
        lines.append(f"| [`{cid}`](#{cid}) | {info.kind} | {info.paper_ref} |")
    lines.append("")
    for cid in EXPERIMENTS:
        module = load(cid)
        info = module.CLAIM
        lines += [f"## {cid}", "", f"**{info.title}**", "", f"*{info.kind}* · {info.paper_ref}", "", info.statement, ""]
        lines += [f"*Hypotheses.* {info.hypotheses}", ""]
        stated = re.findall(r'detects="([^"]+)"', inspect.getsource(module))
        for k, v in vars(module).items():
            if "DETECTS" in k:
                stated += [v] if isinstance(v, str) else [x for x in getattr(v, "values", list)() if isinstance(x, str)]
        powers = sorted(set(stated))
        if powers:
            lines += ["*What its judged checks are shown to detect:* " + "; ".join(powers) + ".", ""]
        elif info.kind == "pass/fail":
            lines += ["*What its judged checks detect* is not yet stated (each has a violating-input test).", ""]
        quick = getattr(module, "QUICK", {})
        if quick:
            lines += ["*Quick size* (`--quick`): " + ", ".join(f"`{k} = {v}`" for k, v in quick.items()) + ".", ""]
    return "\n".join(lines) + "\n"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _model_of(annotation: object) -> type[BaseModel] | None:
    """The config table (a pydantic model) an annotation holds, also inside ``X | None``."""
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _type_name(annotation: object) -> str:
    if _model_of(annotation) is not None:
        return "table"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f'`"{a}"`' for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None))
    if origin is list or annotation is list:
        return "list" + (f" of {_type_name(args[0])}" if args else "")
    if origin is dict or annotation is dict:
        return "table"
    names = {int: "integer", float: "number", str: "string", bool: "boolean", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field) -> str:
    if field.default is PydanticUndefined:
        return "required"
    value = field.default
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return "(the table's defaults)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float) and value >= 1e6:
        return f"`{value:.0e}`".replace("e+", "e")
    return f"`{value}`"


def _range(field) -> str:
    if typing.Literal in (typing.get_origin(field.annotation), *map(typing.get_origin, typing.get_args(field.annotation))):
        return "one of the type's values"
    if _model_of(field.annotation) is not None or field.annotation is dict:
        return "see its rows" if _model_of(field.annotation) is not None else "see its meaning"
    bounds = []
    for item in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(f"{sign} {value}")
        if getattr(item, "allow_inf_nan", True) is False:
            bounds.append("finite")
    return ", ".join(bounds) or "any"


def config_tables(model: type[BaseModel], prefix: str = "") -> list[tuple[type[BaseModel], str]]:
    """Every table of a config, as (model, dotted path), the top level first, in the schema's order."""
    found = [(model, prefix)]
    for name, field in model.model_fields.items():
        inner = _model_of(field.annotation)
        if inner is not None:
            found += config_tables(inner, f"{prefix}{name}.")
    return found


def _table_rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows = ["| key | type | default | range | meaning |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        rows.append(f"| `{prefix}{name}` | {_type_name(field.annotation)} | {_default(field)} | {_range(field)} | {_cell(field.description or '')} |")
    return rows


def config_reference(simulation: type[BaseModel] | None = None, meanfield: type[BaseModel] | None = None) -> str:
    """The page; ``simulation`` and ``meanfield`` replace the schema's two configs (for the page's test)."""
    from attndyn.workflow.schema import MeanFieldConfig, SimulationConfig

    simulation, meanfield = simulation or SimulationConfig, meanfield or MeanFieldConfig
    lines = [
        "# Configuration reference",
        "",
        "Every key of the TOML configs that `attndyn simulate` and `attndyn meanfield` read, generated from",
        "the schema (`attndyn.workflow.schema`). Unknown keys are refused, and values are taken as written",
        "(an integer is accepted where a number is expected). Combinations the table cannot show (a key that",
        "applies to one `kind` only, `dt` or `rtol` and `atol`) are checked when a config is read, and a bad",
        "config exits with status 2 and one line naming the key. How the options work together:",
        "[the engine guide](../guide/engine.md).",
        "",
        "## Simulation config (`attndyn simulate`)",
        "",
    ]
    seen: dict[type, list[str]] = {}
    for model, prefix in config_tables(simulation):
        seen.setdefault(model, []).append(prefix)
    for model, prefixes in seen.items():
        where = prefixes[0].rstrip(".")
        if where:
            named = ", ".join(f"`[{p.rstrip('.')}]`" for p in prefixes)
            lines += [f"### {named}", ""]
            if len(prefixes) > 1:
                lines += ["The same keys in each of these tables; the rows name the first.", ""]
        else:
            lines += ["### Top level", ""]
        lines += [*_table_rows(model, prefixes[0]), ""]
    lines += ["## Mean-field config (`attndyn meanfield`)", "", *_table_rows(meanfield, ""), ""]
    return "\n".join(lines)


def _option_type(param) -> str:
    annotation = param.type_descriptor.annotation  # (Typer's record of the parameter's annotation)
    if annotation is bool:
        return "flag"
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list:
        return f"{_type_name(args[0])}, repeatable" if param.opts[0].startswith("--") else f"{_type_name(args[0])}, several"
    return _type_name(annotation)


def _option_default(param) -> str:
    value = param.default
    if param.required:
        return "required"
    if value is None or value == [] or value == () or value == "":
        return "none"
    if isinstance(value, bool):
        return "off" if not value else "on"
    return f"`{value}`"


def cli_commands(app: object = None) -> list[tuple[str, object]]:
    """The commands of ``attndyn`` (or another Typer app), in the order ``attndyn --help`` lists them."""
    import typer.main

    if app is None:
        from attndyn.app.cli import app

    group = typer.main.get_command(app)
    return [("attndyn", group), *((f"attndyn {name}", command) for name, command in group.commands.items())]


def cli_reference(app: object = None) -> str:
    lines = [
        "# Command-line reference",
        "",
        "Every command of `attndyn` with its arguments and options, generated from the command line itself",
        "(`attndyn COMMAND --help` prints the same). A bad value exits with status 2 and one line; Ctrl-C",
        "exits with status 130 keeping what had finished. How the commands are used: [getting started](../getting-started.md)",
        "and the user guide.",
        "",
    ]
    for name, command in cli_commands(app):
        heading = "Global options" if name == "attndyn" else f"`{name}`"
        lines += [f"## {heading}", ""]
        if name == "attndyn":
            lines += ["Given before the command: `attndyn --threads 2 simulate ...`.", ""]
        else:
            lines += [_cell(" ".join((command.help or "").split("\n\n")[0].split())), ""]
        params = [p for p in command.params if not p.hidden]
        if name == "attndyn":
            params = [p for p in params if p.name != "help"]
        if not params:
            lines += ["No arguments or options.", ""]
            continue
        lines += ["| argument or option | type | default | meaning |", "|---|---|---|---|"]
        for p in params:
            label = " / ".join(f"`{o}`" for o in (*p.opts, *p.secondary_opts)) if p.opts[0].startswith("-") else f"`{p.name.upper()}`"
            lines.append(f"| {label} | {_option_type(p)} | {_option_default(p)} | {_cell(' '.join((p.help or '').split()))} |")
        if name == "attndyn":
            lines.append("| `--debug` | flag | off | On an unexpected error, print the traceback instead of one line (anywhere on the line). |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    (DOCS / "claims.md").write_text(catalogue())
    (DOCS / "reference").mkdir(exist_ok=True)
    (DOCS / "reference" / "config.md").write_text(config_reference())
    (DOCS / "reference" / "cli.md").write_text(cli_reference())
    out = DOCS / "notebooks"
    out.mkdir(exist_ok=True)
    for nb in sorted((ROOT / "examples").glob("*.ipynb")):
        shutil.copyfile(nb, out / nb.name)


if __name__ == "__main__":
    main()
