"""e^{tV} of the rescaled dynamics from V's eigendecomposition (issue 25) against
``torch.linalg.matrix_exp`` and SciPy's ``expm``; defective V keeps matrix_exp."""

import dataclasses

import numpy as np
import pytest
import torch
from scipy.linalg import expm

import attndyn as ad
from attndyn.core.dynamics import _expm_from_eigen, prepare, vector_field


@pytest.mark.parametrize("seed", range(5))
def test_eigen_exponential_equals_expm(seed):
    rng = np.random.default_rng(seed)
    V = rng.normal(size=(4, 4))  # complex eigenvalues in general
    args = prepare(ad.Model(ad.Weights(np.eye(4), np.eye(4), V), rescaled=True), torch.zeros(3, 4, dtype=torch.float64))
    assert args.eig is not None
    for t in (0.0, 0.4, 3.0):
        np.testing.assert_allclose(_expm_from_eigen(args.eig, t), expm(t * V), rtol=1e-12, atol=1e-12 * np.abs(expm(t * V)).max())


def test_rescaled_field_is_unchanged_by_the_factorisation(rng):
    V = rng.normal(size=(3, 3))
    model = ad.Model(ad.Weights(rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), V), beta=0.7, rescaled=True)
    x = torch.as_tensor(rng.normal(size=(2, 9, 3)))
    fast = prepare(model, x)
    slow = dataclasses.replace(fast, eig=None)
    for t in (0.1, 1.5, 4.0):
        a, b = vector_field(t, x, fast), vector_field(t, x, slow)
        assert float((a - b).abs().max() / b.abs().max()) < 1e-13


def test_a_defective_v_keeps_matrix_exp():
    V = np.array([[1.0, 1.0], [0.0, 1.0]])  # a Jordan block: no eigenvector basis
    model = ad.Model(ad.Weights(np.eye(2), np.eye(2), V), rescaled=True)
    args = prepare(model, torch.zeros(4, 2, dtype=torch.float64))
    assert args.eig is None
    x = torch.as_tensor(np.random.default_rng(0).normal(size=(4, 2)))
    z = x @ torch.as_tensor(expm(2.0 * V)).T
    L = z @ z.T
    P = torch.softmax(L, -1)
    expected = (P @ x - x) @ torch.as_tensor(V).T
    np.testing.assert_allclose(vector_field(2.0, x, args).numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
