"""The compiled small-system path against the eager engine (the oracle: the same RK4 steps in torch)."""

import hashlib
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attndyn as ad
from attndyn.core import compiled, plan


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    """A temporary cache holding the kernel, built once for this module (about 2 s of compiling each)."""
    cache = tmp_path_factory.mktemp("kernel")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTNDYN_CACHE", str(cache))
        mp.setattr(compiled, "STATUS", {"library": None, "reason": "not tried"})
        compiled.library()
    return cache


@pytest.fixture
def kernel(kernel_cache, monkeypatch):
    """The kernel built in this session, loaded afresh from its temporary cache (verified against its recorded
    SHA-256 as on every load; skips where no C compiler exists)."""
    monkeypatch.setenv("ATTNDYN_CACHE", str(kernel_cache))
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
        plan.loop_reason(
            ad.Model(ad.Weights.identity(2), beta=math.inf), torch.zeros(3, 2, dtype=torch.float64), ad.RK4(), ad.FixedStep(0.1), None, 10**5
        )
        == "the C field: hardmax"
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


def torch_field(model, x, t=0.0):
    """The torch field (the oracle of the C field): prepared with ATTNDYN_COMPILED=0."""
    from attndyn.core.dynamics import prepare, vector_field

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTNDYN_COMPILED", "0")
        args = prepare(model, x)
    assert args.native is None
    return vector_field(t, x, args)


def test_the_vectorised_exponential_against_libm(kernel):
    x = np.concatenate([np.linspace(-708.0, 0.0, 200_001), np.linspace(0.0, 709.4, 2001), [-0.0, 1e-300, -1e-300]])
    y = np.empty_like(x)
    kernel.library().exp_array(x.size, x.ctypes.data, y.ctypes.data)
    rel = np.abs(y / np.exp(x) - 1)
    assert rel.max() <= 4e-16
    z = np.array([-800.0, -1e4, -np.inf, np.nan, 709.8, 1e4, np.inf])
    kernel.library().exp_array(z.size, z.ctypes.data, y.ctypes.data)
    assert (y[4:7] == np.inf).all()  # past float range: inf, as libm
    assert (y[:3] > 0).all()
    assert (y[:3] <= 1.001 * np.exp(-708.0)).all()  # below -708: about e^-708, negligible beside a row's 1
    assert np.isnan(y[3])


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 6, 7, 8])
def test_the_native_field_is_torch_s_field_for_every_d_mode_and_shape(kernel, monkeypatch, d):
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    from attndyn.core.dynamics import prepare, vector_field

    rng = np.random.default_rng(d)
    W = ad.Weights(*(rng.normal(size=(d, d)) for _ in range(3)))
    lam = ad.Weights(rng.normal(size=(d, d)), rng.normal(size=(d, d)), 0.6 * np.eye(d))
    for shape in [(1, d), (7, d), (9, d), (3, 17, d), (2, 2, 33, d)]:  # n = 1, below, above and past a block of 8 lanes
        x = torch.tensor(rng.normal(size=shape))
        u = x / x.norm(dim=-1, keepdim=True)
        cases = [
            (ad.Model(W, beta=1.3), x, 0.0),
            (ad.Model(lam, rescaled=True), x, 0.7),
            (ad.Model(W, beta=2.0, geometry="sphere"), u, 0.0),
            (ad.Model(W, rescaled=True), x, 0.3),  # any V: e^{tV} from its eigenvectors
            (ad.Model(ad.Weights(W.Q, W.K, np.eye(d) + np.eye(d, k=1)), rescaled=True), x, 0.3),  # a Jordan block: matrix_exp
            (ad.Model(W, beta=0.7, normalization="unnormalized"), x, 0.0),  # USA: e^{logit} / n
            (ad.Model(W, beta=1.5, geometry="sphere", normalization="unnormalized"), u, 0.0),
        ]
        for model, state, t in cases:
            args = prepare(model, state)
            assert args.native is not None, plan.native_reason(model, state)
            fast, ref = vector_field(t, state, args), torch_field(model, state, t)
            assert fast.shape == ref.shape
            torch.testing.assert_close(fast, ref, rtol=0, atol=1e-13 * max(1.0, ref.abs().max().item()))


def test_every_solver_uses_the_native_field_and_gets_the_torch_trajectory(kernel, monkeypatch):
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    calls = []
    real = compiled.field
    monkeypatch.setattr(compiled, "field", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(3)
    model = ad.Model(ad.Weights(*(rng.normal(size=(3, 3)) for _ in range(3))), beta=2.0, geometry="sphere")
    x0 = rng.normal(size=(4, 11, 3))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    ts = np.linspace(0, 3, 4)
    fast = ad.simulate(model, x0, ts)
    assert calls
    monkeypatch.setenv("ATTNDYN_COMPILED", "0")
    n_calls = len(calls)
    ref = ad.simulate(model, x0, ts)
    assert len(calls) == n_calls
    assert fast.stats["steps"] == ref.stats["steps"]
    torch.testing.assert_close(fast.xs, ref.xs, rtol=0, atol=1e-11)


def test_the_native_field_is_kept_off_where_torch_is_needed_or_faster(kernel, monkeypatch):
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    x = torch.zeros(5, 3, dtype=torch.float64)
    W = ad.Weights.identity(3)
    assert plan.native_reason(ad.Model(W), x) is None
    assert plan.native_reason(ad.Model(W), x.float()) == "not float64 on the CPU"
    assert plan.native_reason(ad.Model(W, mask="causal"), x) == "a mask, a sink or another normalization"
    assert plan.native_reason(ad.Model(W, attention="fused"), x) is None  # O(n) memory, as fused
    assert plan.native_reason(ad.Model(ad.Weights.identity(9)), torch.zeros(5, 9, dtype=torch.float64)) == "d > 8"
    general = ad.Model(ad.Weights(np.eye(3), np.eye(3), np.diag([1.0, 2.0, 3.0])), rescaled=True)
    assert plan.native_reason(general, x) is None  # the field, through E^T Q^T K E
    assert plan.loop_reason(general, x, ad.RK4(), ad.FixedStep(0.1), None, 10**5) == "a rescaled model with V not a multiple of I"  # not the loop
    grad = ad.Weights.identity(3)
    grad.V.requires_grad_(True)
    assert plan.native_reason(ad.Model(grad), x) == "weights that require gradients"
    with ad.core.threads.policy(0, 2):
        assert plan.native_reason(ad.Model(W), x) is None  # d = 3: one C thread beats two torch threads
        assert plan.native_reason(ad.Model(ad.Weights.identity(6)), torch.zeros(5, 6, dtype=torch.float64)).startswith("torch runs 2 threads")
        assert plan.native_reason(ad.Model(ad.Weights.identity(6)), torch.zeros(4, 5, 6, dtype=torch.float64)) is None  # a batch: C
    with ad.core.threads.policy(0, 3):
        assert plan.native_reason(ad.Model(W), x).startswith("torch runs 3 threads")
    monkeypatch.setenv("ATTNDYN_COMPILED", "0")
    assert plan.native_reason(ad.Model(W), x) == "ATTNDYN_COMPILED=0"


def test_a_state_that_records_gradients_takes_the_torch_field(kernel, monkeypatch):
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    from attndyn.core.dynamics import prepare, vector_field

    x = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    args = prepare(ad.Model(ad.Weights.identity(2)), x.detach())
    assert args.native is not None
    vector_field(0.0, x, args).sum().backward()
    assert x.grad is not None
    assert torch.isfinite(x.grad).all()
    with pytest.raises(ValueError, match="gradients"):
        compiled.field(args.native, x, 1.0)


@pytest.mark.parametrize("case", range(3))
def test_the_compiled_adaptive_step_takes_the_eager_engine_s_steps(kernel, monkeypatch, case):
    """Stages, stage sums and error norm in C, the controller in Python: the same accepted and rejected steps."""
    rng = np.random.default_rng(10 + case)
    name, model, x0 = models(rng)[case]
    calls = []
    real = compiled.stepper
    monkeypatch.setattr(compiled, "stepper", lambda *a: calls.append(1) or real(*a))
    runs = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("ATTNDYN_COMPILED", flag)
        runs[flag] = ad.simulate(model, x0, np.linspace(0.0, 3.0, 7), solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-9, atol=1e-11, dt0=0.5))
        assert bool(calls) == (flag == "1"), name
    assert runs["1"].stats == runs["0"].stats, name
    assert runs["0"].stats["rejected"] > 0, name  # dt0 = 0.5 is rejected at first
    torch.testing.assert_close(runs["1"].xs, runs["0"].xs, rtol=0, atol=1e-11)


def test_the_compiled_adaptive_step_rejects_a_non_finite_trial(kernel, monkeypatch):
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    from attndyn.core.dynamics import prepare

    model = ad.Model(ad.Weights.identity(2))
    x = torch.tensor(np.random.default_rng(0).normal(size=(2, 5, 2)))
    step = compiled.stepper(prepare(model, x).native, ad.Dopri5(), 1e-8, 1e-10)
    k1 = torch.full_like(x, 1e308)
    _, en, _ = step(0.0, x, 10.0, k1)
    assert not math.isfinite(en)
    x_new, en, k_last = step(0.0, x, 1e-3, torch.zeros_like(x))
    assert math.isfinite(en)
    assert torch.isfinite(x_new).all()
    assert torch.isfinite(k_last).all()


def test_the_points_kernel_is_the_long_time_integrator_s_numpy_field(kernel, monkeypatch):
    from attndyn.core.longtime import _field

    rng = np.random.default_rng(5)
    for k, d in [(1, 3), (2, 2), (7, 3), (12, 5)]:
        y = rng.normal(size=(k, d))
        y /= np.linalg.norm(y, axis=1, keepdims=True)
        log_mass = np.log(rng.integers(1, 5, k).astype(float))
        M = rng.normal(size=(d, d))
        for M_, beta, usa in [(None, 4.0, None), (M, 1.5, None), (None, 2.0, (1.0, 9)), (M, 0.7, (float(np.linalg.norm(M, 2)), 12))]:
            fast = compiled.points_kernel(M_, d, beta, usa)
            v, gap = fast(y, log_mass)
            v0, gap0 = _field(y, log_mass, M_, beta, usa)
            np.testing.assert_allclose(v, v0, rtol=0, atol=1e-14 * max(1.0, np.abs(v0).max()))
            assert gap == pytest.approx(gap0, rel=1e-13, abs=1e-13)
    monkeypatch.setenv("ATTNDYN_COMPILED", "0")
    assert compiled.points_kernel(None, 3, 1.0) is None


def kutta_three_eighths(name: str) -> ad.core.solvers.Tableau:
    """Kutta's 3/8 rule (Hairer-Norsett-Wanner I, Table 1.2): order 4, not classical RK4."""
    third = 1 / 3
    return ad.core.solvers.Tableau(
        name, 4, (0.0, third, 2 * third, 1.0), ((), (third,), (-third, 1.0), (1.0, -1.0, 1.0)), (1 / 8, 3 / 8, 3 / 8, 1 / 8)
    )


def test_a_tableau_named_rk4_is_compared_by_value_not_by_name(kernel, monkeypatch):
    """Finding 1 of issue 36: the 3/8 rule named "rk4" went to the compiled classical-RK4 loop and
    returned classical RK4's result. The oracle: the same tableau under another name (eager)."""
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    model = ad.Model(ad.Weights.identity(2), beta=2.0)
    x0 = np.random.default_rng(3).uniform(-1, 1, (9, 2))
    ts, step = np.linspace(0.0, 2.0, 3), ad.FixedStep(0.01)
    impostor = ad.simulate(model, x0, ts, solver=kutta_three_eighths("rk4"), step=step)
    honest = ad.simulate(model, x0, ts, solver=kutta_three_eighths("kutta38"), step=step)
    classical = ad.simulate(model, x0, ts, solver=ad.RK4(), step=step)
    assert impostor.stats == honest.stats
    torch.testing.assert_close(impostor.xs, honest.xs, rtol=1e-13, atol=1e-14)
    assert (impostor.xs - classical.xs).abs().max().item() > 1e-11  # the two order-4 rules differ


# ---- the kernel cache cannot be planted (issue 38, finding 5) ----

PLANT = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *path = getenv("ATTNDYN_PLANT_MARK");
    if (path) { FILE *f = fopen(path, "w"); if (f) { fputs("foreign code ran\n", f); fclose(f); } }
}
"""


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A constructor-only library (it writes the file $ATTNDYN_PLANT_MARK when loaded), built with cc."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build the planted library")
    (tmp_path / "plant.c").write_text(PLANT)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "plant.so"), str(tmp_path / "plant.c")], check=True)
    mark = tmp_path / "ran.txt"
    monkeypatch.setenv("ATTNDYN_PLANT_MARK", str(mark))
    monkeypatch.setattr(compiled, "STATUS", {"library": None, "reason": "not tried"})
    monkeypatch.setattr(compiled, "_PRIVATE", None)
    return tmp_path / "plant.so", mark, cc


def _plant(cache, plant, cc, monkeypatch, *, side: bool):
    """Put the planted library where the kernel of this machine lives (with a forged hash file when ``side``)."""
    import hashlib
    import shutil

    monkeypatch.setenv("ATTNDYN_CACHE", str(cache))
    monkeypatch.setattr(compiled, "_PRIVATE", None)
    target = compiled.library_path(compiled.shutil.which(compiled.os.environ.get("CC", "cc")) or cc)
    shutil.copy(plant, target)
    if side:
        target.with_name(target.name + ".sha256").write_text(hashlib.sha256(b"the real kernel").hexdigest() + "\n")
    return target


@pytest.mark.parametrize("side", [False, True], ids=["no-recorded-hash", "wrong-recorded-hash"])
def test_a_planted_library_in_a_private_cache_is_never_loaded_and_is_rebuilt(planted, tmp_path, monkeypatch, capfd, side):
    plant, mark, cc = planted
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    target = _plant(cache, plant, cc, monkeypatch, side=side)
    assert compiled.library() is not None, compiled.STATUS["reason"]
    assert not mark.exists(), "the planted library's constructor ran"
    err = capfd.readouterr().err
    assert f"rebuilding the compiled kernel {target.name}" in err
    assert len(err.strip().splitlines()) == 1
    assert compiled.verified(target) is None
    assert target.read_bytes() != plant.read_bytes()
    assert compiled.STATUS["path"] == str(target)


def test_a_world_writable_cache_folder_is_not_used(planted, tmp_path, monkeypatch, capfd):
    plant, mark, cc = planted
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("ATTNDYN_CACHE", str(cache))
    target = compiled.library_path(compiled.shutil.which(compiled.os.environ.get("CC", "cc")) or cc)
    monkeypatch.setattr(compiled, "_PRIVATE", None)
    capfd.readouterr()
    # even a planted library with a matching recorded hash: the folder itself is refused
    import hashlib
    import shutil

    planted_target = cache / target.name
    shutil.copy(plant, planted_target)
    planted_target.with_name(planted_target.name + ".sha256").write_text(hashlib.sha256(plant.read_bytes()).hexdigest() + "\n")
    assert compiled.library() is not None, compiled.STATUS["reason"]
    assert not mark.exists(), "the planted library's constructor ran"
    assert Path(compiled.STATUS["path"]).parent != cache
    err = capfd.readouterr().err
    assert "writable by" in err
    assert str(cache) in err
    assert len(err.strip().splitlines()) == 1
    compiled.cache_dir()
    assert capfd.readouterr().err == ""  # said once
    assert planted_target.read_bytes() == plant.read_bytes()  # the shared folder is not touched either


def test_the_private_folder_used_instead_of_an_unsafe_cache_is_removed_at_exit(tmp_path):
    """One private folder per process that meets an unsafe cache, and none left behind in /tmp."""
    import subprocess
    import sys

    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    code = "from attndyn.core import compiled; p = compiled.cache_dir(); assert p.is_dir(); print(p)"
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ATTNDYN_CACHE": str(cache)}, capture_output=True, text=True, check=True)
    private = Path(run.stdout.strip())
    assert private.name.startswith("attndyn-kernel-")
    assert str(private) in run.stderr
    assert not private.exists()


def test_a_damaged_library_is_rebuilt(tmp_path, monkeypatch, capfd):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("ATTNDYN_CACHE", str(cache))
    monkeypatch.setattr(compiled, "STATUS", {"library": None, "reason": "not tried"})
    if compiled.library() is None:
        pytest.skip(f"no compiled kernel here: {compiled.STATUS['reason']}")
    target = Path(compiled.STATUS["path"])
    damaged = target.with_name("damaged")
    damaged.write_bytes(target.read_bytes()[:1000])  # truncated (a new file: the loaded one stays mapped in this process)
    damaged.rename(target)
    monkeypatch.setattr(compiled, "STATUS", {"library": None, "reason": "not tried"})
    capfd.readouterr()
    assert compiled.library() is not None, compiled.STATUS["reason"]
    assert "is not the recorded" in capfd.readouterr().err
    assert compiled.verified(target) is None


def test_the_cache_checks_see_each_unsafe_property(tmp_path):
    """Sensitivity of the folder and file checks: each property alone makes them refuse."""
    folder = tmp_path / "c"
    folder.mkdir(mode=0o700)
    assert compiled.unsafe_folder(folder) is None
    folder.chmod(0o720)
    assert "its group" in compiled.unsafe_folder(folder)
    folder.chmod(0o702)
    assert "others" in compiled.unsafe_folder(folder)
    folder.chmod(0o700)
    (tmp_path / "link").symlink_to(folder)
    assert "symbolic link" in compiled.unsafe_folder(tmp_path / "link")
    lib = folder / "k.so"
    lib.write_bytes(b"x")
    side = folder / "k.so.sha256"
    import hashlib

    side.write_text(hashlib.sha256(b"x").hexdigest())
    assert compiled.verified(lib) is None
    lib.chmod(0o666)
    assert "writable by" in compiled.verified(lib)
    lib.chmod(0o644)
    side.unlink()
    side.symlink_to(tmp_path / "elsewhere")
    assert "symbolic link" in compiled.verified(lib)


# --- a damaged library whose record was rewritten to match (issue 51 item 7) -------------------------

LOAD = """
import numpy as np
from attndyn.core import compiled
lib = compiled.library()
print(compiled.STATUS["reason"])
if lib is not None:  # the library loaded is a working kernel
    x = np.linspace(-2.0, 2.0, 9)
    y = np.empty_like(x)
    lib.exp_array(len(x), x.ctypes.data, y.ctypes.data)
    assert np.allclose(y, np.exp(x), rtol=1e-14), y
"""


def _load_in_a_child(cache: Path, **env) -> subprocess.CompletedProcess:
    """:data:`LOAD` in a fresh process on ``cache`` (a SIGBUS there is a return code of -7, not this process's death)."""
    src = str(Path(compiled.__file__).parents[2])
    paths = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-c", LOAD], env={**os.environ, "ATTNDYN_CACHE": str(cache), "PYTHONPATH": paths, **env},
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _plant_damaged(target: Path, data: bytes, recorded: str) -> None:
    """``data`` at ``target`` (a new file: a process that mapped the old one keeps it) and ``recorded`` as its record."""
    fresh = target.with_name("fresh")
    fresh.write_bytes(data)
    fresh.chmod(0o755)
    fresh.rename(target)
    target.with_name(target.name + ".sha256").write_text(recorded)


def _sha_only(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest() + "\n"


# (id, damage: the built library's bytes -> (the bytes left, the record written beside them), words of the one line)
DAMAGED = [
    ("truncated-its-hash-rewritten", lambda b: (b[: len(b) // 2], _sha_only(b[: len(b) // 2])), "no readable size"),
    ("truncated-hash-size-and-header-rewritten", lambda b: (b[: len(b) // 2], compiled.record(b[: len(b) // 2])), "(truncated)"),
    ("truncated-in-its-program-headers", lambda b: (b[:200], compiled.record(b[:200])), "program headers end at byte"),
    ("truncated-by-100-bytes", lambda b: (b[:-100], compiled.record(b[:-100])), "(truncated)"),
    ("size-recorded-wrong", lambda b: (b, compiled.record(b).replace(f"size {len(b)}", f"size {len(b) + 1}")), "not the recorded"),
    ("not-a-library-the-loader-refuses", lambda b: (b"not a library\n" * 8, compiled.record(b"not a library\n" * 8)), "it did not load"),
    ("not-a-library-its-hash-rewritten", lambda b: (b"not a library\n" * 8, _sha_only(b"not a library\n" * 8)), "no readable size"),
]


@pytest.mark.parametrize(("case", "damage", "says"), DAMAGED, ids=[c[0] for c in DAMAGED])
def test_a_damaged_library_with_a_matching_record_is_rebuilt_never_loaded(tmp_path, monkeypatch, case, damage, says):
    """A cached library damaged (truncated: the loader would touch pages past its end, a SIGBUS that killed
    the process) with its record rewritten to match: checked before the load, rebuilt with one line, and the
    rebuilt kernel works; one the loader refuses is rebuilt the same way."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("ATTNDYN_CACHE", str(cache))
    monkeypatch.setattr(compiled, "STATUS", {"library": None, "reason": "not tried"})
    if compiled.library() is None:
        pytest.skip(f"no compiled kernel here: {compiled.STATUS['reason']}")
    target = Path(compiled.STATUS["path"])
    _plant_damaged(target, *damage(target.read_bytes()))
    run = _load_in_a_child(cache)
    assert run.returncode == 0, f"{case}: exit {run.returncode}\n{run.stderr}"
    assert run.stdout.strip() == "compiled", f"{case}: {run.stdout}\n{run.stderr}"
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, f"{case}: {run.stderr!r}"
    assert f"rebuilding the compiled kernel {target.name}" in lines[0]
    assert says in lines[0], f"{case}: {lines[0]!r} does not say {says!r}"
    assert compiled.verified(target) is None
    assert compiled.loadable(target) is None


def test_a_truncated_library_without_a_working_compiler_falls_back_to_the_eager_engine(tmp_path):
    """The documented fallback, on any machine (no C compiler needed): a compiler that fails (``CC=false``)
    and a truncated shared object under its cache name, its hash rewritten to match: one line says it is
    rebuilt, the build fails, ``library()`` is None with the reason, and the process lives."""
    import _ctypes

    compiler = shutil.which("false")
    if compiler is None or not str(_ctypes.__file__).endswith(".so"):
        pytest.skip("no false(1), or no shared object to truncate")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    data = Path(_ctypes.__file__).read_bytes()
    code = f"from attndyn.core import compiled; print(compiled.library_path({compiler!r}))"
    src = str(Path(compiled.__file__).parents[2])
    where = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ATTNDYN_CACHE": str(cache), "PYTHONPATH": src},
                           capture_output=True, text=True, check=True)  # fmt: skip
    target = Path(where.stdout.strip())
    _plant_damaged(target, data[: len(data) // 2], _sha_only(data[: len(data) // 2]))
    run = _load_in_a_child(cache, CC=compiler)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stderr}"
    assert run.stdout.strip().startswith("the C compiler failed"), run.stdout
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert f"rebuilding the compiled kernel {target.name}" in lines[0]


def test_the_elf_check_sees_each_truncation(kernel_cache):
    """Sensitivity of :func:`elf_problem`: the whole kernel passes; cut anywhere from its header to its
    last byte, it does not."""
    libs = sorted(kernel_cache.glob("attndyn_small_*.so"))
    if not libs:
        pytest.skip("no compiled kernel here")
    data = libs[0].read_bytes()
    assert compiled.elf_problem(data) is None
    for cut in (16, 63, 64, 200, 1000, len(data) // 3, len(data) // 2, len(data) - 1):
        assert compiled.elf_problem(data[:cut]) is not None, cut
