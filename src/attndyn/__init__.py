"""attndyn: self-attention as an interacting particle system.

Core names only, from the engine layer :mod:`attndyn.core`; the other layers (``analysis``,
``theory``, ``models``, ``workflow``, ``claims``, ``app``) are sub-packages imported on demand.
Every public name is loaded on first use (PEP 562), so ``import attndyn`` and the light commands
(``attndyn --help``, ``sweep status``, ``judge``, ``report``) do not import torch; ``from attndyn
import simulate`` and ``attndyn.simulate`` load the engine then. A few modules of the flat layout of
0.1 keep their old paths as aliases of their new homes (``attndyn.runs``, ``attndyn.meanfield``,
``attndyn.numerics``, ``attndyn.metastability``, ``attndyn.noise``) or as a re-export
(``attndyn.sweep``).
"""

from importlib import import_module

# public name -> the module that defines it
_HOMES = {
    "Model": "attndyn.core.dynamics",
    "attention_matrix": "attndyn.core.dynamics",
    "velocity": "attndyn.core.dynamics",
    "LongTrajectory": "attndyn.core.longtime",
    "simulate_long": "attndyn.core.longtime",
    "Trajectory": "attndyn.core.simulation",
    "plan": "attndyn.core.simulation",
    "residual_layers": "attndyn.core.simulation",
    "simulate": "attndyn.core.simulation",
    "sphere_start": "attndyn.core.simulation",
    "RK4": "attndyn.core.solvers",
    "AdaptiveStep": "attndyn.core.solvers",
    "Dopri5": "attndyn.core.solvers",
    "Euler": "attndyn.core.solvers",
    "FixedStep": "attndyn.core.solvers",
    "Heun": "attndyn.core.solvers",
    "FeedForward": "attndyn.core.weights",
    "Weights": "attndyn.core.weights",
    "analyze": "attndyn.analysis.prediction",  # SciPy's analysis stack
}


def __getattr__(name):
    if name == "__version__":  # importlib.metadata on first use: the command line's first moments stay short
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("attndyn")
        except PackageNotFoundError:  # running from a source tree without installation
            value = "0.0.0"
        globals()[name] = value
        return value
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'attndyn' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOMES) | {"__version__"})


__all__ = [*sorted(_HOMES, key=str.lower), "__version__"]
