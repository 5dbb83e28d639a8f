"""The paper's named matrices, defined once (from the authors' released scripts).

* ``V2``: the 2-D good triple of the hyperplane figure (eigenvalues 1.348, -0.068).
* ``V3A``: 3-D, leading eigenvalue 0.991, a complex pair with negative real part.
* ``V3B``: 3-D, leading eigenvalue 1.078, a complex pair with positive real part (k = 3).
* ``VC``: symmetric, eigenvalues {-0.222, 0.253, 1.963} (the codimension-conjecture example, k = 2).

Each is returned as a fresh float64 NumPy array, so callers cannot change the shared values.
"""

from __future__ import annotations

import numpy as np

_V2 = ((0.64709742, 0.81911926), (0.61210449, 0.63263484))
_V3A = ((0.2362413, 0.0599536, 0.40506019), (0.81321448, 0.49948705, 0.33754772), (0.2160645, 0.38505272, 0.14588075))
_V3B = ((0.18608476, 0.34391026, 0.13905949), (0.35244288, 0.6694859, 0.39992145), (0.46685606, 0.17094454, 0.42092308))
_VC = ((0.92761287, 0.94333073, 0.3827744), (0.94333073, 0.59991396, 0.47825472), (0.3827744, 0.47825472, 0.46668605))


def V2() -> np.ndarray:
    """The paper's 2-D value matrix of the hyperplane figure (F-hyp2)."""
    return np.array(_V2)


def V3A() -> np.ndarray:
    """3-D value matrix of F-hyp3, complex pair with Re < 0."""
    return np.array(_V3A)


def V3B() -> np.ndarray:
    """3-D value matrix of F-hyp3, complex pair with Re > 0."""
    return np.array(_V3B)


def VC() -> np.ndarray:
    """The symmetric value matrix of the codimension-conjecture figure (F-conj)."""
    return np.array(_VC)
