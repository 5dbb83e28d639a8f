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
