"""Run claims and write their run folders (edge: I/O, figures).

A claim's run folder ``DIR/runs/<id>/`` holds ``config.json``, ``result.json`` (checks,
verdict, parameters, seconds, extra information), ``arrays.npz``, ``figures/*.png``, movies
(``*.gif``) and ``summary.json``, written last: its presence marks a complete folder. A folder is
cleared of its ``summary.json`` before a rerun, so an interrupted run never looks complete.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType

from attndyn import __version__
from attndyn.claims.common import ExperimentConfig, Result
from attndyn.core.errors import UserError
from attndyn.workflow import ownership
from attndyn.workflow.files import write_json, write_npz


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
    import json

    import numpy as np

    from attndyn.claims import EXPERIMENTS, load
    from attndyn.claims.common import verdict_of

    folder = Path(folder)
    summary = folder / "summary.json"
    if not summary.is_file():
        raise JudgeError(f"{folder} is not a complete run folder (no summary.json)")
    try:
        claim_id = json.loads(summary.read_text())["id"]
        config_data = json.loads((folder / "config.json").read_text())
        recorded = json.loads((folder / "result.json").read_text())
    except (OSError, ValueError, KeyError) as err:
        raise JudgeError(f"{folder}: cannot read the run folder ({err})") from None
    if claim_id not in EXPERIMENTS:
        raise JudgeError(f"{folder}: unknown claim id {claim_id!r}")
    module = load(claim_id)
    if recorded.get("verdict") == "skipped":
        raise JudgeError(f"{folder}: the claim {claim_id!r} was skipped ({recorded.get('reason', '')}); there is nothing to judge")
    if not hasattr(module, "judge"):
        raise JudgeError(f"claim {claim_id!r} does not yet separate its checks from its simulation; rerun it with `attndyn reproduce`")
    try:
        config = module.Config.model_validate(config_data)
    except ValueError as err:
        raise JudgeError(f"{folder}/config.json does not fit claim {claim_id!r}: {str(err).splitlines()[0]}") from None
    try:
        with np.load(folder / "arrays.npz", allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
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


def run_claim(
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
) -> dict:
    """Run one claim, write its folder, return its record; ``svg`` also writes every figure as SVG
    (for papers; an SVG costs about three PNGs, so the report's PNGs alone are the default)."""
    from attndyn.workflow import plots

    if config is None:
        config = config_for(module, seed=seed, quick=quick, device=device, dtype=dtype)
    owner = ownership.claim(folder, "claim-run", "attndyn reproduce", option="run folder")
    ownership.clear(owner)  # the previous run of this claim: its summary.json first of all
    folder = owner.folder
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", config.model_dump(mode="json"))
    owner.add("config.json")
    if hasattr(module, "available"):
        ok, reason = module.available()
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
    names = []
    for name, fig in module.figures(result).items():
        plots.save(fig, folder / "figures" / f"{name}.png", vector=svg)
        names.append(f"figures/{name}.png")
    vectors = [str(Path(n).with_suffix(".svg")) for n in names] if svg else []
    owner.add(*names, *vectors)
    movies = [p.name for p in module.movies(result, folder)] if hasattr(module, "movies") else []
    owner.add(*movies)
    record = result_record(result, seconds, quick, seed)
    record["figures"] = names
    record["vectors"] = vectors
    record["movies"] = movies
    write_json(folder / "result.json", record)
    write_json(folder / "summary.json", {"id": claim_id, "verdict": record["verdict"], "seconds": record["seconds"], "version": __version__})
    owner.add("result.json", "summary.json")
    return record
