"""Bad input is rejected with a message naming the value (issue 2, item 8)."""

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

import attndyn as ad
from tests.helpers import random_weights


def test_mismatched_QK_shapes():
    with pytest.raises(ValueError, match=r"Q and K must have the same shape.*\(1, 2, 3\).*\(1, 3, 3\)"):
        ad.Weights(np.zeros((2, 3)), np.zeros((3, 3)), np.eye(3))


def test_V_shape_must_match_heads():
    with pytest.raises(ValueError, match=r"V must have shape \(heads, d, d\) = \(2, 3, 3\).*\(1, 3, 3\)"):
        ad.Weights(np.zeros((2, 2, 3)), np.zeros((2, 2, 3)), np.eye(3))


def test_x0_dimension_must_match_weights():
    with pytest.raises(ValueError, match=r"d = 3.*\(5, 2\)"):
        ad.simulate(ad.Model(ad.Weights.identity(3)), np.zeros((5, 2)), [0, 1], solver=ad.RK4(), step=ad.FixedStep(0.1))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_x0(bad):
    x0 = np.zeros((4, 2))
    x0[1, 1] = bad
    with pytest.raises(ValueError, match=r"x0 \(shape \(4, 2\)\) contains non-finite"):
        ad.simulate(ad.Model(ad.Weights.identity(2)), x0, [0, 1], solver=ad.RK4(), step=ad.FixedStep(0.1))


def test_non_finite_weights():
    V = np.eye(2)
    V[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"V \(shape \(2, 2\)\) contains non-finite"):
        ad.Weights(np.eye(2), np.eye(2), V)


@pytest.mark.parametrize("shape", [(0, 2), (3, 0)])
def test_empty_state(shape):
    with pytest.raises(ValueError, match=r"n and d must both be positive|d = 2"):
        ad.simulate(ad.Model(ad.Weights.identity(2)), np.zeros(shape), [0, 1], solver=ad.RK4(), step=ad.FixedStep(0.1))


def test_zero_dimension_weights():
    with pytest.raises(ValueError, match=r"m and d must be positive"):
        ad.Weights(np.zeros((1, 0)), np.zeros((1, 0)), np.zeros((0, 0)))


@pytest.mark.parametrize("dt", [0.0, -0.1, math.inf])
def test_bad_dt(dt):
    with pytest.raises(ValueError, match=r"FixedStep dt=.* must be a finite number > 0"):
        ad.FixedStep(dt)


@pytest.mark.parametrize(("rtol", "atol", "name"), [(0.0, 1e-9, "rtol"), (1e-6, -1.0, "atol")])
def test_bad_tolerances(rtol, atol, name):
    with pytest.raises(ValueError, match=rf"AdaptiveStep {name}=.* must be a finite number > 0"):
        ad.AdaptiveStep(rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    ("kw", "pattern"),
    [
        ({"mask": "diagonal"}, r"mask='diagonal' is not an option"),
        ({"geometry": "torus"}, r"geometry='torus' is not an option"),
        ({"attention": "flash"}, r"attention='flash' is not an option"),
        ({"normalization": "l1"}, r"normalization='l1' is not an option"),
        ({"beta": -1.0}, r"beta=-1.0 is invalid"),
        ({"rescaled": True, "geometry": "sphere"}, r"does not stay on the sphere"),
        ({"beta": math.inf, "attention": "fused"}, r"has no hardmax"),
        ({"normalization": "unnormalized", "attention": "fused"}, r"always normalizes rows"),
        ({"beta": math.inf, "normalization": "unnormalized"}, r"not defined"),
    ],
)
def test_unknown_or_impossible_options(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        ad.Model(ad.Weights.identity(2), **kw)


def test_rescaled_multihead_rejected(rng):
    with pytest.raises(ValueError, match=r"rescaled=True needs one value matrix.*2 heads"):
        ad.Model(random_weights(rng, 2, heads=2), rescaled=True)


def test_unknown_sigma():
    with pytest.raises(ValueError, match=r"sigma 'gelu' is unknown"):
        ad.FeedForward(np.eye(2), "gelu")


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        (np.zeros((2, 2), dtype=np.complex128), r"complex"),
        (np.zeros((2, 2), dtype=np.int64), r"floating dtype"),
        (torch.zeros((2, 2), dtype=torch.int32), r"floating dtype"),
        (torch.zeros((2, 2), dtype=torch.complex64), r"complex"),
    ],
)
def test_non_float_dtypes(value, pattern):
    with pytest.raises(TypeError, match=pattern):
        ad.Weights(value, np.eye(2), np.eye(2))
    with pytest.raises(TypeError, match=pattern):
        ad.simulate(ad.Model(ad.Weights.identity(2)), value, [0, 1], solver=ad.RK4(), step=ad.FixedStep(0.1))


def test_ts_not_increasing():
    with pytest.raises(ValueError, match=r"ts must be strictly increasing; got \[0.0, 1.0, 0.5\]"):
        ad.simulate(ad.Model(ad.Weights.identity(2)), np.zeros((3, 2)), [0, 1, 0.5], solver=ad.RK4(), step=ad.FixedStep(0.1))


def test_ts_off_grid():
    with pytest.raises(ValueError, match=r"save time 0.25 is not on the dt=0.1 grid"):
        ad.simulate(ad.Model(ad.Weights.identity(2)), np.zeros((3, 2)), [0, 0.25], solver=ad.RK4(), step=ad.FixedStep(0.1))


def test_max_steps():
    with pytest.raises(RuntimeError, match=r"max_steps=5 reached at t=0.5"):
        ad.simulate(ad.Model(ad.Weights.identity(2)), np.ones((3, 2)), [0, 1], solver=ad.RK4(), step=ad.FixedStep(0.1), max_steps=5)


def test_state_becomes_non_finite_names_time():
    W = ad.Weights(np.eye(1), np.eye(1), np.array([[1e6]]))
    with pytest.raises(FloatingPointError, match=r"non-finite at t="):
        ad.simulate(ad.Model(W), np.ones((2, 1)), [0, 10], solver=ad.Euler(), step=ad.FixedStep(0.1))


def test_rescaled_overflow_is_a_clear_error():
    W = ad.Weights(np.eye(2), np.eye(2), 200 * np.eye(2))
    with pytest.raises(FloatingPointError, match=r"e\^\(tV\) overflows at t="):
        ad.simulate(ad.Model(W, rescaled=True), np.ones((3, 2)), [0, 5], solver=ad.RK4(), step=ad.FixedStep(0.1))
    V = np.array([[300.0, 1.0], [0.0, 1.0]])
    with pytest.raises(FloatingPointError, match=r"e\^\(tV\) overflows at t="):
        ad.velocity(3.0, torch.ones(3, 2, dtype=torch.float64), ad.Model(ad.Weights(np.eye(2), np.eye(2), V), rescaled=True))


def test_adaptive_needs_error_estimate():
    with pytest.raises(ValueError, match=r"rk4 has none"):
        ad.simulate(ad.Model(ad.Weights.identity(2)), np.ones((3, 2)), [0, 1], solver=ad.RK4(), step=ad.AdaptiveStep(rtol=1e-6, atol=1e-9))


def test_sphere_needs_unit_vectors():
    with pytest.raises(ValueError, match=r"unit-norm tokens"):
        ad.simulate(ad.Model(ad.Weights.identity(2), geometry="sphere"), np.ones((3, 2)), [0, 1], solver=ad.RK4(), step=ad.FixedStep(0.1))


def test_import_is_light():
    code = (
        "import sys, attndyn\n"
        "heavy = [m for m in ('matplotlib', 'pydantic', 'typer', 'dask', 'transformers') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
