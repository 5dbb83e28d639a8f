"""Analysis: what a run shows, compared with what the paper predicts for it.

Layer contract
--------------
Functions of arrays (host NumPy/SciPy; torch only where attention is recomputed): clusters and
their stability (``clusters``), hulls, hyperplanes and invariant subspaces (``geometry``), Boolean
distance and leaders (``lowrank``), spectra and the regime of the paper that applies
(``spectra``), energy plateaus (``metastability``), validity horizons (``numerics``), and
:func:`analyze`, which puts them together for one trajectory (``prediction``). No I/O, no plotting.
Imports :mod:`attndyn.core` at most.
"""

from attndyn.analysis.prediction import Analysis, analyze

__all__ = ["Analysis", "analyze"]
