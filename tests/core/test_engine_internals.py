"""Engine internals (issue 9): prepared arguments, the generic integrator, validated tableaux,
the adaptive error estimate, and no global state (the import rule is tests/test_layers.py)."""

import ast
import dataclasses
import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attndyn as ad
from attndyn.core import solvers
from attndyn.core.attention import resolve_beta
from attndyn.core.dynamics import prepare, vector_field
from attndyn.core.solvers import SOLVERS, Tableau, integrate, order_conditions_failed, rk_step
from tests.core.test_against_scipy import numpy_field, reference
from tests.helpers import random_weights
from tests.tolerances import AGAINST_SCIPY

SRC = Path(ad.__file__).parent


# --- Model: parameters only -------------------------------------------------------------------


def test_model_pickles_small_and_without_cache(rng):
    W = random_weights(rng, 3, heads=2)
    model = ad.Model(W, beta=2.0, mask="causal", attention="fused")
    x = torch.as_tensor(rng.normal(size=(5, 3)))
    before = len(pickle.dumps(model))
    ad.simulate(model, x, [0, 0.1], solver=ad.RK4(), step=ad.FixedStep(0.05))
    blob = pickle.dumps(model)
    # running the model stores nothing in it (no hidden cache)
    assert len(blob) == before
    assert not hasattr(model, "_cache")
    assert len(blob) < 4000  # three (2, 3, 3) float64 tensors and the options
    back = pickle.loads(blob)
    for name in ("Q", "K", "V"):
        t = getattr(back.weights, name)
        assert t.device.type == "cpu"
        torch.testing.assert_close(t, getattr(W, name), rtol=0, atol=0)
    assert (back.beta, back.mask, back.attention) == (2.0, "causal", "fused")


def test_weights_are_stored_on_the_host(rng):
    W = ad.Weights(torch.eye(2, dtype=torch.float32), torch.eye(2, dtype=torch.float32), torch.eye(2, dtype=torch.float32).requires_grad_())
    assert W.V.device.type == "cpu"
    assert not W.V.requires_grad
    assert W.V.dtype == torch.float32


def test_velocity_accepts_numpy_and_returns_numpy(rng):
    W = random_weights(rng, 2)
    model = ad.Model(W, beta=0.7)
    x = rng.normal(size=(3, 4, 2))
    v = ad.velocity(0.3, x, model)
    assert isinstance(v, np.ndarray)
    assert v.shape == x.shape
    # independent NumPy field (test_against_scipy), member by member
    f = numpy_field(W, beta=0.7)
    for b in range(3):
        np.testing.assert_allclose(v[b], f(0.3, x[b].ravel(), 4, 2).reshape(4, 2), atol=1e-14)
    vt = ad.velocity(0.3, torch.as_tensor(x), model)
    assert isinstance(vt, torch.Tensor)
    np.testing.assert_array_equal(vt.numpy(), v)


def test_prepared_arguments_follow_the_state_dtype(rng):
    model = ad.Model(random_weights(rng, 3))
    args = prepare(model, torch.zeros(4, 3, dtype=torch.float32))
    assert args.Q.dtype == torch.float32
    assert args.V.dtype == torch.float32
    with pytest.raises(ValueError, match=r"d = 3"):
        prepare(model, torch.zeros(4, 2))


def test_replace_keeps_every_option(rng):
    model = ad.Model(random_weights(rng, 2), beta=3.0, mask="causal", geometry="sphere", normalization="unnormalized")
    other = dataclasses.replace(model, beta=1.0)
    assert (other.mask, other.geometry, other.normalization, other.beta) == ("causal", "sphere", "unnormalized", 1.0)


def test_resolve_beta_is_the_one_rule():
    assert resolve_beta(float("inf")) == (1.0, True)
    assert resolve_beta(2.5) == (2.5, False)
    assert ad.Model(ad.Weights.identity(2), beta=float("inf")).weighting == "hardmax"
    assert ad.Model(ad.Weights.identity(2), normalization="unnormalized").weighting == "unnormalized"


# --- The generic integrator --------------------------------------------------------------------


def test_integrate_is_generic_harmonic_oscillator():
    """integrate knows nothing about attention: x'' = -w^2 x with w passed as args."""

    def f(t, y, w):
        return torch.stack([y[..., 1], -(w**2) * y[..., 0]], -1)

    x0 = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    ts = np.linspace(0, 3, 7)
    w = 1.7
    sol = integrate(f, x0, ts, w, solver=ad.RK4(), controller=ad.FixedStep(0.005), batch_dims=1)
    np.testing.assert_allclose(sol.xs[:, 0, 0].numpy(), np.cos(w * ts), atol=1e-9)
    np.testing.assert_allclose(sol.xs[:, 1, 0].numpy(), 2 / w * np.sin(w * ts), atol=1e-9)
    adaptive = integrate(f, x0, ts, w, solver=ad.Dopri5(), controller=ad.AdaptiveStep(rtol=1e-10, atol=1e-12), batch_dims=1)
    np.testing.assert_allclose(adaptive.xs[:, 1, 0].numpy(), 2 / w * np.sin(w * ts), atol=1e-8)


def test_simulate_equals_integrate_of_the_prepared_field(rng, monkeypatch):
    # the eager wrapper exactly (the compiled path, which takes the same steps to 1e-12, is tested in test_compiled)
    monkeypatch.setenv("ATTNDYN_COMPILED", "0")
    model = ad.Model(random_weights(rng, 3), beta=0.9)
    x0 = torch.as_tensor(rng.normal(size=(6, 3)))
    traj = ad.simulate(model, x0, [0, 0.5, 1.0], solver=ad.RK4(), step=ad.FixedStep(0.01))
    sol = integrate(vector_field, x0, [0, 0.5, 1.0], prepare(model, x0), solver=ad.RK4(), controller=ad.FixedStep(0.01))
    torch.testing.assert_close(traj.xs, sol.xs, rtol=0, atol=0)
    assert traj.stats == sol.stats


@pytest.mark.parametrize("geometry", ["euclidean", "sphere"])
def test_a_large_fixed_step_batch_in_cache_sized_chunks_is_the_batch_in_one_piece(rng, monkeypatch, geometry):
    # systems are independent and fixed steps shared, so chunks must reproduce the one-piece run
    # (to the rounding of a batched GEMM of another batch size), batch axes in place
    from attndyn.core import plan

    monkeypatch.setenv("ATTNDYN_COMPILED", "0")
    d = 12  # above the C field's d <= 8: the torch engine's batches are the ones chunked
    x0 = torch.as_tensor(rng.normal(size=(3, 5, 7, d)))
    if geometry == "sphere":
        x0 = x0 / x0.norm(dim=-1, keepdim=True)
        model = ad.Model(ad.Weights.identity(d), beta=3.0, geometry="sphere")
    else:
        model = ad.Model(random_weights(rng, d), beta=0.5)
    ts = [0.0, 0.2, 0.5]
    whole = ad.simulate(model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(0.05))
    per_system = 7 * (7 + d) * 8
    monkeypatch.setattr(plan, "CHUNK_BYTES", 4 * per_system)  # chunks of 4 systems: 15 = 4 + 4 + 4 + 3
    assert plan.cache_chunk(x0, ad.FixedStep(0.05), None, None) == 4
    chunked = ad.simulate(model, x0, ts, solver=ad.RK4(), step=ad.FixedStep(0.05))
    assert chunked.xs.shape == whole.xs.shape == (3, 3, 5, 7, d)
    torch.testing.assert_close(chunked.xs, whole.xs, rtol=0, atol=1e-14)
    assert chunked.stats == whole.stats
    # the shared adaptive step, observe and progress see the whole batch: never chunked
    assert plan.cache_chunk(x0, ad.AdaptiveStep(rtol=1e-8, atol=1e-10), None, None) is None
    assert plan.cache_chunk(x0, ad.FixedStep(0.05), lambda t, x: x, None) is None
    assert plan.cache_chunk(x0, ad.FixedStep(0.05), None, print) is None
    assert plan.cache_chunk(x0[0, 0], ad.FixedStep(0.05), None, None) is None  # one system


def test_the_dedicated_rk4_step_is_the_generic_step_bit_for_bit(rng):
    # integrate's fixed-step RK4 loop runs a four-stage step without the tableau loops; it must take
    # the generic rk_step's exact arithmetic (same ops, same coefficients)
    model = ad.Model(random_weights(rng, 3), beta=0.7)
    x = torch.as_tensor(rng.normal(size=(2, 7, 3)))
    args = prepare(model, x)
    for t, dt in ((0.0, 0.01), (0.3, 0.1), (2.5, 1 / 3)):
        generic = rk_step(lambda s, y: vector_field(s, y, args), t, x, dt, ad.RK4())[0]
        assert torch.equal(solvers._classical_rk4(vector_field, args, dt)(t, x), generic)


def test_an_eager_rk4_step_dispatches_the_fewest_torch_ops(rng, monkeypatch):
    # the eager path's per-step cost is its torch calls (benchmarks/solvers.py times it against a
    # straight-line replay of the same ops): one rescaled V = I step is four evaluations of
    # transpose, addmm (logits, scale folded in), softmax, addmm (P z - z), three stage sums and the
    # update (one add, three in-place adds) = 23 ops; each op more costs about 3 us at n = 20
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen[str(func)] += 1
            return func(*args, **(kwargs or {}))

    monkeypatch.setenv("ATTNDYN_COMPILED", "0")
    model = ad.Model(ad.Weights.identity(2), rescaled=True)
    z0 = rng.uniform(-1, 1, (20, 2))
    counts = {}
    for steps in (50, 150):
        with Ops() as ops:
            ad.simulate(model, z0, [0.0, steps * 0.005], solver=ad.RK4(), step=ad.FixedStep(0.005))
        counts[steps] = ops.seen
    per_step = {k: (counts[150][k] - counts[50][k]) / 100 for k in counts[150] if counts[150][k] != counts[50][k]}
    expected = {"aten.transpose.int": 4, "aten.addmm.default": 8, "aten._softmax.default": 4, "aten.add.Tensor": 4, "aten.add_.Tensor": 3}
    assert per_step == expected


def test_observe_is_recorded_at_every_save_time(rng):
    model = ad.Model(random_weights(rng, 2))
    x0 = rng.normal(size=(5, 2))
    seen = []

    def observe(t, x):
        seen.append(t)
        return x.norm(dim=-1).max()

    ts = [0.0, 0.3, 0.7, 1.0]
    for step, solver in ((ad.FixedStep(0.1), ad.RK4()), (ad.AdaptiveStep(rtol=1e-8, atol=1e-10), ad.Dopri5())):
        seen.clear()
        traj = ad.simulate(model, x0, ts, solver=solver, step=step, observe=observe)
        assert seen == pytest.approx(ts, abs=1e-12)
        np.testing.assert_allclose(traj.observed.numpy(), traj.xs.norm(dim=-1).amax(-1).numpy(), rtol=0, atol=0)


def test_nonfinite_state_is_found_at_save_times_without_per_step_checks():
    W = ad.Weights(np.eye(1), np.eye(1), np.array([[1e6]]))
    # Euler multiplies x by 1 + 1e5 per step: finite after one step, inf after about 62
    with pytest.raises(FloatingPointError, match=r"non-finite at t=10 .*last finite save was t=0.1"):
        ad.simulate(ad.Model(W), np.ones((2, 1)), [0, 0.1, 10, 20], solver=ad.Euler(), step=ad.FixedStep(0.1))


# --- Tableaux ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SOLVERS))
def test_every_tableau_satisfies_its_conditions(name):
    tab = SOLVERS[name]()
    for k, row in enumerate(tab.a):
        assert sum(row) == pytest.approx(tab.c[k], abs=1e-14)
    assert order_conditions_failed(tab.c, tab.a, tab.b, tab.order) == []
    # and not the next order: the stated order is the true one
    assert order_conditions_failed(tab.c, tab.a, tab.b, tab.order + 1) != []


def test_order_condition_counts_match_butcher():
    # number of rooted trees with p nodes: 1, 1, 2, 4, 9 (OEIS A000081)
    assert [len(solvers._rooted_trees(p)) for p in range(1, 6)] == [1, 1, 2, 4, 9]


def test_broken_tableaux_are_rejected():
    rk4 = ad.RK4()
    with pytest.raises(ValueError, match=r"row 2 of a sums to"):
        Tableau("bad-rows", 4, rk4.c, ((), (0.5,), (0.1, 0.5), (0.0, 0.0, 1.0)), rk4.b)
    with pytest.raises(ValueError, match=r"claims order 4 but fails"):
        Tableau("bad-weights", 4, rk4.c, rk4.a, (0.25, 0.25, 0.25, 0.25))
    with pytest.raises(ValueError, match=r"claims order 5 but fails"):
        Tableau("over-claimed", 5, rk4.c, rk4.a, rk4.b)
    dp = ad.Dopri5()
    # (scaling b_err keeps every condition: it is orthogonal to them; moving one weight does not)
    bad_err = (dp.b_err[0] + 1e-3, *dp.b_err[1:])
    with pytest.raises(ValueError, match=r"embedded weights fail"):
        Tableau("bad-embedded", 5, dp.c, dp.a, dp.b, bad_err, fsal=True)


# Dormand-Prince's embedded 4th-order weights, from Hairer-Norsett-Wanner I, Table 5.2 (written
# out here, independently of the solver's b_err = b - b_hat).
DP_B_HAT = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)


def test_dopri5_error_estimate_matches_true_local_error(rng):
    """The estimate equals x5 - x4 with x4 from the published weights, and the true local error of
    x4 (against a DOP853 reference) to leading order."""
    W = random_weights(rng, 2, scale=0.8)
    x0 = rng.normal(size=(6, 2))
    x = torch.as_tensor(x0)
    args = prepare(ad.Model(W), x)
    dp = ad.Dopri5()
    order4 = Tableau("dp-embedded", 4, dp.c, dp.a, DP_B_HAT)

    def f(t, y):
        return vector_field(t, y, args)

    misfit = []
    for h in (0.2, 0.1, 0.05, 0.025):
        x5, err, _, _ = rk_step(f, 0.0, x, h, dp)
        x4, _, _, _ = rk_step(f, 0.0, x, h, order4)
        torch.testing.assert_close(err, x5 - x4, rtol=0, atol=1e-15)
        true4 = x4.numpy() - reference(W, x0, h)
        misfit.append(np.linalg.norm(-err.numpy() - true4) / np.linalg.norm(true4))
    # x5's own error over x4's: O(h), so the estimate becomes exact as h -> 0
    assert misfit[-1] < 0.05
    assert all(b < 0.7 * a for a, b in zip(misfit, misfit[1:], strict=False)), misfit


def test_float32_state_runs_in_float32(rng):
    W = random_weights(rng, 2)
    x0 = torch.as_tensor(rng.normal(size=(5, 2)), dtype=torch.float32)
    traj = ad.simulate(ad.Model(W), x0, [0, 1], solver=ad.RK4(), step=ad.FixedStep(0.01))
    assert traj.xs.dtype == torch.float32
    ref = reference(W, x0.double().numpy(), 1.0)
    np.testing.assert_allclose(traj.xs[-1].double().numpy(), ref, atol=1e-5)
    assert AGAINST_SCIPY < 1e-5


# --- Global state -------------------------------------------------------------------------------


def test_importing_plots_leaves_matplotlib_global_state_alone():
    code = (
        "import json, matplotlib\n"
        "before = (matplotlib.get_backend(), dict(matplotlib.rcParams))\n"
        "import attndyn.workflow.plots as p, numpy as np\n"
        "fig = p.trajectories(np.linspace(0, 1, 3), np.zeros((3, 2, 2)))\n"
        "big = p.trajectories(np.linspace(0, 1, 3), np.zeros((3, 2, 2)), style={'font.size': 17})\n"
        "after = (matplotlib.get_backend(), dict(matplotlib.rcParams))\n"
        "sizes = [f.axes[0].xaxis.label.get_fontsize() for f in (fig, big)]\n"
        "print(json.dumps([before[0] == after[0], before[1] == after[1], *sizes]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    same_backend, same_rc, fontsize, styled = json.loads(out.stdout)
    assert same_backend
    assert same_rc
    assert fontsize == 11  # the module's style was applied inside the figure function
    assert styled == 17  # and a figure's own style argument overrides it, for that figure only


def test_public_functions_are_annotated():
    """Every public top-level function of the package annotates its parameters and its return."""
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                gaps = [a.arg for a in args if a.annotation is None] + (["return"] if node.returns is None else [])
                if gaps:
                    missing.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} {gaps}")
    assert not missing, "\n".join(missing)


def test_the_first_adaptive_step_stays_within_the_first_save_interval():
    """A nearly still state (saturated attention, rescaled tokens) made the starting-step heuristic
    try t ~ 1e3, where e^{tV} overflows; the first step is now capped by the first save interval."""
    import attndyn as ad

    model = ad.Model(ad.Weights.from_value(0.6 * np.eye(40)), beta=1.0, rescaled=True)
    x0 = np.random.default_rng(7).standard_normal((3, 12, 40))
    traj = ad.simulate(model, x0, np.linspace(0.0, 4.0, 9), solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-11, atol=1e-13))
    assert np.isfinite(traj.xs.numpy()).all()
