"""attndyn: self-attention as an interacting particle system.

Core names only, from the engine layer :mod:`attndyn.core`; the other layers (``analysis``,
``theory``, ``models``, ``workflow``, ``claims``, ``app``) are sub-packages imported on demand
(``import attndyn`` loads torch, NumPy and SciPy-free core code only). A few modules of the flat
layout of 0.1 keep their old paths as aliases of their new homes (``attndyn.runs``,
``attndyn.meanfield``, ``attndyn.numerics``, ``attndyn.metastability``, ``attndyn.noise``) or as a
re-export (``attndyn.sweep``).
"""

from importlib.metadata import PackageNotFoundError, version

from attndyn.core.dynamics import Model, attention_matrix, velocity
from attndyn.core.longtime import LongTrajectory, simulate_long
from attndyn.core.simulation import Trajectory, plan, residual_layers, simulate, sphere_start
from attndyn.core.solvers import RK4, AdaptiveStep, Dopri5, Euler, FixedStep, Heun
from attndyn.core.weights import FeedForward, Weights


def __getattr__(name):
    # analyze pulls in SciPy's analysis stack; load it on first use so `import attndyn` stays light.
    if name == "analyze":
        from attndyn.analysis.prediction import analyze

        return analyze
    raise AttributeError(f"module 'attndyn' has no attribute {name!r}")


try:
    __version__ = version("attndyn")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

__all__ = [
    "AdaptiveStep",
    "Dopri5",
    "Euler",
    "FeedForward",
    "FixedStep",
    "Heun",
    "LongTrajectory",
    "Model",
    "RK4",
    "Trajectory",
    "Weights",
    "analyze",
    "attention_matrix",
    "plan",
    "residual_layers",
    "simulate",
    "simulate_long",
    "sphere_start",
    "velocity",
    "__version__",
]
