"""The page of ``attndyn atlas``: a figure per model (a row each), then the compact side-by-side table, then
the sentences of :mod:`attndyn.models.atlas`. Reads the records; computes nothing and decides nothing."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from attndyn.models import atlas
from attndyn.models.atlas import _ci, _finite


def figure(rec: dict, path: Path) -> Path:
    """One model's row: Sun's ratio after every sublayer (log scale) with its band, the shuffled-token null's band and
    uniform causal attention's curve, the step-up and the fall marked; beside it, per block, the sink rate, the share
    of prompts whose spike token is the sink token (and the shuffled null's), and the secondary sinks per prompt."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attndyn.app.interventions_page import _save

    subs, blocks = rec["sublayers"], rec["blocks"]
    x = np.array([r["sublayer"] / 2 for r in subs])  # block l's attention at l, its feed-forward at l + 0.5
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.6))
    for key, label, color, style in (
        ("ratio", "network", "C0", "-"),
        ("shuffled", "shuffled tokens", "C1", "--"),
        ("uniform", "uniform causal", "C2", ":"),
    ):
        ax.plot(x, [r[key] for r in subs], style, color=color, lw=1.4, label=label)
        ax.fill_between(x, [r[f"{key}_ci"][0] for r in subs], [r[f"{key}_ci"][1] for r in subs], color=color, alpha=0.2, lw=0)
    m = rec["massive"]
    for s, label, ls in ((m.get("step_up"), "step-up", "-"), (m.get("fall"), "fall", "--")):
        if s is not None:
            ax.axvline(s / 2, color="k", lw=0.8, ls=ls, label=f"{label}: {atlas.sublayer_name(s)}")
    ax.axhline(100, color="0.5", lw=0.6)
    ax.set_yscale("log")
    ax.set_xlabel("block (0-based; attention at l, feed-forward at l + 0.5)")
    ax.set_ylabel("max |h_ij| / median |h_ij|")
    ax.set_title(f"{rec['model']}: Sun's ratio after each sublayer", fontsize=9)
    ax.legend(fontsize=7)
    k = np.array([b["block"] for b in blocks])
    for key, label, color in (
        ("sink_rate", "sink rate (Gu et al.)", "C3"),
        ("coupled", "spike token = sink token", "C0"),
        ("coupled_shuffled", "the same, shuffled", "C1"),
    ):
        y = np.array([b[key] for b in blocks], dtype=float)
        bx.plot(k, y, "-o", ms=2.5, color=color, lw=1.2, label=label)
        bx.fill_between(k, [b[f"{key}_ci"][0] for b in blocks], [b[f"{key}_ci"][1] for b in blocks], color=color, alpha=0.2, lw=0)
    bx.bar(k, [b["secondary"] for b in blocks], color="0.6", alpha=0.6, label="secondary sinks per prompt")
    if rec["middle"] is not None:
        bx.axvspan(rec["middle"][0] - 0.5, rec["middle"][1] + 0.5, color="0.92", zorder=0)
    bx.set_xlabel("block (0-based; the shaded blocks are the middle ones)")
    bx.set_title(f"{rec['model']}: spikes and sinks per block", fontsize=9)
    bx.legend(fontsize=7)
    return _save(fig, path)


def _sub(s: int | None) -> str:
    return "none" if s is None else atlas.sublayer_name(s)


def table_rows(records: list[dict]) -> list[tuple[str, list[str]]]:
    """The compact table: (row name, one cell per model)."""

    def massive(r: dict, key: str) -> str:
        m = r["massive"]
        if m["step_up"] is None:
            return "-"
        if key == "step_up":
            lo, hi = (int(round(v)) for v in m["step_up_interval"])
            return f"{_sub(m['step_up'])} [{_sub(lo)}, {_sub(hi)}]" if lo != hi else f"{_sub(m['step_up'])} (in every resample)"
        if key == "plateau":
            p = m["plateau"]
            ratio = [row["ratio"] for row in r["sublayers"]]
            return (
                f"{_sub(p['first'])} to {_sub(p['last'])}: ratio {ratio[p['first']]:.3g} at the start, {ratio[p['last']]:.3g} at the end, "
                f"mean {_ci(p['ratio'], p['ratio_ci'])}"
            )
        if key == "dims":
            return ", ".join(f"{d['dim']} ({d['prompts']})" for d in m["dims"][:5])
        return ", ".join(("token 0" if t["position"] == 0 else repr(t["text"])) + f" ({t['prompts']})" for t in m["tokens"][:5])

    def middle_rate(r: dict) -> str:
        rates = [b["sink_rate"] for b in r["blocks"] if b["middle"] and _finite(b["sink_rate"])]
        return f"{np.mean(rates):.3g}" if rates else "- (prompts shorter than T)"

    rows = [
        ("norm placement", [r["norm_placement"] + (", QK-norm" if r["qk_norm"] else "") for r in records]),
        ("blocks, prompts, dtype", [f"{r['layers']}, {r['prompts']}, {r['dtype']}" for r in records]),
        ("step-up [95 % bootstrap interval]", [massive(r, "step_up") for r in records]),
        ("first above the threshold", [_sub(r["massive"]["first_massive"]) for r in records]),
        ("plateau", [massive(r, "plateau") for r in records]),
        ("fall", [_sub(r["massive"].get("fall")) if r["massive"]["step_up"] is not None else "-" for r in records]),
        ("dimensions (prompts)", [massive(r, "dims") for r in records]),
        ("tokens (prompts)", [massive(r, "tokens") for r in records]),
        (
            "step-up, shuffled tokens (per draw)",
            [", ".join(_sub(s) for s in sorted(set(r["massive_shuffled"]), key=lambda v: (v is None, v))) for r in records],
        ),
        ("step-up, uniform causal attention", [_sub(r["massive_uniform"]["step_up"]) for r in records]),
        ("middle blocks", ["-" if r["middle"] is None else f"{r['middle'][0]}-{r['middle'][1]}" for r in records]),
        ("sink rate, middle blocks", [middle_rate(r) for r in records]),
        ("spike token = sink token", [_ci(r["coupling"]["rate"], r["coupling"]["ci"], ".2f") for r in records]),
        ("the same, shuffled tokens", [_ci(r["coupling"]["shuffled"], r["coupling"]["shuffled_ci"], ".2f") for r in records]),
        ("secondary sinks per middle block", [_ci(r["secondary"]["per_block"], r["secondary"]["per_block_ci"]) for r in records]),
        ("the same, shuffled tokens", [_ci(r["secondary"]["shuffled"], r["secondary"]["shuffled_ci"]) for r in records]),
        ("cosine of their writer to token 0", [_ci(r["secondary"]["cosine"], r["secondary"]["cosine_ci"]) for r in records]),
        ("the same, other tokens", [_ci(r["secondary"]["ordinary_cosine"], r["secondary"]["ordinary_cosine_ci"]) for r in records]),
    ]
    return rows


def page(records: list[dict], out: Path, *, placement: str, seconds: float) -> Path:
    """``index.html`` in ``out``: the figures (``<model>.png``, written here), the table, the sentences."""
    from attndyn.workflow.files import atomic_write_text

    names = []
    for k, r in enumerate(records):
        name = f"atlas-{k}.png"
        figure(r, out / name)
        names.append((name, r["model"]))
    head = "".join(f"<th>{html.escape(r['model'])}</th>" for r in records)
    rows = "".join(
        "<tr><th>" + html.escape(n) + "</th>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>" for n, cells in table_rows(records)
    )
    sentences = "".join(f"<h3>{html.escape(r['model'])}</h3>" + "".join(f"<p>{html.escape(s)}</p>" for s in atlas.findings(r)) for r in records)
    dtypes = sorted({r["dtype"] for r in records})
    shuffles = sorted({r["shuffles"] for r in records})
    body = (
        "<h1>attndyn atlas</h1>"
        f"<p>The same protocol on {len(records)} decoder{'s' * (len(records) > 1)}, computed in {', '.join(dtypes)} "
        f"({seconds:.0f} s). Each value is a mean over the prompts with its 95 % percentile bootstrap interval; the "
        f"shuffled-token null permutes each prompt's tokens ({', '.join(map(str, shuffles))} draws, a beginning-of-sequence "
        "token kept in place; its interval resamples prompts and draws), uniform causal attention keeps every map but the scores.</p>"
        + "".join(f'<h2>{html.escape(m)}</h2><img src="{n}" alt="{html.escape(m)}">' for n, m in names)
        + f"<h2>side by side</h2><table border=1><tr><th></th>{head}</tr>{rows}</table>"
        + f"<h2>findings</h2>{sentences}<h3>norm placement</h3><p>{html.escape(placement)}</p>"
        + "<h2>rules</h2>"
        + "".join(f"<p>{html.escape(s)}</p>" for s in (atlas.STEP_UP_RULE, atlas.COUPLING_RULE, "secondary sink: " + atlas.SECONDARY_RULE))
    )
    return atomic_write_text(out / "index.html", f"<!doctype html><meta charset=utf-8><title>atlas</title><body>{body}</body>")


# the docs' rows and sentences, generated from atlas.json (docs/data/atlas.json)
MARK = "<!-- atlas (generated by attndyn.app.atlas_page.docs_text from docs/data/atlas.json) -->"
END = "<!-- /atlas -->"


def docs_text(record: dict) -> str:
    """The docs' side-by-side table and sentences of an ``atlas.json`` record, as Markdown (the sentences written
    again from the record's numbers, not copied from it)."""
    records = record["models"]

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| | " + " | ".join(cell(r["model"]) for r in records) + " |", "|---" * (len(records) + 1) + "|"]
    lines += [f"| {cell(name)} | " + " | ".join(cell(c) for c in cells) + " |" for name, cells in table_rows(records)]
    prose = [s for r in records for s in atlas.findings(r)] + [atlas.placement_sentence(records)]  # written again from the data
    return "\n".join(lines) + "\n\n" + "\n\n".join(prose) + "\n"


def docs_section(text: str, record: dict) -> str:
    """``text`` with the marked atlas section replaced by :func:`docs_text` of ``record``."""
    from attndyn.app.decoder_page import marked_section

    return marked_section(text, MARK, END, docs_text(record))
