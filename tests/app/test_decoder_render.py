"""The decoder page opens with its findings in figures (issue 47, item 5).

Oracles: a planted record whose peaks and onsets are known by construction (the massive-activation ratio
peaks at table row 5, the state after block 4; the sink rate's interval first lies above 0.8 at row 4, the
attention of block 3): the sentences of :func:`findings_text` name those blocks, and the figures must put
the same values at the same x. The bands and intervals are counted from the planted rows (a null with
draws has a band over them, uniform causal attention, one draw, a line); the page's order is read from the
HTML. The code's three parts are each under 400 lines (the issue's size).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from attndyn.app import decoder_render as render
from attndyn.models.decoder_findings import block_of, findings_text

pytest.importorskip("matplotlib")

L = 8  # blocks; rows 0..L
PEAK_ROW, ONSET_ROW = 5, 4
KEYS = ("mean_cosine", "massive_activation_ratio", "norm_ratio", "sink_rate")
DRAWS = {"uniform": 1, "random": 5, "shuffled": 10}


def _row(layer: int) -> dict:
    row: dict = {"layer": layer, "massive_token": 0, "massive_dim": 7, "standardized_cosine": 0.1, "standardized_cosine_ci": [0.0, 0.2]}
    for key in KEYS:
        if key == "sink_rate" and layer == 0:
            row[key] = float("nan")  # row 0 holds no attention
            continue
        if key == "massive_activation_ratio":
            v = 100.0 if layer == PEAK_ROW else 5.0 + layer
        elif key == "sink_rate":
            v = 0.9 if layer >= ONSET_ROW else 0.2
        else:
            v = 0.1 + 0.05 * layer
        row[key] = v
        row[f"{key}_ci"] = [v * 0.95, v * 1.05] if key != "sink_rate" else [v - 0.05, min(v + 0.05, 1.0)]
        for name, n in DRAWS.items():
            row[f"{key}_null_{name}"] = v / 2
            if n > 1:
                row[f"{key}_null_{name}_spread"] = [v / 3, v / 1.5]
            row[f"{key}_diff_{name}_ci"] = [v / 4, v]
            row[f"{key}_diff_{name}_decision"] = "exceeds"
    return row


def record() -> dict:
    rows = [_row(k) for k in range(L + 1)]
    s1 = {"value": 0.5, "ci": [0.4, 0.6], "T": 64, "prompts": 12, "shorter_than_T": 0}
    for name, n in DRAWS.items():
        s1 |= {f"null_{name}": 0.1, f"null_{name}_ci": [0.05, 0.15], f"null_{name}_spread": [0.05, 0.15], f"null_{name}_draws": n}
    twin = [
        {"layer": k, "prompts": 4, "attention_share_shapley": 0.6, "ffn_share_shapley": 0.4, "attention_share_first": 0.6,
         "attention_share_last": 0.6, "attention_share_shapley_ci": [0.5, 0.7], "attention_share_shapley_null_random": 0.9,
         "identity": 0.1, "one_step": 0.05, "flow": 0.04, "best_one_step": 0.03}
        for k in (0, 3, 6)
    ]  # fmt: skip
    leaders = {
        "pairs": 12, "prompts": 4, "layers": [0, 3, 6], "twin_top_agrees": 12, "uniform_top_agrees": 11, "network_top_is_token_0": 11,
        "twin_top3_is_mask": 10, "twin_overlap": 0.9, "uniform_overlap": 0.8, "top_difference_ci": [0.0, 0.25],
        "top_difference_sets": [[0.0, 0.25]] * 5, "overlap_difference_ci": [0.0, 0.2], "resampled": "prompts",
    }  # fmt: skip
    return {
        "file": "planted.gguf", "title": "planted.gguf (base, Q8_0, run in float64)", "model": "planted", "tuning": "base",
        "quantisation": "Q8_0", "dtype": "float64", "null_dtype": "float32", "version": "0", "layers": L, "heads": 4, "kv_heads": 2,
        "head_dim": 8, "d_model": 32, "tokens": [70] * 12, "per_layer": rows, "per_head": [], "twin": twin, "leaders": leaders,
        "study": {"pool": "the given prompts (12)", "sink_1": s1, "null_draws": DRAWS, "replicates": 5, "sentences": []},
        "held_out": {"pool": "the held-out prompts (6)", "sink_1": s1, "per_layer": [dict(r) for r in rows]},
        "regime_counts": {"none": 20, "polytope": 12}, "regime_undetermined": {"none": 2}, "regime_counts_null_random": {"none": 32},
        "regime_draws": {"draws": 8, "groups": [1, 2]}, "regime_hypotheses": "formal",
    }  # fmt: skip


@pytest.fixture(scope="module")
def figures():
    r = record()
    r["findings"] = findings_text(r)
    figs = render.finding_figures(r)
    yield r, figs
    import matplotlib.pyplot as plt

    for fig in figs.values():
        plt.close(fig)


def _network(fig):
    line = fig.axes[0].lines[0]
    assert line.get_label().startswith("network"), line.get_label()
    return np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)


def test_the_x_axis_holds_the_blocks_the_sentences_name(figures):
    r, figs = figures
    text = r["findings"]
    peak = int(re.search(r"largest after block (\d+),", text).group(1))
    onset = int(re.search(r"the first block whose interval lies above 0\.8 is (\d+)", text).group(1))
    assert (peak, onset) == (PEAK_ROW - 1, ONSET_ROW - 1)  # the sentences' own numbering, by construction
    x, y = _network(figs["finding_massive_activation_ratio"])
    assert x[np.argmax(y)] == peak
    x, y = _network(figs["finding_sink_rate"])
    lo = np.array([row["sink_rate_ci"][0] for row in r["per_layer"][1:]])
    assert x[np.argmax(lo > 0.8)] == onset
    assert list(x) == list(range(L))  # attention: blocks 0..L-1
    for key in ("mean_cosine", "norm_ratio", "massive_activation_ratio"):  # hidden states: the embeddings at -1, then after block k at k
        x, _ = _network(figs[f"finding_{key}"])
        assert list(x) == [block_of(row["layer"]) for row in r["per_layer"]] == list(range(-1, L))
    x = figs["finding_attribution"].axes[0].lines
    assert [t["layer"] for t in r["twin"]] == [0, 3, 6]
    assert {float(v) for line in x for v in line.get_xdata()} == {0.0, 3.0, 6.0}


def _bands(ax) -> int:
    from matplotlib.collections import PolyCollection

    return sum(isinstance(c, PolyCollection) for c in ax.collections)


def test_every_finding_figure_shows_its_nulls_and_intervals(figures):
    r, figs = figures
    assert list(figs) == [f"finding_{k}" for k in ("sink_rate", "massive_activation_ratio", "norm_ratio", "mean_cosine")] + [
        "finding_leaders", "finding_attribution", "finding_regimes"
    ]  # fmt: skip
    for key in ("sink_rate", "massive_activation_ratio", "norm_ratio", "mean_cosine"):
        ax = figs[f"finding_{key}"].axes[0]
        labels = [line.get_label() for line in ax.lines]
        for null in ("uniform causal attention", "random weights", "shuffled tokens"):
            assert any(label.startswith(null) for label in labels), (key, labels)
        # the network's interval, the random and shuffled nulls' ranges over their draws, the held-out interval
        assert _bands(ax) == 4, key
        assert any("95 % interval" in label for label in labels)
        assert ax.get_legend() is not None
    ax = figs["finding_leaders"].axes[0]
    assert len(ax.containers) == 1
    assert len(ax.containers[0].lines[2][0].get_segments()) == 6  # all pairs and 5 replicates
    assert any(line.get_ydata()[0] == 0 for line in ax.lines[1:])  # the mask, the null: no difference
    ax = figs["finding_attribution"].axes[0]
    assert len(ax.containers) == 1
    assert any(line.get_label().startswith("random weights") for line in ax.lines)
    ax = figs["finding_regimes"].axes[0]
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"network, undetermined", "random weights"}


def test_the_page_opens_with_the_figures_then_the_table_then_the_sentences(figures):
    r, figs = figures
    names = [f"figures/{n}.png" for n in figs]
    page = render.page(r, names, ["figures/ranks.png"])
    at = {k: page.index(k) for k in ("finding-figures", "findings-table", "findings-sentences", "<h2>Per layer")}
    assert at["finding-figures"] < at["findings-table"] < at["findings-sentences"] < at["<h2>Per layer"]
    assert page.index("<h1>") < at["finding-figures"]
    assert "<li>" not in page[: at["findings-sentences"]]  # no sentence before the figures and the table
    head = page[at["finding-figures"] : at["findings-table"]]
    assert [m for m in re.findall(r'src="([^"]+)"', head)] == names
    table = page[at["findings-table"] : at["findings-sentences"]]
    assert table.count("<tr>") == 1 + len(render.findings_rows(r)) == 1 + 8  # a header, then one row a finding
    assert "exceeds" in table  # the decisions, as the findings made them


def test_the_page_code_is_in_three_parts_each_under_400_lines():
    import attndyn

    src = Path(attndyn.__file__).parent
    parts = {p: len((src / p).read_text().splitlines()) for p in ("models/decoder_study.py", "models/decoder_findings.py", "app/decoder_render.py")}
    assert all(n < 400 for n in parts.values()), parts
    assert len((src / "app" / "decoder_page.py").read_text().splitlines()) < 400
