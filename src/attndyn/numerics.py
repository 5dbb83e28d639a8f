"""Numerical-validity diagnostics: is a value still decided by the dynamics, or by rounding?

Contract
--------
* ``finite_json(obj)``: a copy JSON can hold (NumPy scalars to Python, non-finite floats to the
  strings ``"inf"``, ``"-inf"``, ``"nan"``), so that a reported value is never silently dropped.

Pure NumPy; no I/O.
"""

from __future__ import annotations

import numpy as np


def finite_json(obj: object) -> object:
    """A copy of ``obj`` that JSON can hold: NumPy scalars to Python, non-finite floats to strings."""
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite_json(obj.tolist())
    if isinstance(obj, float | np.floating):
        v = float(obj)
        return v if np.isfinite(v) else str(v)
    if isinstance(obj, np.integer | np.bool_):
        return obj.item()
    return obj
