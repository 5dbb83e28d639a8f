"""attndyn: self-attention as an interacting particle system.

Core names only; analysis, experiments, plots and the CLI live in their own modules and are
imported on demand (``import attndyn`` loads torch, NumPy and SciPy-free core code only).
"""

from importlib.metadata import PackageNotFoundError, version

from .dynamics import Model, attention_matrix, velocity
from .longtime import LongTrajectory, simulate_long
from .simulation import Trajectory, residual_layers, simulate
from .solvers import RK4, AdaptiveStep, Dopri5, Euler, FixedStep, Heun
from .weights import FeedForward, Weights


def __getattr__(name):
    # analyze pulls in SciPy's analysis stack; load it on first use so `import attndyn` stays light.
    if name == "analyze":
        from .analysis import analyze

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
    "residual_layers",
    "simulate",
    "simulate_long",
    "velocity",
    "__version__",
]
