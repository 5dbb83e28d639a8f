"""Run claims and write their run folders (edge: I/O, figures).

A claim's run folder ``DIR/runs/<id>/`` holds ``config.json``, ``result.json`` (checks,
verdict, parameters, seconds, extra information), ``arrays.npz``, ``figures/*.png``, movies
(``*.gif``) and ``summary.json``, written last: its presence marks a complete folder. A folder is
cleared of its ``summary.json`` before a rerun, so an interrupted run never looks complete.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from attndyn import __version__
from attndyn.claims import common
from attndyn.claims.common import ExperimentConfig, Result
from attndyn.core.errors import UserError
from attndyn.workflow import ownership
from attndyn.workflow.files import write_json, write_npz
from attndyn.workflow.provenance import provenance


def config_for(module: ModuleType, *, seed: int, quick: bool, device: str = "cpu", dtype: str = "float64") -> ExperimentConfig:
    overrides = dict(module.QUICK) if quick else {}
    return module.Config(seed=seed, device=device, dtype=dtype, **overrides)


def result_record(result: Result, seconds: float, quick: bool, seed: int) -> dict:
    return {
        "id": result.claim.id,
        "paper_ref": result.claim.paper_ref,
        "title": result.claim.title,
        "statement": result.claim.statement,
        "hypotheses": result.claim.hypotheses,
        "kind": result.claim.kind,
        "verdict": result.verdict,
        "checks": [
            {
                "name": name,
                "value": c.value,
                "threshold": c.threshold,
                "passed": c.passed,
                "note": c.note,
                "n_judged": c.n_judged,
                "margin": c.margin,
                "worst_case": c.worst_case,
                "detects": c.detects,
            }
            for name, c in result.checks.items()
        ],
        "params": result.params,
        "info": result.info,
        "seconds": round(seconds, 3),
        "quick": quick,
        "seed": seed,
        "version": __version__,
    }


class JudgeError(UserError):
    """A run folder that cannot be judged (incomplete, unreadable, unknown claim); one readable line."""


def judge_folder(folder: Path) -> dict:
    """Recompute a claim's checks and verdict from ``arrays.npz`` and ``config.json`` alone.

    Returns ``{"id", "kind", "verdict", "checks": {name: Check}, "info", "recorded_verdict"}``.
    Nothing is simulated: the claim module's pure ``judge(arrays, config)`` does the work, the same
    function ``reproduce`` used.
    """
    from attndyn.claims import EXPERIMENTS, load
    from attndyn.claims.common import verdict_of
    from attndyn.core.reading import FileRefused, load_npz, read_json
    from attndyn.workflow.ownership import changed_since_written

    folder = Path(folder)
    summary = folder / "summary.json"
    if not summary.exists():  # (something that is not a regular file is refused by name below)
        raise JudgeError(f"{folder} is not a complete run folder (no summary.json)")
    # a file changed since the run wrote it is refused by the hash its folder's signed marker records (a judge of edited
    # arrays could pass on fewer cases); a folder copied away from its marker is judged as it is
    for name in ("summary.json", "config.json", "result.json", "arrays.npz"):
        why = changed_since_written(folder / name)
        if why:
            raise JudgeError(f"{why}; judge the folder as the run wrote it, or reproduce the claim again")
    try:
        # tables read within bounds: a list, a FIFO or a 2000-deep nesting is refused by name
        summary_data = read_json(summary, "run folder file")
        config_data = read_json(folder / "config.json", "run folder file")
        recorded = read_json(folder / "result.json", "run folder file")
    except FileRefused as err:
        raise JudgeError(f"{folder}: cannot read the run folder ({err})") from None
    claim_id = summary_data.get("id")
    if not isinstance(claim_id, str):
        raise JudgeError(f"{summary}: 'id' is {claim_id!r}, not a claim id")
    if claim_id not in EXPERIMENTS:
        raise JudgeError(f"{folder}: unknown claim id {claim_id!r}")
    module = load(claim_id)
    if recorded.get("verdict") == "skipped":
        raise JudgeError(f"{folder}: the claim {claim_id!r} was skipped ({recorded.get('reason', '')}); there is nothing to judge")
    try:
        config = module.Config.model_validate(config_data)
    except ValueError as err:
        raise JudgeError(f"{folder}/config.json does not fit claim {claim_id!r}: {str(err).splitlines()[0]}") from None
    try:  # declared sizes checked before a read; a 0-byte file (EOFError) is a damaged file
        arrays = load_npz(folder / "arrays.npz")
    except FileRefused as err:
        raise JudgeError(f"{folder}/arrays.npz cannot be read ({err})") from None
    try:
        checks, info = module.judge(arrays, config)
    except KeyError as err:
        raise JudgeError(f"{folder}/arrays.npz lacks the array {err} that claim {claim_id!r} needs") from None
    except (ValueError, IndexError, TypeError, ArithmeticError) as err:  # arrays of the wrong shape or type
        raise JudgeError(f"{folder}/arrays.npz does not fit claim {claim_id!r} ({type(err).__name__}: {str(err).splitlines()[0]})") from None
    return {
        "id": claim_id,
        "kind": module.CLAIM.kind,
        "verdict": verdict_of(module.CLAIM.kind, checks),
        "checks": checks,
        "info": info,
        "recorded_verdict": recorded.get("verdict"),
    }


def run_claim(claim_id: str, module: ModuleType, folder: Path, **options: Any) -> dict:
    """Run one claim, write its folder, return its record: :func:`compute_claim` (``options``: its
    keywords ``seed``, ``quick``, ``device``, ``dtype``, ``config``, ``svg``), then :func:`finish_claim`."""
    done = compute_claim(claim_id, module, folder, **options)
    return done if isinstance(done, dict) else finish_claim(done)


def compute_claim(
    claim_id: str,
    module: ModuleType,
    folder: Path,
    *,
    seed: int,
    quick: bool,
    device: str = "cpu",
    dtype: str = "float64",
    config: ExperimentConfig | None = None,
    svg: bool = False,
) -> Computed | dict:
    """The first part of :func:`run_claim`: clear the folder, run the claim, write ``config.json`` and
    ``arrays.npz``. Returns what :func:`finish_claim` completes, or the finished record of a claim
    skipped because its data is unavailable. ``svg`` also writes every figure as SVG (for papers; an
    SVG costs about three PNGs, so the report's PNGs alone are the default)."""
    if config is None:
        config = config_for(module, seed=seed, quick=quick, device=device, dtype=dtype)
    owner = ownership.claim(folder, "claim-run", "attndyn reproduce", option="run folder")
    ownership.clear(owner)  # the previous run of this claim: its summary.json first of all
    folder = owner.folder
    owner.mkdir("figures")
    write_json(folder / "config.json", config.model_dump(mode="json"))
    owner.add("config.json")
    ok, reason = common.available(module)
    if not ok:
        info = module.CLAIM
        record = {
            "id": claim_id,
            "paper_ref": info.paper_ref,
            "title": info.title,
            "statement": info.statement,
            "hypotheses": info.hypotheses,
            "kind": info.kind,
            "verdict": "skipped",
            "reason": reason,
            "checks": [],
            "params": config.model_dump(mode="json"),
            "info": {},
            "seconds": 0.0,
            "quick": quick,
            "seed": seed,
            "version": __version__,
            "provenance": provenance(),
            "figures": [],
            "movies": [],
        }
        write_json(folder / "result.json", record)
        write_json(folder / "summary.json", {"id": claim_id, "verdict": "skipped", "seconds": 0.0, "version": __version__})
        owner.add("result.json", "summary.json")
        return record
    start = time.perf_counter()
    result = module.run(config)
    seconds = time.perf_counter() - start
    write_npz(folder / "arrays.npz", **result.arrays)
    owner.add("arrays.npz")
    return Computed(claim_id, module.__name__, owner, result, seconds, quick, seed, svg, provenance())


@dataclass
class Computed:
    """A claim whose run is done and whose arrays are on disk; what is left is :func:`finish_claim`:
    the figures, movies, ``result.json`` and, last, ``summary.json``. Plain data, so that a figure
    worker (:class:`FigureWorker`) can finish it in another process."""

    claim_id: str
    module: str
    owner: ownership.Owner
    result: Result
    seconds: float
    quick: bool
    seed: int
    svg: bool
    provenance: dict  # of the process that computed it (a figure worker's own command line would mislead)


def finish_claim(done: Computed) -> dict:
    """Write the figures, movies, ``result.json`` and ``summary.json`` (last) of a computed claim; its record."""
    import importlib

    from attndyn.workflow import plots

    module = importlib.import_module(done.module)
    owner, result, folder = done.owner, done.result, done.owner.folder
    names = []
    for name, fig in module.figures(result).items():
        plots.save(fig, folder / "figures" / f"{name}.png", vector=done.svg)
        names.append(f"figures/{name}.png")
    vectors = [str(Path(n).with_suffix(".svg")) for n in names] if done.svg else []
    owner.add(*names, *vectors)
    movies = [p.name for p in module.movies(result, folder)] if hasattr(module, "movies") else []
    owner.add(*movies)
    record = result_record(result, done.seconds, done.quick, done.seed)
    record["figures"] = names
    record["vectors"] = vectors
    record["movies"] = movies
    record["provenance"] = done.provenance
    write_json(folder / "result.json", record)
    write_json(folder / "summary.json", {"id": done.claim_id, "verdict": record["verdict"], "seconds": record["seconds"], "version": __version__})
    owner.add("result.json", "summary.json")
    return record


class FigureWorker:
    """Finishes computed claims (:func:`finish_claim`: figures, movies, ``result.json``, ``summary.json``)
    in a second process, one claim at a time, while the next claim computes.

    Drawing and writing the figures is about a quarter of a quick reproduction, and it needs only the
    claim's result: on a machine with two cores it overlaps the next claim's simulation. The worker is
    a fresh interpreter (``spawn``); it ignores Ctrl-C, so that the claim in flight either finishes
    (its ``summary.json`` last, as always) or is stopped by :meth:`close`, never half-written; if the
    parent dies, the worker finishes its claim, reads the end of the pipe and exits.
    """

    def __init__(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_figure_worker, args=(child,), daemon=True, name="attndyn-figures")
        self._proc.start()
        child.close()
        self.pending: str | None = None

    def submit(self, done: Computed) -> None:
        """Send a computed claim; the previous one must have been collected."""
        if self.pending is not None:
            raise RuntimeError(f"the figure worker still has {self.pending} in flight.")
        self._conn.send(done)
        self.pending = done.claim_id

    def collect(self) -> tuple[str, dict | str] | None:
        """Wait for the claim in flight: ``(claim id, record)``, ``(claim id, error text)``, or ``None``
        when nothing is in flight."""
        if self.pending is None:
            return None
        cid, self.pending = self.pending, None
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError):
            return cid, "the figure worker stopped before it finished the figures"
        return cid, value

    def close(self) -> None:
        """Stop the worker (a claim still in flight is abandoned: it has no ``summary.json``)."""
        try:
            self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self._proc.join(timeout=0.5 if self.pending is not None else 10)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=10)
        self._conn.close()


def _figure_worker(conn) -> None:  # noqa: ANN001  (a multiprocessing connection)
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C keeps
    from attndyn.core.threads import set_process_default

    set_process_default()
    while True:
        try:
            done = conn.recv()
        except (EOFError, OSError):
            return
        if done is None:
            return
        try:
            conn.send(("ok", finish_claim(done)))
        except Exception as err:  # the parent reports it as this claim's error
            text = str(err).strip().splitlines()
            conn.send(("error", f"{type(err).__name__}: {text[0] if text else ''}"))
