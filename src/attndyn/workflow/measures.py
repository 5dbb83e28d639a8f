"""Sweep measures: functions ``(ts, xs, model, options) -> array`` of one integrated system.

Contract
--------
:data:`MEASURES` maps the built-in names to their functions; :func:`measure_function` resolves a
name, or ``"package.module:function"`` (imported where it is called, on the workers). Measures over
time return one value per save; ``BATCHED_MEASURES`` also accept a batch of systems at once, and
``INNER_PRODUCT_MEASURES`` need only inner products (so a task may read them off span coordinates); a
``package.module:function`` measure says the same with the attribute ``inner_products_only = True``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from attndyn.workflow.schema import SweepError

if TYPE_CHECKING:  # annotations only: `sweep status` reads the ledger without importing torch
    from attndyn.core.dynamics import Model


def _cosines(x: np.ndarray) -> np.ndarray:
    """Pairwise cosines ``(..., n, n)`` of the tokens ``(..., n, d)``."""
    u = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-300)
    return u @ np.swapaxes(u, -1, -2)


def pair_fraction(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> np.ndarray:
    """Fraction of pairs i < j with cos(x_i, x_j) >= ``pair_threshold`` at every save time: ``(T,)``."""
    n = xs.shape[-2]
    iu = np.triu_indices(n, 1)
    return (_cosines(xs)[..., iu[0], iu[1]] >= options["pair_threshold"]).mean(-1)


def energy(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> np.ndarray:
    """Normalised energy (1/n^2) sum_ij e^{beta (cos(x_i, x_j) - 1)} at every save time (arXiv 2410.06833): ``(T,)``."""
    beta = model.beta if math.isfinite(model.beta) else 1.0
    return np.exp(beta * (_cosines(xs) - 1.0)).mean((-1, -2))


# measures over time written for any leading axes: a batch (T, B, n, d) gives (T, B) in one call
def one_cluster(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> np.ndarray:
    """1 at the save times where every pair has cos >= ``pair_threshold``, else 0: ``(T,)``; averaged
    over the seed dimension of the exported array, the probability of one cluster at each save."""
    return (pair_fraction(ts, xs, model, options) >= 1.0).astype(np.float64)


BATCHED_MEASURES = {"pair_fraction", "energy", "one_cluster"}


# measures of the tokens' inner products only: the same on the span coordinates Y as on X = Y U^T
INNER_PRODUCT_MEASURES = {"pair_fraction", "energy", "time_to_one_cluster", "one_cluster"}


def time_to_one_cluster(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> float:
    """First save time at which every pair has cos >= ``pair_threshold`` (NaN if never)."""
    done = pair_fraction(ts, xs, model, options) >= 1.0
    return float(ts[np.argmax(done)]) if done.any() else float("nan")


def cluster_count(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> float:
    """Clusters at the last save time, by the definition ``analyze`` uses
    (:func:`attndyn.analysis.clusters.stable_cluster_count`): groups separated by a significant gap
    in the merge distances, at resolution ``cluster_tol`` (absolute: tokens closer than it are one
    cluster) and relative to the system's initial diameter, so a collapsed system counts 1. NaN where
    the tokens have no structure (no gap, not collapsed): that verdict's count is the tokens told apart,
    no number of clusters, so a mean over seeds (which skips NaN) never mixes the two, and the share of
    seeds without structure is the share of NaN."""
    from attndyn.analysis.clusters import diameter_of, stable_cluster_count

    reference = max(diameter_of(xs[0]), diameter_of(xs[-1]))
    if reference <= options["cluster_tol"]:
        return 1.0
    st = stable_cluster_count(xs[-1], scale=reference, rel_min=options["cluster_tol"] / reference)
    return float(st.count) if st.verdict != "no structure" else float("nan")


def boolean_distance(ts: np.ndarray, xs: np.ndarray, model: Model, options: dict) -> float:
    """Distance of the last attention matrix (head 0) to the nearest Boolean matrix."""
    from attndyn.analysis.lowrank import boolean_distance as distance
    from attndyn.core.dynamics import attention_matrix
    from attndyn.core.weights import to_numpy

    P = to_numpy(attention_matrix(model, xs[-1], t=float(ts[-1])))[0]
    return float(distance(P))


MEASURES: dict[str, Callable] = {
    "pair_fraction": pair_fraction,
    "energy": energy,
    "time_to_one_cluster": time_to_one_cluster,
    "one_cluster": one_cluster,
    "cluster_count": cluster_count,
    "boolean_distance": boolean_distance,
}


def measure_function(name: str) -> Callable:
    """A measure by name, or ``package.module:function`` (imported here, on the worker)."""
    if name in MEASURES:
        return MEASURES[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        if not (all(part.isidentifier() for part in module.split(".")) and attr.isidentifier()):
            raise SweepError(f"measure {name!r} is not of the form 'package.module:function' (dotted Python names)")
        try:
            function = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise SweepError(f"measure {name!r} cannot be imported: {err}") from None
        except Exception as err:  # the user's module raised while it was imported: its error, not attndyn's
            raise SweepError(f"measure {name!r}: importing {module!r} raised {type(err).__name__}: {' '.join(str(err).split())}") from None
        if not callable(function):
            raise SweepError(f"measure {name!r} is a {type(function).__name__}, not a function")
        return function
    raise SweepError(f"unknown measure {name!r}; known: {', '.join(MEASURES)} (or 'package.module:function')")
