"""Integration in the span of x0 (simulate(..., span=True)) against the full-dimensional engine."""

import numpy as np
import pytest
import torch

import attndyn as ad
from attndyn.core.plan import span_obstruction


def unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


CASES = {
    "sphere, Q = K = V = I": dict(weights=ad.Weights.identity(40), beta=4.0, geometry="sphere"),
    "euclidean, scaled Q^T K and V, causal": dict(weights=ad.Weights(2 * np.eye(40), 0.5 * np.eye(40), 0.7 * np.eye(40)), beta=1.5, mask="causal"),
    "two heads": dict(
        weights=ad.Weights(np.stack([np.eye(40), 2 * np.eye(40)]), np.stack([np.eye(40)] * 2), np.stack([np.eye(40), -0.5 * np.eye(40)])), beta=1.0
    ),
    "rescaled, V = 0.6 I": dict(weights=ad.Weights.from_value(0.6 * np.eye(40)), beta=1.0, rescaled=True),
    "Pre-LN scheme": dict(weights=ad.Weights.identity(40), beta=2.0, geometry="sphere", scheme="pre"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_span_run_equals_the_full_run(name):
    options = CASES[name]
    model = ad.Model(**options)
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((3, 12, 40))  # a batch of 3 systems, n = 12 < d = 40
    if options.get("geometry") == "sphere":
        x0 = unit(x0)
    ts = np.linspace(0.0, 4.0, 9)
    run = dict(solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-11, atol=1e-13))
    full = ad.simulate(model, x0, ts, **run)
    reduced = ad.simulate(model, x0, ts, span=True, **run)
    np.testing.assert_allclose(reduced.xs.numpy(), full.xs.numpy(), atol=1e-8)
    # the point of it: the same trajectory for fewer evaluations' worth of work (n x n instead of n x d)
    assert reduced.xs.shape == full.xs.shape


def test_observe_sees_the_full_dimensional_state():
    model = ad.Model(ad.Weights.identity(30), beta=2.0, geometry="sphere")
    x0 = unit(np.random.default_rng(1).standard_normal((5, 30)))
    seen = []
    traj = ad.simulate(
        model, x0, [0.0, 0.5, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.05), span=True, observe=lambda t, x: (seen.append(x.shape), x.sum())[1]
    )
    assert seen == [torch.Size([5, 30])] * 3
    np.testing.assert_allclose(traj.observed.numpy(), traj.xs.sum((-1, -2)).numpy(), atol=1e-12)


@pytest.mark.parametrize(
    ("weights", "reason"),
    [
        (ad.Weights(np.diag([1.0, 2.0, 3.0]), np.eye(3), np.eye(3)), "Q^T K of head 0"),
        (ad.Weights.from_value(np.diag([1.0, -1.0, 0.5])), "V of head 0"),
        (ad.Weights(np.eye(3), np.eye(3), np.eye(3), ad.FeedForward(np.eye(3), "relu")), "feed-forward"),
    ],
)
def test_models_that_do_not_commute_with_rotations_are_refused(weights, reason):
    model = ad.Model(weights, beta=1.0)
    assert reason in span_obstruction(model)
    with pytest.raises(ValueError, match="commute with rotations"):
        ad.simulate(model, np.ones((2, 3)), [0.0, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.5), span=True)


def test_d_at_most_n_runs_unreduced():
    model = ad.Model(ad.Weights.identity(3), beta=1.0)
    x0 = np.random.default_rng(0).standard_normal((5, 3))
    a = ad.simulate(model, x0, [0.0, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.1), span=True)
    b = ad.simulate(model, x0, [0.0, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.1))
    assert torch.equal(a.xs, b.xs)
