"""The ``attndyn`` command line (Typer + Rich). Nothing imports this module.

User errors (bad config, bad path, unreadable run folder) print one line to stderr and exit 2.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

if TYPE_CHECKING:
    from .dynamics import Model

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
) -> None:
    """attndyn: Transformers as interacting particle systems."""


@contextlib.contextmanager
def delayed_progress(description: str, total: float, *, delay: float = 1.0) -> Iterator[Callable[[float], None]]:
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
) -> None:
    """Simulate the dynamics of a config and write a run folder."""
    from . import __version__
    from . import simulate as run_simulation
    from .config import ConfigError, build, load_config
    from .io import write_json, write_npz
    from .weights import to_numpy

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
    ts, xs = traj.numpy()  # host float64 whatever the run's device and dtype
    out.mkdir(parents=True, exist_ok=True)
    # summary.json goes last: its presence marks a complete run folder.
    (out / "summary.json").unlink(missing_ok=True)
    write_json(out / "config.json", cfg.model_dump(mode="json"))
    w = setup.model.weights
    arrays = {"ts": ts, "xs": xs, "Q": to_numpy(w.Q), "K": to_numpy(w.K), "V": to_numpy(w.V)}
    if w.ff is not None:
        arrays["W"] = to_numpy(w.ff.W)
        if w.ff.bias is not None:
            arrays["bias"] = to_numpy(w.ff.bias)
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


def model_from_run(run: dict) -> Model:
    """Rebuild the Model of a run folder from its resolved config and stored weights."""
    from . import FeedForward, Model, Weights

    arrays, cfg = run["arrays"], run["config"]
    ff = None
    spec = cfg.get("weights", {}).get("feedforward")
    if spec is not None:
        ff = FeedForward(arrays["W"], spec["sigma"], arrays.get("bias"), spec.get("bias_inside", True))
    return Model(Weights(arrays["Q"], arrays["K"], arrays["V"], ff), **cfg["model"])


@app.command()
def meanfield(
    config: Annotated[Path, typer.Argument(help="Mean-field TOML config (see configs/meanfield-*.toml).")],
    out: Annotated[Path, typer.Option("--out", help="Run folder to write.")],
) -> None:
    """Solve the mean-field equation on the circle (SPEC §8.8) and write a run folder with figures."""
    import numpy as np

    from . import __version__, plots
    from . import meanfield as mf
    from .config import ConfigError, load_meanfield_config, meanfield_setup
    from .io import write_json, write_npz

    try:
        cfg = load_meanfield_config(config)
        rho0, ts = meanfield_setup(cfg)
    except ConfigError as err:
        fail(f"{config}: {err}")
    if out.exists() and not out.is_dir():
        fail(f"--out {str(out)!r} exists and is not a folder")
    start = time.perf_counter()
    try:
        sol = mf.solve_circle(rho0, ts, beta=cfg.beta, usa=cfg.usa, rtol=cfg.rtol, atol=cfg.atol, method=cfg.method, cfl=cfg.cfl)
    except ValueError as err:
        fail(f"{config}: {err}")
    except mf.ResolutionError as err:
        err_console.print(f'stopped: {err} (or use method = "finite-volume")', highlight=False, markup=False)
        raise typer.Exit(1) from None
    wall = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").unlink(missing_ok=True)  # written last: it marks a complete run folder
    write_json(out / "config.json", cfg.model_dump(mode="json"))
    write_npz(out / "density.npz", ts=sol.ts, theta=sol.theta, rho=sol.rho)
    label = f"{'USA' if cfg.usa else 'SA'}, beta = {cfg.beta:g}, M = {sol.rho.shape[1]}, {cfg.method}"
    plots.save(plots.density_map(sol.ts, sol.theta, sol.rho, title=label), out / "density.png")
    plots.save(
        plots.curves(sol.ts, {"R(t) = |int e^(i theta) rho|": mf.order_parameter(sol.rho)}, xlabel="t", ylabel="order parameter", title=label),
        out / "order_parameter.png",
    )
    plots.density_movie(out / "density.gif", sol.ts, sol.theta, sol.rho, title=label)
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
    console.print(f"wrote {out} ({sol.steps} steps, {wall:.2f} s)")


@app.command()
def analyze(run_dir: Annotated[Path, typer.Argument(help="Run folder written by `attndyn simulate`.")]) -> None:
    """Analyse a run folder: regime, limits, attention structure; writes RUN_DIR/analysis.json."""
    import torch
    from rich.table import Table

    from . import Trajectory
    from .analysis import analyze as run_analysis
    from .io import RunFolderError, load_run, write_json

    try:
        run = load_run(run_dir)
        model = model_from_run(run)
    except (RunFolderError, KeyError, TypeError, ValueError) as err:
        fail(f"cannot read run folder {str(run_dir)!r}: {err}")
    arrays = run["arrays"]
    traj = Trajectory(torch.from_numpy(arrays["ts"]), torch.from_numpy(arrays["xs"]), variable=run["summary"].get("variable", "x"))
    try:
        result = run_analysis(traj, model)
    except ValueError as err:
        fail(f"cannot analyse {str(run_dir)!r}: {err}")
    write_json(run_dir / "analysis.json", result.to_dict())
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
        console.print(f"[bold yellow]warning:[/] {warning}")
    console.print(f"wrote {run_dir / 'analysis.json'}")


@app.command("list")
def list_claims() -> None:
    """List the claims that `attndyn reproduce` checks, with their paper references."""
    from rich.table import Table

    from .experiments import EXPERIMENTS, load

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

    from .config import ConfigError, resolve_device

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
) -> None:
    """Run the claims of the paper and write DIR/index.html and DIR/results.json."""
    from .experiments import EXPERIMENTS, load
    from .experiments.runner import run_claim
    from .report import ReportError, build

    engine_options(device, dtype)
    chosen = list(claims) if claims else list(EXPERIMENTS)
    unknown = [c for c in chosen if c not in EXPERIMENTS]
    if unknown:
        fail(f"unknown claim id(s) {', '.join(unknown)}; valid ids: {', '.join(EXPERIMENTS)}")
    if out.exists() and not out.is_dir():
        fail(f"--out {str(out)!r} exists and is not a folder")
    (out / "index.html").unlink(missing_ok=True)
    (out / "results.json").unlink(missing_ok=True)
    runs = out / "runs"
    if runs.is_dir():
        import shutil

        for old in runs.iterdir():
            if old.is_dir() and old.name not in chosen:
                shutil.rmtree(old)
    start = time.perf_counter()
    bar = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=err_console
    )
    verdicts = {}
    with bar:
        task = bar.add_task("reproduce", total=len(chosen))
        for cid in chosen:
            bar.update(task, description=f"reproduce: {cid}")
            record = run_claim(cid, load(cid), runs / cid, seed=seed, quick=quick, device=device, dtype=dtype)
            verdicts[cid] = record["verdict"]
            bar.advance(task)
    try:
        page = build(out, list(EXPERIMENTS))
    except ReportError as err:
        fail(str(err))
    summary = ", ".join(f"{v}: {sum(x == v for x in verdicts.values())}" for v in ("pass", "fail", "report", "skipped"))
    console.print(f"{len(chosen)} claims in {time.perf_counter() - start:.0f} s ({summary})")
    for cid, v in verdicts.items():
        if v == "fail":
            console.print(f"[bold red]FAIL[/] {cid}: see the report")
    _preview(page)
    console.print(f"report: {page.resolve()}")


def _preview(page: Path) -> None:
    """Write preview.png (the report's first screen at 1400x900) when a Chromium is available."""
    from .browser import BrowserUnavailable, screenshot

    try:
        screenshot(page, page.parent / "preview.png")
    except BrowserUnavailable as err:
        console.print(f"[dim]preview.png not written: {err}[/dim]")
    except Exception as err:  # playwright's own errors (a browser that fails to start)
        console.print(f"[dim]preview.png not written: {type(err).__name__}: {str(err).splitlines()[0]}[/dim]")


@app.command()
def report(out: Annotated[Path, typer.Argument(help="Folder written by `attndyn reproduce`.")]) -> None:
    """Rebuild DIR/index.html and DIR/results.json from the run folders, without recomputing."""
    from .experiments import EXPERIMENTS
    from .report import ReportError, build

    try:
        page = build(out, list(EXPERIMENTS))
    except ReportError as err:
        fail(str(err))
    _preview(page)
    console.print(f"report: {page.resolve()}")


@app.command()
def judge(run_dir: Annotated[Path, typer.Argument(help="A claim's run folder written by `attndyn reproduce` (DIR/runs/CLAIM).")]) -> None:
    """Recompute a claim's checks and verdict from its saved arrays and config, without simulating.

    Exits 0 on pass or report, 1 on fail, 2 on an unreadable or incomplete folder.
    """
    from rich.table import Table

    from .experiments.runner import JudgeError, judge_folder

    try:
        record = judge_folder(run_dir)
    except JudgeError as err:
        fail(str(err))
    table = Table(title=f"{record['id']}: {record['verdict']}")
    for col in ("check", "value", "threshold", "cases", "verdict"):
        table.add_column(col, overflow="fold")
    for name, c in record["checks"].items():
        verdict = "report" if c.passed is None else ("pass" if c.passed else "FAIL")
        table.add_row(name, f"{c.value:.4g}", c.threshold, "-" if c.n_judged is None else str(c.n_judged), verdict)
    console.print(table)
    if record["recorded_verdict"] not in (None, record["verdict"]):
        console.print(
            f"[bold red]the recorded verdict was {record['recorded_verdict']!r}; judged again from the saved data it is {record['verdict']!r}[/]"
        )
    raise typer.Exit(1 if record["verdict"] == "fail" else 0)


@app.command()
def checkpoint(
    path: Annotated[str, typer.Argument(help="Checkpoint folder (config.json + model.safetensors), or 'minilm'.")],
    text: Annotated[str, typer.Option("--text", help="Text whose tokens start the dynamics.")] = "The quick brown fox jumps over the lazy dog.",
    layer: Annotated[int, typer.Option("--layer", help="Layer whose weights drive the dynamics.")] = 0,
    head: Annotated[int | None, typer.Option("--head", help="Head (default: all heads summed).")] = None,
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("checkpoint-report"),
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Load a pytorch_model.bin with torch.load(weights_only=True).")] = False,
    device: Annotated[str, typer.Option("--device", help="Device of the simulated dynamics: cpu, cuda or cuda:N.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="float64 (default) or float32.")] = "float64",
) -> None:
    """Spectra of every head of a trained checkpoint, and the dynamics its weights drive vs its hidden states."""
    from .checkpoint_report import checkpoint_report
    from .checkpoints import CheckpointError

    dev, torch_dtype = engine_options(device, dtype)

    if out.exists() and not out.is_dir():
        fail(f"--out {str(out)!r} exists and is not a folder")
    bar = Progress(TextColumn("[bold]{task.description}"), TimeElapsedColumn(), console=err_console, transient=True)
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
                progress=lambda msg: bar.update(task, description=msg),
                device=dev,
                dtype=torch_dtype,
            )
    except CheckpointError as err:
        fail(str(err))
    console.print(f"{record['good_triples']} of {record['heads_total']} heads are good triples; report: {(out / 'index.html').resolve()}")


if __name__ == "__main__":  # pragma: no cover
    app()
