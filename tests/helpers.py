"""Shared test helpers (imported explicitly; conftest.py holds fixtures only)."""

from pathlib import Path

import numpy as np
import torch

import attndyn as ad

# The repository's root folder (configs/, examples/, src/).
ROOT = Path(__file__).resolve().parent.parent


def random_weights(rng, d, *, heads=1, m=None, scale=0.5):
    """Random non-symmetric Q, K, V (Gaussian entries) as NumPy float64."""
    m = d if m is None else m
    Q = rng.normal(0, scale, (heads, m, d))
    K = rng.normal(0, scale, (heads, m, d))
    V = rng.normal(0, scale, (heads, d, d))
    return ad.Weights(Q, K, V)


def tensor(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))
