"""The page of ``attndyn intervene``: one figure per study, each edit's perplexity ratio with its bootstrap
interval beside its null's band (the interval of the null pooled over its draws, and every draw), and a
table of the numbers of interventions.json."""

from __future__ import annotations

import html
from pathlib import Path


def figure(record: dict, path: Path, title: str) -> Path:
    """The edits' perplexity ratios (log scale) with their intervals, the null's band behind each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edits = record["edits"]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(edits) + 2), 3.6))
    for i, e in enumerate(edits):
        null = e.get("null")
        if null:
            lo, hi = null["ppl_ratio_interval"]
            ax.fill_between([i - 0.35, i + 0.35], [lo, lo], [hi, hi], color="0.8", label="null (95 % interval)" if i == 0 else None)
            ax.plot([i] * len(null["ppl_ratio_draws"]), null["ppl_ratio_draws"], "x", color="0.45", ms=4, label="null draws" if i == 0 else None)
        lo, hi = e["ppl_ratio_interval"]
        ax.errorbar(
            [i],
            [e["ppl_ratio"]],
            yerr=[[e["ppl_ratio"] - lo], [hi - e["ppl_ratio"]]],
            fmt="o",
            color="C0",
            capsize=4,
            label="edit" if i == 0 else None,
        )
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_yscale("log")
    ax.set_xticks(range(len(edits)), [e["edit"] for e in edits], rotation=25, ha="right", fontsize=7)
    ax.set_ylabel("perplexity ratio (edit / plain)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    """The figure as a PNG written then renamed, and closed."""
    import io

    import matplotlib.pyplot as plt

    from attndyn.workflow.files import atomic_write_bytes

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def theory_figure(study: dict, path: Path, title: str) -> Path:
    """Per twin layer, the loss of each replacement above the plain layer (twin-step, twin, uniform) with its
    paired interval; the share of the gap the flow closes, with its interval, under each layer's tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = study["per_layer"]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(rows) + 2), 3.6))
    for c, w in enumerate(("twin-step", "twin", "uniform")):
        xs, ys, lo, hi = [], [], [], []
        for i, r in enumerate(rows):
            d = r["nll"][w] - r["nll"]["plain"]
            a, b = r["plain_to"][w]
            xs.append(i + (c - 1) * 0.22)
            ys.append(d)
            lo.append(d - a)
            hi.append(b - d)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", color=f"C{c}", capsize=3, label=w)
    ax.axhline(0.0, color="k", lw=0.6)
    labels = []
    for r in rows:
        share = "undetermined" if r["share"] is None else f"{r['share']:.2f} [{r['share_interval'][0]:.2f}, {r['share_interval'][1]:.2f}]"
        labels.append(f"layer {r['layer']}\nshare {share}")
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("NLL - NLL plain (nats)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)


def _theory_table(study: dict) -> str:
    def iv(v, ci):
        return "-" if v is None else f"{v:.4g} [{ci[0]:.4g}, {ci[1]:.4g}]"

    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(c)}</td>"
            for c in (
                str(r["layer"]),
                *(iv(d["nll"], d["nll_interval"]) for d in r["differences"]),
                iv(r["gap"], r["gap_interval"]),
                iv(r["share"], r["share_interval"]) if r["share"] is not None else r["share_status"],
            )
        )
        + "</tr>"
        for r in study["per_layer"]
    )
    return (
        "<p>Each twin layer's attention replaced by the twin's one step, its flow over unit time and uniform causal attention "
        "(the mask alone): the loss differences along plain &rarr; twin-step &rarr; twin &rarr; uniform in nats with paired "
        "bootstrap intervals, the gap uniform &minus; plain, and the share of the gap the flow closes, (uniform &minus; twin) / "
        "(uniform &minus; plain), given only where the gap's interval excludes zero.</p>"
        "<table border=1><tr><th>layer</th><th>plain &rarr; twin-step</th><th>twin-step &rarr; twin</th><th>twin &rarr; uniform</th>"
        f"<th>gap</th><th>share closed by the flow</th></tr>{rows}</table>"
    )


GEOMETRY_LABELS = {
    "mean_cosine": "mean pairwise cosine",
    "massive_activation_ratio": "Sun's entry ratio (log)",
    "norm_ratio": "first token's norm / median",
    "attention_on_first": "attention on the first token",
    "sink_rate": "sink rate (Gu et al., T = 64)",
}


def geometry_figure(geometry: dict, path: Path, title: str) -> Path:
    """One panel per measure of :func:`attndyn.models.interventions.geometry_after` against the block: the
    plain prompts in black, each edit in colour, the edit's block marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in GEOMETRY_LABELS if any(v is not None for v in geometry["plain"][k])]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.0 * len(keys) + 0.5, 3.2), squeeze=False)
    x = geometry["after_block"]
    nan = float("nan")
    for ax, key in zip(axes[0], keys, strict=True):
        ax.plot(x, [nan if v is None else v for v in geometry["plain"][key]], color="k", lw=1.4, label="plain")
        for j, e in enumerate(geometry["edits"]):
            ax.plot(x, [nan if v is None else v for v in e[key]], color=f"C{j}", lw=1.0, marker=".", ms=3, label=e["edit"])
        if key == "massive_activation_ratio":
            ax.set_yscale("log")
        ax.set_xlabel("after block")
        ax.set_title(GEOMETRY_LABELS[key], fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def page(record: dict, out: Path) -> Path:
    from attndyn.workflow.files import atomic_write_text

    figures = []
    for name, study in [("edits", record), *((k, v) for k, v in record.get("studies", {}).items())]:
        if study.get("per_layer"):
            theory_figure(study, out / f"{name}.png", f"{record['model']}: {name} (95 % paired intervals)")
            figures.append(name)
        elif study.get("edits"):
            figure(study, out / f"{name}.png", f"{record['model']}: {name}")
            figures.append(name)
        if name != "edits" and study.get("geometry"):
            geometry_figure(study["geometry"], out / f"{name}-geometry.png", f"{record['model']}: {name}, the attention after each edit")

    if record.get("geometry"):
        geometry_figure(record["geometry"], out / "geometry.png", f"{record['model']}: the geometry after each edit (mean over prompts)")

    def interval(e, key):
        lo, hi = e[f"{key}_interval"]
        return f"{e[key]:.4g} [{lo:.4g}, {hi:.4g}]"

    rows = []
    for name in figures:
        study = record if name == "edits" else record["studies"][name]
        for e in study["edits"]:
            null = e.get("null")
            rows.append(
                "<tr>"
                + "".join(
                    f"<td>{html.escape(str(c))}</td>"
                    for c in (
                        name,
                        e["edit"],
                        interval(e, "ppl_ratio"),
                        interval(e, "kl"),
                        interval(null, "ppl_ratio") if null else "-",
                        e["decision"],
                    )
                )
                + "</tr>"
            )
    body = (
        f"<h1>Interventions on {html.escape(record['model'])}</h1>"
        f"<p>{record['prompts']} prompts, compute dtype {html.escape(record['dtype'])}; unedited next-token loss "
        f"{record['nll']:.4f} nats [{record['nll_interval'][0]:.4f}, {record['nll_interval'][1]:.4f}]; "
        f"{record['counts']['forwards']:.1f} forwards' worth of blocks in {record['seconds']:.1f} s. "
        "Each interval is a 95 % percentile bootstrap over prompts; each null is drawn "
        f"{record['draws']} times. An edit matters more than chance only where every draw's paired interval of "
        "the loss difference to its null excludes zero on the same side and the margin exceeds 3 Monte-Carlo standard errors.</p>"
        + "".join(
            f'<h2>{html.escape(n)}</h2><img src="{n}.png" alt="{html.escape(n)}">'
            + (f'<img src="{n}-geometry.png" alt="{html.escape(n)}: geometry">' if n != "edits" and record["studies"][n].get("geometry") else "")
            + (_theory_table(record["studies"][n]) if n != "edits" and record["studies"][n].get("per_layer") else "")
            for n in figures
        )
        + (
            "<h2>geometry after the edits</h2><p>The residual stream's mean cosine, Sun's ratio and the first token's norm ratio "
            "after each block, and the attention the block used, plain and under each --edit (--geometry), averaged over prompts.</p>"
            '<img src="geometry.png" alt="geometry after the edits">'
            if record.get("geometry")
            else ""
        )
        + "<table border=1><tr><th>study</th><th>edit</th><th>perplexity ratio</th><th>KL</th><th>null's ratio</th><th>against the null</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    return atomic_write_text(out / "index.html", f"<!doctype html><meta charset=utf-8><title>interventions</title><body>{body}</body>")


# the docs' sentences on the massive-activation study, generated from interventions.json
MARK = "<!-- interventions:{name} (generated by attndyn.app.interventions_page.massive_text from docs/data/interventions-{name}.json) -->"
END = "<!-- /interventions:{name} -->"


def _ratio(effect: dict) -> str:
    lo, hi = effect["ppl_ratio_interval"]
    return f"{effect['ppl_ratio']:.4g} [{lo:.4g}, {hi:.4g}]"


def _dims(dims: list[int]) -> str:
    return f"dimension{'s' * (len(dims) > 1)} {', '.join(map(str, dims))}"


def massive_text(record: dict) -> str:
    """The sentences of the docs on ``record["studies"]["massive"]`` (``attndyn intervene --study massive``)."""
    s = record["studies"]["massive"]
    head = (
        f"Massive activations in {record['model']} (Sun et al., arXiv 2402.17762; `attndyn intervene --study massive`, "
        f"{record['dtype']}, {record['prompts']} prompts, {record['draws']} null draws)"
    )
    if s["block"] is None:
        return f"{head}: {s['finding']}.\n"
    first = [m["dim"] for m in s["means"] if m["role"] == "first"]
    later = [m for m in s["means"] if m["role"] == "later"]
    where = " and ".join(
        ([f"token 0 at {_dims(first)}"] if first else [])
        + ([f"later tokens at {_dims([m['dim'] for m in later])} ({sum(m['count'] for m in later)} entries over the prompts)"] if later else [])
    )
    appear = s["first_massive_block"]
    before = f"; entries above the threshold occur from block {appear} on but do not stay" if appear is not None and appear < s["block"] else ""
    zero, mean = s["edits"]
    holds = {True: "holds", False: "does not hold"}
    return (
        f"{head}: the step-up block is {s['block']}, the first block after which, in more than half of the prompts, an "
        f"entry (same token and dimension) exceeds {s['threshold']} and stays above it after every later block up to "
        f"block {s['window_end']}{before}. Edited after block {s['block']}, in each prompt its staying entries: {where}. "
        f"Setting them to zero multiplies perplexity by {_ratio(zero)} (95 % bootstrap interval over prompts), the null "
        f"(the same places on a random dimension with no massive entry) by {_ratio(zero['null'])}, the same change in "
        f"a random direction by {_ratio(zero['null_l2'])} (the edit against its null, by the findings' rule over the "
        f"draws: {zero['decision']}); setting each to the mean of the massive entries of its (token "
        f"role, dimension) over the prompts multiplies it by {_ratio(mean)}, its null by {_ratio(mean['null'])} "
        f"({mean['decision']}). By "
        f"the rule stated before running, \"zero matters\" (the ratio's interval above the null's and above 10x) "
        f'{holds[s["zero_matters"]]} and "mean is harmless" (its interval within 1 %) {holds[s["mean_harmless"]]}.\n'
    )


def docs_section(text: str, name: str, record: dict) -> str:
    """``text`` with the marked section of ``name`` replaced by :func:`massive_text` of ``record``."""
    from attndyn.app.decoder_page import marked_section

    return marked_section(text, MARK.format(name=name), END.format(name=name), massive_text(record))
