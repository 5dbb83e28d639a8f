"""One sweep task: the grid points of one shape integrated as one batch, and their measures.

Contract
--------
``run_task(configs, measures, options)`` takes config dicts (never live objects, so it runs on a
Dask worker as well as in-process), builds them (seeds share one model when their weights are
deterministic), integrates points that share their weights as one batch (in the span of x0 when the
weights allow it), and returns each measure stacked over the task's points. No I/O.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from attndyn.core.threads import ENV
from attndyn.workflow.measures import BATCHED_MEASURES, INNER_PRODUCT_MEASURES, measure_function
from attndyn.workflow.schema import SweepError, parse_config


def _same_model(a, b) -> bool:
    import torch

    if a is b:  # seeds of one task built together share their model (config.build_many)
        return True
    options = ("beta", "mask", "geometry", "rescaled", "attention", "normalization", "scheme", "scheme_tau", "scheme_alpha")
    if any(getattr(a, k) != getattr(b, k) for k in options):
        return False
    wa, wb = a.weights, b.weights
    if (wa.ff is None) != (wb.ff is None):
        return False
    pairs = [(wa.Q, wb.Q), (wa.K, wb.K), (wa.V, wb.V)] + ([(wa.ff.W, wb.ff.W)] if wa.ff is not None else [])
    return all(torch.equal(x, y) for x, y in pairs) and (wa.ff is None or (wa.ff.sigma, wa.ff.bias_inside) == (wb.ff.sigma, wb.ff.bias_inside))


def run_task(configs: list[dict], measures: list[str], options: dict) -> dict[str, np.ndarray]:
    """Simulate the grid points of one task and return each measure stacked over them: an array of
    shape ``(len(configs), *shape)`` per measure name, points in the order given.

    Points whose models are identical are integrated as one batch; the others one by one. When
    d > n and the weights commute with rotations (Q^T K and V multiples of I, no feed-forward), a
    batch is integrated in the span of its initial tokens (``simulate(..., span=True)``): n
    dimensions instead of d, the same trajectory. A measure must have one shape at every point of
    the task (it may depend on the save times, not on the point); otherwise SweepError names it.
    """
    import torch

    from attndyn.core.plan import span_obstruction
    from attndyn.core.simulation import simulate, span_coordinates
    from attndyn.workflow import runs
    from attndyn.workflow.setup import build_many

    try:
        from distributed import get_worker

        get_worker()
        # one thread per Dask worker (the thread policy reads ATTNDYN_THREADS): two workers on two cores do not oversubscribe
        os.environ.setdefault(ENV, "1")
        torch.set_num_threads(1)
    except (ImportError, ValueError):
        pass
    functions = dict(zip(measures, (measure_function(m) for m in measures), strict=True))
    setups = build_many([parse_config(c) for c in configs])
    out: dict[str, np.ndarray] = {}

    def store(name: str, where, values) -> None:
        """Write a measure's values at the task positions ``where`` (an index or an index array)."""
        values = np.asarray(values, dtype=np.float64)
        shape = values.shape if np.ndim(where) == 0 else values.shape[1:]
        if name not in out:
            out[name] = np.full((len(setups), *shape), np.nan)
        elif out[name].shape[1:] != shape:
            raise SweepError(f"measure {name!r} has different shapes at the points of one task ({out[name].shape[1:]} and {shape})")
        out[name][where] = values

    batches: list[list[int]] = []
    for i, s in enumerate(setups):
        if s.kind != "ode":  # the noisy and long-horizon integrators run one point at a time (a point's noise is its own seed's)
            ts, xs, _ = runs.integrate(s)
            for m, f in functions.items():
                store(m, i, f(ts, xs, s.model, options))
            continue
        for batch in batches:
            first = setups[batch[0]]
            if _same_model(first.model, s.model) and first.x0.shape == s.x0.shape and type(first.step) is type(s.step) and first.step == s.step:
                batch.append(i)
                break
        else:
            batches.append([i])
    for batch in batches:
        first = setups[batch[0]]
        x0 = torch.stack([setups[i].x0 for i in batch])
        # d > n with rotation-commuting weights (Q = K = V = I, ...): integrate in the span of x0,
        # and give measures of inner products only the n-dimensional coordinates
        run = {"solver": first.solver, "step": first.step, "max_steps": first.max_steps}
        if x0.shape[-1] > x0.shape[-2] and span_obstruction(first.model) is None:
            traj, Ut = span_coordinates(first.model, x0, first.ts, **run)
            if not all(m in INNER_PRODUCT_MEASURES or getattr(f, "inner_products_only", False) for m, f in functions.items()):
                traj = dataclasses.replace(traj, xs=traj.xs @ Ut)
        else:
            traj = simulate(first.model, x0, first.ts, **run)
        ts, xs = traj.numpy()  # (T,), (T, B, n, d or n)
        where = np.asarray(batch)
        for m, f in functions.items():
            if m in BATCHED_MEASURES:  # one call for the whole batch: (T, B)
                store(m, where, np.moveaxis(np.asarray(f(ts, xs, first.model, options), dtype=np.float64), 1, 0))
            else:
                for b, i in enumerate(batch):
                    store(m, i, f(ts, xs[:, b], first.model, options))
    return out
