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

from attndyn import __version__
from attndyn.app import mathml
from attndyn.core.errors import UserError
from attndyn.workflow.files import atomic_write_text, write_json

CHECK_KEYS = ("name", "value", "threshold", "passed", "n_judged", "margin", "worst_case", "detects")
CLAIM_KEYS = ("id", "paper_ref", "verdict", "checks", "params", "seconds")


class ReportError(UserError):
    """The run folders cannot make a trustworthy report; the message is one line."""


def read_record(folder: Path) -> dict:
    for name in ("summary.json", "result.json"):
        if not (folder / name).exists():  # a FIFO or device is refused by name when read
            raise ReportError(f"run folder {folder} is incomplete: {name} is missing (interrupted run?)")
    from attndyn.core.reading import FileRefused, read_json

    try:  # within bounds: a list, a FIFO or a deep nesting is refused by name
        record = read_json(folder / "result.json", "run folder file")
        summary = read_json(folder / "summary.json", "run folder file")
    except FileRefused as err:
        raise ReportError(f"run folder {folder} is corrupted: {err}") from None
    if any(k not in record for k in CLAIM_KEYS):
        raise ReportError(f"run folder {folder} is corrupted: result.json lacks {[k for k in CLAIM_KEYS if k not in record]}")
    if not isinstance(record["id"], str) or not isinstance(record["checks"], list):
        raise ReportError(f"run folder {folder} is corrupted: its result.json's id or checks have the wrong type")
    files = [record.get(key, []) for key in ("figures", "vectors", "movies")]
    if not all(isinstance(names, list) for names in files):
        raise ReportError(f"run folder {folder} is corrupted: its result.json's figures, vectors or movies are not lists")
    if summary.get("id") != record["id"] or summary.get("verdict") != record["verdict"]:
        raise ReportError(f"run folder {folder} is inconsistent: summary.json and result.json disagree")
    if record["verdict"] not in ("pass", "fail", "report", "skipped"):
        raise ReportError(f"run folder {folder} is corrupted: unknown verdict {record['verdict']!r}")
    root = folder.resolve()
    for rel in sum(files, []):
        if not isinstance(rel, str) or Path(rel).is_absolute() or root not in (folder / rel).resolve().parents:
            raise ReportError(f"run folder {folder} is corrupted: its result.json names the file {rel!r} outside the folder")
        if not (folder / rel).is_file():
            raise ReportError(f"run folder {folder} is incomplete: {rel} is missing")
    return record


def collect(out_dir: Path, order: list[str] | None = None, *, unfinished: dict[str, str] | None = None) -> list[dict]:
    """The records of every run folder, in ``order``; folders named in ``unfinished`` are passed over."""
    unfinished = unfinished or {}
    runs = Path(out_dir) / "runs"
    if not runs.is_dir():
        if unfinished:
            return []
        raise ReportError(f"{out_dir} holds no run folders (expected {runs})")
    folders = sorted(p for p in runs.iterdir() if p.is_dir() and p.name not in unfinished)
    if not folders and not unfinished:
        raise ReportError(f"{runs} is empty")
    # The claims' order comes from the caller (the CLI passes the registry's); the report itself
    # only reads run folders.
    rank = {cid: k for k, cid in enumerate(order or [])}
    records = [read_record(f) for f in folders]
    seen: dict[str, Path] = {}
    for folder, r in zip(folders, records, strict=True):
        if r["id"] in seen:
            raise ReportError(f"two run folders hold the claim {r['id']!r}: {seen[r['id']]} and {folder}; remove one")
        seen[r["id"]] = folder
    return sorted(records, key=lambda r: (rank.get(r["id"], len(rank)), r["id"]))


def existing_runs(out_dir: str | Path) -> list[dict]:
    """The records of the complete run folders in ``out_dir/runs`` (incomplete ones are left out)."""
    runs = Path(out_dir) / "runs"
    if not runs.is_dir():
        return []
    out = []
    for folder in sorted(p for p in runs.iterdir() if p.is_dir()):
        try:
            out.append(read_record(folder))
        except ReportError:
            continue
    return out


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


# the model in the header, in LaTeX; the page shows it as MathML (drawn by the browser offline; attndyn.app.mathml)
MODEL_TEX = r"\dot x_i = \sum_{j} \frac{e^{\beta \langle Q x_i, K x_j \rangle}}{\sum_k e^{\beta \langle Q x_i, K x_k \rangle}}\, V x_j"

CSS = """
.provenance pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}.provenance code{overflow-wrap:anywhere}
:root{--pass:#1b7f3b;--fail:#b00020;--report:#2856a3;--skip:#666}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1400px;margin:0 auto;padding:0.6em 1.2em;color:#222;line-height:1.45}
h1{font-size:1.35em;margin:0.2em 0}header p{margin:0.2em 0;color:#444;font-size:0.92em}
.filters{display:flex;gap:0.4em;flex-wrap:wrap;align-items:center;margin:0.5em 0;font-size:0.9em}
.filters button{border:1px solid #bbb;background:#fff;border-radius:1em;padding:0.15em 0.8em;cursor:pointer}
.filters button[aria-pressed=true]{background:#222;color:#fff;border-color:#222}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(215px,1fr));gap:0.6em}
.card{border:1px solid #ddd;border-radius:6px;padding:0.5em;display:flex;flex-direction:column;background:#fff}
.card[hidden]{display:none}.card img{width:100%;height:125px;object-fit:contain;background:#fafafa;border:0}
.card h3{font-size:0.85em;margin:0.25em 0 0.1em;line-height:1.25}.card h3 a{color:#222;text-decoration:none}
.clamp{display:-webkit-box;-webkit-box-orient:vertical;-webkit-line-clamp:2;overflow:hidden}.card .ref{font-size:0.7em;color:#666;margin:0}
.card ul{font-size:0.72em;margin:0.25em 0 0;padding-left:1.1em;line-height:1.3}.card .meta{display:flex;gap:0.4em;align-items:center;margin-top:0.2em}
.badge{display:inline-block;color:#fff;border-radius:0.8em;padding:0 0.6em;font-size:0.8em;font-weight:600}
.badge.pass{background:var(--pass)}.badge.fail{background:var(--fail)}.badge.report{background:var(--report)}.badge.skipped{background:var(--skip)}
.kind{font-size:0.75em;color:#555;border:1px solid #ccc;border-radius:0.8em;padding:0 0.5em}
table{border-collapse:collapse;margin:0.6em 0;font-size:0.88em}td,th{border:1px solid #ccc;padding:0.25em 0.5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.pass{background:#d8f5d8}td.fail{background:#f8d0d0;font-weight:bold}td.report{background:#e6eefc}td.skip{background:#eee}
details.claim{border-top:2px solid #ddd;margin-top:1em;padding-top:0.4em}details.claim>summary{cursor:pointer;font-size:1.1em;font-weight:600}
.figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:0.5em}
figure{margin:0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:0.78em;color:#555}code,pre{background:#f6f6f6;padding:0.1em 0.3em;font-size:0.9em}
"""

SCRIPT = """
(function(){
  var state={verdict:'all',kind:'all'};
  function apply(){
    var shown=0;
    document.querySelectorAll('.card').forEach(function(c){
      var ok=(state.verdict==='all'||c.dataset.verdict===state.verdict)&&(state.kind==='all'||c.dataset.kind===state.kind);
      c.hidden=!ok; if(ok){shown++;}
    });
    document.getElementById('shown').textContent=shown;
  }
  document.querySelectorAll('.filters button').forEach(function(b){
    b.addEventListener('click',function(){
      var group=b.dataset.group; state[group]=b.dataset.value;
      document.querySelectorAll('.filters button[data-group="'+group+'"]').forEach(function(o){o.setAttribute('aria-pressed',String(o===b));});
      apply();
    });
  });
  function openHash(){
    var id=decodeURIComponent(location.hash.slice(1)); if(!id){return;}
    var el=document.getElementById(id); if(el&&el.tagName==='DETAILS'){el.open=true; el.scrollIntoView();}
  }
  window.addEventListener('hashchange',openHash); openHash(); apply();
})();
"""


def _key_numbers(r: dict, k: int = 2) -> list[str]:
    """The one or two numbers that matter: the first judged checks (or reported values)."""
    checks = [c for c in r["checks"] if c.get("passed") is not None] or list(r["checks"])
    out = [_sentence(c) for c in checks[:k]]
    if r["verdict"] == "skipped":
        out = [html.escape(r.get("reason", "skipped"))]
    return out


def _sentence(c: dict) -> str:
    """A check as a sentence for a card: "... : 0 of 120 fail", "... : worst 3.2e-13 (seed 4), within <= 1e-12"."""
    name = html.escape(c["name"])
    threshold = str(c.get("threshold") or "")
    if c.get("passed") is None:
        return f"{name}: <b>{_fmt(c['value'])}</b>"
    if threshold.startswith("0 of "):
        total = threshold.removeprefix("0 of ").removesuffix(" fail")
        closest = f" (closest: {html.escape(c['worst_case'])})" if c.get("worst_case") and c.get("passed") else ""
        return f"{name}: <b>{int(c['value'])} of {html.escape(total)} fail</b>{closest}"
    worst = f" ({html.escape(c['worst_case'])})" if c.get("worst_case") else ""
    verdict = "within" if c["passed"] else "outside"
    return f"{name}: worst <b>{_fmt(c['value'])}</b>{worst}, {verdict} {html.escape(threshold)}"


def _card(r: dict) -> str:
    cid = html.escape(r["id"])
    figures = r.get("figures", [])
    hero = (
        f'<a href="#{cid}"><img src="runs/{cid}/{html.escape(figures[0])}" alt="{cid}: {html.escape(figures[0])}"></a>'
        if figures
        else '<a href="#' + cid + '" class="nofig">(no figure)</a>'
    )
    nums = "".join(f"<li>{n}</li>" for n in _key_numbers(r))
    kind = html.escape(r.get("kind", "report"))
    verdict = html.escape(r["verdict"])
    return (
        f'<article class="card" id="card-{cid}" data-verdict="{verdict}" data-kind="{kind}">{hero}'
        f'<h3><a href="#{cid}">{html.escape(r.get("title") or r["id"])}</a></h3>'
        f'<p class="ref clamp" title="{html.escape(r["paper_ref"])}">{cid} &middot; {html.escape(r["paper_ref"])}</p>'
        f'<div class="meta"><span class="badge {verdict}">{verdict}</span><span class="kind">{kind}</span></div>'
        f"<ul>{nums}</ul></article>"
    )


def _section(r: dict) -> str:
    cid = html.escape(r["id"])
    folder = f"runs/{cid}"
    rows = "".join(
        f"<tr><td>{html.escape(c['name'])}</td><td>{_fmt(c['value'])}</td><td>{html.escape(str(c['threshold']))}</td>"
        f"<td>{_fmt(c.get('n_judged'))}</td><td>{html.escape(c.get('worst_case', '') or '')}</td><td>{_fmt(c.get('margin'))}</td>"
        f"{_verdict_cell(_check_verdict(c['passed']))}<td>{html.escape(c.get('detects', '') or '')}</td>"
        f"<td>{html.escape(c.get('note', '') or '')}</td></tr>"
        for c in r["checks"]
    )
    head = "".join(f"<th>{h}</th>" for h in ("check", "value", "threshold", "cases judged", "worst case", "margin", "verdict", "detects", "note"))
    table = f"<table><tr>{head}</tr>{rows}</table>"
    if len(r["checks"]) > 6:
        table = f"<details><summary>{len(r['checks'])} checks</summary>{table}</details>"

    def figure(rel: str, movie: bool = False) -> str:
        src = f"{folder}/{html.escape(rel)}"
        vector = Path(rel).with_suffix(".svg").as_posix()
        link = f' &middot; <a href="{folder}/{html.escape(vector)}">SVG</a>' if not movie and vector in r.get("vectors", []) else ""
        label = "movie" if movie else "figure"
        return f'<figure><img src="{src}" alt="{label} {html.escape(rel)}"><figcaption>{html.escape(Path(rel).stem)}{link}</figcaption></figure>'

    figs = "".join(figure(f) for f in r.get("figures", []))
    movies = "".join(figure(m, movie=True) for m in r.get("movies", []))
    movies = f"<details><summary>{len(r['movies'])} movie(s)</summary><div class='figs'>{movies}</div></details>" if movies else ""
    params = html.escape(json.dumps(r["params"], indent=None))
    reason = f"<p><b>Skipped:</b> {html.escape(r['reason'])}</p>" if r["verdict"] == "skipped" else ""
    verdict = html.escape(r["verdict"])
    return (
        f'<details class="claim" id="{cid}"><summary>{cid}: {html.escape(r.get("title", ""))} '
        f'<span class="badge {verdict}">{verdict}</span></summary>'
        f"<p><b>Paper:</b> {html.escape(r['paper_ref'])}. <b>Verdict:</b> {verdict} ({r['seconds']:.1f} s)</p>{reason}"
        f"<p>{mathml.html_text(r.get('statement', ''))}</p><p><b>Hypotheses:</b> {mathml.html_text(r.get('hypotheses', ''))}</p>"
        f"<details><summary>Parameters and seeds</summary><pre>{params}</pre></details>"
        f"{table}<div class='figs'>{figs}</div>{movies}</details>"
    )


def render(records: list[dict], *, quick: bool, seed: int | None, unfinished: dict[str, str] | None = None) -> str:
    counts = {v: sum(r["verdict"] == v for r in records) for v in ("pass", "fail", "report", "skipped")}
    verdict_buttons = "".join(
        f'<button type="button" data-group="verdict" data-value="{v}" aria-pressed="{str(v == "all").lower()}">{v}'
        + (f" ({counts[v]})" if v in counts else f" ({len(records)})")
        + "</button>"
        for v in ("all", "pass", "fail", "report", "skipped")
    )
    kind_buttons = "".join(
        f'<button type="button" data-group="kind" data-value="{k}" aria-pressed="{str(k == "all").lower()}">{k}</button>'
        for k in ("all", "pass/fail", "report")
    )
    size = "quick" if quick else "full"
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
        f"<title>attndyn: reproduction report</title><link rel='icon' href='data:,'><style>{CSS}</style></head><body>"
        "<header><h1>The emergence of clusters in self-attention dynamics: reproduction report</h1>"
        f"<p>Tokens move under self-attention, {mathml.to_mathml(MODEL_TEX)}, and gather into clusters "
        "whose shape is set by the spectrum of V (Geshkovski, Letrouit, Polyanskiy, Rigollet, NeurIPS 2023, arXiv:2305.05465v6, "
        "and its successors). Each card is one claim, checked numerically: <i>pass</i>/<i>fail</i> for theorems, <i>report</i> "
        "(values, no judgement) for conjectures and exploratory runs. Click a card for its section.</p>"
        f"<p>attndyn {html.escape(__version__)}, {size} run, base seed {seed}: <b>{counts['pass']}</b> pass, "
        f"<b>{counts['fail']}</b> fail, <b>{counts['report']}</b> report, <b>{counts['skipped']}</b> skipped.</p>"
        f"{_provenance(records)}</header>"
        f"<nav class='filters' aria-label='filter claims'>verdict: {verdict_buttons} &nbsp; kind: {kind_buttons}"
        f" &nbsp; <span><span id='shown'>{len(records)}</span> shown</span></nav>"
        f"{_unfinished(unfinished or {})}"
        f"<main><div class='grid'>{''.join(_card(r) for r in records)}</div>"
        f"<h2>Claims in detail</h2>{''.join(_section(r) for r in records)}</main>"
        f"<script>{SCRIPT}</script></body></html>"
    )


def _provenance(records: list[dict]) -> str:
    """Where the page's results came from (commit, dates, commands, machine) and a "cite this" block."""
    from attndyn.workflow.provenance import CITATION, software_citation

    made = [r["provenance"] for r in records if isinstance(r.get("provenance"), dict)]
    if not made:
        return "<p class='provenance'>These runs were written before attndyn recorded their commit, date, command and machine.</p>"
    esc = html.escape

    def distinct(key: str) -> list[str]:
        return sorted({str(p.get(key)) for p in made})

    dates = distinct("date")
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    commits = ", ".join(esc(c) for c in distinct("commit"))
    commands = "".join(f"<li><code>{esc(c)}</code></li>" for c in distinct("command"))
    m = made[0].get("machine") or {}
    machine = esc(
        f"{m.get('os')}, {m.get('processor')}, {m.get('cores')} cores, Python {m.get('python')}, NumPy {m.get('numpy')}, torch {m.get('torch')}"
    )
    older = len(records) - len(made)
    note = f" ({older} of {len(records)} claims were written before this was recorded)" if older else ""
    cite = esc(CITATION + "\n\n" + software_citation(made[0]))
    return (
        f"<details class='provenance'><summary>Made by attndyn {esc(str(made[0].get('version')))}, commit {commits}, "
        f"on {esc(when)}{esc(note)}; cite this</summary><p>Machine: {machine}.</p><p>Commands:</p><ul>{commands}</ul>"
        f"<p>Cite the paper and the software:</p><pre>{cite}</pre></details>"
    )


def _unfinished(unfinished: dict[str, str]) -> str:
    if not unfinished:
        return ""
    rows = "".join(f"<li><b>{html.escape(cid)}</b>: {html.escape(why)}</li>" for cid, why in unfinished.items())
    head = f"<h2>Not finished ({len(unfinished)})</h2><p>These claims have no result on this page:</p>"
    return f"<section class='unfinished'>{head}<ul>{rows}</ul></section>"


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
                "provenance": r.get("provenance"),  # None for a folder written before it was recorded
            }
            for r in records
        ],
    }


def build(out_dir: str | Path, order: list[str] | None = None, *, unfinished: dict[str, str] | None = None) -> Path:
    """Write ``results.json`` and ``index.html`` from the run folders; returns the page's path.

    ``unfinished`` maps claims whose run did not finish (an error, an interruption) to why: their
    folders are not read, and the page and ``results.json`` list them as not finished.
    """
    out_dir = Path(out_dir)
    unfinished = dict(unfinished or {})
    records = collect(out_dir, order, unfinished=unfinished)
    quick = {r.get("quick") for r in records}
    seeds = {r.get("seed") for r in records}
    if len(quick) > 1 or len(seeds) > 1:
        raise ReportError(f"run folders in {out_dir} mix quick/full runs or seeds; rerun them together")
    q, s = (bool(quick.pop()), seeds.pop()) if records else (False, None)
    write_json(out_dir / "results.json", {**results_json(records, quick=q, seed=s), "unfinished": unfinished})
    return atomic_write_text(out_dir / "index.html", render(records, quick=q, seed=s, unfinished=unfinished))
