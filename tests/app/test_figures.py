"""Figures a referee accepts (issue 24): every heat map has a colour bar, and a figure's own style
argument applies to that figure only (the global rcParams are checked in test_engine_internals)."""

import numpy as np
import pytest

from attndyn.workflow import plots


def _colorbars(fig) -> int:
    return sum(1 for ax in fig.axes if ax.get_label() == "<colorbar>")


@pytest.mark.parametrize(
    "make",
    [
        lambda: plots.attention_heatmaps([np.eye(4), np.full((4, 4), 0.25)], np.array([0.0, 1.0]), [4, 1], tol=1e-4, title="P"),
        lambda: plots.density_map(np.linspace(0, 1, 5), np.linspace(0, 6, 8), np.ones((5, 8)), title="rho"),
        lambda: plots.grid_heatmap(np.arange(3.0), np.arange(2.0), np.ones((2, 3)), xlabel="x", ylabel="y", label="v"),
    ],
    ids=["attention", "density", "sweep-grid"],
)
def test_every_heat_map_has_a_colour_bar(make):
    fig = make()
    assert _colorbars(fig) == 1


def test_style_argument_reaches_every_figure_function():
    fig = plots.curves(np.arange(3.0), {"a": np.arange(3.0)}, xlabel="x", ylabel="y", title="t", style={"axes.titlesize": 21})
    assert fig.axes[0].title.get_fontsize() == 21


def _labelled_ticks(axis) -> list[str]:
    """The non-empty major tick labels of ``axis`` inside its view (after a draw)."""
    lo, hi = sorted(axis.get_view_interval())
    pad = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    return [
        t.get_text()
        for t, v in zip(axis.get_majorticklabels(), axis.get_majorticklocs(), strict=False)
        if t.get_visible() and t.get_text().strip() and lo - pad <= v <= hi + pad
    ]


def _unlabelled_axes(fig) -> list[str]:
    """Every drawn axis of ``fig`` without a labelled tick (two on a log axis); an axis whose ticks were
    removed on purpose (an empty fixed list: heat-map rows) draws none and is skipped."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.ticker import FixedLocator

    FigureCanvasAgg(fig)
    fig.canvas.draw()
    bad = []
    for k, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison:
            continue
        for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
            if not axis.get_visible():
                continue
            locator = axis.get_major_locator()
            if isinstance(locator, FixedLocator) and len(locator.locs) == 0:
                continue
            need = 2 if scale == "log" else 1
            got = _labelled_ticks(axis)
            if len(got) < need:
                bad.append(f"axes {k} ({ax.get_title()[:40]!r}) {name} ({scale}): labels {got}")
    return bad


@pytest.mark.parametrize("decades", [0.02, 0.3, 1.0, 2.0, 5.0, 18.0, 40.0])
def test_a_log_axis_is_labelled_over_any_span(decades):
    """Issue 33: `_plain_log_ticks` returned no tick over 18 decades (rank-collapse's y-axis)."""
    x = np.arange(10.0)
    fig = plots.curves(x, {"a": 10.0 ** (-decades * x / 9)}, xlabel="x", ylabel="y", title="t", logy=True)
    assert not _unlabelled_axes(fig)
    labels = _labelled_ticks(fig.axes[0].yaxis)
    assert 2 <= len(labels) <= 10, labels  # labelled, and not crowded


def test_log_tick_values_thin_1_2_5_beyond_a_decade():
    assert plots.log_tick_values(1.0, 10.0) == [1.0, 2.0, 5.0, 10.0]
    assert plots.log_tick_values(1e-18, 1.0)[:3] == [1e-18, 1e-15, 1e-12]
    assert all(len(plots.log_tick_values(10.0**-d, 1.0)) <= 9 for d in range(1, 60))


def _figure_claims():
    from attndyn.claims import EXPERIMENTS
    from tests.tiny_claims import SLOW

    return [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in EXPERIMENTS]


@pytest.mark.parametrize("claim_id", _figure_claims())
def test_every_claim_figure_labels_the_ticks_of_each_axis_it_draws(claim_id):
    from matplotlib.figure import Figure

    from attndyn.claims import load
    from tests.tiny_claims import tiny_result

    module = load(claim_id)
    if hasattr(module, "available") and not module.available()[0]:
        pytest.skip(module.available()[1])
    figs = module.figures(tiny_result(claim_id))
    bad = {name: _unlabelled_axes(fig) for name, fig in figs.items() if isinstance(fig, Figure)}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}
