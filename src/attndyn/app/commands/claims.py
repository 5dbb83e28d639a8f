"""The paper's claims: ``attndyn list``, ``reproduce`` (compute and judge, write the report), ``report`` (rebuild
the page) and ``judge`` (recompute one claim's verdict from its saved arrays).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from attndyn.app.cli_common import FORCE_ADOPT, _one_line, console, engine_options, err_console, fail, say, writable


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


def reproduce(
    claims: Annotated[list[str] | None, typer.Argument(help="Claim ids (default: all; see `attndyn list`).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes: every claim in a few minutes on a laptop.")] = False,
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("report"),
    seed: Annotated[int, typer.Option("--seed", help="Base seed of every claim.")] = 0,
    device: Annotated[str, typer.Option("--device", help="Device of the claims' batched runs: cpu, cuda or cuda:N.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="float64 (default; the checks' thresholds assume it) or float32.")] = "float64",
    svg: Annotated[bool, typer.Option("--svg", help="Also write every figure as SVG (for papers; the page links them).")] = False,
    force_adopt: Annotated[bool, typer.Option("--force-adopt", help=FORCE_ADOPT)] = False,
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
    writable(out, "report", "attndyn reproduce", force_adopt)
    for cid in chosen:  # every claim's run folder is checked too, before any work
        try:
            ownership.check(out / "runs" / cid, "claim-run", option="run folder")
        except ownership.OwnershipError as err:
            fail(str(err))
    others = {r["id"]: r for r in existing_runs(out) if r["id"] not in chosen}
    mismatched = [cid for cid, r in others.items() if (bool(r.get("quick")), r.get("seed")) != (quick, seed)]
    if mismatched:
        r = others[mismatched[0]]
        fail(
            f"{out} holds runs made with {'--quick' if r.get('quick') else 'full sizes'} and --seed {r.get('seed')} "
            f"({', '.join(mismatched[:3])}{'...' if len(mismatched) > 3 else ''}); rerun with the same options, or name another --out"
        )
    owner = ownership.claim(out, "report", "attndyn reproduce")
    owner.remove("index.html", "results.json", "preview.png")  # the old page no longer matches its runs
    owner.mkdir("runs")
    start = time.perf_counter()
    bar = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        disable=not err_console.is_terminal,  # off a terminal: the plain lines below, and no bar drawn into a log
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
        owner.remove("index.html", "results.json", "preview.png")  # a stale page must not look current
        fail(f"{err}; the old page was removed")
    owner.add("index.html", "results.json")
    _preview(page)
    console.print(f"report: {page.resolve()}", markup=False)


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
    rows = []
    for name, c in record["checks"].items():
        verdict = "report" if c.passed is None else ("pass" if c.passed else "FAIL")
        value = f"{c.value:.4g}" + (f" ({c.worst_case})" if c.worst_case else "")
        margin = "-" if c.margin is None else f"{c.margin:.3g}"
        rows.append((name, value, c.threshold, margin, "-" if c.n_judged is None else str(c.n_judged), verdict, c.detects or "-"))
    if console.is_terminal:
        table = Table(title=f"{record['id']}: {record['verdict']}")
        for col in ("check", "value (worst case)", "threshold", "margin", "cases", "verdict", "detects"):
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    else:
        # piped or redirected: one unwrapped line per check, which grep and a log keep whole (a table at the
        # pipe's default width of 80 folds every cell mid-word)
        print(f"{record['id']}: {record['verdict']}")
        for name, value, threshold, margin, cases, verdict, detects in rows:
            print(f"{verdict}: {name}; value (worst case) {value}; threshold {threshold}; margin {margin}; cases {cases}; detects: {detects}")
    if record["recorded_verdict"] not in (None, record["verdict"]):
        say(f"the recorded verdict was {record['recorded_verdict']!r}; judged again from the saved data it is {record['verdict']!r}", label="changed")
    raise typer.Exit(1 if record["verdict"] == "fail" else 0)
