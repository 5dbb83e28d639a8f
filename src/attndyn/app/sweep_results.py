"""Reading a sweep's results: an xarray Dataset, CSV/NetCDF export, heat maps.

Contract
--------
``load(out)`` returns an ``xarray.Dataset`` (one dimension per grid key in file order, plus ``t``
for measures over time; missing points are NaN). A dimension is named so that it works as an
attribute: the grid key ``"model.beta"`` becomes ``model_beta`` (``ds.model_beta``,
``ds.sel(model_beta=4.0)``), and the coordinate keeps the dotted key in its attributes (``key`` and
``long_name``). ``export`` writes it as CSV or NetCDF (atomically); ``heatmap`` draws one measure over
two grid axes, named either way.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attndyn.app.ledger import LEDGER, Ledger, cell, decode_results
from attndyn.workflow import ownership
from attndyn.workflow.schema import SweepError

if TYPE_CHECKING:
    from collections.abc import Sequence

    import xarray as xr
    from matplotlib.figure import Figure


def dim_name(key: str) -> str:
    """A grid key as a dimension name that is a Python identifier: ``"model.beta"`` to ``model_beta``."""
    name = re.sub(r"\W", "_", key)
    return f"_{name}" if name[:1].isdigit() else name


def _dims(keys: list[str]) -> list[str]:
    names = [dim_name(k) for k in keys]
    for name in names:
        if names.count(name) > 1:
            raise SweepError(f"grid keys {', '.join(repr(o) for o in keys if dim_name(o) == name)} would share the dimension name {name!r}")
    if "t" in names:
        raise SweepError("a grid key may not be named 't' (the time dimension)")
    return names


def load(folder: str | Path) -> xr.Dataset:
    """The sweep's results as an ``xarray.Dataset`` (see the module docstring)."""
    import xarray as xr

    folder = Path(folder)
    if not (folder / LEDGER).is_file():
        raise SweepError(f"{str(folder)!r} holds no sweep ledger ({LEDGER})")
    ledger = Ledger(folder)
    try:
        meta = ledger.meta()
        if not meta:
            raise SweepError(f"{folder / LEDGER} is empty")
        ledger.check_schema(meta)
        spec, ts = meta["spec"], np.asarray(meta["ts"], dtype=np.float64)
        grid = spec["grid"]
        keys = spec["axes"]  # the grid keys in file order (the canonical JSON sorts the grid's keys)
        shape = [len(grid[k]) for k in keys]
        index = {k: {json.dumps(v): i for i, v in enumerate(grid[k])} for k in keys}
        # a task is one grid point at every seed: its results fill the seed axis at that point
        place = {}
        for task_id, coords in ledger.db.execute("SELECT task_id, coords FROM tasks"):
            coords = cell(coords, f"{folder / LEDGER} (task {task_id})")
            place[task_id] = tuple(slice(None) if k == "seed" else index[k][json.dumps(coords[k])] for k in keys)
        data: dict[str, np.ndarray] = {}
        for task_id, blob in ledger.db.execute("SELECT task_id, data FROM results"):
            for name, value in decode_results(blob, f"{folder / LEDGER} (result of task {task_id})").items():
                if name not in data:
                    data[name] = np.full(shape + list(value.shape[1:]), np.nan)
                data[name][place[task_id]] = value if "seed" in keys else value[0]
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        if isinstance(err, SweepError):
            raise
        # cells that parse but do not fit one another (a grid value no task names, a spec without axes)
        raise SweepError(
            f"{folder / LEDGER} holds cells that do not fit together ({type(err).__name__}: {err}); the ledger was changed or damaged"
        ) from None
    finally:
        ledger.close()
    names = _dims(keys)
    variables = {}
    for name in spec["measures"]:
        value = data.get(name)
        if value is None:
            value = np.full(shape, np.nan)
        dims = names + (["t"] if value.ndim > len(keys) else [])
        variables[name] = (dims, value)
    coords = {d: (d, grid[k], {"key": k, "long_name": k}) for d, k in zip(names, keys, strict=True)}
    if any(len(v[0]) > len(keys) for v in variables.values()):
        coords["t"] = ts
    return xr.Dataset(variables, coords=coords, attrs={"fingerprint": meta["fingerprint"], "sweep": json.dumps(spec, sort_keys=True)})


def export(folder: str | Path, fmt: str, path: str | Path | None = None) -> Path:
    """Write the sweep's Dataset as ``netcdf``, ``zarr`` or ``csv`` (atomically; default ``folder/results.<ext>``)."""
    import tempfile

    ext = {"netcdf": "nc", "zarr": "zarr", "csv": "csv"}
    if fmt not in ext:
        raise SweepError(f"format {fmt!r} is not one of netcdf, zarr, csv")
    ds = load(folder)
    target = Path(path) if path is not None else Path(folder) / f"results.{ext[fmt]}"
    owner, rel = _writable(folder, target, "attndyn sweep export")
    if target.is_dir() and fmt != "zarr":
        raise SweepError(f"--out {str(target)!r} is a folder; {fmt} export writes a file")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".attndyn-export-") as tmp:
        part = Path(tmp) / target.name
        if fmt == "netcdf":
            ds.to_netcdf(part, engine="scipy")
        elif fmt == "zarr":
            ds.to_zarr(part, mode="w", zarr_format=2, consolidated=True)  # v2: readable by every zarr reader
        else:
            ds.to_dataframe().to_csv(part)
        ownership.install(part, target)  # over an earlier export of attndyn's only (its recorded hash)
    if rel is not None:
        owner.add(rel)
    return target


def grid_scale(values: Sequence[object] | np.ndarray) -> str:
    """How a sweep axis's measured values are drawn: ``"linear"`` (evenly spaced, or fewer than 3),
    ``"log"`` (positive and geometric: evenly spaced on a log axis), ``"uneven"`` (neither: each value
    gets one equal cell, labelled with the value, so no cell suggests values between the grid's) or
    ``"category"`` (not numbers)."""
    v = np.asarray(values)
    if not np.issubdtype(v.dtype, np.number):
        return "category"
    v = v.astype(float)
    if len(v) < 3:
        return "linear"
    steps = np.diff(v)
    if np.allclose(steps, steps[0], rtol=1e-6, atol=0):
        return "linear"
    if (v > 0).all():
        ratios = np.diff(np.log(v))
        if np.allclose(ratios, ratios[0], rtol=1e-6, atol=0):
            return "log"
    return "uneven"


def heatmap(
    folder: str | Path,
    measure: str,
    x: str,
    y: str,
    *,
    title: str = "",
    xlabel: str | None = None,
    ylabel: str | None = None,
    label: str | None = None,
    logx: bool = False,
    logy: bool = False,
) -> Figure:
    """A Figure of ``measure`` over the axes ``x`` and ``y`` (grid keys or ``t``), averaged over the
    others (named in the default title, with how many values each has); the title, axis and colour-bar
    labels (default: the names) and log axes may be set. An axis is drawn as its grid is
    (:func:`grid_scale`): a geometric grid on a log axis, an uneven one as one equal cell per value, with
    ticks at the measured values only where there are at most 12."""
    from attndyn.workflow import plots

    ds = load(folder)
    if measure not in ds:
        raise SweepError(f"measure {measure!r} is not in this sweep; it has {', '.join(ds.data_vars)}")
    da = ds[measure]
    for axis in (x, y):
        if axis not in da.dims and dim_name(axis) not in da.dims:
            raise SweepError(f"axis {axis!r} is not a dimension of {measure!r}; dimensions: {', '.join(da.dims)}")
    x, y = (axis if axis in da.dims else dim_name(axis) for axis in (x, y))  # the grid key or the dimension name
    if x == y:
        raise SweepError("--x and --y must differ")
    for flag, axis, name in ((logx, "x", x), (logy, "y", y)):
        values = np.asarray(ds[name].values)
        if flag and not (np.issubdtype(values.dtype, np.number) and (values > 0).all()):
            raise SweepError(f"a log {axis} axis needs positive numbers; the values of {name!r} are not")
    others = [d for d in da.dims if d not in (x, y)]
    mean = da.mean(others, skipna=True).transpose(y, x)
    names = {d: ds[d].attrs.get("key", d) for d in da.dims}
    reduced = ", ".join(f"{names[d]} ({da.sizes[d]} values)" for d in others)
    scales = {}
    for flag, name in ((logx, x), (logy, y)):
        scale = grid_scale(ds[name].values)
        scales[name] = "log" if flag else scale
    fig = plots.grid_heatmap(
        np.asarray(ds[x].values),
        np.asarray(ds[y].values),
        mean.values,
        xlabel=xlabel or names[x],
        ylabel=ylabel or names[y],
        label=label or measure,
        title=title or (f"mean of {label or measure} over {reduced}" if others else f"{label or measure}"),
        xscale=scales[x],
        yscale=scales[y],
    )
    return fig


def sources(folder: str | Path) -> list[Path]:
    """What the sweep folder's results depend on: its ledger (and SQLite's files beside it), the
    driver's lock and the folder's marker; no export or plot is ever written onto or inside them."""
    folder = Path(folder)
    return [folder / name for name in (*ownership.LIVE_FILES, ownership.MARKER, ownership.PREVIOUS)]


def _writable(folder: str | Path, target: Path, writer: str) -> tuple[ownership.Owner, str | None]:
    """The sweep folder's owner and ``target``'s path inside it (None outside); SweepError when
    ``target`` is (or is inside, or links to) one of the sweep's :func:`sources`, or exists and
    attndyn did not write it as it is now."""
    folder = Path(folder)
    for source in sources(folder):
        for form in {Path(os.path.abspath(target))} | {target.resolve()}:
            if form == Path(os.path.abspath(source)) or form == source.resolve() or source.resolve() in form.parents:
                raise SweepError(f"--out {str(target)!r} is the sweep's own {source.name} (what its results depend on); name another file")
    owner = ownership.claim(folder, "sweep", writer, option="the sweep folder")
    inside = Path(os.path.abspath(owner.folder)) in Path(os.path.abspath(target)).parents
    rel = Path(os.path.abspath(target)).relative_to(os.path.abspath(owner.folder)).as_posix() if inside else None
    try:
        ownership.release(target)
    except ownership.OwnershipError:
        kind = "a folder" if target.is_dir() else "a file"
        raise SweepError(f"--out {str(target)!r} is {kind} attndyn did not write (or changed since); name a new file") from None
    return owner, rel


def plot(folder: str | Path, measure: str, x: str, y: str, path: str | Path | None = None, **labels) -> Path:
    """Draw :func:`heatmap` into ``path`` (default ``folder/MEASURE_X_Y.png``), never over a file
    attndyn did not write; ``labels`` are :func:`heatmap`'s title, label and log-axis options."""
    from attndyn.workflow import plots

    safe = "_".join(part.replace(":", "-").replace("/", "-") for part in (measure, x, y))  # no colons in file names
    target = Path(path) if path is not None else Path(folder) / f"{safe}.png"
    if target.suffix != ".png":
        raise SweepError(f"--out {str(target)!r}: a plot is written as .png")
    figure = heatmap(folder, measure, x, y, **labels)
    owner, rel = _writable(folder, target, "attndyn sweep plot")
    target.parent.mkdir(parents=True, exist_ok=True)
    plots.save(figure, target)
    if rel is not None:
        owner.add(rel, str(Path(rel).with_suffix(".svg")))
    return target
