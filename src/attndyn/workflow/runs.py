"""One simulation run as a library unit: the run folder's writer and reader (edge: files).

Contract
--------
``execute(config) -> Run`` builds a :class:`~attndyn.workflow.schema.SimulationConfig` (see
:mod:`attndyn.workflow.schema`) and integrates it; ``write(run, folder)`` writes the run folder
(``config.json``, ``trajectory.npz``, ``trajectory.png``, then ``summary.json`` last: its presence
marks a complete folder); ``read(folder) -> Run`` reads one back, refusing incomplete or
inconsistent folders with :class:`~attndyn.workflow.files.RunFolderError`. ``Run`` is a typed record: the
resolved config, the model, ``ts``/``xs`` (host float64 NumPy), the solver statistics and the wall
time. The CLI's ``simulate`` and ``analyze`` only parse arguments and print. :func:`integrate`
runs a built config with the integrator its solver section names (the ODE, the noisy SDE, or the
long-horizon sphere integrator); sweeps use it for the points they do not batch.

Random draws (``attndyn.workflow.setup.rng_for``) come from one stream per role (x0, Q, K, V, the
feed-forward W, the noise of the noisy model), each derived from the seed by
``numpy.random.SeedSequence(seed, spawn_key=(role,))``: changing n or d changes the initial state
only, not the weights drawn for another role.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attndyn.core.dynamics import Model
from attndyn.core.weights import FeedForward, Weights, to_numpy
from attndyn.workflow import ownership
from attndyn.workflow.files import PARTIAL, RunFolderError, load_run, write_json, write_npz
from attndyn.workflow.schema import ConfigError, SimulationConfig
from attndyn.workflow.setup import Setup, build


@dataclass(frozen=True)
class Run:
    """A finished simulation: resolved config, model, save times ``ts`` ``(T,)``, states ``xs`` ``(T, ..., n, d)``."""

    config: dict
    model: Model
    ts: np.ndarray
    xs: np.ndarray
    stats: dict = field(default_factory=dict)
    wall_seconds: float = 0.0
    version: str = ""

    @property
    def variable(self) -> str:
        return "z" if self.model.rescaled else "x"


class RunInterrupted(Exception):
    """An integration stopped by KeyboardInterrupt (Ctrl-C, or SIGTERM turned into one): ``run``
    holds the saves computed until then (``None`` when not even the first was recorded)."""

    def __init__(self, run: Run | None):
        super().__init__("interrupted")
        self.run = run


def execute(config: SimulationConfig, *, progress: Callable[[float], None] | None = None) -> Run:
    """Build and integrate ``config``; raises ConfigError (bad config), RuntimeError/FloatingPointError
    (a failed run), or :class:`RunInterrupted` with the saves so far (an interrupted ODE run)."""
    from attndyn import __version__

    setup = build(config)
    start = time.perf_counter()
    saves: list[tuple[float, np.ndarray]] = []
    try:
        ts, xs, stats = integrate(setup, progress=progress, saves=saves)
    except KeyboardInterrupt:
        partial = None
        if saves:
            ts = np.array([t for t, _ in saves])
            xs = np.stack([x for _, x in saves])
            partial = Run(config.model_dump(mode="json"), setup.model, ts, xs, {}, time.perf_counter() - start, __version__)
        raise RunInterrupted(partial) from None
    wall = time.perf_counter() - start
    return Run(config.model_dump(mode="json"), setup.model, ts, xs, stats, wall, __version__)


def explain(config: SimulationConfig) -> str:
    """The engine plan of ``config``'s run as :func:`execute` would integrate it (``attndyn simulate
    --explain``): :func:`attndyn.plan` for an ODE run (with ``observe`` and ``progress``, which the run
    folder's saves and the progress bar use), one line for the SDE and long-horizon integrators."""
    from attndyn.core.simulation import plan

    setup = _planning_setup(config)
    if setup.kind == "sde":
        return "engine plan: projected Euler-Maruyama of the noisy model (attndyn.core.noise.simulate_sde); no other path"
    if setup.kind == "long":
        return "engine plan: the long-horizon integrator on merged points (attndyn.simulate_long), its field in C where available"
    report = plan(
        setup.model,
        setup.x0,
        setup.ts,
        solver=setup.solver,
        step=setup.step,
        max_steps=setup.max_steps,
        threads=setup.threads,
        observe=lambda t, x: x,
        progress=lambda t: None,
    )
    return str(report)


def _planning_setup(config: SimulationConfig) -> Setup:
    """What the plan is decided on, without building heads x d x d weights: a config of several heads
    whose weights are not listed head by head is built with one head, and that head stands for all of
    them as a view (stride 0, nothing allocated). The plan reads the heads only through their count,
    head 0 (is V a multiple of I) and whether they need gradients, which the stand-in shares with the
    real weights (the memory and work budgets are checked on the real config first)."""
    import dataclasses

    from attndyn.workflow.setup import check_budget

    w = config.weights
    listed = any(spec.kind == "matrix" and np.ndim(spec.values) == 3 for spec in (w.Q, w.K, w.V))
    if w.heads == 1 or listed:  # listed values are in the config already: building them costs no more
        return build(config)
    check_budget(config)
    one = build(config.model_copy(update={"weights": w.model_copy(update={"heads": 1})}))
    stand_in = one.model.weights
    for name in ("Q", "K", "V"):  # past Weights' checks (which would read every repeated entry): head 0's, checked already
        object.__setattr__(stand_in, name, getattr(stand_in, name).expand(w.heads, -1, -1))
    try:  # the model's own checks on several heads (a rescaled model needs one V), as build makes them
        return dataclasses.replace(one, model=dataclasses.replace(one.model, weights=stand_in))
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from None


def integrate(setup: Setup, *, progress: Callable[[float], None] | None = None, saves: list | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """Integrate a built config with the integrator its solver section names: ``(ts, xs, stats)``.

    ``ode``: :func:`attndyn.simulate` (``x0`` may carry batch dimensions); ``sde``: the noisy model
    by projected Euler-Maruyama, seeded by the config's ``noise`` stream; ``long``:
    :func:`attndyn.simulate_long` (stats add the merge count). ``saves``: a list that an ODE run
    appends ``(t, x)`` to at every save time as it goes (what an interrupted run can keep).
    """
    from attndyn.core.simulation import simulate

    if setup.kind == "sde":
        from attndyn.core.noise import simulate_sde

        ts, xs = simulate_sde(setup.model, setup.x0, setup.ts, kappa=setup.kappa, dt=setup.step.dt, seed=setup.noise_seed, threads=setup.threads)
        steps = round(float(ts[-1]) / setup.step.dt)
        return ts, xs, {"nfev": steps, "steps": steps, "rejected": 0}
    if setup.kind == "long":
        from attndyn.core.longtime import simulate_long

        traj = simulate_long(setup.model, setup.x0, setup.ts, rtol=setup.step.rtol, atol=setup.step.atol, max_steps=setup.max_steps)
        stats = {k: int(traj.stats[k]) for k in ("nfev", "steps", "rejected")}
        return traj.ts, traj.xs, {**stats, "merges": len(traj.merges)}

    def keep(t: float, x):
        saves.append((float(t), x.detach().to("cpu", copy=True).double().numpy()))
        return x.new_zeros(())

    traj = simulate(
        setup.model,
        setup.x0,
        setup.ts,
        solver=setup.solver,
        step=setup.step,
        max_steps=setup.max_steps,
        progress=progress,
        threads=setup.threads,
        observe=None if saves is None else keep,
    )
    ts, xs = traj.numpy()
    return ts, xs, dict(traj.stats)


def write(run: Run, folder: str | Path, *, partial: str | None = None) -> Path:
    """Write ``run`` as a run folder (summary.json last); returns the folder.

    The folder must be new, empty or an attndyn run folder (:mod:`attndyn.workflow.ownership`,
    OwnershipError otherwise); the previous run's files there (its analysis and figures included)
    are removed first, files attndyn did not write are left alone. With ``partial`` (why the run
    stopped), the saves computed so far are written with ``partial.json`` instead of
    ``summary.json``: :func:`read` and the report refuse such a folder, naming it partial.
    """
    from attndyn.workflow import plots

    owner = ownership.claim(folder, "run", "attndyn simulate")
    ownership.clear(owner)
    folder = owner.folder
    write_json(folder / "config.json", run.config)
    owner.add("config.json")
    w = run.model.weights
    arrays = {"ts": run.ts, "xs": run.xs, "Q": to_numpy(w.Q), "K": to_numpy(w.K), "V": to_numpy(w.V)}
    if w.ff is not None:
        arrays["W"] = to_numpy(w.ff.W)
        if w.ff.bias is not None:
            arrays["bias"] = to_numpy(w.ff.bias)
    write_npz(folder / "trajectory.npz", **arrays)
    owner.add("trajectory.npz")
    n, d = run.config["n"], run.config["d"]
    if partial is not None:
        write_json(folder / PARTIAL, {"reason": partial, "t_reached": float(run.ts[-1]), "saves": len(run.ts), "version": run.version})
        owner.add(PARTIAL)
        return folder
    plots.save(
        plots.trajectories(run.ts, run.xs, variable=run.variable, title=f"{n} tokens, d = {d}, {run.variable}-form"), folder / "trajectory.png"
    )
    owner.add("trajectory.png", "trajectory.svg")
    write_json(
        folder / "summary.json",
        {
            "version": run.version,
            "seed": run.config["seed"],
            "stats": run.stats,
            "wall_seconds": round(run.wall_seconds, 4),
            "n": n,
            "d": d,
            "t1": float(run.ts[-1]),
            "saves": len(run.ts),
            "variable": run.variable,
        },
    )
    owner.add("summary.json")
    return folder


def model_of(config: dict, arrays: dict) -> Model:
    """The Model of a run folder from its resolved config and stored weights."""
    ff = None
    spec = config.get("weights", {}).get("feedforward")
    if spec is not None:
        ff = FeedForward(arrays["W"], spec["sigma"], arrays.get("bias"), spec.get("bias_inside", True))
    return Model(Weights(arrays["Q"], arrays["K"], arrays["V"], ff), **config["model"])


def read(folder: str | Path) -> Run:
    """Read a complete run folder back; raises RunFolderError (one line) otherwise."""
    raw = load_run(folder)
    try:
        model = model_of(raw["config"], raw["arrays"])
    except (KeyError, TypeError, ValueError) as err:
        raise RunFolderError(f"run folder {str(folder)!r}: its config and weights do not make a model ({err})") from None
    summary = raw["summary"]
    return Run(
        raw["config"],
        model,
        raw["arrays"]["ts"],
        raw["arrays"]["xs"],
        summary.get("stats", {}),
        summary.get("wall_seconds", 0.0),
        summary.get("version", ""),
    )
