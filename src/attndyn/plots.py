"""Figures (matplotlib, Agg backend). The only module that imports matplotlib.

Contract
--------
Functions take NumPy arrays and return a ``matplotlib.figure.Figure``; ``save(fig, path)`` writes
it atomically as PNG and closes it. No LaTeX is needed; every axis is labelled.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .io import atomic_write_bytes  # noqa: E402

plt.rcParams.update({"font.size": 11, "axes.titlesize": 12, "figure.dpi": 100})


def save(fig, path: str | Path, *, dpi: int = 120) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def principal_axes(points: np.ndarray, k: int = 2) -> np.ndarray:
    """The top-``k`` principal directions (columns) of a point cloud ``(N, d)``."""
    centered = points - points.mean(0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return vt[:k].T


def trajectories(ts: np.ndarray, xs: np.ndarray, *, title: str = "", variable: str = "x"):
    """Token paths: ``xs`` of shape ``(T, n, d)`` (a batch shows its first member).

    d = 1: coordinate against time; d = 2, 3: paths in space (start o, end filled); d > 3: paths
    in the first two principal components of all visited points.
    """
    xs = np.asarray(xs)
    while xs.ndim > 3:
        xs = xs[:, 0]
    T, n, d = xs.shape
    colors = plt.cm.viridis(np.linspace(0, 0.9, n))
    if d == 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        for i in range(n):
            ax.plot(ts, xs[:, i, 0], color=colors[i], lw=1)
        ax.set_xlabel("t")
        ax.set_ylabel(f"{variable}_i(t)")
    elif d == 3:
        fig = plt.figure(figsize=(6, 5))
        ax = fig.add_subplot(projection="3d")
        for i in range(n):
            ax.plot(xs[:, i, 0], xs[:, i, 1], xs[:, i, 2], color=colors[i], lw=1)
        ax.scatter(*xs[0].T, facecolors="none", edgecolors="gray", s=18, label=f"t = {ts[0]:.3g}")
        ax.scatter(*xs[-1].T, color="crimson", s=18, label=f"t = {ts[-1]:.3g}")
        ax.set_xlabel(f"{variable}[0]")
        ax.set_ylabel(f"{variable}[1]")
        ax.set_zlabel(f"{variable}[2]")
        ax.legend(loc="upper left", fontsize=9)
    else:
        if d == 2:
            pts, labels = xs, (f"{variable}[0]", f"{variable}[1]")
        else:
            axes = principal_axes(xs.reshape(-1, d))
            pts, labels = (xs - xs.reshape(-1, d).mean(0)) @ axes, ("principal component 1", "principal component 2")
        fig, ax = plt.subplots(figsize=(5.5, 5))
        for i in range(n):
            ax.plot(pts[:, i, 0], pts[:, i, 1], color=colors[i], lw=1)
        ax.scatter(pts[0, :, 0], pts[0, :, 1], facecolors="none", edgecolors="gray", s=20, label=f"t = {ts[0]:.3g}")
        ax.scatter(pts[-1, :, 0], pts[-1, :, 1], color="crimson", s=20, zorder=3, label=f"t = {ts[-1]:.3g}")
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        ax.set_aspect("equal", adjustable="datalim")
        ax.legend(loc="best", fontsize=9)
    ax.set_title(title or f"{n} tokens, d = {d}")
    return fig
