"""Old path of :mod:`attndyn.core.noise` (the flat layout of 0.1), kept for existing code: the same module object."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("attndyn.core.noise")
