"""Old path of the sweep API (one module in 0.1), kept for existing code: a re-export.

Its parts now live by layer: the sweep file in :mod:`attndyn.workflow.grid`, the measures in
:mod:`attndyn.workflow.measures`, one task in :mod:`attndyn.workflow.tasks`, the ledger in
:mod:`attndyn.app.ledger`, the driver in :mod:`attndyn.app.sweep_driver` and reading results in
:mod:`attndyn.app.sweep_results`. ``attndyn.sweep.load(folder)`` and ``attndyn.sweep.run(...)``
work as before.
"""

from attndyn.app.ledger import LEDGER, SCHEMA, Ledger, decode_results, encode_results
from attndyn.app.sweep_driver import Summary, run
from attndyn.app.sweep_results import export, heatmap, load
from attndyn.workflow.grid import SWEEP_KEYS, Point, Sweep, load_spec, parse
from attndyn.workflow.measures import (
    MEASURES,
    boolean_distance,
    cluster_count,
    energy,
    measure_function,
    pair_fraction,
    time_to_one_cluster,
)
from attndyn.workflow.schema import SweepError
from attndyn.workflow.tasks import run_task

__all__ = [
    "LEDGER",
    "MEASURES",
    "SCHEMA",
    "SWEEP_KEYS",
    "Ledger",
    "Point",
    "Summary",
    "Sweep",
    "SweepError",
    "boolean_distance",
    "cluster_count",
    "decode_results",
    "encode_results",
    "energy",
    "export",
    "heatmap",
    "load",
    "load_spec",
    "measure_function",
    "pair_fraction",
    "parse",
    "run",
    "run_task",
    "time_to_one_cluster",
]
