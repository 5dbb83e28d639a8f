"""Workflow: declarative runs. Config files, run folders, sweep grids and tasks, files and figures.

Layer contract
--------------
Turns data into runs and runs into files: the config schema (``schema``, pydantic) and its
resolution into library objects (``setup``), one run as a unit (``runs``), sweep grids
(``grid``), measures (``measures``) and batched tasks (``tasks``), atomic writes of JSON/NPZ/run
folders (``files``) and figures (``plots``, the only matplotlib import). What the claims build on.
Imports :mod:`attndyn.core`, :mod:`attndyn.analysis`, :mod:`attndyn.theory` and
:mod:`attndyn.models`; never :mod:`attndyn.claims` or :mod:`attndyn.app`.
"""
