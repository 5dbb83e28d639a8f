"""The ``attndyn`` command line (Typer + Rich). Nothing imports this module.

User errors (bad config, bad path, unreadable run folder) print one line to stderr and exit 2.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Self-attention dynamics: simulate, analyse, reproduce.")
err_console = Console(stderr=True)
console = Console()


def fail(message: str) -> None:
    """One readable line on stderr, exit status 2."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _version(value: bool):
    if value:
        from . import __version__

        console.print(f"attndyn {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
):
    """attndyn: Transformers as interacting particle systems."""


@contextlib.contextmanager
def delayed_progress(description: str, total: float, *, delay: float = 1.0):
    """Yield ``update(completed)``; a Rich bar appears only once the run has lasted ``delay`` s."""
    start = time.perf_counter()
    state: dict = {}

    def update(completed: float):
        if "bar" not in state:
            if time.perf_counter() - start < delay:
                return
            bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.percentage:>5.1f}%"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=err_console,
                transient=False,
            )
            bar.start()
            state["bar"], state["task"] = bar, bar.add_task(description, total=total)
        state["bar"].update(state["task"], completed=completed)

    try:
        yield update
    finally:
        if "bar" in state:
            state["bar"].stop()


@app.command()
def simulate(
    config: Annotated[Path, typer.Argument(help="TOML config (see configs/).")],
    out: Annotated[Path, typer.Option("--out", help="Run folder to write.")],
):
    """Simulate the dynamics of a config and write a run folder."""
    from . import __version__
    from . import simulate as run_simulation
    from .config import ConfigError, build, load_config
    from .io import write_json, write_npz

    try:
        cfg = load_config(config)
        setup = build(cfg)
    except ConfigError as err:
        fail(f"{config}: {err}")
    if out.exists() and not out.is_dir():
        fail(f"--out {str(out)!r} exists and is not a folder")
    start = time.perf_counter()
    t0, t1 = float(setup.ts[0]), float(setup.ts[-1])
    try:
        with delayed_progress("simulate", t1 - t0) as update:
            traj = run_simulation(
                setup.model,
                setup.x0,
                setup.ts,
                solver=setup.solver,
                step=setup.step,
                max_steps=setup.max_steps,
                progress=lambda t: update(t - t0),
            )
    except (FloatingPointError, RuntimeError) as err:
        fail(f"simulation stopped: {err}")
    wall = time.perf_counter() - start
    ts, xs = traj.numpy()
    out.mkdir(parents=True, exist_ok=True)
    # summary.json goes last: its presence marks a complete run folder.
    (out / "summary.json").unlink(missing_ok=True)
    write_json(out / "config.json", cfg.model_dump(mode="json"))
    w = setup.model.weights
    arrays = {"ts": ts, "xs": xs, "Q": w.Q.numpy(), "K": w.K.numpy(), "V": w.V.numpy()}
    if w.ff is not None:
        arrays["W"] = w.ff.W.numpy()
        if w.ff.bias is not None:
            arrays["bias"] = w.ff.bias.numpy()
    write_npz(out / "trajectory.npz", **arrays)
    from . import plots

    variable = "z" if setup.model.rescaled else "x"
    plots.save(
        plots.trajectories(ts, xs, variable=variable, title=f"{cfg.n} tokens, d = {cfg.d}, {variable}-form"),
        out / "trajectory.png",
    )
    write_json(
        out / "summary.json",
        {
            "version": __version__,
            "seed": cfg.seed,
            "stats": traj.stats,
            "wall_seconds": round(wall, 4),
            "n": cfg.n,
            "d": cfg.d,
            "t1": t1,
            "saves": len(ts),
            "variable": variable,
        },
    )
    console.print(f"wrote {out} ({traj.stats['steps']} steps, {traj.stats['nfev']} evaluations, {wall:.2f} s)")


if __name__ == "__main__":  # pragma: no cover
    app()
