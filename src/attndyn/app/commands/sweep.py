"""``attndyn sweep``: run, inspect, export or plot a resumable parameter sweep."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from attndyn.app.cli_common import FORCE_ADOPT, console, err_console, fail, say, writable


def sweep(
    target: Annotated[str, typer.Argument(help="SWEEP.toml to run, or 'status' / 'export' / 'plot' followed by the sweep folder.")],
    folder: Annotated[Path | None, typer.Argument(help="With status, export or plot: the sweep folder.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Sweep folder to write (running) or file to write (export, plot).")] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Dask worker processes (0: in-process; default: one per core).")] = None,
    scheduler: Annotated[str | None, typer.Option("--scheduler", help="Address of an existing Dask scheduler (tcp://host:port).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="export: netcdf, zarr or csv.")] = "netcdf",
    measure: Annotated[str | None, typer.Option("--measure", help="plot: the measure to draw.")] = None,
    x: Annotated[str | None, typer.Option("--x", help="plot: the horizontal axis (a grid key or t).")] = None,
    y: Annotated[str | None, typer.Option("--y", help="plot: the vertical axis (a grid key or t).")] = None,
    title: Annotated[str, typer.Option("--title", help="plot: the figure's title.")] = "",
    xlabel: Annotated[str | None, typer.Option("--xlabel", help="plot: the horizontal axis label (default: its key).")] = None,
    ylabel: Annotated[str | None, typer.Option("--ylabel", help="plot: the vertical axis label (default: its key).")] = None,
    logx: Annotated[bool, typer.Option("--logx", help="plot: a logarithmic horizontal axis.")] = False,
    logy: Annotated[bool, typer.Option("--logy", help="plot: a logarithmic vertical axis.")] = False,
    allow_import: Annotated[
        bool, typer.Option("--allow-import", help="Allow measures named 'package.module:function' (imports and runs that code).")
    ] = False,
    force_adopt: Annotated[bool, typer.Option("--force-adopt", help=FORCE_ADOPT)] = False,
    repair: Annotated[bool, typer.Option("--repair", help="Complete an incomplete ledger and recompute what it lacks.")] = False,
) -> None:
    """Run, export or plot a resumable parameter sweep (Dask).

    attndyn sweep SWEEP.toml --out DIR [--workers N | --scheduler ADDRESS]; attndyn sweep status DIR
    (done, pending and failed tasks, read-only); attndyn sweep export DIR --format netcdf|zarr|csv;
    attndyn sweep plot DIR --measure M --x KEY --y KEY. Exit 1 when a task failed (the others are
    kept), 2 on a bad file or a changed sweep on an existing folder.
    """
    from attndyn.app.ledger import LEDGER
    from attndyn.app.sweep_driver import run as run_sweep
    from attndyn.app.sweep_results import export, plot
    from attndyn.workflow.grid import SweepError

    if target == "status":
        from attndyn.app.ledger import status

        if folder is None:
            fail("attndyn sweep status needs the sweep folder")
        try:
            st = status(folder)
        except SweepError as err:
            fail(str(err))
        c = st["counts"]
        lines = [f"{folder}: {c['done']} of {st['total']} tasks done, {c['pending']} pending, {c['running']} running, {c['failed']} failed"]
        if st["set_aside"]:
            lines.append(f"  {st['set_aside']} ledger row(s) that did not fit the sweep are kept in its set_aside table")
        lines += [f"  failed task {f['task']} {f['point']}: {f['error']}" for f in st["failed"]]
        lines += [f"  {u['status']} task {u['task']} {u['point']}" for u in st["unfinished"]]
        if c["done"] < st["total"]:
            lines.append("rerun the same `attndyn sweep SWEEP.toml --out DIR` command to finish the rest")
        for line in lines:
            console.print(line, markup=False, soft_wrap=True)
        return
    if target in ("export", "plot"):
        if folder is None:
            fail(f"attndyn sweep {target} needs the sweep folder")
        try:
            if target == "export":
                path = export(folder, fmt, out)
            else:
                if not (measure and x and y):
                    fail("attndyn sweep plot needs --measure, --x and --y")
                path = plot(folder, measure, x, y, out, title=title, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy)
        except SweepError as err:
            fail(str(err))
        console.print(f"wrote {path}", markup=False)
        return
    if folder is not None:
        fail(f"unexpected argument {str(folder)!r}: run a sweep with `attndyn sweep SWEEP.toml --out DIR`")
    if out is None:
        fail("attndyn sweep SWEEP.toml needs --out DIR")
    if workers is not None and workers < 0:
        fail(f"--workers {workers} must be >= 0")
    if force_adopt:
        writable(out, "sweep", "attndyn sweep", force_adopt)
    bar = Progress(
        TextColumn("sweep"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tasks"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=not err_console.is_terminal,  # off a terminal: the plain lines below, and no bar drawn into a log
    )
    task = bar.add_task("sweep", total=None)
    start = time.perf_counter()

    def update(done: int, total: int) -> None:
        # called from the first task on: the sweep file, the folder and the lock are checked by then,
        # so a bad input prints its one line and no bar
        if not bar.live.is_started:
            bar.start()
        bar.update(task, completed=done, total=total)
        if not err_console.is_terminal and (done == total or done % max(1, total // 10) == 0):
            bar.console.print(f"sweep: {done} of {total} tasks done, {time.perf_counter() - start:.0f} s elapsed", markup=False, highlight=False)

    try:
        summary = run_sweep(
            target,
            out,
            workers=workers,
            scheduler=scheduler,
            progress=update,
            allow_import=allow_import,
            repair=repair,
            notice=lambda line: say(line, label="sweep", style="bold"),
        )
    except KeyboardInterrupt:
        bar.stop()
        from attndyn.app.ledger import status

        try:
            c = status(out)
            done = f"{c['counts']['done']} of {c['total']} tasks done"
        except SweepError:
            done = "no task finished"
        say(f"{done}; they are kept in {out}: rerun the same command to resume", label="interrupted", style="bold yellow")
        raise typer.Exit(130) from None
    except SweepError as err:
        bar.stop()
        fail(f"{target}: {err}")
    bar.stop()
    console.print(
        f"{summary.done} of {summary.total} tasks done ({summary.ran} run now, {summary.failed} failed) in {summary.seconds:.1f} s; "
        f"ledger {out / LEDGER}"
    )
    for line in summary.set_aside:
        err_console.print(f"repair: set aside the {line}", markup=False, highlight=False)
    for task_id, error in summary.errors:
        err_console.print(f"task {task_id} failed: {error}", markup=False, highlight=False)
    if summary.failed:
        raise typer.Exit(1)
