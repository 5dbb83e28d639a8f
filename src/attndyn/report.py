"""Run folders -> ``index.html`` + ``results.json`` (edge). Never re-runs an experiment.

Contract
--------
``build(out_dir)`` reads every ``out_dir/runs/<claim>/`` (``result.json`` and ``summary.json``;
figures and movies by reference), checks that each is complete and that every file it names
exists, and writes ``results.json`` and a self-contained ``index.html`` (figures linked from the
run folders, relative paths). Any missing, half-written or corrupted folder raises
:class:`ReportError` (one line) before anything is written, so no page that looks complete can
come from incomplete runs.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from . import __version__
from .io import atomic_write_text, write_json

CHECK_KEYS = ("name", "value", "threshold", "passed", "n_judged")
CLAIM_KEYS = ("id", "paper_ref", "verdict", "checks", "params", "seconds")


class ReportError(ValueError):
    """The run folders cannot make a trustworthy report; the message is one line."""


def read_record(folder: Path) -> dict:
    for name in ("summary.json", "result.json"):
        if not (folder / name).is_file():
            raise ReportError(f"run folder {folder} is incomplete: {name} is missing (interrupted run?)")
    try:
        record = json.loads((folder / "result.json").read_text())
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"run folder {folder} is corrupted: {err.__class__.__name__} reading its JSON") from None
    if not isinstance(record, dict) or any(k not in record for k in CLAIM_KEYS):
        raise ReportError(f"run folder {folder} is corrupted: result.json lacks {[k for k in CLAIM_KEYS if k not in record]}")
    if summary.get("id") != record["id"] or summary.get("verdict") != record["verdict"]:
        raise ReportError(f"run folder {folder} is inconsistent: summary.json and result.json disagree")
    if record["verdict"] not in ("pass", "fail", "report", "skipped"):
        raise ReportError(f"run folder {folder} is corrupted: unknown verdict {record['verdict']!r}")
    for rel in record.get("figures", []) + record.get("movies", []):
        if not (folder / rel).is_file():
            raise ReportError(f"run folder {folder} is incomplete: {rel} is missing")
    return record


def collect(out_dir: Path, order: list[str] | None = None) -> list[dict]:
    runs = Path(out_dir) / "runs"
    if not runs.is_dir():
        raise ReportError(f"{out_dir} holds no run folders (expected {runs})")
    folders = sorted(p for p in runs.iterdir() if p.is_dir())
    if not folders:
        raise ReportError(f"{runs} is empty")
    # The claims' order comes from the caller (the CLI passes the registry's); the report itself
    # only reads run folders.
    rank = {cid: k for k, cid in enumerate(order or [])}
    records = [read_record(f) for f in folders]
    return sorted(records, key=lambda r: (rank.get(r["id"], len(rank)), r["id"]))


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e4):
            return f"{value:.3e}"
        return f"{value:.4g}"
    return html.escape(str(value))


def _verdict_cell(v) -> str:
    cls = {"pass": "pass", "fail": "fail", "report": "report", "skipped": "skip"}.get(v, "report")
    return f'<td class="{cls}">{html.escape(str(v))}</td>'


def _check_verdict(passed) -> str:
    return "report" if passed is None else ("pass" if passed else "fail")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:0.6em 0;font-size:0.92em}td,th{border:1px solid #ccc;padding:0.25em 0.5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.pass{background:#d8f5d8}.fail{background:#f8d0d0;font-weight:bold}.report{background:#e6eefc}.skip{background:#eee}
section{border-top:2px solid #ddd;margin-top:2em;padding-top:0.5em}img{max-width:100%;margin:0.4em 0;border:1px solid #eee}
code,pre{background:#f6f6f6;padding:0.1em 0.3em;font-size:0.9em}pre{white-space:pre-wrap;padding:0.5em}
"""


def render(records: list[dict], *, quick: bool, seed: int) -> str:
    rows = []
    for r in records:
        checks = r["checks"] or [{"name": r.get("reason", "-"), "value": None, "threshold": "", "passed": None}]
        for k, c in enumerate(checks):
            head = (
                f'<td rowspan="{len(checks)}"><a href="#{html.escape(r["id"])}">{html.escape(r["id"])}</a></td>'
                f'<td rowspan="{len(checks)}">{html.escape(r["paper_ref"])}</td>'
                if k == 0
                else ""
            )
            tail = _verdict_cell(r["verdict"]) if k == 0 else ""
            if k == 0 and len(checks) > 1:
                tail = tail.replace("<td ", f'<td rowspan="{len(checks)}" ')
            rows.append(
                f"<tr>{head}<td>{html.escape(c['name'])}</td><td>{_fmt(c['value'])}</td><td>{html.escape(str(c['threshold']))}</td>"
                f"{_verdict_cell(_check_verdict(c['passed']))}{tail}</tr>"
            )
    counts = {v: sum(r["verdict"] == v for r in records) for v in ("pass", "fail", "report", "skipped")}
    sections = []
    for r in records:
        folder = f"runs/{r['id']}"
        checks = "".join(
            f"<tr><td>{html.escape(c['name'])}</td><td>{_fmt(c['value'])}</td><td>{html.escape(str(c['threshold']))}</td>"
            f"<td>{_fmt(c.get('n_judged'))}</td>"
            f"{_verdict_cell(_check_verdict(c['passed']))}<td>{html.escape(c.get('note', '') or '')}</td></tr>"
            for c in r["checks"]
        )
        figs = "".join(f'<figure><img src="{folder}/{html.escape(f)}" alt="{html.escape(f)}"></figure>' for f in r.get("figures", []))
        movies = "".join(f'<figure><img src="{folder}/{html.escape(m)}" alt="movie {html.escape(m)}"></figure>' for m in r.get("movies", []))
        params = html.escape(json.dumps(r["params"], indent=None))
        reason = f"<p><b>Skipped:</b> {html.escape(r['reason'])}</p>" if r["verdict"] == "skipped" else ""
        sections.append(
            f'<section id="{html.escape(r["id"])}"><h2>{html.escape(r["id"])}: {html.escape(r.get("title", ""))}</h2>'
            f"<p><b>Paper:</b> {html.escape(r['paper_ref'])}. <b>Verdict:</b> {html.escape(r['verdict'])} "
            f"({r['seconds']:.1f} s)</p>{reason}<p>{html.escape(r.get('statement', ''))}</p>"
            f"<p><b>Hypotheses:</b> {html.escape(r.get('hypotheses', ''))}</p>"
            f"<p><b>Parameters and seeds:</b> <code>{params}</code></p>"
            f"<table><tr><th>check</th><th>value</th><th>threshold</th><th>cases judged</th><th>verdict</th><th>note</th></tr>{checks}</table>"
            f"{figs}{movies}</section>"
        )
    size = "quick" if quick else "full"
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>attndyn: reproduction report</title>"
        f"<style>{CSS}</style></head><body>"
        "<h1>The emergence of clusters in self-attention dynamics: reproduction report</h1>"
        f"<p>attndyn {html.escape(__version__)}, {size} run, base seed {seed}. Geshkovski, Letrouit, Polyanskiy, Rigollet, "
        "NeurIPS 2023 (arXiv:2305.05465v6). Each claim is checked numerically; conjectures and open problems carry the "
        "verdict <i>report</i>: values, no judgement. A failing check is shown as failing.</p>"
        f"<p><b>{counts['pass']}</b> pass, <b>{counts['fail']}</b> fail, <b>{counts['report']}</b> report, "
        f"<b>{counts['skipped']}</b> skipped.</p>"
        "<table><tr><th>claim</th><th>paper reference</th><th>check</th><th>measured value</th><th>threshold</th>"
        f"<th>check verdict</th><th>claim verdict</th></tr>{''.join(rows)}</table>{''.join(sections)}</body></html>"
    )


def results_json(records: list[dict], *, quick: bool, seed: int) -> dict:
    def clean(v):
        return v if not (isinstance(v, float) and not math.isfinite(v)) else None

    return {
        "version": __version__,
        "quick": quick,
        "seed": seed,
        "claims": [
            {
                "id": r["id"],
                "paper_ref": r["paper_ref"],
                "verdict": r["verdict"],
                "checks": [{k: clean(c.get(k)) for k in CHECK_KEYS} for c in r["checks"]],
                "params": r["params"],
                "seconds": r["seconds"],
            }
            for r in records
        ],
    }


def build(out_dir: str | Path, order: list[str] | None = None) -> Path:
    """Write ``results.json`` and ``index.html`` from the run folders; returns the page's path."""
    out_dir = Path(out_dir)
    records = collect(out_dir, order)
    quick = {r.get("quick") for r in records}
    seeds = {r.get("seed") for r in records}
    if len(quick) > 1 or len(seeds) > 1:
        raise ReportError(f"run folders in {out_dir} mix quick/full runs or seeds; rerun them together")
    q, s = bool(quick.pop()), seeds.pop()
    write_json(out_dir / "results.json", results_json(records, quick=q, seed=s))
    return atomic_write_text(out_dir / "index.html", render(records, quick=q, seed=s))
