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

__all__ = ["Analysis", "analyze"]


def __getattr__(name: str) -> object:
    # loaded on first use: the light commands (`judge`, `report`) read through the NumPy-only
    # submodules (numerics) without the torch that prediction imports
    if name in __all__:
        from attndyn.analysis import prediction

        return getattr(prediction, name)
    raise AttributeError(f"module 'attndyn.analysis' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
