"""The step controller (solvers.StepController) takes the same accepted steps, to the last bit, as the
controllers it replaced (issue 36): the oracle is the old inline controller of ``integrate`` and the
old formulas of ``simulate_long``, copied here as they were written before the refactor."""

import math

import numpy as np
import pytest
import torch

import attndyn as ad
from attndyn.core import compiled
from attndyn.core.dynamics import prepare, vector_field
from attndyn.core.solvers import ERROR_FLOOR, MAX_FACTOR, MIN_FACTOR, SAFETY, StepController, error_norm, initial_step, rk_step


def old_adaptive_times(f, x, ts, args, solver, step, batch_dims, stepper=None):
    """The accepted step times of integrate's adaptive loop as it was written before the refactor
    (``stepper``: the C stages, as integrate took them)."""
    times = [float(t) for t in ts]

    def g(t, y):
        return f(t, y, args)

    t = times[0]
    k1 = g(t, x)
    if step.dt0 is None:
        dt, _ = initial_step(g, t, x, k1, solver.order - 1, step.rtol, step.atol, batch_dims, max_step=times[1] - times[0])
    else:
        dt = step.dt0
    exponent = 1.0 / solver.order
    err_prev = 1.0
    accepted, rejected = [], 0
    for target in times[1:]:
        while t < target:
            landing = t + dt >= target * (1 - 1e-14) if target > 0 else t + dt >= target
            h = target - t if landing else dt
            if stepper is not None:
                x_new, en, k_last = stepper(t, x, h, k1)
            else:
                x_new, err, k_last, _ = rk_step(g, t, x, h, solver, k1=k1)
                en = error_norm(err, x, x_new, step.rtol, step.atol, batch_dims)
            if not math.isfinite(en):
                en = math.inf
            if en <= 1.0:
                t = target if landing else t + h
                x = x_new
                k1 = k_last if solver.fsal else g(t, x)
                en = max(en, 1e-10)
                factor = step.safety * en ** (-exponent + 0.75 * step.pi_beta) * err_prev**step.pi_beta
                factor = min(step.max_factor, max(step.min_factor, factor))
                err_prev = en
                dt = max(dt, h) * factor if landing else h * factor
                accepted.append(t)
            else:
                rejected += 1
                factor = step.min_factor if math.isinf(en) else max(step.min_factor, step.safety * en ** (-exponent))
                dt = h * min(1.0, factor)
    return accepted, rejected


def _sphere(shape, seed):
    x = np.random.default_rng(seed).normal(size=shape)
    return torch.as_tensor(x / np.linalg.norm(x, axis=-1, keepdims=True))


RNG = np.random.default_rng(5)
W3 = ad.Weights(*(RNG.normal(size=(3, 3)) for _ in range(3)))
RUNS = [
    ("Euclidean, random weights", ad.Model(W3, beta=1.5), torch.as_tensor(RNG.normal(size=(12, 3))), ad.AdaptiveStep(rtol=1e-8, atol=1e-10)),
    ("sphere, beta 8", ad.Model(ad.Weights.identity(3), beta=8.0, geometry="sphere"), _sphere((12, 3), 1), ad.AdaptiveStep(rtol=1e-8, atol=1e-10)),
    (
        "rescaled batch",
        ad.Model(ad.Weights.identity(2), rescaled=True),
        torch.as_tensor(RNG.normal(size=(4, 10, 2))),
        ad.AdaptiveStep(rtol=1e-8, atol=1e-10),
    ),
    (
        "PI, dt0, loose",
        ad.Model(W3, beta=3.0),
        torch.as_tensor(RNG.normal(size=(12, 3))),
        ad.AdaptiveStep(rtol=1e-4, atol=1e-6, dt0=0.5, pi_beta=0.04),
    ),
    (
        "own bounds, beta 30",
        ad.Model(ad.Weights.identity(2), beta=30.0),
        torch.as_tensor(RNG.normal(size=(10, 2))),
        ad.AdaptiveStep(rtol=1e-6, atol=1e-9, max_factor=5.0, min_factor=0.1, safety=0.8),
    ),
]


@pytest.mark.parametrize("run", RUNS, ids=[r[0] for r in RUNS])
@pytest.mark.parametrize("stages", ["torch", "C"])
def test_integrate_accepts_the_old_controller_s_steps_bit_for_bit(run, stages, monkeypatch):
    name, model, x, step = run
    ts = [0.0, 1.0, 2.5, 4.0]
    monkeypatch.setenv("ATTNDYN_COMPILED", "1" if stages == "C" else "0")
    planned = ad.plan(model, x, ts, solver=ad.Dopri5(), step=step).stepper
    if stages == "C" and planned != "C step":
        pytest.skip("no C step here (no compiler, or the plan runs torch)")
    args = prepare(model, x)
    stepper = compiled.stepper(args.native, ad.Dopri5(), step.rtol, step.atol) if stages == "C" else None
    old, old_rejected = old_adaptive_times(vector_field, x, ts, args, ad.Dopri5(), step, x.ndim - 2, stepper)
    seen = []
    traj = ad.simulate(model, x, ts, solver=ad.Dopri5(), step=step, progress=seen.append)
    assert [t.hex() for t in seen] == [t.hex() for t in old], name
    assert traj.stats["rejected"] == old_rejected
    if name == "own bounds, beta 30":
        assert old_rejected > 0  # rejections are exercised too


def test_the_controller_reproduces_simulate_long_s_old_formulas():
    """simulate_long's controller was step * min(5, 0.9 max(e, 1e-10)^(-1/5)) on acceptance and
    step * max(0.2, 0.9 e^(-1/5)) on rejection; StepController with max_factor 5 gives the same bits."""
    from attndyn.core.longtime import LONG_MAX_FACTOR

    control = StepController(5, 1e-10, 1e-12, dt0=1e-3, max_factor=LONG_MAX_FACTOR)
    rng = np.random.default_rng(0)
    for step in 10.0 ** rng.uniform(-6, 40, 200):
        for e in [0.0, 1e-14, *(10.0 ** rng.uniform(-12, 3, 30)), 1.0]:
            accepted, h, _ = control.adapt(step, e, 1.0)
            if e <= 1.0:
                assert accepted
                assert h == step * min(5.0, 0.9 * max(e, 1e-10) ** (-0.2))
            else:
                assert not accepted
                assert h == step * max(0.2, 0.9 * e ** (-0.2))


def test_the_named_constants_are_the_defaults_and_shape_the_step():
    assert (ad.AdaptiveStep(rtol=1, atol=1).safety, ad.AdaptiveStep(rtol=1, atol=1).min_factor) == (SAFETY, MIN_FACTOR)
    assert ad.AdaptiveStep(rtol=1, atol=1).max_factor == MAX_FACTOR
    control = StepController(5, 1e-8, 1e-10)
    assert control.adapt(1.0, 0.0, 1.0)[1] == MAX_FACTOR  # a zero error grows the step by the cap
    assert control.adapt(1.0, ERROR_FLOOR, 1.0)[1] == min(MAX_FACTOR, SAFETY * ERROR_FLOOR**-0.2)
    assert control.adapt(1.0, math.inf, 1.0)[1] == MIN_FACTOR  # a non-finite trial step shrinks by the floor
    assert control.adapt(1.0, 1e9, 1.0)[1] == MIN_FACTOR
    accepted, h, _ = control.adapt(0.5, 2.0**-5, 1.0, planned=2.0)  # a landing step: grow from the planned one
    assert accepted
    assert h == 2.0 * SAFETY * 2.0
