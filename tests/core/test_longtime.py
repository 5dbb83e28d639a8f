"""The long-horizon sphere integrator against the general engine and the exact two-token law (SPEC §8.4)."""

import math

import numpy as np
import pytest
from scipy.integrate import quad

import attndyn as ad
from attndyn.core.longtime import simulate_long


def unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


@pytest.mark.parametrize("general_qk", [False, True])
def test_matches_the_engine_through_merges(general_qk):
    """Up to t = 150 at beta = 6 two merges happen; the engine (plain field, Dopri5) is the reference."""
    rng = np.random.default_rng(3)
    d, n = 3, 5
    x0 = unit(rng.standard_normal((n, d)))
    if general_qk:
        Q = np.eye(d) + 0.2 * rng.standard_normal((d, d))
        weights = ad.Weights(Q, np.eye(d), np.eye(d))
    else:
        weights = ad.Weights.identity(d)
    model = ad.Model(weights, beta=6.0, geometry="sphere")
    ts = np.linspace(0.0, 150.0, 31)
    ref = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-11, atol=1e-13)).xs.numpy()
    long = simulate_long(model, x0, ts, rtol=1e-11, atol=1e-13)
    assert len(long.merges) >= 2  # the test goes through merges, where the masses matter
    np.testing.assert_allclose(long.xs, ref, atol=1e-6)
    # merged tokens share one position; unmerged ones do not
    last = long.xs[-1]
    distinct = len(np.unique(np.round(last, 12), axis=0))
    assert distinct == n - len(long.merges)


def test_two_tokens_follow_the_exact_law_over_exponential_times():
    """For n = 2, dc/ds = 2 (1 - c^2) / (1 + e^{-beta (1 - c)}) exactly; s(c) by quadrature."""
    beta, c0 = 200.0, 0.5
    half = math.acos(c0) / 2
    x0 = np.array([[math.cos(half), math.sin(half), 0.0], [math.cos(half), -math.sin(half), 0.0]])
    model = ad.Model(ad.Weights.identity(3), beta=beta, geometry="sphere")
    traj = simulate_long(model, x0, [0.0, 10 * math.exp(beta * (1 - c0))], clock_pair=(0, 1), every_step=True)
    xs, s = traj.steps["xs"], traj.steps["clock"]
    c = (xs[:, 0] * xs[:, 1]).sum(-1)
    assert c[0] == pytest.approx(c0)
    assert c.max() > 1 - 1e-6
    checked = 0
    for ck, sk in zip(c[::10], s[::10], strict=True):
        if ck > 1 - 1e-6:
            continue
        exact = quad(lambda u: (1 + math.exp(-beta * (1 - u))) / (2 * (1 - u * u)), c0, ck, epsabs=1e-13, epsrel=1e-12)[0]
        assert sk == pytest.approx(exact, rel=1e-7, abs=1e-9)
        checked += 1
    assert checked > 20
    assert traj.merges
    assert traj.merges[0][1:] == (0, 1)


def test_a_plateau_of_1e40_costs_about_a_hundred_steps_and_the_merge_comes_on_time():
    """Two tokens at cosine -0.9, beta = 50: they merge at t = int (1 + e^{beta(1-u)}) / (2 (1 - u^2)) du, about 1e40."""
    beta, c0 = 50.0, -0.9
    x0 = np.array([[1.0, 0.0, 0.0], [c0, math.sqrt(1 - c0 * c0), 0.0]])
    model = ad.Model(ad.Weights.identity(3), beta=beta, geometry="sphere")
    traj = simulate_long(model, x0, [0.0, 1e100], every_step=True)
    c = (traj.steps["xs"][:, 0] * traj.steps["xs"][:, 1]).sum(-1)
    # the plateau (c within 1e-3 of c0, from t = 0 to about 1e39) in a hundred-odd steps; the approach
    # itself costs about a thousand, since the speed changes by e^{beta dc} along it
    assert int((c < c0 + 1e-3).sum()) < 150
    assert traj.stats["steps"] < 2000
    assert traj.stats["max_step"] > 1e90
    # log of the exact merge time (the part of the integral near c = 1 adds O(10) time units, nothing here)
    scaled = quad(lambda u: math.exp(beta * (c0 - u)) / (2 * (1 - u * u)), c0, 1 - 1e-9, epsrel=1e-12, limit=200)[0]
    assert len(traj.merges) == 1
    assert math.log(traj.merges[0][0]) == pytest.approx(beta * (1 - c0) + math.log(scaled), abs=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mask": "causal"}, "no mask"),
        ({"geometry": "euclidean"}, "geometry='sphere'"),
        ({"beta": math.inf}, "finite beta"),
    ],
)
def test_other_models_are_refused_with_the_reason(change, message):
    model = ad.Model(ad.Weights.identity(3), **{"beta": 5.0, "geometry": "sphere", **change})
    with pytest.raises(ValueError, match=message):
        simulate_long(model, np.eye(3), [0.0, 1.0])


def test_bad_inputs_are_refused():
    model = ad.Model(ad.Weights.identity(3), beta=5.0, geometry="sphere")
    with pytest.raises(ValueError, match="V = I"):
        simulate_long(ad.Model(ad.Weights(np.eye(3), np.eye(3), 2 * np.eye(3)), beta=5.0, geometry="sphere"), np.eye(3), [0.0, 1.0])
    with pytest.raises(ValueError, match="unit vectors"):
        simulate_long(model, 2 * np.eye(3), [0.0, 1.0])
    with pytest.raises(ValueError, match="starting at 0"):
        simulate_long(model, np.eye(3), [1.0, 2.0])
    with pytest.raises(ValueError, match="shape"):
        simulate_long(model, np.eye(4), [0.0, 1.0])
    with pytest.raises(ValueError, match="clock_pair"):
        simulate_long(model, np.eye(3), [0.0, 1.0], clock_pair=(1, 1))


@pytest.mark.parametrize("general_qk", [False, True])
def test_usa_matches_the_engine_through_merges_in_t_and_in_tau(general_qk):
    """USA at beta = 4 to t = 80: the engine's plain field is the reference; tau = e^{beta |Q^T K|} t gives the same run."""
    rng = np.random.default_rng(5)
    d, n = 3, 5
    x0 = unit(rng.standard_normal((n, d)))
    weights = ad.Weights(np.eye(d) + 0.2 * rng.standard_normal((d, d)), np.eye(d), np.eye(d)) if general_qk else ad.Weights.identity(d)
    model = ad.Model(weights, beta=4.0, geometry="sphere", normalization="unnormalized")
    ts = np.linspace(0.0, 80.0, 33)
    ref = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-11, atol=1e-13)).xs.numpy()
    long = simulate_long(model, x0, ts, rtol=1e-11, atol=1e-13)
    assert len(long.merges) >= 2
    np.testing.assert_allclose(long.xs, ref, atol=1e-6)
    scale = math.exp(4.0 * np.linalg.norm(weights.Q[0].numpy().T @ weights.K[0].numpy(), 2))
    tau = simulate_long(model, x0, ts * scale, rtol=1e-11, atol=1e-13, rescaled_time=True)
    np.testing.assert_allclose(tau.xs, long.xs, atol=1e-9)
    np.testing.assert_allclose([m[0] for m in tau.merges], [m[0] * scale for m in long.merges], rtol=1e-9)


def test_usa_two_tokens_follow_the_exact_law_in_tau_beyond_float64_t():
    """USA, n = 2 at beta = 3000 (e^beta t is out of float64): dc/dtau = (1 - c^2) e^{-beta (1 - c)}, so
    tau(c) = int dc / ((1 - c^2) e^{-beta (1 - c)}) and the clock s = int e^{-beta (1 - c)} dtau = artanh(c) - artanh(c0)."""
    beta, c0 = 3000.0, 0.99
    half = math.acos(c0) / 2
    x0 = np.array([[math.cos(half), math.sin(half)], [math.cos(half), -math.sin(half)]])
    model = ad.Model(ad.Weights.identity(2), beta=beta, geometry="sphere", normalization="unnormalized")
    with pytest.raises(ValueError, match="rescaled_time=True"):
        simulate_long(model, x0, [0.0, 1.0])
    horizon = 10 * math.exp(beta * (1 - c0))
    traj = simulate_long(model, x0, [0.0, horizon], clock_pair=(0, 1), every_step=True, rescaled_time=True)
    xs, s = traj.steps["xs"], traj.steps["clock"]
    c = (xs[:, 0] * xs[:, 1]).sum(-1)
    keep = c < 1 - 1e-6
    # the clock, well conditioned in c: s = artanh(c) - artanh(c(0))
    np.testing.assert_allclose(s[keep], np.arctanh(c[keep]) - math.atanh(c[0]), rtol=1e-7, atol=1e-9)
    # the merge time against the pair law's quadrature (c(tau) itself is ill-conditioned: a 1e-10 step error at c0
    # is amplified by e^{beta (c - c0)}), in tau = e^beta t: ln tau = beta + ln t
    from attndyn.theory import pair_log_time

    law = beta + pair_log_time(beta, float(c[0]), 1, 1, u_end=0.5e-18, n=2, usa=True)
    assert math.log(traj.merges[0][0]) == pytest.approx(law, abs=1e-7)
    checked = int(keep.sum())
    assert checked > 10
    assert traj.merges[0][1:] == (0, 1)
