"""The compiled small-system path against the eager engine (the oracle: the same RK4 steps in torch)."""

import math

import numpy as np
import pytest
import torch

import attndyn as ad
from attndyn.core import compiled


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A fresh build of the kernel in a temporary cache (skips where no C compiler exists)."""
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path))
    monkeypatch.setattr(compiled, "STATUS", {"library": None, "reason": "not tried"})
    if compiled.library() is None:
        pytest.skip(f"no compiled kernel here: {compiled.STATUS['reason']}")
    return compiled


def eager_and_compiled(model, x0, ts, dt, monkeypatch):
    calls = []
    real = compiled.run
    monkeypatch.setattr(compiled, "run", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setenv("ATTNDYN_COMPILED", "0")
    eager = ad.simulate(model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(dt))
    assert not calls
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    fast = ad.simulate(model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(dt))
    assert calls, "the compiled path was not taken"
    return eager, fast


def models(rng):
    W2 = ad.Weights(*(rng.normal(size=(2, 2)) for _ in range(3)))
    W3 = ad.Weights(*(rng.normal(size=(3, 3)) for _ in range(3)))
    x = rng.normal(size=(3, 12, 3))
    spd = ad.Weights(np.eye(2), np.array([[2.0, 0.3], [0.3, 1.0]]), 0.7 * np.eye(2))
    return [
        ("Euclidean, random Q, K, V", ad.Model(W2, beta=1.5), rng.uniform(-1, 1, (20, 2))),
        ("rescaled, V = 0.7 I, Q^T K SPD", ad.Model(spd, rescaled=True), rng.uniform(-1, 1, (2, 15, 2))),
        ("sphere (Post-LN), random Q, K, V, a batch", ad.Model(W3, beta=3.0, geometry="sphere"), x / np.linalg.norm(x, axis=-1, keepdims=True)),
        ("d = 1, rescaled", ad.Model(ad.Weights(np.eye(1), np.array([[0.5]]), np.array([[2.0]])), rescaled=True), rng.uniform(-1, 1, (6, 1))),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(4))
def test_the_compiled_path_takes_the_eager_engine_s_steps(kernel, monkeypatch, case):
    name, model, x0 = models(np.random.default_rng(case))[case]
    ts = np.linspace(0.0, 2.0, 9)
    eager, fast = eager_and_compiled(model, x0, ts, 0.01, monkeypatch)
    assert fast.xs.shape == eager.xs.shape
    assert fast.stats == eager.stats
    scale = eager.xs.abs().max().item()
    assert (fast.xs - eager.xs).abs().max().item() <= 1e-12 * scale, name
    np.testing.assert_array_equal(fast.ts.numpy(), eager.ts.numpy())


def test_it_records_observe_at_every_save_as_the_eager_solver_does(kernel, monkeypatch):
    model = ad.Model(ad.Weights.identity(2), beta=2.0)
    x0 = np.random.default_rng(7).uniform(-1, 1, (9, 2))

    def spread(t, x):
        return (x - x.mean(-2, keepdim=True)).norm(dim=-1).max()

    runs = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("ATTNDYN_COMPILED", flag)
        runs[flag] = ad.simulate(model, x0, np.linspace(0, 2, 5), solver=ad.RK4(), step=ad.FixedStep(0.01), observe=spread)
    assert runs["1"].observed.shape == runs["0"].observed.shape == (5,)
    torch.testing.assert_close(runs["1"].observed, runs["0"].observed, rtol=1e-12, atol=0)


def test_it_reports_progress_and_non_finite_states(kernel, monkeypatch):
    model = ad.Model(ad.Weights(np.eye(2), np.eye(2), 40.0 * np.eye(2)))
    seen = []
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    ad.simulate(ad.Model(ad.Weights.identity(2)), np.eye(2), [0.0, 1.0, 2.0], solver=ad.RK4(), step=ad.FixedStep(0.01), progress=seen.append)
    assert seen == pytest.approx([1.0, 2.0])
    with pytest.raises(FloatingPointError, match="non-finite"):
        ad.simulate(model, np.ones((3, 2)), np.linspace(0, 30, 4), solver=ad.RK4(), step=ad.FixedStep(0.01))


def test_what_it_does_not_cover_stays_with_the_eager_engine(kernel, monkeypatch):
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, (10, 2))
    calls = []
    monkeypatch.setattr(compiled, "run", lambda *a, **k: calls.append(1))
    fixed = {"solver": ad.RK4(), "step": ad.FixedStep(0.01)}
    ts = np.linspace(0, 2, 5)
    ad.simulate(ad.Model(ad.Weights.identity(2)), x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-8, atol=1e-10))
    ad.simulate(ad.Model(ad.Weights.identity(2), beta=math.inf), x0, ts, **fixed)
    ad.simulate(ad.Model(ad.Weights.identity(2), mask="causal"), x0, ts, **fixed)
    ad.simulate(ad.Model(ad.Weights(np.eye(2), np.eye(2), np.diag([1.0, 0.5])), rescaled=True), x0, ts, **fixed)
    ad.simulate(ad.Model(ad.Weights.identity(2)), torch.tensor(x0, dtype=torch.float32), ts, **fixed)
    ad.simulate(ad.Model(ad.Weights.identity(2)), x0, [0.0, 0.5], **fixed)  # 50 steps: below MIN_STEPS
    assert not calls
    assert (
        compiled.eligible(ad.Model(ad.Weights.identity(2), beta=math.inf), torch.zeros(3, 2, dtype=torch.float64), ad.RK4(), ad.FixedStep(0.1), None)
        == "hardmax"
    )


def test_without_a_compiler_simulate_stays_eager_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDYN_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler-attndyn")
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    monkeypatch.setattr(compiled, "STATUS", {"library": None, "reason": "not tried"})
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    traj = ad.simulate(ad.Model(ad.Weights.identity(2)), np.eye(2), np.linspace(0, 2, 5), solver=ad.RK4(), step=ad.FixedStep(0.01))
    assert traj.stats["steps"] == 200
    assert compiled.STATUS["library"] is None
    assert "no C compiler" in compiled.STATUS["reason"]
