"""``attndyn checkpoint smollm2|FILE.gguf|LLAMA_FOLDER``: the decoder page, written into a folder (edge: files).

Contract
--------
``decoder_report(name_or_path, prompts=..., out=...)`` runs the study (:mod:`attndyn.models.decoder_study`: the
measurements and their nulls, plain data), decides and writes the findings from it
(:mod:`attndyn.models.decoder_findings`), draws the page (:mod:`attndyn.app.decoder_render`: one figure per
finding first, then the compact table of findings, then the sentences) and writes into ``out`` (an attndyn
``checkpoint`` folder, see :mod:`attndyn.workflow.ownership`): ``decoder.json`` (the record), ``findings.json``
(what the findings read, :func:`findings_record`), ``findings.md``, ``layers.csv``, ``heads.csv``, the figures
and ``index.html``, the page last. Returns the record. ``side_by_side(folders, out)``: several decoders' pages
on one page. ``docs_section(text, name, findings)``: the docs' findings, generated from
``docs/data/findings-*.json`` by :func:`~attndyn.models.decoder_findings.findings_text`.
"""

from __future__ import annotations

import csv
import html
import io
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attndyn.app import decoder_render as render
from attndyn.models import decoder_findings as fnd
from attndyn.models import decoder_study as study
from attndyn.models.decoder_findings import findings_text
from attndyn.models.decoder_study import NULLS, SHARE_KEYS
from attndyn.workflow import ownership
from attndyn.workflow.files import atomic_write_text, write_json


def decoder_report(
    name_or_path: str,
    *,
    prompts: list[str],
    out: Path,
    twin_layers: tuple[int, ...] | None = None,
    regime_layers: tuple[int, ...] | str = "all",
    heatmap: tuple[int, int] | None = None,
    dtype: torch.dtype | None = torch.float32,
    progress: Callable[[str, int, int], None] | None = None,
    held_out: list[str] | None = None,
    prompt_set: str | None = None,
) -> dict:
    """The page (module docstring). Every option is checked before the folder is claimed
    (:func:`~attndyn.models.decoder_study.plan`); ``held_out``, ``prompt_set``: as
    :func:`~attndyn.models.decoder_study.run_study` takes them. ``progress(stage, i, n)``: ``i`` of the ``n`` jobs of
    ``stage`` (a sentence) done, for each stage in turn from ``i = 0`` to ``i = n`` (the study's, then the figures and
    the page)."""
    from attndyn.workflow import plots

    step = progress or (lambda stage, i, n: None)
    step("reading the model", 0, 1)
    plan = study.plan(name_or_path, twin_layers=twin_layers, regime_layers=regime_layers, heatmap=heatmap)
    study.check_prompts(plan, prompts, held_out)  # a prompt it refuses leaves the folder as it was
    owner = ownership.claim(out, "checkpoint", "attndyn checkpoint")
    ownership.clear(owner)
    out = owner.folder
    (out / "figures").mkdir(exist_ok=True)
    start = time.perf_counter()
    record, A = study.run_study(plan, prompts=prompts, dtype=dtype, held_out=held_out, prompt_set=prompt_set, progress=step)
    record["per_layer"], record["study"] = fnd.decided(record["per_layer"], record["study"])
    if record["held_out"]:
        _, record["held_out"] = fnd.decided(None, record["held_out"])
    step("figures and the page", 0, 1)
    groups = [render.finding_figures(record), render.other_figures(record, A)]
    names = [[f"figures/{name}.png" for name in group] for group in groups]
    for group in groups:
        for name, fig in group.items():
            plots.save(fig, out / "figures" / f"{name}.png")
    owner.add(*names[0], *names[1], *(str(Path(n).with_suffix(".svg")) for n in names[0] + names[1]))
    record["figures"] = names[0] + names[1]
    record["seconds"] = round(time.perf_counter() - start, 2)
    record["findings"] = findings_text(record)
    write_json(out / "findings.json", findings_record(record))
    atomic_write_text(out / "layers.csv", _csv([{k: v for k, v in r.items() if not k.endswith("_ci")} for r in record["per_layer"]]))
    atomic_write_text(out / "heads.csv", _csv(record["per_head"]))
    write_json(out / "decoder.json", record)
    atomic_write_text(out / "findings.md", record["findings"])
    owner.add("layers.csv", "heads.csv", "decoder.json", "findings.md", "findings.json")
    atomic_write_text(out / "index.html", render.page(record, names[0], names[1]))
    owner.add("index.html")
    step("figures and the page", 1, 1)
    return record


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    keys = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


FINDINGS_LAYER_KEYS = ("layer", "sink_rate", "sink_rate_ci", "massive_activation_ratio", "massive_activation_ratio_ci", "massive_token",
                      "massive_dim", "norm_ratio", "norm_ratio_ci", "mean_cosine", "mean_cosine_ci",
                      "standardized_cosine", "standardized_cosine_ci") + tuple(
    f"{key}_{part}" for key in ("massive_activation_ratio", "norm_ratio", "mean_cosine") for name in NULLS
    for part in (f"null_{name}", f"null_{name}_spread", f"diff_{name}_ci", f"diff_{name}_decision")
)  # fmt: skip


def findings_record(r: dict) -> dict:
    """The part of the record that :func:`findings_text` reads (``findings.json``; the docs' copies live in
    ``docs/data/findings-*.json`` and the docs' marked sections are generated from them)."""
    keep = ("file", "tuning", "quantisation", "dtype", "null_dtype", "tokens", "leaders", "regime_counts", "regime_undetermined", "regime_draws",
            "regime_counts_null_random")  # fmt: skip
    out = {k: r.get(k) for k in keep}
    out["per_layer"] = [{k: row[k] for k in FINDINGS_LAYER_KEYS if k in row} for row in r["per_layer"]]
    out["study"] = {
        k: r["study"][k] for k in ("pool", "sink_1", "sink_1_all_queries", "null_draws", "replicates", "null_init", "sentences") if k in r["study"]
    }
    twin_keys = (
        "layer",
        "prompts",
        "ffn_share_shapley",
        *SHARE_KEYS[:3],
        *(f"{k}_ci" for k in SHARE_KEYS[:3]),
        "attention_share_shapley_null_random",
    )
    out["twin"] = [{k: t[k] for k in twin_keys if k in t} for t in r["twin"]]
    held = r.get("held_out")
    out["held_out"] = None if not held else {"pool": held["pool"], "sink_1": held["sink_1"], "per_layer": [held["per_layer"][-1]]}
    return out


MARK = "<!-- findings:{name} (generated by attndyn.models.decoder_findings.findings_text from docs/data/findings-{name}.json) -->"
END = "<!-- /findings:{name} -->"


def marked_section(text: str, start: str, end: str, body: str) -> str:
    """``text`` with what lies between the marks ``start`` and ``end`` replaced by ``body``."""
    a, b = text.find(start), text.find(end)
    if a < 0 or b < a:
        raise ValueError(f"the docs have no section marked {start!r} ... {end!r}")
    return text[: a + len(start)] + "\n\n" + body + "\n" + text[b:]


def docs_section(text: str, name: str, findings: dict) -> str:
    """``text`` with the marked section of ``name`` replaced by :func:`~attndyn.models.decoder_findings.findings_text` of ``findings``."""
    return marked_section(text, MARK.format(name=name), END.format(name=name), findings_text(findings))


def prompts_from(path: Path | None) -> list[str]:
    from attndyn.core.reading import read_bytes
    from attndyn.models.prompts import PROMPTS, read_prompts

    if path is not None:  # a regular file of at most 64 MiB: a FIFO or /dev/zero is refused by name, never opened
        read_bytes(path, "--prompts file")
    return list(PROMPTS) if path is None else read_prompts(path)


def side_by_side(folders: list[Path], out: Path) -> Path:
    """One page with several decoders' studies side by side (``compare.html`` in ``out``, an attndyn
    ``checkpoint`` folder): their sink rate, massive-activation ratio and mean cosine against relative
    depth (layer / L), each with its bootstrap band, and their findings. ``folders``: checkpoint pages
    written by :func:`decoder_report`."""
    import json

    from attndyn.workflow import plots

    records = [json.loads((Path(f) / "decoder.json").read_text(encoding="utf-8")) for f in folders]
    owner = ownership.claim(out, "checkpoint", "attndyn checkpoint (side by side)")
    ownership.clear(owner)
    out = owner.folder
    (out / "figures").mkdir(exist_ok=True)
    names = []
    for key, label, logy in (
        ("sink_rate", "sink rate (Gu et al., eps = 0.3)", False),
        ("massive_activation_ratio", "massive-activation ratio (Sun et al.)", True),
        ("mean_cosine", "mean pairwise cosine", False),
    ):
        series = {}
        for r in records:
            rows = [row for row in r["per_layer"] if np.isfinite(row.get(key, np.nan))]
            depth = np.array([row["layer"] / r["layers"] for row in rows])
            series[r["file"]] = (depth, np.array([row[key] for row in rows]))
            series[f"{r['file']}: 95 % interval (low)"] = (depth, np.array([row[f"{key}_ci"][0] for row in rows]))
            series[f"{r['file']}: 95 % interval (high)"] = (depth, np.array([row[f"{key}_ci"][1] for row in rows]))
        fig = plots.curves(np.array([0.0, 1.0]), series, xlabel="relative depth (layer / L)", ylabel=label, title=label, logy=logy)
        plots.save(fig, out / "figures" / f"compare_{key}.png")
        names.append(f"figures/compare_{key}.png")
    owner.add(*names, *(str(Path(n).with_suffix(".svg")) for n in names))
    cols = "".join(
        f"<div style='flex:1;min-width:420px'><h2>{html.escape(r['title'])}</h2><ul>"
        + "".join(f"<li>{html.escape(line[2:])}</li>" for line in r["findings"].splitlines() if line.startswith("- "))
        + "</ul></div>"
        for r in records
    )
    figs = "".join(f'<figure><img src="{html.escape(n)}" alt="{html.escape(n)}"></figure>' for n in names)
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Trained decoders side by side</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1500px;margin:auto;padding:1em}img{max-width:480px}"
        "figure{display:inline-block;margin:4px}</style></head><body><h1>Trained decoders side by side</h1>"
        f"<div>{figs}</div><div style='display:flex;gap:2em;flex-wrap:wrap'>{cols}</div></body></html>"
    )
    atomic_write_text(out / "compare.html", page)
    owner.add("compare.html")
    return out / "compare.html"
