"""``attndyn meanfield``: the mean-field equation on the circle, to a run folder."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated

import typer

from attndyn.app.cli_common import FORCE_ADOPT, _about, console, delayed_progress, err_console, fail, writable


def meanfield(
    config: Annotated[Path, typer.Argument(help="Mean-field TOML config (see configs/meanfield-*.toml).")],
    out: Annotated[Path, typer.Option("--out", help="Run folder to write.")],
    force_adopt: Annotated[bool, typer.Option("--force-adopt", help=FORCE_ADOPT)] = False,
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
        fail(_about(config, err))
    writable(out, "meanfield", "attndyn meanfield", force_adopt)
    start = time.perf_counter()
    try:
        with delayed_progress("meanfield", float(ts[-1]), adaptive=cfg.method == "spectral") as update:
            sol = mf.solve_circle(rho0, ts, beta=cfg.beta, usa=cfg.usa, rtol=cfg.rtol, atol=cfg.atol, method=cfg.method, cfl=cfg.cfl, progress=update)
    except ValueError as err:
        fail(_about(config, err))
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
