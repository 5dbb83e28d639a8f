"""The engine plan (attndyn.core.plan): its choice for a table of cases, read from the paths'
definitions (not from the code's output), and that simulate executes exactly the planned path."""

import math

import numpy as np
import pytest
import torch

import attndyn as ad
from attndyn.core import compiled, plan, simulation

RNG = np.random.default_rng(0)
SMALL = RNG.uniform(-1, 1, (12, 3))
FIXED = {"solver": ad.RK4(), "step": ad.FixedStep(0.01)}
ADAPTIVE = {"solver": ad.Dopri5(), "step": ad.AdaptiveStep(rtol=1e-8, atol=1e-10)}
TS = [0.0, 1.0, 2.0]  # 200 fixed steps of 0.01


def _three_eighths(name):
    third = 1 / 3
    return ad.core.solvers.Tableau(
        name, 4, (0.0, third, 2 * third, 1.0), ((), (third,), (-third, 1.0), (1.0, -1.0, 1.0)), (1 / 8, 3 / 8, 3 / 8, 1 / 8)
    )


def _sphere(shape, seed=1):
    x = np.random.default_rng(seed).normal(size=shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# (name, model, x0, ts, options, path, field, stepper, a reason that must be given for a path not taken)
ID3, SPH = ad.Weights.identity(3), _sphere((6, 3))
GENERAL_V = ad.Weights(np.eye(3), np.eye(3), np.diag([0.5, 0.2, -0.1]))
EIGHTHS = {"solver": _three_eighths("rk4"), "step": ad.FixedStep(0.01)}
C, TORCH, RK4STEP, GENERIC = "C field", "torch field", "classical RK4 step", "generic RK step"
CASES = [
    ("classical RK4, 200 steps, d = 3", ad.Model(ID3), SMALL, TS, FIXED, "compiled loop", C, "C loop", None),
    ("3/8 rule named rk4", ad.Model(ID3), SMALL, TS, EIGHTHS, "eager loop", C, GENERIC, ("compiled loop", "not classical RK4")),
    ("50 steps", ad.Model(ID3), SMALL, [0.0, 0.5], FIXED, "eager loop", C, RK4STEP, ("compiled loop", "50 steps")),
    ("off the grid", ad.Model(ID3), SMALL, [0.0, 1.005, 2.0], FIXED, "eager loop", C, RK4STEP, ("compiled loop", "off the dt grid")),
    ("Dopri5 adaptive", ad.Model(ID3), SMALL, TS, ADAPTIVE, "eager loop", C, "C step", ("compiled loop", "not classical RK4")),
    ("hardmax", ad.Model(ID3, beta=math.inf), SMALL, TS, FIXED, "eager loop", TORCH, RK4STEP, ("C field", "hardmax")),
    ("float32", ad.Model(ID3), SMALL.astype(np.float32), TS, FIXED, "eager loop", TORCH, RK4STEP, ("C field", "float64")),
    ("causal mask, adaptive", ad.Model(ID3, mask="causal"), SMALL, TS, ADAPTIVE, "eager loop", TORCH, GENERIC, ("C step", "not in C")),
    ("rescaled, general V", ad.Model(GENERAL_V, rescaled=True), SMALL, TS, ADAPTIVE, "eager loop", C, GENERIC, ("C step", "V not a multiple")),
    ("sqrt scheme", ad.Model(ID3, geometry="sphere", scheme="sqrt"), SPH, TS, ADAPTIVE, "eager loop", C, GENERIC, ("C step", "sqrt scheme")),
    ("pre scheme", ad.Model(ID3, geometry="sphere", scheme="pre"), SPH, TS, FIXED, "eager loop", TORCH, RK4STEP, ("compiled loop", "Post-LN")),
    ("span, d > n", ad.Model(ad.Weights.identity(6)), RNG.normal(size=(3, 6)), TS, {**ADAPTIVE, "span": True}, "span reduction", C, "C step",
     None),
    ("span, d <= n", ad.Model(ID3), SMALL, TS, {**ADAPTIVE, "span": True}, "eager loop", C, "C step", ("span reduction", "nothing to reduce")),
    ("a large batch, d = 12", ad.Model(ad.Weights.identity(12)), RNG.normal(size=(300, 30, 12)), [0.0, 0.1], FIXED,
     "chunked batch", TORCH, RK4STEP, ("compiled loop", "fewer than 100")),
]  # fmt: skip


@pytest.fixture
def one_thread_with_kernel(monkeypatch):
    monkeypatch.setenv("ATTNDYN_COMPILED", "1")
    monkeypatch.setenv("ATTNDYN_THREADS", "1")
    if compiled.library() is None:
        pytest.skip(f"no compiled kernel here: {compiled.STATUS['reason']}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_plan_chooses_the_path_its_definition_names(one_thread_with_kernel, case):
    _, model, x0, ts, options, path, field, stepper, reason = case
    got = ad.plan(model, x0, ts, **options)
    assert (got.path, got.field, got.stepper) == (path, field, stepper), str(got)
    if reason is not None:
        assert reason[1] in dict(got.not_taken)[reason[0]], str(got)
    text = str(got)
    assert text.startswith("engine plan for ")
    assert path in text


def test_simulate_executes_exactly_the_planned_path(one_thread_with_kernel, monkeypatch):
    """A spy on each executor records what simulate ran: the plan's path, once (a chunked batch then
    runs its chunks, each planned again); the result equals the named path's executor run directly.
    Spies on the kernels tell the paths apart independently of the executors' names: the C loop runs
    exactly when the compiled loop is planned, the C step exactly when the plan names it."""
    ran, kernels = [], []
    real = dict(simulation.EXECUTORS)
    for name, fn in real.items():
        monkeypatch.setitem(simulation.EXECUTORS, name, lambda p, *a, _n=name, _f=fn, **k: ran.append(_n) or _f(p, *a, **k))
    for kernel, fn in (("run", compiled.run), ("stepper", compiled.stepper)):
        monkeypatch.setattr(compiled, kernel, lambda *a, _k=kernel, _f=fn, **k: kernels.append(_k) or _f(*a, **k))
    seen_paths = set()
    for name, model, x0, ts, options, path, _, stepper, _ in CASES:
        ran.clear()
        kernels.clear()
        if name == "off the grid":  # the eager loop runs, and says what is wrong
            with pytest.raises(ValueError, match="not on the dt=0.01 grid"):
                ad.simulate(model, x0, ts, **options)
            assert ran == [path]
            continue
        traj = ad.simulate(model, x0, ts, **options)
        assert ran[0] == path, name
        assert ("run" in kernels) == (path == "compiled loop"), name
        assert ("stepper" in kernels) == (stepper == "C step"), name
        seen_paths.add(ran[0])
        x = simulation.prepare_state(model, x0)
        solver, step = options["solver"], options["step"]
        chosen = ad.plan(model, x0, ts, **options)
        direct = real[path](chosen, model, x, [float(t) for t in ts], solver=solver, step=step, observe=None, max_steps=100_000, progress=None)
        torch.testing.assert_close(traj.xs, direct.xs, rtol=0, atol=0, msg=name)
    assert seen_paths == set(plan.PATHS)  # the table covers every path


def test_the_compiled_loop_and_the_eager_loop_are_different_arithmetic(one_thread_with_kernel, monkeypatch):
    """The check above could not tell two paths apart if they gave the same bits: they do not."""
    model, x0 = ad.Model(ad.Weights.identity(3)), SMALL
    loop = ad.simulate(model, x0, TS, **FIXED)
    monkeypatch.setenv("ATTNDYN_COMPILED", "0")
    assert ad.plan(model, x0, TS, **FIXED).path == "eager loop"
    eager = ad.simulate(model, x0, TS, **FIXED)
    difference = (loop.xs - eager.xs).abs().max().item()
    assert 0 < difference < 1e-12


def test_plan_refuses_span_for_a_model_that_does_not_commute_with_rotations():
    model = ad.Model(ad.Weights(np.eye(4), np.diag([1.0, 2.0, 1.0, 1.0]), np.eye(4)))
    with pytest.raises(ValueError, match="Q\\^T K of head 0"):
        ad.plan(model, RNG.normal(size=(2, 4)), span=True)


def test_the_cli_prints_the_plan(tmp_path):
    from typer.testing import CliRunner

    from attndyn.app.cli import app

    done = CliRunner().invoke(app, ["simulate", "configs/polytope.toml", "--explain"])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("engine plan for ")
    assert "runs:" in done.output
    assert not any(tmp_path.iterdir())  # nothing written


EXPLAINED = """seed = 3
n = 5
d = 3

[init]
kind = "uniform"

[weights]
heads = 3
{more}
[solver]
method = "rk4"
dt = 0.05
t1 = {t1}
"""


@pytest.mark.parametrize(
    "more",
    [
        "",
        '[weights.V]\nkind = "scaled_identity"\nscale = 0.5\n',
        '[weights.V]\nkind = "random"\ndist = "gaussian"\n',
        '[weights.Q]\nkind = "diagonal"\ndiag = [1.0, 2.0, 3.0]\n',
        '[weights.feedforward]\nsigma = "relu"\n[weights.feedforward.W]\nkind = "identity"\n',
        '[model]\nrescaled = true\n[weights.V]\nkind = "scaled_identity"\nscale = -1.0\n',
    ],
)
@pytest.mark.parametrize("t1", [0.5, 20.0])
def test_explain_decides_on_one_head_standing_for_all_as_on_the_built_weights(more, t1, monkeypatch):
    """Issue 51 finding 7: ``--explain`` built every head (14 GB and 36 s for 10,000 heads at d = 200);
    it plans on one head repeated as a view. Oracle: the plan of the weights built in full, line for line."""
    import tomllib

    from attndyn.workflow import runs
    from attndyn.workflow.schema import ConfigError, parse_config
    from attndyn.workflow.setup import build

    monkeypatch.setenv("ATTNDYN_THREADS", "1")  # the thread count reads the machine's load: fixed for both
    config = parse_config(tomllib.loads(EXPLAINED.format(more=more, t1=t1)))
    if "rescaled" in more:  # refused on several heads: by the stand-in as by the full build, with the same words
        with pytest.raises(ConfigError) as built:
            build(config)
        with pytest.raises(ConfigError) as explained:
            runs.explain(config)
        assert str(explained.value) == str(built.value)
        return
    full = build(config)
    stand_in = runs._planning_setup(config)
    assert stand_in.model.weights.Q.stride(0) == 0  # one head, repeated: not built
    assert stand_in.model.weights.heads == full.model.weights.heads == 3
    explained = runs.explain(config)
    monkeypatch.setattr(runs, "_planning_setup", build)  # the plan of the weights built in full
    assert explained == runs.explain(config)


def test_explain_of_ten_thousand_heads_at_d_200_allocates_no_weights(tmp_path):
    """The issue's case, in a child process: its peak memory stays far below the 9.6 GB the weights would take."""
    import subprocess
    import sys

    config = tmp_path / "big.toml"
    config.write_text(EXPLAINED.format(more="", t1=0.5).replace("d = 3", "d = 200").replace("heads = 3", "heads = 10000"))
    child = (
        "import re, sys\nfrom attndyn.app.cli import entry\ncode = entry(['simulate', sys.argv[1], '--explain'])\n"
        "print('peak', re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))\nsys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", child, str(config)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "several heads" in done.stdout
    # its own peak, in bytes: VmHWM (KiB) belongs to the process's own memory map; getrusage's ru_maxrss would
    # carry over, through fork and exec, the size of the test process that started it (3 GB late in a full run)
    peak = int(done.stdout.split("peak ")[-1]) * 1024
    assert peak < 2 * 2**30, peak


def test_the_kernels_module_decides_nothing_and_imports_no_model():
    """compiled.py holds kernels only: it imports neither the dynamics nor the plan (the cycle of
    issue 36 is gone) and reads no Model."""
    import ast
    from pathlib import Path

    source = Path(compiled.__file__).read_text()
    imported = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"attndyn.core.dynamics", "attndyn.core.plan", "attndyn.core.simulation"}
    assert "Model" not in source


def test_the_plan_reads_the_scheme_table_s_compiled_column(monkeypatch):
    """Which compiled paths a scheme takes is the table's ``compiled`` column, not the scheme's name: Post-LN with
    its column set to "none" gets the torch field and no compiled loop, and the field the run evaluates is then the
    scheme split's (the same numbers: Post-LN's split is its tangent projection)."""
    import dataclasses

    from attndyn.core import schemes
    from attndyn.core.dynamics import prepare, vector_field
    from attndyn.core.plan import decide
    from attndyn.core.solvers import RK4, FixedStep

    model = ad.Model(ad.Weights.identity(3), geometry="sphere")
    x = torch.as_tensor(ad.sphere_start(64, 3, seed=0))
    before = decide(model, x, [0.0, 10.0], solver=RK4(), step=FixedStep(0.01), max_steps=10**6)
    field = vector_field(0.0, x, prepare(model, x))
    monkeypatch.setitem(schemes.SCHEME_TABLE, "post", dataclasses.replace(schemes.SCHEME_TABLE["post"], compiled="none"))
    after = decide(model, x, [0.0, 10.0], solver=RK4(), step=FixedStep(0.01), max_steps=10**6)
    assert after.path != "compiled loop"
    assert after.field == "torch field"
    assert ("compiled loop", "a normalization scheme other than Post-LN") in after.not_taken
    if before.path == "compiled loop":  # where the C library builds
        assert before.field == "C field"
    torch.testing.assert_close(vector_field(0.0, x, prepare(model, x)), field, rtol=1e-12, atol=1e-14)
