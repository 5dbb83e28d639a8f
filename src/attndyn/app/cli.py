"""The ``attndyn`` command line (Typer + Rich). Nothing imports this module.

User errors (bad config, bad path, unreadable run folder) print one line to stderr and exit 2.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Self-attention dynamics: simulate, analyse, reproduce.")
err_console = Console(stderr=True)
console = Console()


def say(message: str, *, label: str = "error", style: str = "bold red") -> None:
    """One line on stderr, printed literally (no markup: ``[grid]`` and ``[nan, nan]`` survive)."""
    from rich.text import Text

    err_console.print(Text.assemble((f"{label}: ", style), message), highlight=False, soft_wrap=True)


def fail(message: str) -> None:
    """One readable line on stderr, exit status 2."""
    say(message)
    raise typer.Exit(2)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__


def _interrupt(signum, frame):  # SIGTERM is handled as Ctrl-C: what finished is kept
    raise KeyboardInterrupt


def entry(argv: list[str] | None = None) -> int:
    """The ``attndyn`` command: runs the Typer app behind one error path; returns the exit status.

    Expected errors (:class:`~attndyn.core.errors.UserError`, usage errors, files that cannot be
    read or written) print one line and exit 2; Ctrl-C or SIGTERM prints what was kept and exits
    130; anything else is a bug: one line with a hint to rerun with ``--debug`` (the traceback), exit 1.
    """
    import signal
    import sys

    from attndyn.core.errors import UserError

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    for k, a in enumerate(args):  # Typer reads "" as the current folder: an empty path is refused here
        option, eq, value = a.partition("=")
        if option == "--out" and ((eq and not value.strip()) or (not eq and k + 1 < len(args) and not args[k + 1].strip())):
            say("--out '' is an empty path; name a new or empty folder")
            return 2
    previous = signal.signal(signal.SIGTERM, _interrupt) if threading_main() else None
    try:
        code = app(args=args, prog_name="attndyn", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except typer.Exit as err:
        return err.exit_code
    except (typer.Abort, KeyboardInterrupt):
        say("nothing more was written (what had finished is kept)", label="interrupted", style="bold yellow")
        return 130
    except UserError as err:
        say(_one_line(err))
        return 2
    except typer.exceptions.TyperException as err:  # usage errors (an unknown option, a value of the wrong type)
        message = err.format_message() if hasattr(err, "format_message") else str(err)
        ctx = getattr(err, "ctx", None)
        where = f"{ctx.command_path} --help" if ctx is not None else "attndyn --help"
        if message.strip():  # (no arguments at all: the help was shown, nothing to add)
            say(f"{' '.join(message.split())} (see `{where}`)")
        return int(getattr(err, "exit_code", 2))
    except OSError as err:
        where = f" {err.filename}" if getattr(err, "filename", None) else ""
        say(f"cannot read or write{where}: {err.strerror or _one_line(err)}")
        return 2
    except Exception as err:
        package = (getattr(err, "name", None) or "").partition(".")[0] if isinstance(err, ModuleNotFoundError) else ""
        if package in OPTIONAL_PACKAGES and not debug:  # an optional extra that is not installed: not a bug
            say(f"this command needs the optional package {package!r}, which is not installed: pip install 'attndyn[{OPTIONAL_PACKAGES[package]}]'")
            return 2
        if debug:
            raise
        say(f"unexpected {type(err).__name__}: {_one_line(err)} (a bug in attndyn; rerun with --debug for the traceback)")
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# packages only some commands import, and the extra of pyproject.toml that installs them
OPTIONAL_PACKAGES = {"safetensors": "checkpoints", "tokenizers": "checkpoints", "gguf": "checkpoints"}


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _version(value: bool):
    if value:
        from attndyn import __version__

        console.print(f"attndyn {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    threads: int | None = typer.Option(
        None, "--threads", help="Intra-op threads (default: the thread policy, one for small states; env ATTNDYN_THREADS)."
    ),
) -> None:
    """attndyn: Transformers as interacting particle systems."""
    import os

    from attndyn.core.threads import ENV, check_threads, set_process_default

    try:
        if threads is not None:
            os.environ[ENV] = str(check_threads(threads, "--threads"))
        # the process default for work outside the library's entry points (which choose per call),
        # for torch and for NumPy's and SciPy's BLAS pools
        set_process_default()
    except ValueError as err:
        fail(str(err))


PROGRESS_DELAY = 1.0  # seconds before a run's progress appears (short runs print none)
COLLAPSE_RATIO = 1e-4  # an adaptive step this much below the largest so far ...
COLLAPSE_STEPS = 50  # ... for this many accepted steps in a row is a collapse


class StepWatch:
    """Reads an adaptive run's accepted steps off successive ``progress(t)`` calls and says when they collapse
    (near-hardmax attention makes adaptive steps chatter: the error estimate jumps as an argmax flips)."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.largest = 0.0
        self.run = 0
        self.collapsed: tuple[float, float] | None = None  # (t, step) when first seen

    def see(self, t: float) -> bool:
        """Record the step ending at ``t``; True the first time a collapse is seen."""
        if self.last is not None and t > self.last:
            h = t - self.last
            self.largest = max(self.largest, h)
            self.run = self.run + 1 if h < COLLAPSE_RATIO * self.largest else 0
            if self.run >= COLLAPSE_STEPS and self.collapsed is None:
                self.collapsed = (t, h)
                self.last = t
                return True
        self.last = t
        return False


@contextlib.contextmanager
def delayed_progress(description: str, total: float, *, delay: float | None = None, adaptive: bool = False) -> Iterator[Callable[[float], None]]:
    """Yield ``update(completed)``. Progress appears once the run has lasted ``delay`` s (default
    ``PROGRESS_DELAY``): a Rich bar on a terminal, else one line per 10 % with the elapsed time. For an
    adaptive run (``adaptive``) a collapsing step is said once, with the suggestion of a fixed step."""
    start = time.perf_counter()
    wait = PROGRESS_DELAY if delay is None else delay
    state: dict = {"decile": 0}
    watch = StepWatch() if adaptive else None
    terminal = err_console.is_terminal

    def say_line(text: str) -> None:
        err_console.print(text, markup=False, highlight=False, soft_wrap=True)

    def update(completed: float):
        if watch is not None and watch.see(completed):
            t, h = watch.collapsed
            say_line(
                f"{description}: the adaptive step has collapsed to {h:.1e} (the largest so far {watch.largest:.1e}) at t = {t:.6g}; "
                "near-hardmax attention makes adaptive steps chatter, and a fixed step (solver.dt) may serve"
            )
            if "bar" in state:
                state["bar"].update(state["task"], description=f"{description} [step {h:.0e}: collapsing]")
        elapsed = time.perf_counter() - start
        if elapsed < wait:
            return
        if not terminal:
            decile = int(10 * completed / total) if total > 0 else 10
            if decile > state["decile"]:
                state["decile"] = decile
                say_line(f"{description}: {10 * decile} % (t = {completed:.6g} of {total:g}), {elapsed:.0f} s elapsed")
            return
        if "bar" not in state:
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
    out: Annotated[Path | None, typer.Option("--out", help="Run folder to write (required unless --explain).")] = None,
    movie: Annotated[bool, typer.Option("--movie", help="Also write trajectory.gif (the tokens moving; principal axes above d = 3).")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Print the engine plan (which path runs, why not a faster one) and exit.")] = False,
) -> None:
    """Simulate a config and write a run folder."""
    from attndyn.workflow import ownership, runs
    from attndyn.workflow.files import RunFolderError
    from attndyn.workflow.schema import ConfigError, load_config

    try:
        cfg = load_config(config)
        if explain:
            console.print(runs.explain(cfg), markup=False, highlight=False)
            return
    except (ConfigError, ValueError) as err:
        fail(f"{config}: {err}")
    if out is None:
        fail("--out is required: name the run folder to write (or pass --explain to print the plan only)")
    ownership.check(out, "run")  # before any work: a folder attndyn may not write into is refused now
    marker = ownership.read_marker(out) if out.is_dir() else None
    if movie and (out / "trajectory.gif").exists() and "trajectory.gif" not in (marker or {}).get("files", []):
        fail(f"{out / 'trajectory.gif'} exists and was not written by attndyn; move it away or name another folder")
    try:
        with delayed_progress("simulate", cfg.solver.t1, adaptive=cfg.solver.rtol is not None and cfg.solver.method != "long") as update:
            run = runs.execute(cfg, progress=update)
    except ConfigError as err:
        fail(f"{config}: {err}")
    except (FloatingPointError, RuntimeError) as err:
        fail(f"simulation stopped: {err}")
    except runs.RunInterrupted as stop:
        if stop.run is None:
            say(f"nothing was computed; {out} is unchanged", label="interrupted", style="bold yellow")
        else:
            runs.write(stop.run, out, partial="interrupted")
            say(
                f"kept the {len(stop.run.ts)} saves up to t = {stop.run.ts[-1]:.6g} in {out}, marked partial (partial.json, no summary.json)",
                label="interrupted",
                style="bold yellow",
            )
        raise typer.Exit(130) from None
    try:
        runs.write(run, out)
    except RunFolderError as err:
        fail(str(err))
    if movie:
        import numpy as np

        from attndyn.workflow import plots

        owner = ownership.claim(out, "run", "attndyn simulate")
        xs = run.xs if run.xs.ndim == 3 else run.xs.reshape(len(run.ts), -1, run.xs.shape[-1])
        if xs.shape[-1] > 3:
            xs = xs @ plots.principal_axes(xs[-1])
        plots.points_movie(out / "trajectory.gif", np.asarray(run.ts), xs, title=f"{xs.shape[1]} tokens, {run.variable}-form", variable=run.variable)
        owner.add("trajectory.gif")
    console.print(f"wrote {out} ({run.stats['steps']} steps, {run.stats['nfev']} evaluations, {run.wall_seconds:.2f} s)", markup=False)


@app.command()
def meanfield(
    config: Annotated[Path, typer.Argument(help="Mean-field TOML config (see configs/meanfield-*.toml).")],
    out: Annotated[Path, typer.Option("--out", help="Run folder to write.")],
) -> None:
    """Solve the mean-field equation on the circle.

    Writes a run folder with the density, its figures and a movie.
    """
    import numpy as np

    from attndyn import __version__
    from attndyn.theory import meanfield as mf
    from attndyn.workflow import ownership, plots
    from attndyn.workflow.files import write_json, write_npz
    from attndyn.workflow.schema import ConfigError, load_meanfield_config
    from attndyn.workflow.setup import meanfield_setup

    try:
        cfg = load_meanfield_config(config)
        rho0, ts = meanfield_setup(cfg)
    except ConfigError as err:
        fail(f"{config}: {err}")
    ownership.check(out, "meanfield")
    start = time.perf_counter()
    try:
        with delayed_progress("meanfield", float(ts[-1]), adaptive=cfg.method == "spectral") as update:
            sol = mf.solve_circle(rho0, ts, beta=cfg.beta, usa=cfg.usa, rtol=cfg.rtol, atol=cfg.atol, method=cfg.method, cfl=cfg.cfl, progress=update)
    except ValueError as err:
        fail(f"{config}: {err}")
    except mf.ResolutionError as err:
        err_console.print(f'stopped: {err} (or use method = "finite-volume")', highlight=False, markup=False)
        raise typer.Exit(1) from None
    wall = time.perf_counter() - start
    owner = ownership.claim(out, "meanfield", "attndyn meanfield")
    ownership.clear(owner)  # the previous run's files, summary.json (written last) among them
    write_json(out / "config.json", cfg.model_dump(mode="json"))
    write_npz(out / "density.npz", ts=sol.ts, theta=sol.theta, rho=sol.rho)
    label = f"{'USA' if cfg.usa else 'SA'}, beta = {cfg.beta:g}, M = {sol.rho.shape[1]}, {cfg.method}"
    plots.save(plots.density_map(sol.ts, sol.theta, sol.rho, title=label), out / "density.png")
    plots.save(
        plots.curves(sol.ts, {"R(t) = |int e^(i theta) rho|": mf.order_parameter(sol.rho)}, xlabel="t", ylabel="order parameter", title=label),
        out / "order_parameter.png",
    )
    plots.density_movie(out / "density.gif", sol.ts, sol.theta, sol.rho, title=label)
    owner.add("config.json", "density.npz", "density.png", "density.svg", "order_parameter.png", "order_parameter.svg", "density.gif")
    mass = sol.rho.sum(1) * 2 * math.pi / sol.rho.shape[1]
    write_json(
        out / "summary.json",
        {
            "version": __version__,
            "method": sol.method,
            "steps": sol.steps,
            "wall_seconds": round(wall, 4),
            "M": int(sol.rho.shape[1]),
            "t1": float(sol.ts[-1]),
            "saves": len(sol.ts),
            "mass_drift": float(np.abs(mass - 1).max()),
            "min_density": float(sol.rho.min()),
            "final_order_parameter": float(mf.order_parameter(sol.rho[-1])),
        },
    )
    owner.add("summary.json")
    console.print(f"wrote {out} ({sol.steps} steps, {wall:.2f} s)", markup=False)


@app.command(context_settings={"allow_extra_args": False})
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
    bar = Progress(
        TextColumn("sweep"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tasks"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
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
        summary = run_sweep(target, out, workers=workers, scheduler=scheduler, progress=update, allow_import=allow_import)
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
    for task_id, error in summary.errors:
        err_console.print(f"task {task_id} failed: {error}", markup=False, highlight=False)
    if summary.failed:
        raise typer.Exit(1)


def _analysis_figure(run_dir: Path, traj, model, result) -> None:
    """analysis.png: the tokens' paths in the variable the prediction is about (z or x; the top two
    principal axes above d = 3), with the limit polytope only where the prediction is a polytope."""
    import numpy as np

    from attndyn.analysis.prediction import rescaled_tokens
    from attndyn.workflow import plots

    ts, xs = traj.numpy()
    variable = "z" if result.space.startswith("z") or result.regime.variable == "z" else "x"
    zs = rescaled_tokens(traj, model) if variable == "z" else xs
    if zs is None:
        zs, variable = xs, "x"
    limit = np.asarray(result.limit_points) if result.space in ("z", "x") and len(result.limit_points) else None
    if zs.shape[-1] > 3:
        axes = plots.principal_axes(zs[-1])
        zs = zs @ axes
        limit = None if limit is None or limit.shape[-1] != axes.shape[0] else limit @ axes
        variable = f"{variable} (principal axes)"
    polytope = result.regime.name in ("polytope", "polytope-subspace") and limit is not None
    title = f"{result.regime.name}: {result.regime.reference or 'no theorem applies'}"
    fig = plots.paths_with_hulls(ts, zs, title=title, variable=variable, limit_points=limit, limit_label="limit polytope" if polytope else None)
    plots.save(fig, run_dir / "analysis.png", vector=False)


@app.command()
def analyze(run_dir: Annotated[Path, typer.Argument(help="Run folder written by `attndyn simulate`.")]) -> None:
    """Analyse a run folder: regime, limits, attention.

    Writes RUN_DIR/analysis.json and RUN_DIR/analysis.png (the paths in the analysed variable and,
    for a polytope limit, the polytope the prediction names).
    """
    import torch
    from rich.table import Table

    from attndyn import Trajectory
    from attndyn.analysis.prediction import analyze as run_analysis
    from attndyn.workflow import ownership, runs
    from attndyn.workflow.files import RunFolderError, write_json

    try:
        run = runs.read(run_dir)
    except RunFolderError as err:
        fail(f"cannot read run folder {str(run_dir)!r}: {err}")
    traj = Trajectory(torch.from_numpy(run.ts), torch.from_numpy(run.xs), variable=run.variable)
    try:
        result = run_analysis(traj, run.model)
    except ValueError as err:
        fail(f"cannot analyse {str(run_dir)!r}: {err}")
    owner = ownership.claim(run_dir, "run", "attndyn analyze", option="RUN_DIR")
    try:
        owner.refuse_foreign("analysis.json", "analysis.png")
    except ownership.OwnershipError as err:
        fail(str(err))
    write_json(run_dir / "analysis.json", result.to_dict())
    owner.add("analysis.json")
    _analysis_figure(run_dir, traj, run.model, result)
    owner.add("analysis.png")
    table = Table(title=f"analysis of {run_dir} at t = {result.t_final:g}", show_header=True)
    table.add_column("quantity")
    table.add_column("value", overflow="fold")
    table.add_row("regime", f"{result.regime.name} ({result.regime.reference})")
    table.add_row("why", result.regime.reason)
    table.add_row("prediction", result.regime.prediction or "-")
    lo, hi = result.cluster_tol_range
    table.add_row(
        f"clusters in {result.space}", f"{result.cluster_count} (stable for tol in [{lo:.2g}, {hi:.2g}], {result.cluster_decades:.1f} decades)"
    )
    if result.max_distance_to_prediction is not None:
        table.add_row("max distance to prediction", f"{result.max_distance_to_prediction:.3g}")
    table.add_row("Boolean distance of P", ", ".join(f"{b:.2g}" for b in result.boolean_distance))
    table.add_row(f"rank of P (tol {result.rank_tol:g})", ", ".join(str(r) for r in result.rank))
    table.add_row("leaders (some P_ij > 1 - 1e-4)", "; ".join(str(lead) for lead in result.leaders))
    for name, fit in result.rates.items():
        value = f"{fit['rate']:.3f} over t in [{fit['t_from']:g}, {fit['t_to']:g}]" if isinstance(fit, dict) else f"{fit:.3f}"
        table.add_row(f"rate: {name}", value)
    for name, mono in result.monotone.items():
        table.add_row(name, "monotone" if mono["monotone"] else f"VIOLATED by {mono['max_violation']:.3g}")
    console.print(table)
    for warning in result.warnings:
        say(warning, label="warning", style="bold yellow")
    console.print(f"wrote {run_dir / 'analysis.json'}", markup=False)


@app.command("list")
def list_claims() -> None:
    """List the claims and their paper references."""
    from rich.table import Table

    from attndyn.claims import EXPERIMENTS, load

    table = Table(show_header=True)
    for col in ("claim", "paper reference", "verdict kind", "title"):
        table.add_column(col, overflow="fold")
    for cid in EXPERIMENTS:
        info = load(cid).CLAIM
        table.add_row(cid, info.paper_ref, info.kind, info.title)
    console.print(table)


def engine_options(device: str, dtype: str) -> tuple:
    """Validate ``--device`` and ``--dtype``; exit 2 with one line when unusable. Returns torch objects."""
    import torch

    from attndyn.workflow.schema import ConfigError
    from attndyn.workflow.setup import resolve_device

    if dtype not in ("float64", "float32"):
        fail(f"--dtype {dtype!r} is not float64 or float32")
    try:
        return resolve_device(device), getattr(torch, dtype)
    except ConfigError as err:
        fail(f"--device: {err}")


@app.command()
def reproduce(
    claims: Annotated[list[str] | None, typer.Argument(help="Claim ids (default: all; see `attndyn list`).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes: every claim in a few minutes on a laptop.")] = False,
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("report"),
    seed: Annotated[int, typer.Option("--seed", help="Base seed of every claim.")] = 0,
    device: Annotated[str, typer.Option("--device", help="Device of the claims' batched runs: cpu, cuda or cuda:N.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="float64 (default; the checks' thresholds assume it) or float32.")] = "float64",
    svg: Annotated[bool, typer.Option("--svg", help="Also write every figure as SVG (for papers; the page links them).")] = False,
) -> None:
    """Check the claims and write the report.

    Writes DIR/runs/CLAIM/, DIR/results.json, DIR/index.html and, with a Chromium, DIR/preview.png.
    Claims not chosen keep their runs in DIR; the page is rebuilt from every run present.
    """
    from attndyn.app.report import ReportError, build, existing_runs
    from attndyn.claims import EXPERIMENTS, load
    from attndyn.claims.runner import Computed, FigureWorker, compute_claim, config_for, finish_claim
    from attndyn.core.threads import cores
    from attndyn.workflow import ownership

    # Every option is checked before anything on disk changes.
    engine_options(device, dtype)
    chosen = list(dict.fromkeys(claims)) if claims else list(EXPERIMENTS)
    unknown = [c for c in chosen if c not in EXPERIMENTS]
    if unknown:
        fail(f"unknown claim id(s) {', '.join(unknown)}; valid ids: {', '.join(EXPERIMENTS)}")
    if not 0 <= seed < 2**31:
        fail(f"--seed {seed} must be an integer in [0, 2^31)")
    configs = {}
    for cid in chosen:
        try:
            configs[cid] = config_for(load(cid), seed=seed, quick=quick, device=device, dtype=dtype)
        except ValueError as err:
            fail(f"claim {cid}: its configuration is invalid with these options ({_one_line(err)})")
    ownership.check(out, "report")
    others = {r["id"]: r for r in existing_runs(out) if r["id"] not in chosen}
    mismatched = [cid for cid, r in others.items() if (bool(r.get("quick")), r.get("seed")) != (quick, seed)]
    if mismatched:
        r = others[mismatched[0]]
        fail(
            f"{out} holds runs made with {'--quick' if r.get('quick') else 'full sizes'} and --seed {r.get('seed')} "
            f"({', '.join(mismatched[:3])}{'...' if len(mismatched) > 3 else ''}); rerun with the same options, or name another --out"
        )
    owner = ownership.claim(out, "report", "attndyn reproduce")
    for name in ("index.html", "results.json", "preview.png"):  # the old page no longer matches its runs
        (out / name).unlink(missing_ok=True)
    start = time.perf_counter()
    bar = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
    )
    verdicts, errors, interrupted = {}, {}, False
    # a second process draws claim k's figures while claim k + 1 computes (two cores or more)
    worker = FigureWorker() if len(chosen) > 1 and cores() >= 2 and os.environ.get("ATTNDYN_FIGURE_WORKER", "1") != "0" else None

    def finished(cid: str, outcome: dict | str) -> None:
        if isinstance(outcome, dict):
            verdicts[cid] = outcome["verdict"]
        else:  # one failing claim does not cost the others their page
            errors[cid] = outcome
            say(f"{cid} did not finish: {outcome}")
        bar.advance(task)

    def collect() -> None:
        got = worker.collect() if worker is not None else None
        if got is not None:
            finished(*got)

    with bar:
        task = bar.add_task("reproduce", total=len(chosen))
        try:
            for k, cid in enumerate(chosen):
                bar.update(task, description=f"reproduce: {cid}")
                if not err_console.is_terminal:
                    say(f"{cid} ({k + 1} of {len(chosen)}), {time.perf_counter() - start:.0f} s elapsed", label="reproduce", style="bold")
                try:
                    done = compute_claim(cid, load(cid), out / "runs" / cid, seed=seed, quick=quick, config=configs[cid], svg=svg)
                    if isinstance(done, Computed) and worker is None:
                        done = finish_claim(done)
                except KeyboardInterrupt:
                    raise
                except Exception as err:
                    done = f"{type(err).__name__}: {_one_line(err)}"
                collect()  # the previous claim's figures
                if isinstance(done, Computed):
                    worker.submit(done)
                else:  # its record (finished here, or skipped: nothing to draw) or its error
                    finished(cid, done)
            collect()
        except KeyboardInterrupt:
            interrupted = True
            try:
                collect()  # the claim whose figures are being drawn finishes (a second Ctrl-C abandons it)
            except KeyboardInterrupt:
                pass
        finally:
            if worker is not None:
                worker.close()
    owner.add("runs", *(f"runs/{cid}" for cid in verdicts))
    try:
        page = build(
            out,
            list(EXPERIMENTS),
            unfinished={**errors, **{c: "interrupted before it finished" for c in chosen if interrupted and c not in verdicts and c not in errors}},
        )
    except ReportError as err:
        fail(str(err))
    owner.add("index.html", "results.json")
    summary = ", ".join(f"{v}: {sum(x == v for x in verdicts.values())}" for v in ("pass", "fail", "report", "skipped"))
    console.print(f"{len(verdicts)} of {len(chosen)} claims in {time.perf_counter() - start:.0f} s ({summary})", markup=False)
    for cid, v in verdicts.items():
        if v == "fail":
            say(f"{cid}: see the report", label="FAIL")
    if interrupted:
        say(f"{len(verdicts)} of {len(chosen)} claims finished; the page shows them: {page}", label="interrupted", style="bold yellow")
        raise typer.Exit(130)
    _preview(page)
    if (out / "preview.png").exists():
        owner.add("preview.png")
    console.print(f"report: {page.resolve()}", markup=False)
    if errors:
        raise typer.Exit(1)


def _preview(page: Path) -> None:
    """Write preview.png (the report's first screen at 1400x900) when a Chromium is available."""
    from attndyn.app.browser import BrowserUnavailable, screenshot

    try:
        screenshot(page, page.parent / "preview.png")
    except BrowserUnavailable as err:
        console.print(f"preview.png not written: {err}", style="dim", markup=False)
    except Exception as err:  # playwright's own errors (a browser that fails to start)
        console.print(f"preview.png not written: {type(err).__name__}: {str(err).splitlines()[0]}", style="dim", markup=False)


@app.command()
def report(out: Annotated[Path, typer.Argument(help="Folder written by `attndyn reproduce`.")]) -> None:
    """Rebuild the report from its run folders.

    Rewrites DIR/index.html and DIR/results.json without recomputing.
    """
    from attndyn.app.report import ReportError, build
    from attndyn.claims import EXPERIMENTS
    from attndyn.workflow import ownership

    if not out.is_dir():
        fail(f"report folder {str(out)!r} does not exist")
    owner = ownership.claim(out, "report", "attndyn report", option="DIR")
    try:
        page = build(out, list(EXPERIMENTS))
    except ReportError as err:
        for name in ("index.html", "results.json", "preview.png"):  # a stale page must not look current
            if name in owner.files:
                (out / name).unlink(missing_ok=True)
        fail(f"{err}; the old page was removed")
    owner.add("index.html", "results.json")
    _preview(page)
    console.print(f"report: {page.resolve()}", markup=False)


@app.command()
def judge(run_dir: Annotated[Path, typer.Argument(help="A claim's run folder written by `attndyn reproduce` (DIR/runs/CLAIM).")]) -> None:
    """Recompute a claim's verdict from its saved arrays.

    Uses the run folder's arrays and config, without simulating. Exits 0 on pass or report, 1 on fail, 2 on an unreadable or incomplete folder.
    """
    from rich.table import Table

    from attndyn.claims.runner import JudgeError, judge_folder

    try:
        record = judge_folder(run_dir)
    except JudgeError as err:
        fail(str(err))
    table = Table(title=f"{record['id']}: {record['verdict']}")
    for col in ("check", "value (worst case)", "threshold", "margin", "cases", "verdict", "detects"):
        table.add_column(col, overflow="fold")
    for name, c in record["checks"].items():
        verdict = "report" if c.passed is None else ("pass" if c.passed else "FAIL")
        value = f"{c.value:.4g}" + (f" ({c.worst_case})" if c.worst_case else "")
        margin = "-" if c.margin is None else f"{c.margin:.3g}"
        table.add_row(name, value, c.threshold, margin, "-" if c.n_judged is None else str(c.n_judged), verdict, c.detects or "-")
    console.print(table)
    if record["recorded_verdict"] not in (None, record["verdict"]):
        say(f"the recorded verdict was {record['recorded_verdict']!r}; judged again from the saved data it is {record['verdict']!r}", label="changed")
    raise typer.Exit(1 if record["verdict"] == "fail" else 0)


@app.command()
def checkpoint(
    path: Annotated[
        str,
        typer.Argument(
            help="'minilm' or a BERT-family folder; 'smollm2', 'gemma3', a .gguf file or a LLaMA, Gemma 3 or GPT-2 folder for a causal decoder."
        ),
    ],
    text: Annotated[str, typer.Option("--text", help="Text whose tokens start the dynamics.")] = "The quick brown fox jumps over the lazy dog.",
    layer: Annotated[int, typer.Option("--layer", help="Layer whose weights drive the dynamics.")] = 0,
    head: Annotated[int | None, typer.Option("--head", help="Head (default: all heads summed).")] = None,
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("checkpoint-report"),
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Load a pytorch_model.bin with torch.load(weights_only=True).")] = False,
    device: Annotated[str, typer.Option("--device", help="Device of the simulated dynamics: cpu, cuda or cuda:N.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="float64 (default) or float32.")] = "float64",
    prompts: Annotated[Path | None, typer.Option("--prompts", help="Decoders: a text file of prompts, one per paragraph.")] = None,
    twin_layers: Annotated[str | None, typer.Option("--twin-layers", help="Decoders: particle-twin layers, e.g. 0,7,15.")] = None,
    regime_layers: Annotated[
        str,
        typer.Option("--regime-layers", help="Decoders: layers whose heads get the paper's regime: all (default), twins, or e.g. 0,7,15."),
    ] = "all",
    table: Annotated[bool, typer.Option("--table", help="Also print the per-head table (it is in heads.csv / checkpoint.json either way).")] = False,
    spectra_only: Annotated[
        bool, typer.Option("--spectra-only", help="Encoders: the head spectra alone (no text, so no tokenizer.json or vocab.txt needed).")
    ] = False,
) -> None:
    """Head spectra and dynamics of a trained checkpoint.

    Encoders (MiniLM, BERT folders): spectra of every head, and the dynamics its weights drive
    against its hidden states. Causal decoders (SmolLM2, GGUF files, folders of the families in models/architectures.py): token geometry
    of every layer on a set of prompts, attention sinks and leaders, head spectra, and the particle
    twin of chosen layers.
    """
    from attndyn.app.checkpoint_page import checkpoint_report
    from attndyn.models.bert import CheckpointError

    dev, torch_dtype = engine_options(device, dtype)
    if _is_decoder(path):
        record = _decoder(path, out, prompts, twin_layers, regime_layers, layer, head, torch_dtype)
        if table:
            _head_table(
                record["per_head"],
                ("layer", "head", "kv_group", "regime", "effective_beta", "effective_beta_rope", "positive_share_rope", "top_eig_V_real"),
            )
        return
    p = Path(path)
    if path.lower() != "minilm" and p.is_file():
        fail(
            f"{path!r} is a file: give the folder that holds config.json and the *.safetensors weights "
            "(or 'minilm', 'smollm2', 'gemma3', a .gguf file)"
        )
    if path.lower() != "minilm" and not p.exists() and "/" in path and not path.startswith((".", "/", "~")):
        fail(f"{path!r} is not a folder here; attndyn never downloads: a hub id needs its files on disk (config.json, *.safetensors)")

    if out.exists() and not out.is_dir():
        fail(f"--out {str(out)!r} exists and is not a folder")
    bar = _status()
    try:
        with bar:
            task = bar.add_task("loading checkpoint")
            record = checkpoint_report(
                path,
                text=text,
                layer=layer,
                head=head,
                out=out,
                allow_pickle=allow_pickle,
                progress=_stages(bar, task),
                device=dev,
                dtype=torch_dtype,
                spectra_only=spectra_only,
            )
    except CheckpointError as err:
        fail(str(err))
    console.print(
        f"{record['good_triples']} of {record['heads_total']} heads are good triples; report: {(out / 'index.html').resolve()}", markup=False
    )
    if table:
        _head_table(record["per_head"], ("layer", "head", "regime", "good_triple", "effective_beta", "sym_QK_min", "sym_QK_max"))


def _head_table(rows: list[dict], columns: tuple[str, ...]) -> None:
    """The per-head table on the terminal (numbers to 4 significant digits)."""
    from rich.table import Table

    t = Table(title=f"{len(rows)} heads")
    for col in columns:
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(*(f"{r[c]:.4g}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in columns))
    console.print(t)


def _stages(bar: Progress, task) -> Callable[[str], None]:
    """``progress(message)`` for ``checkpoint``'s stages: the status line on a terminal, else one printed line per
    stage with the elapsed time, from ``PROGRESS_DELAY`` s on (a bad input found at once prints only its error)."""
    start = time.perf_counter()

    def stage(message: str) -> None:
        bar.update(task, description=message)
        elapsed = time.perf_counter() - start
        if not err_console.is_terminal and elapsed >= PROGRESS_DELAY:
            err_console.print(f"checkpoint: {message}, {elapsed:.0f} s elapsed", markup=False, highlight=False, soft_wrap=True)

    return stage


def _status() -> Progress:
    """A one-line status with the elapsed time, erased when done (the long steps of ``checkpoint``)."""
    return Progress(TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=err_console, transient=True)


def _is_decoder(path: str) -> bool:
    p = Path(path)
    if path.lower() in ("smollm2", "gemma3") or p.suffix == ".gguf":
        return True
    try:
        from attndyn.models.architectures import encoder_model_types

        # every folder that is not an encoder's goes to the decoder reader, which names an unknown model_type
        return (p / "config.json").is_file() and json.loads((p / "config.json").read_text()).get("model_type") not in encoder_model_types()
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False  # the encoder reader names what is wrong with the folder


def _decoder(
    path: str, out: Path, prompts: Path | None, twin_layers: str | None, regime_layers: str, layer: int, head: int | None, torch_dtype
) -> dict:
    """``attndyn checkpoint`` for causal decoders (see :mod:`attndyn.app.decoder_page`)."""
    from attndyn.app.decoder_page import decoder_report, prompts_from
    from attndyn.workflow import ownership

    try:
        texts = prompts_from(prompts)
    except (OSError, UnicodeDecodeError) as err:
        fail(f"--prompts {str(prompts)!r} cannot be read ({err.__class__.__name__})")
    except ValueError as err:
        fail(str(err))
    try:
        layers = None if twin_layers is None else tuple(int(v) for v in twin_layers.split(","))
    except ValueError:
        fail(f"--twin-layers {twin_layers!r} is not a comma-separated list of layer numbers")
    regimes: tuple[int, ...] | str = regime_layers
    if regime_layers not in ("all", "twins"):
        try:
            regimes = tuple(int(v) for v in regime_layers.split(","))
        except ValueError:
            fail(f"--regime-layers {regime_layers!r} is not 'all', 'twins' or a comma-separated list of layer numbers")
    ownership.check(out, "checkpoint")
    bar = _status()
    with bar:
        task = bar.add_task("reading the model")
        record = decoder_report(
            path,
            prompts=texts,
            out=out,
            twin_layers=layers,
            regime_layers=regimes,
            heatmap=None if head is None else (layer, head),
            dtype=torch_dtype,
            progress=_stages(bar, task),
        )
    last = record["per_layer"][-1]
    console.print(
        f"{record['model']}: {record['prompts']} prompts, {record['layers']} layers in {record['seconds']:.1f} s; at the last layer "
        f"mean cosine {last['mean_cosine']:.3f}, sink rate {last['sink_rate']:.2f}; report: {(out / 'index.html').resolve()}",
        markup=False,
    )
    return record


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(entry())
