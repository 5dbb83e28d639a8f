"""The engine plan: which path integrates a call of ``simulate``, and why each faster one was not taken.

Contract
--------
* :func:`decide` takes the model, the state (its shape, dtype and device), the save times, the solver
  and step (and whether ``observe``, ``progress`` or ``span`` are asked for) and returns a
  :class:`Plan`: the path that runs, the field it evaluates, and for every faster path or kernel
  the reason it was not taken. It reads the thread count torch runs now, so ``simulate`` decides
  inside its thread policy; :func:`attndyn.plan` does the same for a user.
* ``simulate`` executes the plan and nothing else decides: :mod:`attndyn.core.compiled` holds the
  kernels only. Whether the field of a model runs in C is a property of the model and the state,
  kept beside the model in :mod:`attndyn.core.dynamics` (:func:`native_reason`, :func:`native_field`,
  which ``dynamics.prepare`` stores), as its choice between the dense and the fused kernel is; the
  plan reads both.
* The paths, fastest first (:data:`PATHS`): the span reduction (``span=True`` with d > n: the
  same model in n dimensions, itself planned again), the compiled loop (a whole classical RK4 run
  in C), the chunked batch (a large fixed-step batch on the CPU in cache-sized chunks, each chunk
  planned again) and the eager loop (the solver in Python, each stage a field evaluation, in C
  where :func:`native_reason` allows, and for adaptive Post-LN or Euclidean runs the stages and
  error norm of a step in C).
* Imports the kernels (``compiled``), the dynamics, the solvers, the scheme table and nothing that imports
  it back (``tests/test_layers.py`` fails on any import circle).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attndyn.core import compiled
from attndyn.core.dynamics import Model, native_field, native_reason, scalar_V
from attndyn.core.schemes import SCHEME_TABLE
from attndyn.core.solvers import RK4, AdaptiveStep, FixedStep, Tableau, step_counts

PATHS = ("span reduction", "compiled loop", "chunked batch", "eager loop")

# the compiled loop takes runs of at least this many steps: below it the eager engine's fixed set-up
# (no library call, no copy of the state into NumPy) is the smaller cost
MIN_STEPS = 100

# a fixed-step batch is integrated in chunks of systems whose state and logits take about this much
# (n (n + d) entries a system): about a core's share of the last-level cache, so that the stages of a
# chunk stay in cache (docs/benchmarks records the gain; a quarter of this lost at small d)
CHUNK_BYTES = 1024 * 1024


def loop_reason(model: Model, x: torch.Tensor, solver: Tableau, step: object, times: list[float] | None, max_steps: int) -> str | None:
    """Why the compiled RK4 loop does not integrate this call (``None`` when it does)."""
    checks = [
        (solver == RK4(), "not classical RK4"),  # by value: another order-4 tableau named "rk4" is not it
        (isinstance(step, FixedStep), "not a fixed step"),
        (model.geometry == "euclidean" or SCHEME_TABLE[model.scheme].compiled == "all", "a normalization scheme other than Post-LN"),
        (not model.rescaled or scalar_V(model), "a rescaled model with V not a multiple of I"),
    ]
    for ok, why in checks:
        if not ok:
            return why
    if times is not None:
        try:
            steps = sum(step_counts(times, step.dt))
        except ValueError:
            return "save times off the dt grid (the eager loop says which)"
        if steps < MIN_STEPS:
            return f"{steps} steps, fewer than {MIN_STEPS}"
        if steps > max_steps:
            return f"{steps} steps, more than max_steps = {max_steps}"
    why = native_reason(model, x)
    return None if why is None else f"the C field: {why}"


def cache_chunk(x: torch.Tensor, step: object, observe: object, progress: object) -> int | None:
    """Systems per chunk for a batched fixed-step run on the CPU whose working set exceeds the cache
    (``CHUNK_BYTES`` a chunk), or None to integrate the batch in one piece.

    Systems of a batch are independent and fixed steps are the same for all, so chunks take exactly
    the steps of the whole; adaptive steps are shared by the batch (chunks would step differently),
    and ``observe`` and ``progress`` see the whole state, so those runs stay in one piece.
    """
    return _chunk(x, step, observe, progress)[0]


def _chunk(x: torch.Tensor, step: object, observe: object, progress: object) -> tuple[int | None, str]:
    checks = [
        (isinstance(step, FixedStep), "not a fixed step (adaptive steps are shared by the batch)"),
        (observe is None and progress is None, "observe or progress sees the whole batch"),
        (x.ndim >= 3, "one system"),
        (x.device.type == "cpu", "not on the CPU"),
    ]
    for ok, why in checks:
        if not ok:
            return None, why
    n, d = x.shape[-2:]
    per_system = n * (n + d) * x.element_size()
    chunk = max(1, CHUNK_BYTES // per_system)
    if math.prod(x.shape[:-2]) <= chunk:
        return None, f"the batch fits one chunk of {CHUNK_BYTES // 1024} KiB"
    return chunk, ""


def span_obstruction(model: Model) -> str | None:
    """Why ``model``'s dynamics may leave the span of x0 (``None`` when they cannot).

    With Q_h^T K_h = alpha_h I and V_h = mu_h I for every head and no feed-forward layer, the
    velocity of each token is a combination of the tokens (minus a multiple of itself on the
    sphere, or the radius/direction split of a scheme), and the scores are alpha_h <x_i, x_j>: the
    dynamics commute with every rotation, so the rows of X(t) stay in the span of those of X(0).
    Writing X = Y U^T with U an orthonormal basis of that span (d x n), Y follows the same model
    in n dimensions with Q = alpha I, K = V = mu I, exactly.
    """
    w = model.weights
    if w.ff is not None:
        return "a feed-forward layer"
    eye = torch.eye(w.d, dtype=w.Q.dtype)
    for h in range(w.heads):
        M = w.Q[h].transpose(0, 1) @ w.K[h]
        if not torch.allclose(M, M[0, 0] * eye, rtol=0.0, atol=1e-14 * max(1.0, float(M.abs().max()))):
            return f"Q^T K of head {h} not a multiple of the identity"
        if not torch.equal(w.V[h], w.V[h][0, 0] * eye):
            return f"V of head {h} not a multiple of the identity"
    return None


def span_model(model: Model, n: int) -> Model:
    """The model that the span coordinates Y (n dimensions) follow: Q = alpha_h I, K = I, V = mu_h I."""
    import dataclasses

    from attndyn.core.weights import Weights

    w = model.weights
    eye = torch.eye(n, dtype=w.Q.dtype)
    alphas = [float((w.Q[h].transpose(0, 1) @ w.K[h])[0, 0]) for h in range(w.heads)]
    mus = [float(w.V[h][0, 0]) for h in range(w.heads)]
    return dataclasses.replace(
        model, weights=Weights(torch.stack([a * eye for a in alphas]), torch.stack([eye] * w.heads), torch.stack([m * eye for m in mus]))
    )


@dataclass(frozen=True)
class Plan:
    """What :func:`decide` chose. ``path`` is one of :data:`PATHS`; ``field`` says where the field is
    evaluated (``"C field"`` or ``"torch field"``) and ``form`` which field is integrated
    (``"vector_field"`` or ``"unit_sphere_field"``); ``stepper`` is ``"C step"`` when an adaptive
    step's stages and error norm run in C, ``"classical RK4 step"`` for the eager loop's dedicated
    RK4 step, else ``"generic RK step"``; ``chunk`` the systems a chunk; ``not_taken`` pairs each
    faster path or kernel not taken with the reason; ``inner`` the plan of the reduced run (span)
    or of one chunk. ``str(plan)`` prints it."""

    path: str
    field: str
    form: str
    stepper: str
    threads: int
    what: str
    chunk: int | None = None
    not_taken: tuple[tuple[str, str], ...] = ()
    inner: Plan | None = None
    native: compiled.Native | None = field(default=None, repr=False, compare=False)

    def lines(self) -> list[str]:
        if self.path == "compiled loop":
            runs = "compiled loop: the whole classical RK4 run in one C loop"
        elif self.path == "span reduction":
            runs = "span reduction: the same model in the span of x0 (n dimensions)"
        elif self.path == "chunked batch":
            runs = f"chunked batch: consecutive chunks of {self.chunk} systems"
        else:
            runs = f"eager loop: {self.stepper}, {self.field} ({self.form})"
        out = [f"engine plan for {self.what}, {self.threads} thread{'s' if self.threads != 1 else ''}:", f"  runs: {runs}"]
        if self.not_taken:
            out.append("  not taken:")
            out += [f"    {name}: {why}" for name, why in self.not_taken]
        if self.inner is not None:
            out.append(f"  {self.path}, inside:")
            out += ["    " + line for line in self.inner.lines()]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _describe(solver: Tableau, step: object, x: torch.Tensor) -> str:
    if isinstance(step, AdaptiveStep):
        how = f"adaptive (rtol {step.rtol:g}, atol {step.atol:g})"
    else:
        how = f"fixed dt {step.dt:g}"
    where = str(x.dtype).removeprefix("torch.") + f" on {x.device}"
    return f"{solver.name} {how}, state {tuple(x.shape)} {where}"


def decide(
    model: Model,
    x: torch.Tensor,
    times: list[float] | None,
    *,
    solver: Tableau,
    step: FixedStep | AdaptiveStep,
    observe: object = None,
    progress: object = None,
    max_steps: int = 100_000,
    span: bool = False,
) -> Plan:
    """The plan of ``simulate(model, x, times, ...)`` at the thread count torch runs now (``times``
    validated, or ``None`` when unknown: the compiled loop's step count is then not checked).
    ``ValueError`` for ``span=True`` with a model whose dynamics do not commute with rotations."""
    what = _describe(solver, step, x)
    threads = torch.get_num_threads()
    not_taken = []
    n, d = x.shape[-2:]
    if span:
        reason = span_obstruction(model)
        if reason is not None:
            raise ValueError(f"span=True needs dynamics that commute with rotations; this model has {reason}.")
        if d > n:
            like = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
            inner = decide(span_model(model, n), like, times, solver=solver, step=step, observe=observe, progress=progress, max_steps=max_steps)
            return Plan("span reduction", inner.field, inner.form, inner.stepper, threads, what, inner=inner)
        not_taken.append(("span reduction", f"d = {d} <= n = {n}: nothing to reduce"))
    else:
        not_taken.append(("span reduction", "not asked (span=False)"))
    why = loop_reason(model, x, solver, step, times, max_steps)
    if why is None:
        if times is None:
            what += f" (no save times: assuming at least {MIN_STEPS} steps on the dt grid)"
        return Plan("compiled loop", "C field", "vector_field", "C loop", threads, what, not_taken=tuple(not_taken), native=native_field(model, x))
    not_taken.append(("compiled loop", why))
    chunk, why = _chunk(x, step, observe, progress)
    if chunk is not None:
        part = x.reshape(-1, n, d)[:chunk]
        inner = decide(model, part, times, solver=solver, step=step, max_steps=max_steps)
        return Plan("chunked batch", inner.field, inner.form, inner.stepper, threads, what, chunk=chunk, not_taken=tuple(not_taken), inner=inner)
    not_taken.append(("chunked batch", why))
    return _eager(model, x, solver, step, threads, what, not_taken)


def _eager(model: Model, x: torch.Tensor, solver: Tableau, step: object, threads: int, what: str, not_taken: list) -> Plan:
    sphere = model.geometry == "sphere"
    scheme = SCHEME_TABLE[model.scheme]
    form = "unit_sphere_field" if sphere and scheme.unit_speed is not None else "vector_field"
    why_c = native_reason(model, x)
    if why_c is None and sphere and scheme.compiled != "all" and form == "vector_field":
        why_c = f"the {model.scheme} scheme's radius/direction split runs in torch"
    field_name = "C field" if why_c is None else "torch field"
    if why_c is not None:
        not_taken.append(("C field", why_c))
    elif sphere and scheme.compiled == "before_tau":
        field_name = "C field (torch after scheme_tau)"
    if isinstance(step, AdaptiveStep):
        checks = [
            (why_c is None, "the field is not in C"),
            (not (model.rescaled and not scalar_V(model)), "a rescaled model with V not a multiple of I (e^{tV} is taken in torch)"),
            (solver.adaptive, "the solver has no error estimate"),
            (not sphere or scheme.compiled == "all", f"the {model.scheme} scheme (the C step computes Post-LN)"),
        ]
        failed = [why for ok, why in checks if not ok]
        stepper = "C step" if not failed else "generic RK step"
        if failed:
            not_taken.append(("C step", failed[0]))
    else:
        stepper = "classical RK4 step" if solver == RK4() else "generic RK step"
    return Plan("eager loop", field_name, form, stepper, threads, what, not_taken=tuple(not_taken))
