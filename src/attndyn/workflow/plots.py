"""Figures (matplotlib, Agg backend). The only module that imports matplotlib.

Contract
--------
Functions take NumPy arrays and return a ``matplotlib.figure.Figure``; ``save(fig, path)`` writes
it atomically as PNG and closes it. No LaTeX is needed; every axis is labelled.
"""

from __future__ import annotations

import functools
import io
import math
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from attndyn.workflow.files import atomic_write_bytes

# Applied inside each figure function (matplotlib.rc_context), never to the global rcParams: a
# library import must not change its host's matplotlib state. Figures are plain ``Figure``
# objects (no pyplot, no backend switch), rendered by Agg when saved.
# Okabe-Ito: a qualitative palette that stays distinguishable under the common colour-vision
# deficiencies (sequential data uses viridis, which is too).
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
# the curves' colours: Okabe-Ito without its yellow, which is too faint on white for thin lines and hollow markers
CURVE_COLORS = [c for c in OKABE_ITO if c != "#F0E442"]
LEGEND_INSIDE = 5  # more legend entries than this go outside the axes, on the right, where they hide no data
STYLE = {
    "font.size": 11,
    "font.family": "DejaVu Sans",
    "axes.titlesize": 12,
    "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO),
    "figure.dpi": 100,
    "svg.hashsalt": "attndyn",  # deterministic SVG ids
}


def styled(fn: Callable) -> Callable:
    """Run a figure function under the module's style; every figure function takes ``style``, a
    dict of rcParams that override it for that figure only (``style={"font.size": 14}``)."""

    @functools.wraps(fn)
    def wrapper(*args, style: dict | None = None, **kwargs):
        with matplotlib.rc_context({**STYLE, **(style or {})}):
            out = fn(*args, **kwargs)
        if isinstance(out, Figure):  # every log axis labelled (issue 33: none over 18 decades)
            for ax in out.axes:
                for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
                    if scale == "log" and not isinstance(axis.get_major_locator(), FixedLocator):  # ticks set at data values stay
                        _plain_log_ticks(axis)
        return out

    return wrapper


def _figure(figsize) -> Figure:
    return Figure(figsize=figsize, dpi=STYLE["figure.dpi"])


def _subplots(*grid, figsize, **kwargs):
    fig = _figure(figsize)
    return fig, fig.subplots(*grid, **kwargs)


def _cmap(name: str):
    return matplotlib.colormaps[name]


# plain-text names in titles, axis labels, legends and notes, written as mathtext when a figure is saved
# (texts that already hold mathtext, a "$", are left alone)
MATH_WORDS = [
    (r"\blambda_k\b", r"$\\lambda_k$"),
    (r"\blambda_l\b", r"$\\lambda_\\ell$"),
    (r"\blambda_max\b", r"$\\lambda_{\\max}$"),
    (r"\bbeta\b", r"$\\beta$"),
    (r"\bkappa\b", r"$\\kappa$"),
    (r"\brho0\b", r"$\\rho_0$"),
    (r"\brho\b", r"$\\rho$"),
    (r"\btheta\b", r"$\\theta$"),
    (r"\bsqrt\(d\)", r"$\\sqrt{d}$"),
    (r"\bE_beta\b", r"$E_\\beta$"),
    (r"<x_i, x_j>", r"$\\langle x_i, x_j \\rangle$"),
    (r"\bS\^([12])\b", r"$S^\1$"),
]


def mathtext(text: str) -> str:
    """``text`` with the plain names of :data:`MATH_WORDS` as mathtext (beta -> $\\beta$), unless it has some already."""
    if "$" in text:
        return text
    for pattern, repl in MATH_WORDS:
        text = re.sub(pattern, repl, text)
    return text


def _mathtext_figure(fig: Figure) -> None:
    texts = [t for t in (getattr(fig, "_suptitle", None),) if t is not None]
    for ax in fig.axes:
        sides = [getattr(ax, name, None) for name in ("_left_title", "_right_title")]  # the left and right titles, when any
        texts += [ax.title, *(t for t in sides if t is not None), ax.xaxis.label, ax.yaxis.label, *ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            texts += list(legend.get_texts())
            if legend.get_title() is not None:
                texts.append(legend.get_title())
    for t in texts:
        t.set_text(literal_if_unparsable(mathtext(t.get_text())))


def literal_if_unparsable(text: str) -> str:
    """``text``, or with every ``$`` escaped when matplotlib would read it as mathtext and cannot parse it
    (a model's name or a token string from a file, ``$\\frac{$``, is shown as written instead of failing)."""
    if (text.count("$") - text.count(r"\$")) % 2 or "$" not in text:
        return text  # an odd number of unescaped dollars: matplotlib shows the text literally
    from matplotlib.mathtext import MathTextParser

    try:
        MathTextParser("path").parse(text)
    except ValueError:
        return text.replace(r"\$", "$").replace("$", r"\$")
    return text


def save(fig: Figure, path: str | Path, *, dpi: int = 120, vector: bool = True) -> Path:
    """Write ``fig`` as PNG at ``path`` and, with ``vector``, as SVG next to it (same stem), atomically.

    Returns the PNG's path. Dense artists (images, meshes) stay raster inside the SVG. Plain names
    in the texts (beta, lambda_k, S^2, ...) are written as mathtext first (:func:`mathtext`).
    """
    path = Path(path)
    _mathtext_figure(fig)
    with matplotlib.rc_context(STYLE):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
        atomic_write_bytes(path, buf.getvalue())
        if vector:
            # the tight box of the PNG (in inches), so the SVG does not lay the figure out twice more
            box = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
            buf = io.BytesIO()
            fig.savefig(buf, format="svg", bbox_inches=box, metadata={"Date": None})
            atomic_write_bytes(path.with_suffix(".svg"), buf.getvalue())
    return path


def principal_axes(points: np.ndarray, k: int = 2) -> np.ndarray:
    """The top-``k`` principal directions (columns) of a point cloud ``(N, d)``."""
    centered = points - points.mean(0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return vt[:k].T


@styled
def trajectories(ts: np.ndarray, xs: np.ndarray, *, title: str = "", variable: str = "x") -> Figure:
    """Token paths: ``xs`` of shape ``(T, n, d)`` (a batch shows its first member).

    d = 1: coordinate against time; d = 2, 3: paths in space (start o, end filled); d > 3: paths
    in the first two principal components of all visited points.
    """
    xs = np.asarray(xs)
    while xs.ndim > 3:
        xs = xs[:, 0]
    T, n, d = xs.shape
    colors = _cmap("viridis")(np.linspace(0, 0.9, n))
    if d == 1:
        fig, ax = _subplots(figsize=(6, 4))
        for i in range(n):
            ax.plot(ts, xs[:, i, 0], color=colors[i], lw=1)
        ax.set_xlabel("t")
        ax.set_ylabel(f"{variable}_i(t)")
    elif d == 3:
        fig = _figure(figsize=(6, 5))
        ax = fig.add_subplot(projection="3d")
        for i in range(n):
            ax.plot(xs[:, i, 0], xs[:, i, 1], xs[:, i, 2], color=colors[i], lw=1)
        ax.scatter(*xs[0].T, facecolors="none", edgecolors="gray", s=18, label=f"t = {ts[0]:.3g}")
        ax.scatter(*xs[-1].T, color="#D55E00", s=18, label=f"t = {ts[-1]:.3g}")
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
        fig, ax = _subplots(figsize=(5.5, 5))
        for i in range(n):
            ax.plot(pts[:, i, 0], pts[:, i, 1], color=colors[i], lw=1)
        ax.scatter(pts[0, :, 0], pts[0, :, 1], facecolors="none", edgecolors="gray", s=20, label=f"t = {ts[0]:.3g}")
        ax.scatter(pts[-1, :, 0], pts[-1, :, 1], color="#D55E00", s=20, zorder=3, label=f"t = {ts[-1]:.3g}")
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        ax.set_aspect("equal", adjustable="datalim")
        ax.legend(loc="best", fontsize=9)
    ax.set_title(title or f"{n} tokens, d = {d}")
    return fig


def _hull_polygon(points: np.ndarray):
    """Vertices of the 2-D convex hull in order (for drawing), or None when degenerate."""
    from scipy.spatial import ConvexHull, QhullError

    try:
        hull = ConvexHull(points)
    except (QhullError, ValueError):
        return None
    return points[np.r_[hull.vertices, hull.vertices[0]]]


def _hull_edges_3d(points: np.ndarray):
    from scipy.spatial import ConvexHull, QhullError

    try:
        hull = ConvexHull(points)
    except (QhullError, ValueError):
        return []
    return [points[np.r_[s, s[0]]] for s in hull.simplices]


@styled
def paths_with_hulls(
    ts: np.ndarray,
    zs: np.ndarray,
    *,
    title: str,
    variable: str = "z",
    limit_points: np.ndarray | None = None,
    limit_label: str | None = "limit polytope",
) -> Figure:
    """Token paths in 2-D or 3-D, the initial convex hull (dashed) and the hull of the limit points
    (solid, labelled ``limit_label``; not drawn when it is None, for limits that are not polytopes)."""
    zs = np.asarray(zs)
    d = zs.shape[-1]
    final = np.asarray(limit_points) if limit_points is not None else zs[-1]
    colors = _cmap("viridis")(np.linspace(0, 0.9, zs.shape[1]))
    if d == 2:
        fig, ax = _subplots(figsize=(5.5, 5))
        for i in range(zs.shape[1]):
            ax.plot(zs[:, i, 0], zs[:, i, 1], color=colors[i], lw=0.9)
        hulls = [(_hull_polygon(zs[0]), "--", "initial hull")] + ([(_hull_polygon(final), "-", limit_label)] if limit_label else [])
        for poly, style, label in hulls:
            if poly is not None:
                ax.plot(poly[:, 0], poly[:, 1], style, color="black" if style == "-" else "gray", lw=1.2, label=label)
        ax.scatter(zs[0, :, 0], zs[0, :, 1], facecolors="none", edgecolors="gray", s=16)
        ax.scatter(zs[-1, :, 0], zs[-1, :, 1], color="#D55E00", s=18, zorder=3, label=f"t = {ts[-1]:.3g}")
        ax.set_xlabel(f"{variable}[0]")
        ax.set_ylabel(f"{variable}[1]")
        ax.set_aspect("equal", adjustable="datalim")
        ax.legend(loc="best", fontsize=8)
    else:
        fig = _figure(figsize=(6, 5.5))
        ax = fig.add_subplot(projection="3d")
        for i in range(zs.shape[1]):
            ax.plot(zs[:, i, 0], zs[:, i, 1], zs[:, i, 2], color=colors[i], lw=0.8)
        for e in _hull_edges_3d(final) if limit_label else []:
            ax.plot(e[:, 0], e[:, 1], e[:, 2], color="black", lw=0.6)
        ax.scatter(*zs[-1].T, color="#D55E00", s=14)
        ax.set_xlabel(f"{variable}[0]")
        ax.set_ylabel(f"{variable}[1]")
        ax.set_zlabel(f"{variable}[2]")
    ax.set_title(title)
    return fig


@styled
def coordinates_vs_time(ts: np.ndarray, c: np.ndarray, *, levels: dict, ylabel: str, title: str) -> Figure:
    """Scalar coordinates c_i(t) (``(T, n)``) against t, with horizontal reference lines."""
    fig, ax = _subplots(figsize=(6.5, 4))
    c = np.asarray(c)
    colors = _cmap("viridis")(np.linspace(0, 0.9, c.shape[1]))
    for i in range(c.shape[1]):
        ax.plot(ts, c[:, i], color=colors[i], lw=0.9)
    for name, value in levels.items():
        ax.axhline(value, color="#D55E00", ls="--", lw=1)
        # a level named by its own value ("0", "1") is labelled once, not "0 = 0"
        label = name if name == f"{value:.4g}" else f"{name} = {value:.4g}"
        # outside the axes, on the right: the label never sits on the frame or on the curves
        ax.annotate(label, (1.01, value), xycoords=("axes fraction", "data"), va="center", ha="left", fontsize=9, color="#D55E00")
    ax.set_xlabel("t")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return fig


@styled
def attention_heatmaps(Ps: list[np.ndarray], times: np.ndarray, ranks: list[int], *, tol: float, title: str) -> Figure:
    """P at several times, each titled with its numerical rank at the explicit tolerance."""
    k = len(Ps)
    fig, axes = _subplots(1, k, figsize=(2.6 * k + 0.8, 2.9), squeeze=False)
    image = None
    for ax, P, t, r in zip(axes[0], Ps, times, ranks, strict=True):
        image = ax.imshow(P, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"t = {t:.3g}, rank = {r}", fontsize=10)
        ax.set_xlabel("j (attended)")
        ax.set_ylabel("i")
    fig.suptitle(f"{title} (rank: singular values > {tol:g})", fontsize=11)
    fig.tight_layout()
    fig.colorbar(image, ax=list(axes[0]), label="$P_{ij}$", fraction=0.04, pad=0.02)
    return fig


@styled
def distance_log(ts: np.ndarray, dist: np.ndarray, *, ylabel: str, title: str, fit: dict | None = None, floor: float = 1e-300) -> Figure:
    """A distance on a log scale against t, with an optional fitted exponential rate."""
    fig, ax = _subplots(figsize=(6, 4))
    dist = np.asarray(dist, float)
    ok = dist > floor
    ax.semilogy(np.asarray(ts)[ok], dist[ok], color="#0072B2", lw=1.5, label="measured")
    if fit is not None:
        rate, intercept, t0, t1 = fit
        tt = np.linspace(t0, t1, 50)
        ax.semilogy(tt, np.exp(intercept - rate * tt), "--", color="#D55E00", lw=1.5, label=f"fit: C e^(-{rate:.3f} t)")
    ax.set_xlabel("t")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=9)
    return fig


@styled
def counts_vs_time(ts: np.ndarray, counts: dict, *, ylabel: str, title: str, logx: bool = False) -> Figure:
    """Cluster counts (or other integer series) against t; ``counts`` maps a label to a series."""
    fig, ax = _subplots(figsize=(6, 4))
    for label, series in counts.items():
        ax.step(ts, series, where="post", lw=1.4, label=label)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(counts) > 1:
        _legend(ax, len(counts))
    return fig


@styled
def loglog(ts: np.ndarray, series: dict, *, ylabel: str, title: str, slopes: dict | None = None) -> Figure:
    fig, ax = _subplots(figsize=(6, 4))
    for label, y in series.items():
        ax.loglog(ts, y, lw=1.5, label=label)
    for label, (t, y) in (slopes or {}).items():
        ax.loglog(t, y, "--", lw=1, color="gray", label=label)
    ax.set_xlabel("t")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


@styled
def eigen_coordinates(ts: np.ndarray, coords: np.ndarray, eigenvalues: np.ndarray, *, title: str) -> Figure:
    """Coordinates of the tokens along the eigen-directions of a symmetric V (high-dimensional figure).

    Left: directions with positive eigenvalue (the conjecture predicts convergence), mean +- std over
    tokens, split by the sign of the final value. Right: directions with negative eigenvalue
    (repulsive in z), symlog scale.
    """
    coords = np.asarray(coords)  # (T, n, d)
    eigenvalues = np.asarray(eigenvalues)
    fig, (a1, a2) = _subplots(1, 2, figsize=(11, 4))
    pos = np.flatnonzero(eigenvalues > 0)
    neg = np.flatnonzero(eigenvalues < 0)
    for k in pos[np.argsort(-eigenvalues[pos])][:6]:
        c = coords[:, :, k]
        for sign, style in ((1, "-"), (-1, "--")):
            sel = np.sign(c[-1]) == sign
            if sel.any():
                m, s = c[:, sel].mean(1), c[:, sel].std(1)
                a1.plot(ts, m, style, lw=1.2, label=f"lambda = {eigenvalues[k]:.2f}, final {'> 0' if sign > 0 else '< 0'}")
                a1.fill_between(ts, m - s, m + s, alpha=0.15)
    a1.set_xlabel("t")
    a1.set_ylabel("coordinate of z_i along eigenvector")
    a1.set_title("positive eigenvalues (6 largest)")
    a1.legend(fontsize=7)
    for k in neg[np.argsort(eigenvalues[neg])][:6]:
        a2.plot(ts, coords[:, :, k].mean(1), lw=1.2, label=f"lambda = {eigenvalues[k]:.2f} (mean over tokens)")
    a2.set_yscale("symlog")
    a2.set_xlabel("t")
    a2.set_ylabel("coordinate (symlog)")
    a2.set_title("negative eigenvalues (6 most negative)")
    a2.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


@styled
def write_gif(
    path: str | Path, setup: Callable, update: Callable, n_frames: int, *, figsize: tuple[float, float] = (5.0, 5.0), fps: int = 8, dpi: int = 100
) -> Path:
    """A GIF from ``state = setup(fig)`` and ``update(state, k)`` for k < n_frames, written atomically.

    Artists are created once and updated per frame (rebuilding axes per frame is far slower).
    """
    import tempfile

    from matplotlib.animation import PillowWriter

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = _figure(figsize=figsize)
    state = setup(fig)
    writer = PillowWriter(fps=fps)
    # frames go to a private folder of the system's (a killed run leaves nothing in the user's folder: a referee's
    # killed --movie runs left visible tmpXXXXXXXX/ folders beside the output); the bytes land through the gate
    with tempfile.TemporaryDirectory(prefix="attndyn-movie-") as tmp:
        tmp_file = Path(tmp) / path.name
        with writer.saving(fig, str(tmp_file), dpi):
            for k in range(n_frames):
                update(state, k)
                writer.grab_frame()
        atomic_write_bytes(path, tmp_file.read_bytes())
    return path


def frame_indices(T: int, n_frames: int = 30) -> np.ndarray:
    return np.unique(np.linspace(0, T - 1, min(n_frames, T)).round().astype(int))


@styled
def points_movie(path: str | Path, ts: np.ndarray, zs: np.ndarray, *, title: str, variable: str = "z") -> Path:
    """Tokens moving in 2-D or 3-D (with the current convex hull in 2-D)."""
    zs = np.asarray(zs)
    idx = frame_indices(len(ts))
    d = zs.shape[-1]
    lo, hi = zs.min((0, 1)), zs.max((0, 1))
    pad = 0.05 * (hi - lo + 1e-12)

    def setup(fig):
        if d == 2:
            ax = fig.add_subplot()
            (hull,) = ax.plot([], [], color="gray", lw=1)
            pts = ax.scatter(zs[0, :, 0], zs[0, :, 1], color="#D55E00", s=14)
            ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
            ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
            ax.set_aspect("equal", adjustable="box")
        else:
            ax = fig.add_subplot(projection="3d")
            hull = None
            pts = ax.scatter(*zs[0, :, :3].T, color="#D55E00", s=10)
            ax.set_xlim(lo[0], hi[0])
            ax.set_ylim(lo[1], hi[1])
            ax.set_zlim(lo[2], hi[2])
            ax.set_zlabel(f"{variable}[2]")
        ax.set_xlabel(f"{variable}[0]")
        ax.set_ylabel(f"{variable}[1]")
        return ax, hull, pts

    def update(state, k):
        ax, hull, pts = state
        z = zs[idx[k]]
        if d == 2:
            pts.set_offsets(z)
            poly = _hull_polygon(z)
            hull.set_data(*(poly.T if poly is not None else ([], [])))
        else:
            pts._offsets3d = (z[:, 0], z[:, 1], z[:, 2])
        ax.set_title(f"{title}, t = {ts[idx[k]]:.2f}", fontsize=10)

    return write_gif(path, setup, update, len(idx))


@styled
def heatmap_movie(path: str | Path, ts: np.ndarray, Ps: list[np.ndarray], ranks: list[int], *, tol: float, title: str) -> Path:
    idx = frame_indices(len(ts))

    def setup(fig):
        ax = fig.add_subplot()
        im = ax.imshow(Ps[0], cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        fig.colorbar(im, ax=ax, label="$P_{ij}$")
        ax.set_xlabel("j (attended)")
        ax.set_ylabel("i")
        return ax, im

    def update(state, k):
        ax, im = state
        im.set_data(Ps[idx[k]])
        ax.set_title(f"{title}\nt = {ts[idx[k]]:.2f}, rank = {ranks[idx[k]]} (tol {tol:g})", fontsize=9)

    return write_gif(path, setup, update, len(idx))


@styled
def eigenvalue_grid(eigs: list, labels: list[str], *, title: str, cols: int = 4) -> Figure:
    """Eigenvalues in the complex plane, one panel per head (as in the paper's ALBERT figure)."""
    k = len(eigs)
    rows = math.ceil(k / cols)
    fig, axes = _subplots(rows, cols, figsize=(3.0 * cols, 2.8 * rows), squeeze=False)
    for ax in axes.flat[k:]:
        ax.axis("off")
    for ax, w, label in zip(axes.flat, eigs, labels, strict=False):
        w = np.asarray(w)
        ax.scatter(w.real, w.imag, s=8, color="#0072B2")
        if len(w):
            top = w[np.argmax(np.abs(w))]
            ax.scatter([top.real], [top.imag], s=30, facecolors="none", edgecolors="#D55E00")
        ax.axhline(0, color="gray", lw=0.5)
        ax.axvline(0, color="gray", lw=0.5)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("Re", fontsize=8)
        ax.set_ylabel("Im", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


@styled
def curves(
    x: np.ndarray,
    series: dict,
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    points: dict | None = None,
    logx: bool = False,
    logy: bool = False,
    hlines: dict | None = None,
) -> Figure:
    """Lines ``series`` (label -> y over ``x``, or label -> (x, y) for a line with its own abscissae)
    and markers ``points`` (label -> (x, y)); optional reference levels ``hlines`` (label -> y)."""
    fig, ax = _subplots(figsize=(6, 4))
    colors = CURVE_COLORS
    for k, (label, y) in enumerate(series.items()):
        lx, ly = y if isinstance(y, tuple) else (x, y)
        ax.plot(lx, ly, lw=1.5, label=label, color=colors[k % len(colors)])
    markers = "os^vDx+*"
    for k, (label, (px, py)) in enumerate((points or {}).items()):
        ax.plot(px, py, markers[k % len(markers)], ms=5, mfc="none", label=label, color=colors[(k + len(series)) % len(colors)])
    for label, y in (hlines or {}).items():  # labelled outside the axes, on the right, where they cover no curve
        ax.axhline(y, color="gray", ls=":", lw=1)
        ax.annotate(label, (1.01, y), xycoords=("axes fraction", "data"), fontsize=8, color="gray", va="center", ha="left")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    for axis, flag in ((ax.xaxis, logx), (ax.yaxis, logy)):
        if flag:
            _plain_log_ticks(axis)
    _legend(ax, len(series) + len(points or {}), right=0.14 if hlines else 0.0)
    return fig


def _legend(ax, entries: int, *, right: float = 0.0) -> None:
    """A legend inside the axes where it hides least, or outside on the right beyond ``right`` (axes
    fraction, room for labels there) when it has more than :data:`LEGEND_INSIDE` entries."""
    if entries > LEGEND_INSIDE:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02 + right, 1.0), borderaxespad=0.0)
    else:
        ax.legend(fontsize=8, framealpha=0.9)


def log_tick_values(vmin: float, vmax: float, most: int = 9) -> list[float]:
    """Major ticks of a log axis over [vmin, vmax], at most ``most`` in view, never none: 1, 2 and 5 times
    the powers of ten within about a decade, 1 and 3 within three, every power of ten up to ``most``
    decades, and every k-th power of ten beyond (matplotlib's LogLocator with subs 1, 2, 5 returned no tick
    at all over 18 decades). Fewer than two in view (a span below a decade): 1 to 9 times the powers."""
    if not (np.isfinite(vmin) and np.isfinite(vmax)) or vmax <= 0:
        return []
    vmin, vmax = min(vmin, vmax), max(vmin, vmax)
    vmin = vmin if vmin > 0 else vmax * 1e-6
    lo, hi = math.floor(math.log10(vmin)), math.ceil(math.log10(vmax))
    decades = math.log10(vmax / vmin)
    stride = 1
    if decades <= 1.3:
        subs = (1.0, 2.0, 5.0)
    elif decades <= 3.3:
        subs = (1.0, 3.0)
    else:
        subs = (1.0,)
        stride = max(1, math.ceil((hi - lo + 1) / most))
    first = lo - lo % stride
    ticks = [m * 10.0**e for e in range(first, hi + 1, stride) for m in subs]
    inside = [t for t in ticks if vmin * (1 - 1e-9) <= t <= vmax * (1 + 1e-9)]
    if len(inside) < 2:
        inside = [m * 10.0**e for e in range(lo, hi + 1) for m in range(1, 10) if vmin * (1 - 1e-9) <= m * 10.0**e <= vmax * (1 + 1e-9)]
        if len(inside) > most:  # thin the crowded 1-9 labels
            inside = inside[:: math.ceil(len(inside) / most)]
    if len(inside) < 2:  # a span within one 1-9 step (1.2e-3 to 1.5e-3): evenly spaced round values
        from matplotlib.ticker import MaxNLocator

        inside = [float(t) for t in MaxNLocator(4).tick_values(vmin, vmax) if vmin * (1 - 1e-9) <= t <= vmax * (1 + 1e-9) and t > 0]
    return inside


def _plain_log_ticks(axis) -> None:
    """Log-axis labels from :func:`log_tick_values` (never none, never crowded), written plainly (0.02,
    50, 1e+06), and no minor labels: matplotlib's minor labels collide when an axis spans about one decade."""
    from matplotlib.ticker import FuncFormatter, Locator, NullFormatter

    class PlainLogLocator(Locator):
        def __call__(self):
            vmin, vmax = self.axis.get_view_interval()
            return self.tick_values(vmin, vmax)

        def tick_values(self, vmin, vmax):
            return log_tick_values(float(vmin), float(vmax))

    axis.set_major_locator(PlainLogLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


@styled
def density_map(ts: np.ndarray, theta: np.ndarray, rho: np.ndarray, *, title: str) -> Figure:
    """A density rho(theta, t) on the circle as an image over (t, theta), with a log colour scale."""
    from matplotlib.colors import LogNorm

    fig, ax = _subplots(figsize=(6.5, 4))
    floor = max(float(rho[rho > 0].min()) if (rho > 0).any() else 1e-12, float(rho.max()) * 1e-6)
    image = ax.pcolormesh(ts, theta, np.clip(rho.T, floor, None), shading="nearest", cmap=_cmap("viridis"), norm=LogNorm(floor, float(rho.max())))
    fig.colorbar(image, ax=ax, label="density rho(theta, t)")
    ax.set_xlabel("t")
    ax.set_ylabel("theta (rad)")
    ax.set_title(title)
    return fig


@styled
def density_movie(path: str | Path, ts: np.ndarray, theta: np.ndarray, rho: np.ndarray, *, title: str) -> Path:
    """The density on the circle, one frame per save time (at most 30 frames)."""
    frames = frame_indices(len(ts))
    top = float(rho.max()) * 1.05

    def setup(fig):
        ax = fig.subplots()
        (line,) = ax.plot(theta, rho[0], lw=1.5)
        ax.set_xlim(0, 2 * math.pi)
        ax.set_ylim(0, top)
        ax.set_xlabel("theta (rad)")
        ax.set_ylabel("density")
        return ax, line

    def update(state, k):
        ax, line = state
        line.set_ydata(rho[frames[k]])
        ax.set_title(f"{title}, t = {ts[frames[k]]:.3g}", fontsize=10)

    return write_gif(path, setup, update, len(frames), figsize=(5.5, 3.5))


def _grid_edges(centres: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges midway between grid values (on a log axis, midway in log), the outer cells as wide as their neighbours."""
    c = np.log(centres) if log else centres
    if len(c) == 1:
        edges = np.array([c[0] - 0.5, c[0] + 0.5]) if not log else np.array([c[0] - 0.1, c[0] + 0.1])
    else:
        mid = (c[1:] + c[:-1]) / 2
        edges = np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])
    return np.exp(edges) if log else edges


@styled
def grid_heatmap(
    x: np.ndarray,
    y: np.ndarray,
    values: np.ndarray,
    *,
    xlabel: str,
    ylabel: str,
    label: str,
    title: str = "",
    curve: dict | None = None,
    xscale: str = "linear",
    yscale: str = "linear",
) -> Figure:
    """``values`` ``(len(y), len(x))`` as a heat map over two sweep axes, with optional overlaid curves (label -> (x, y)).

    An axis's ``scale`` says how its grid is drawn: ``"linear"`` or ``"log"`` (cells centred on the values,
    edges midway, on a linear or log axis), ``"uneven"`` or ``"category"`` (one equal cell per value, labelled
    with it: an uneven grid drawn on a linear axis would suggest values between the grid's). Ticks sit at the
    measured values where an axis has at most 12, and a dot marks each measured point where each axis has at
    most 30 values."""
    fig, ax = _subplots(figsize=(6.5, 4.2))
    positions, edges = [], []
    for values_, scale in ((x, xscale), (y, yscale)):
        v = np.asarray(values_)
        if scale in ("uneven", "category") or not np.issubdtype(v.dtype, np.number):
            pos = np.arange(len(v), dtype=float)
            positions.append(pos)
            edges.append(_grid_edges(pos, False))
        else:
            pos = v.astype(float)
            positions.append(pos)
            edges.append(_grid_edges(pos, scale == "log"))
    xs, ys = positions
    image = ax.pcolormesh(edges[0], edges[1], np.asarray(values, dtype=float), shading="flat", cmap=_cmap("viridis"))
    fig.colorbar(image, ax=ax, label=label)
    for axis, values_, pos, scale in (("x", x, xs, xscale), ("y", y, ys, yscale)):
        categorical = scale in ("uneven", "category") or not np.issubdtype(np.asarray(values_).dtype, np.number)
        if scale == "log" and not categorical:
            (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        if categorical or len(pos) <= 12:
            (ax.set_xticks if axis == "x" else ax.set_yticks)(pos, [f"{v:g}" if isinstance(v, int | float | np.number) else str(v) for v in values_])
            (ax.xaxis if axis == "x" else ax.yaxis).set_minor_locator(NullLocator())
    if len(xs) <= 30 and len(ys) <= 30:
        gx, gy = np.meshgrid(xs, ys)
        ax.plot(gx.ravel(), gy.ravel(), ".", color="white", ms=3, alpha=0.8, label="_grid")
    for k, (name, (cx, cy)) in enumerate((curve or {}).items()):
        ax.plot(cx, cy, "--", color=["white", "#D55E00", "#E69F00"][k % 3], lw=1.5, label=name)
    if curve:
        ax.legend(fontsize=8, loc="upper left")
        ax.set_ylim(edges[1].min(), edges[1].max())
    ax.set_xlabel(xlabel + (" (uneven grid: one cell per value)" if xscale == "uneven" else ""))
    ax.set_ylabel(ylabel + (" (uneven grid: one cell per value)" if yscale == "uneven" else ""))
    ax.set_title(title or f"{label} over ({xlabel}, {ylabel})")
    return fig


@styled
def intervals(
    labels: list[str],
    values: np.ndarray,
    lows: np.ndarray,
    highs: np.ndarray,
    *,
    ylabel: str,
    title: str,
    logy: bool = False,
    hlines: dict | None = None,
) -> Figure:
    """One value per label with its interval [low, high] as an error bar; optional reference levels ``hlines`` (label -> y)."""
    fig, ax = _subplots(figsize=(max(5.0, 0.9 * len(labels) + 2.0), 4))
    x = np.arange(len(labels))
    v = np.asarray(values, dtype=float)
    ax.errorbar(x, v, yerr=[v - np.asarray(lows, dtype=float), np.asarray(highs, dtype=float) - v], fmt="o", capsize=4, color=CURVE_COLORS[0])
    for label, y in (hlines or {}).items():
        ax.axhline(y, color="gray", ls=":", lw=1)
        ax.annotate(label, (1.01, y), xycoords=("axes fraction", "data"), fontsize=8, color="gray", va="center", ha="left")
    if logy:
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
    ax.set_xticks(x, labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return fig
