"""False alarms over seeds: every pass/fail claim at quick size over many seeds (issue 33, `make seeds`).

A correct implementation of a true theorem should pass at every seed; a check that fails at some seed
is either a bug or a band that is not derived. This script runs each pass/fail claim of the registry
(``attndyn.claims.EXPERIMENTS``; ``report`` claims have no verdict and are left out) at its quick size
for each seed, in-process through the same ``config_for`` and ``run`` that ``attndyn reproduce
CLAIM --quick --seed S`` uses (nothing is re-judged here: the verdict is the claim's own
``verdict_of`` over its own checks; no run folder, figure or movie is written), and prints a table
of claim x failures: which seeds failed, which check, its value against its threshold.

Usage::

    python benchmarks/seeds.py [--seeds 0-29] [--claims a,b] [--jobs N] [--out DIR]

``--seeds`` takes ranges and lists (``0-29``, ``0,3,7-9``); ``--jobs`` runs that many worker
processes (default 1; each worker gets ``ATTNDYN_THREADS=1`` unless the variable is set); ``--out``
writes ``DIR/seeds.json`` (every run's checks, verdict and seconds), rewritten atomically after each
run so that a long sweep can be read while it goes. Exit status: 0 when every run passed (or was
skipped for lack of data), 1 when some run failed or raised, 2 on bad options.

Not collected by pytest (it lives in ``benchmarks/``) and not a CI step: 30 seeds of every claim
take a few hours on two cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

# Run as `python benchmarks/seeds.py`, Python puts this script's folder first on sys.path, and there
# benchmarks/kernels.py shadows the installed `kernels` package that transformers imports
# (transformers.integrations.hub_kernels), so every claim that builds a transformers model
# (trained-interventions) died with "ImportError: cannot import name ... from 'kernels'", in process
# and in every worker alike. This script imports none of its neighbours: drop its folder from the path
# before any claim is imported, so that claims see the same modules as `attndyn reproduce` does.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]


def parse_seeds(text: str) -> list[int]:
    """``"0-29"``, ``"0,3,7-9"`` -> sorted distinct seeds; raises ValueError naming the bad part."""
    seeds: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                seeds.update(range(a, b + 1))
            else:
                seeds.add(int(part))
        except ValueError:
            raise ValueError(f"--seeds: {part!r} is not a seed or a range a-b of seeds") from None
    if not seeds or min(seeds) < 0:
        raise ValueError(f"--seeds: {text!r} names no non-negative seed")
    return sorted(seeds)


def pass_fail_claims() -> list[str]:
    """The registry's claims that carry a verdict, in registry order."""
    from attndyn.claims import EXPERIMENTS, load

    return [cid for cid in EXPERIMENTS if load(cid).CLAIM.kind != "report"]


def seed_free(claim_id: str) -> str:
    """Why a claim's judged checks do not depend on the seed (its module's ``SEED_FREE``), or ""."""
    from attndyn.claims import load

    return getattr(load(claim_id), "SEED_FREE", "")


def run_one(claim_id: str, seed: int) -> dict:
    """One claim at quick size and one seed, as ``reproduce CLAIM --quick --seed S`` computes it."""
    from attndyn.claims import load
    from attndyn.claims.common import verdict_of
    from attndyn.claims.runner import config_for

    start = time.perf_counter()
    record: dict = {"claim": claim_id, "seed": seed}
    try:
        module = load(claim_id)
        if hasattr(module, "available"):
            ok, reason = module.available()
            if not ok:
                return {**record, "verdict": "skipped", "reason": reason, "checks": [], "seconds": 0.0}
        result = module.run(config_for(module, seed=seed, quick=True))
        checks = [
            {"name": name, "value": c.value, "threshold": c.threshold, "passed": c.passed, "worst_case": c.worst_case, "note": c.note}
            for name, c in result.checks.items()
        ]
        record.update(verdict=verdict_of(module.CLAIM.kind, result.checks), checks=checks)
    except Exception as err:  # a crash is a finding too: record it and go on
        record.update(verdict="error", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc(), checks=[])
    record["seconds"] = round(time.perf_counter() - start, 3)
    return record


def _worker_init() -> None:
    os.environ.setdefault("ATTNDYN_THREADS", "1")


def failures(record: dict) -> list[str]:
    """One line per failed judged check of a run (or its error)."""
    if record["verdict"] == "error":
        return [f"error: {record['error']}"]
    out = []
    for c in record["checks"]:
        if c["passed"] is False:
            where = f" at {c['worst_case']}" if c["worst_case"] else ""
            out.append(f"{c['name']}: {c['value']:.6g} vs {c['threshold']}{where}")
    return out


def table(records: list[dict], claims: list[str], seeds: list[int]) -> str:
    by_claim: dict[str, list[dict]] = {cid: [] for cid in claims}
    for r in records:
        by_claim[r["claim"]].append(r)
    width = max(len(c) for c in claims)
    lines = [f"{'claim':<{width}}  runs  fail  seconds (max)  failing seeds", "-" * (width + 48)]
    detail = []
    for cid in claims:
        rs = sorted(by_claim[cid], key=lambda r: r["seed"])
        bad = [r for r in rs if r["verdict"] in ("fail", "error")]
        skipped = sum(r["verdict"] == "skipped" for r in rs)
        secs = max((r["seconds"] for r in rs), default=0.0)
        seeds_text = ",".join(str(r["seed"]) for r in bad) or ("-" if not skipped else f"(skipped: {skipped})")
        lines.append(f"{cid:<{width}}  {len(rs):>4}  {len(bad):>4}  {secs:>13.1f}  {seeds_text}")
        for r in bad:
            for line in failures(r):
                detail.append(f"  {cid} seed {r['seed']}: {line}")
    total = len(records)
    nbad = sum(r["verdict"] in ("fail", "error") for r in records)
    lines.append(f"{nbad} of {total} runs failed ({len(claims)} claims x {len(seeds)} seeds)")
    if detail:
        lines += ["", "failures (check: value vs threshold at its worst case):", *detail]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-29", help="seeds, e.g. 0-29 or 0,3,7-9 (default 0-29)")
    parser.add_argument("--claims", default="", help="comma-separated claim ids (default: every pass/fail claim)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--out", default=None, help="folder for seeds.json (written atomically after each run)")
    args = parser.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"--jobs: {args.jobs} is not a positive number of processes", file=sys.stderr)
        return 2
    from attndyn.claims import EXPERIMENTS

    eligible = pass_fail_claims()
    if args.claims:
        claims = [c.strip() for c in args.claims.split(",") if c.strip()]
        for c in claims:
            if c not in EXPERIMENTS:
                print(f"--claims: {c!r} is not a claim id (see `attndyn list`)", file=sys.stderr)
                return 2
            if c not in eligible:
                print(f"--claims: {c!r} is a report claim, with no verdict to check over seeds", file=sys.stderr)
                return 2
    else:
        claims = eligible
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)

    from attndyn.workflow.files import write_json

    # a claim whose judged checks cannot depend on the seed (its module says why in SEED_FREE) runs once
    tasks = [(c, s) for c in claims for s in (seeds[:1] if seed_free(c) else seeds)]
    for c in claims:
        if seed_free(c):
            print(f"{c}: run at seed {seeds[0]} only ({seed_free(c)})", file=sys.stderr)
    records: list[dict] = []
    started = time.perf_counter()

    def done(record: dict) -> None:
        records.append(record)
        mark = {"pass": ".", "skipped": "s"}.get(record["verdict"], "F")
        head = f"[{len(records)}/{len(tasks)}] {record['claim']} seed {record['seed']}"
        print(f"{head}: {record['verdict']} ({record['seconds']:.1f} s) {mark}", file=sys.stderr, flush=True)
        if out is not None:
            seconds = round(time.perf_counter() - started, 1)
            summary = {"seeds": seeds, "claims": claims, "complete": len(records) == len(tasks), "seconds": seconds, "runs": records}
            write_json(out / "seeds.json", summary)

    if args.jobs == 1:
        for c, s in tasks:
            done(run_one(c, s))
    else:
        with ProcessPoolExecutor(max_workers=args.jobs, initializer=_worker_init) as pool:
            futures = [pool.submit(run_one, c, s) for c, s in tasks]
            for f in as_completed(futures):
                done(f.result())
    print(table(records, claims, seeds))
    return 0 if all(r["verdict"] in ("pass", "skipped") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
