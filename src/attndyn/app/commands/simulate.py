"""``attndyn simulate`` (a config to a run folder) and ``attndyn analyze`` (a run folder's analysis)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndyn.app.cli_common import FORCE_ADOPT, _about, console, delayed_progress, fail, say, writable


def simulate(
    config: Annotated[Path, typer.Argument(help="TOML config (see configs/).")],
    out: Annotated[Path | None, typer.Option("--out", help="Run folder to write (required unless --explain).")] = None,
    movie: Annotated[bool, typer.Option("--movie", help="Also write trajectory.gif (the tokens moving; principal axes above d = 3).")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Print the engine plan (which path runs, why not a faster one) and exit.")] = False,
    force_adopt: Annotated[bool, typer.Option("--force-adopt", help=FORCE_ADOPT)] = False,
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
        fail(_about(config, err))
    if out is None:
        fail("--out is required: name the run folder to write (or pass --explain to print the plan only)")
    writable(out, "run", "attndyn simulate", force_adopt)  # before any work: a folder attndyn may not write into is refused now
    try:
        with delayed_progress("simulate", cfg.solver.t1, adaptive=cfg.solver.rtol is not None and cfg.solver.method != "long") as update:
            run = runs.execute(cfg, progress=update)
    except ConfigError as err:
        fail(_about(config, err))
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
    try:
        owner = ownership.claim(run_dir, "run", "attndyn analyze", option="RUN_DIR")
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
    apart = f"{result.cluster_count} points told apart, " if result.cluster_verdict == "no structure" else ""
    table.add_row(
        f"clusters in {result.space}",
        f"{result.clusters_reading()} ({apart}stable for tol in [{lo:.2g}, {hi:.2g}], {result.cluster_decades:.1f} decades)",
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
