"""The engine oracles on a CUDA device, in float64 and float32 (issue 9). Skipped without one.

Run them with ``make gpu-check`` (which also runs the velocity benchmark on the device).
"""

import numpy as np
import pytest
import scipy.linalg as sla
import torch

import attndyn as ad
from attndyn.core.dynamics import prepare, vector_field
from tests.core.test_against_scipy import reference
from tests.helpers import random_weights

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]

# (dtype, tolerance against an exact or float64 reference). float32 carries ~1e-7 relative
# rounding per operation; over a few hundred RK4 steps a few 1e-5 absolute on O(1) states.
DTYPES = [(torch.float64, 1e-9), (torch.float32, 5e-5)]


@pytest.fixture
def cuda():
    return torch.device("cuda")


@pytest.mark.parametrize(("dtype", "tol"), DTYPES)
def test_single_token_is_the_matrix_exponential(cuda, dtype, tol, rng):
    V = rng.normal(0, 0.5, (3, 3))
    x0 = rng.normal(size=(1, 3))
    model = ad.Model(ad.Weights(np.eye(3), np.eye(3), V))
    traj = ad.simulate(model, torch.as_tensor(x0, dtype=dtype, device=cuda), [0, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.01))
    assert traj.xs.device.type == "cuda"
    assert traj.xs.dtype == dtype
    np.testing.assert_allclose(ad.core.weights.to_numpy(traj.xs[-1]), x0 @ sla.expm(V).T, atol=tol)


@pytest.mark.parametrize(("dtype", "tol"), DTYPES)
def test_uniform_attention_closed_form(cuda, dtype, tol, rng):
    d = 2
    V = rng.normal(0, 0.5, (d, d))
    x0 = rng.normal(size=(5, d))
    model = ad.Model(ad.Weights(np.zeros((d, d)), np.zeros((d, d)), V))
    traj = ad.simulate(model, torch.as_tensor(x0, dtype=dtype, device=cuda), [0, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.01))
    expected = x0 + x0.mean(0) @ (sla.expm(V) - np.eye(d)).T
    np.testing.assert_allclose(ad.core.weights.to_numpy(traj.xs[-1]), expected, atol=tol)


@pytest.mark.parametrize(("dtype", "tol"), DTYPES)
@pytest.mark.parametrize("rescaled", [False, True])
def test_against_scipy_on_the_device(cuda, dtype, tol, rescaled, rng):
    W = random_weights(rng, 3)
    x0 = rng.normal(size=(6, 3))
    ref = reference(W, x0, 1.5, rescaled=rescaled, beta=0.8)
    x = torch.as_tensor(x0, dtype=dtype, device=cuda)
    model = ad.Model(W, beta=0.8, rescaled=rescaled)
    traj = ad.simulate(model, x, [0, 1.5], solver=ad.RK4(), step=ad.FixedStep(0.005))
    np.testing.assert_allclose(ad.core.weights.to_numpy(traj.xs[-1]), ref, atol=10 * tol)
    if dtype == torch.float64:
        adaptive = ad.simulate(model, x, [0, 1.5], solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-10, atol=1e-12))
        np.testing.assert_allclose(ad.core.weights.to_numpy(adaptive.xs[-1]), ref, atol=1e-7)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("mask", ["full", "causal", "window"])
def test_fused_equals_dense_on_the_device(cuda, dtype, tol, mask, rng):
    W = random_weights(rng, 8, heads=2)
    x = torch.as_tensor(rng.normal(size=(3, 64, 8)), dtype=dtype, device=cuda)
    kw = {"mask": mask, "window": 5 if mask == "window" else None}
    dense = vector_field(0.0, x, prepare(ad.Model(W, **kw), x))
    fused = vector_field(0.0, x, prepare(ad.Model(W, attention="fused", **kw), x))
    torch.testing.assert_close(fused, dense, atol=tol, rtol=0)
    # and both equal the host float64 field
    host = vector_field(0.0, x.double().cpu(), prepare(ad.Model(W, **kw), x.double().cpu()))
    torch.testing.assert_close(dense.double().cpu(), host, atol=tol * 10, rtol=0)
