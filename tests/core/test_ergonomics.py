"""Everyday ergonomics (issue 24): simulate's defaults, readable summaries, saving and loading a
trajectory, labelled arrays, unit-sphere starts."""

import numpy as np
import pytest

import attndyn as ad


def test_simulate_defaults_to_adaptive_dopri5():
    model = ad.Model(ad.Weights.identity(2), beta=1.0)
    x0 = np.random.default_rng(0).normal(size=(6, 2))
    ts = np.linspace(0, 2, 5)
    default = ad.simulate(model, x0, ts)
    explicit = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-8, atol=1e-10))
    np.testing.assert_array_equal(default.xs.numpy(), explicit.xs.numpy())
    with pytest.raises(ValueError, match="give both solver and step"):
        ad.simulate(model, x0, ts, solver=ad.RK4())


def test_trajectory_save_and_load_round_trip(tmp_path):
    model = ad.Model(ad.Weights.identity(3), beta=2.0, geometry="sphere")
    traj = ad.simulate(model, ad.sphere_start(7, 3, batch=(2,), seed=3), np.linspace(0, 3, 7))
    path = traj.save(tmp_path / "traj.npz")
    assert not list(tmp_path.glob(".*tmp"))  # written, then renamed
    back = ad.Trajectory.load(path)
    np.testing.assert_array_equal(back.xs.numpy(), traj.xs.numpy())
    np.testing.assert_array_equal(back.ts.numpy(), traj.ts.numpy())
    assert back.stats == traj.stats
    assert back.variable == "x"
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="holds no trajectory"):
        ad.Trajectory.load(tmp_path / "other.npz")
    np.savez(tmp_path / "pickled.npz", ts=np.zeros(2), xs=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="pickle"):
        ad.Trajectory.load(tmp_path / "pickled.npz")


def test_trajectory_as_labelled_array():
    traj = ad.simulate(ad.Model(ad.Weights.identity(2)), np.eye(2)[None].repeat(3, 0), [0.0, 0.5, 1.0])
    arr = traj.to_xarray()
    assert arr.dims == ("t", "batch0", "token", "coordinate")
    np.testing.assert_array_equal(arr.coords["t"].values, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(arr.values, traj.xs.numpy())


def test_sphere_start():
    x = ad.sphere_start(5, 4, batch=(3,), seed=1)
    assert x.shape == (3, 5, 4)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-15)
    np.testing.assert_array_equal(x, ad.sphere_start(5, 4, batch=(3,), seed=1))
    with pytest.raises(ValueError, match="n = 0"):
        ad.sphere_start(0, 3)


def test_summaries_are_short_and_never_dump_tensors():
    model = ad.Model(ad.Weights.identity(2), beta=1.0, rescaled=True)
    traj = ad.simulate(model, np.random.default_rng(0).uniform(-5, 5, (20, 2)), np.linspace(0, 10, 101))
    analysis = ad.analyze(traj, model)
    texts = {"trajectory": repr(traj), "weights": repr(model.weights), "analysis": repr(analysis), "analysis str": str(analysis)}
    for name, text in texts.items():
        assert "tensor(" not in text, name
        assert len(text) < 200, (name, text)
    assert "101 saves" in texts["trajectory"]
    assert "polytope" in texts["analysis"]
    assert "4 clusters" in texts["analysis"]
