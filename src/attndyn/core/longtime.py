"""Exponentially long horizons on the sphere: metastable plateaus (Geshkovski, Koubbi, Polyanskiy, Rigollet, arXiv 2410.06833).

At large beta the sphere model (Post-LN, ``geometry="sphere"``) forms clusters in O(1) time and
then merges them only after times of order e^{beta (1 - cos theta)}, far beyond what the general
integrator can reach: in the plain field ``P_{x_i}(sum_j A_ij x_j)`` the own term ``A_ii x_i`` is
removed by a cancellation, so rounding (1e-16) swamps an inter-cluster signal of e^{-beta (1 - c)}
once that is below machine precision, and the radial relaxation makes explicit steps stiff.

:func:`simulate_long` integrates the same equation written without the cancellation,

    x_i' = P_{x_i}( sum_j A_ij (x_j - x_i) ),       A = softmax_j(beta <Q x_i, K x_j>),

(equal to the model's field on the sphere because P_x x = 0), on distinct points with
multiplicities: tokens closer than ``merge_tol`` are merged into one point of their summed count,
which is exact for the model (equal tokens feel equal forces and stay equal), and removes the only
fast mode left, the contraction of a cluster onto itself. The state is renormalised to the sphere
after every accepted step (a projection method), and steps are Dopri5 with error control, so a
step grows to the time scale of the slowest motion: a plateau of 1e39 costs about a hundred steps.
Time is autonomous, so only the step size matters; a merge that takes O(1) time at t = 1e40
happens within one rounding of t, which is how it looks on the log-time axis where these runs
are read.

USA (``normalization="unnormalized"``, x_i' = P_{x_i}((1/n) sum_j e^{beta <Q x_i, K x_j>} x_j)) is
integrated in the rescaled time tau = e^{beta m} t with m = |Q^T K|_2 (the authors' tau = e^beta t
for Q^T K = I), where the weights e^{beta (<x_i, Q^T K x_j> - m)} / n are at most 1 / n and never
overflow: the same cancellation-free differences, the same merging (a merged point carries its
count as a mass). Save times are the model's own t by default; ``rescaled_time=True`` takes and
returns tau instead, which beta > 709 / m requires (e^{beta m} t leaves float64 there; the
authors' beta = 500 to 4000).

Limits (checked): one head, ``V = I``, softmax or USA, no mask, no feed-forward, ``scheme="post"``,
finite beta. Logits differ by at most 2 beta |Q^T K| between points, so weights down to
e^{-745} are represented; below that an interaction underflows to zero (the precision horizon of
float64), which :func:`simulate_long` reports as ``stats["logit_gap"]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from attndyn.core import compiled
from attndyn.core.dynamics import Model
from attndyn.core.solvers import Dopri5, StepController
from attndyn.core.weights import as_float_tensor


@dataclass(frozen=True)
class LongTrajectory:
    """What :func:`simulate_long` returns.

    ``ts`` (T,) save times; ``xs`` (T, n, d) the tokens (merged tokens share one position);
    ``merges``: one ``(t, i, j)`` per merge of the point holding token ``i`` with the one holding
    token ``j``; ``clock`` (T,) the pairing clock s(t) = int_0^t e^{-beta (1 - <x_a, x_b>)} dt'
    (for USA with a general Q^T K: <x_a, Q^T K x_b> and |Q^T K| in place of the inner product and 1)
    of the tokens ``a, b`` named in ``clock_pair`` (or ``None``), integrated with the state;
    ``stats``: steps, rejected steps, field evaluations, the largest step, and ``logit_gap`` (the
    largest gap between a row's largest logit and another seen: above 745 some interaction was
    below e^{-745} and counted as zero); ``steps`` (with ``every_step=True``): the state after every
    accepted step, ``{"t", "xs", "clock"}``. A merge at t = 1e40 happens within one rounding of t,
    so save times cannot resolve it; the steps do (their x and clock are exact, their t rounded).
    """

    ts: np.ndarray
    xs: np.ndarray
    merges: list[tuple[float, int, int]]
    clock: np.ndarray | None
    stats: dict = field(default_factory=dict)
    steps: dict | None = None


# simulate_long's controller grows a step by at most this factor (solvers.MAX_FACTOR, the general
# integrator's, is 10): its own setting since it was written, kept so that its steps are unchanged
LONG_MAX_FACTOR = 5.0


def check_model(model: Model) -> torch.Tensor:
    """Raise ValueError (naming what is missing) unless :func:`simulate_long` supports ``model``; returns Q^T K."""
    if not isinstance(model, Model):
        raise TypeError(f"model must be an attndyn.Model, not {type(model).__name__}.")
    w = model.weights
    problems = []
    if model.geometry != "sphere" or model.scheme != "post":
        problems.append("geometry='sphere' with scheme='post'")
    if w.heads != 1:
        problems.append("one head")
    if not torch.equal(w.V[0], torch.eye(w.d, dtype=w.V.dtype)):
        problems.append("V = I")
    if w.ff is not None:
        problems.append("no feed-forward")
    if model.mask != "full":
        problems.append("no mask (a causal mask makes equal tokens feel different forces)")
    if model.sink_bias:
        problems.append("no sink bias (it makes equal tokens feel different forces)")
    if model.normalization not in ("softmax", "unnormalized"):
        problems.append("softmax or unnormalized (USA) attention")
    if math.isinf(model.beta):
        problems.append("finite beta")
    if problems:
        raise ValueError(f"simulate_long supports the metastability model only; this model needs: {', '.join(problems)}.")
    return (w.Q[0].transpose(0, 1) @ w.K[0]).to(torch.float64)


def _field(y: np.ndarray, log_mass: np.ndarray, M: np.ndarray | None, beta: float, usa: tuple[float, int] | None = None) -> tuple[np.ndarray, float]:
    """Velocities of distinct unit points ``y`` (k, d) carrying ``exp(log_mass)`` tokens each, and the largest logit gap.

    ``usa = (m, n)``: USA in the rescaled time tau = e^{beta m} t, weights e^{beta (G - m)} / n (at most 1 / n)."""
    G = y @ y.T if M is None else (y @ M) @ y.T
    L = beta * G + log_mass[None, :]
    if usa is None:
        L -= L.max(1, keepdims=True)
        A = np.exp(L)
        A /= A.sum(1, keepdims=True)
    else:
        L -= beta * usa[0]
        A = np.exp(L) / usa[1]
        L = L - L.max(1, keepdims=True)  # the gap is read as for SA: between a row's largest and smallest logit
    # sum_j A_ij (x_j - x_i) from the differences: no cancellation of the own term
    w = np.einsum("ab,abd->ad", A, y[None, :, :] - y[:, None, :])
    return w - (w * y).sum(1, keepdims=True) * y, float(-L.min())


def simulate_long(
    model: Model,
    x0: np.ndarray | torch.Tensor,
    ts: np.ndarray | list[float],
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    merge_tol: float = 1e-9,
    clock_pair: tuple[int, int] | None = None,
    every_step: bool = False,
    max_steps: int = 200_000,
    rescaled_time: bool = False,
) -> LongTrajectory:
    """Integrate the sphere model from unit tokens ``x0`` (n, d) over exponentially long ``ts``.

    ``ts``: increasing save times from 0 (any magnitude below 1e300), in the model's time t, or for
    USA with ``rescaled_time=True`` in tau = e^{beta |Q^T K|} t (then the merge times, the clock and
    the steps' times are in tau too; the clock is int e^{-beta (|Q^T K| - <x_a, Q^T K x_b>)} dtau).
    See the module docstring for the method and its limits. Raises ``ValueError`` for other models
    or bad inputs and ``RuntimeError`` at ``max_steps``.
    """
    Mt = check_model(model)
    M = None if torch.equal(Mt, torch.eye(len(Mt), dtype=Mt.dtype)) else Mt.numpy()
    beta = float(model.beta)
    usa_model = model.normalization == "unnormalized"
    if rescaled_time and not usa_model:
        raise ValueError("rescaled_time=True is the USA time tau = e^{beta |Q^T K|} t; this model is SA, whose time needs no rescaling.")
    top = float(np.linalg.norm(Mt.numpy(), 2)) if usa_model else 0.0
    log_scale = beta * top  # ln(tau / t)
    if usa_model and not rescaled_time and log_scale > 709.0:
        raise ValueError(
            f"USA at beta |Q^T K| = {log_scale:.6g} runs in tau = e^{{{log_scale:.6g}}} t, beyond float64 from t; "
            "pass save times in tau with rescaled_time=True."
        )
    x = as_float_tensor(x0, "x0").to(torch.float64).numpy()
    if x.ndim != 2 or x.shape[1] != model.weights.d:
        raise ValueError(f"x0 must have shape (n, {model.weights.d}); got {tuple(x.shape)}.")
    norms = np.linalg.norm(x, axis=1)
    if np.abs(norms - 1).max() > 1e-8:
        raise ValueError(f"x0 must hold unit vectors (geometry='sphere'); its norms range over [{norms.min():.6g}, {norms.max():.6g}].")
    times = np.asarray(ts, dtype=np.float64)
    if times.ndim != 1 or len(times) < 2 or times[0] != 0 or np.any(np.diff(times) <= 0) or not np.all(np.isfinite(times)):
        raise ValueError("ts must be finite, strictly increasing save times starting at 0.")
    if not (0 < merge_tol < 1e-2):
        raise ValueError(f"merge_tol = {merge_tol} must be in (0, 1e-2).")
    n, d = x.shape
    usa = (top, n) if usa_model else None
    times = times * math.exp(log_scale) if usa_model and not rescaled_time else times  # integrate in tau
    if not np.all(np.isfinite(times)):
        raise ValueError("the save times overflow float64 once rescaled to tau = e^{beta |Q^T K|} t; pass tau with rescaled_time=True.")
    if clock_pair is not None:
        a, b = clock_pair
        if not (0 <= a < n and 0 <= b < n and a != b):
            raise ValueError(f"clock_pair = {clock_pair} must name two different tokens among {n}.")

    owner = np.arange(n)  # token -> point
    counts = np.ones(n)
    log_mass = np.zeros(n)
    stats = {"steps": 0, "rejected": 0, "nfev": 0, "max_step": 0.0, "logit_gap": 0.0}
    merges: list[tuple[float, int, int]] = []

    kernel = compiled.points_kernel(M, d, beta, usa)  # the field in C, else NumPy's _field

    def f(state: np.ndarray) -> np.ndarray:
        k = len(counts)
        pts = state[: k * d].reshape(k, d)
        v, gap = kernel(pts, log_mass) if kernel is not None else _field(pts, log_mass, M, beta, usa)
        stats["logit_gap"] = max(stats["logit_gap"], gap)
        out = np.empty_like(state)
        out[: k * d] = v.ravel()
        if clock_pair is None:
            out[-1] = 0.0
        else:
            a, b = pts[owner[clock_pair[0]]], pts[owner[clock_pair[1]]]
            inner = float(a @ M @ b) if usa_model and M is not None else float(a @ b)
            out[-1] = math.exp(-beta * ((top if usa_model else 1.0) - inner))
        return out

    def merge(t: float, y: np.ndarray) -> np.ndarray:
        nonlocal owner, counts, log_mass
        while len(counts) > 1:
            D = np.linalg.norm(y[:, None, :] - y[None, :, :], axis=-1)
            np.fill_diagonal(D, np.inf)
            i, j = divmod(int(np.argmin(D)), len(counts))
            if D[i, j] >= merge_tol:
                break
            i, j = min(i, j), max(i, j)
            merges.append((t, int(np.flatnonzero(owner == i)[0]), int(np.flatnonzero(owner == j)[0])))
            p = counts[i] * y[i] + counts[j] * y[j]
            counts[i] += counts[j]
            y[i] = p / np.linalg.norm(p)
            y = np.delete(y, j, axis=0)
            counts = np.delete(counts, j)
            owner = np.where(owner == j, i, owner)
            owner = np.where(owner > j, owner - 1, owner)
        log_mass = np.log(counts)
        return y

    tab = Dopri5()
    # the shared controller with this integrator's own settings, kept as they were: growth by at most
    # LONG_MAX_FACTOR (5x, not MAX_FACTOR's 10x), first step 1e-3 (no starting heuristic), I control
    control = StepController(tab.order, rtol, atol, dt0=1e-3, max_factor=LONG_MAX_FACTOR)
    a_rows = [np.array(r) for r in tab.a]
    b, b_err = np.array(tab.b), np.array(tab.b_err)
    y = merge(0.0, x / norms[:, None])
    saved_x, saved_s = [y[owner].copy()], [0.0]
    step_t, step_x, step_s = [0.0], [y[owner].copy()], [0.0]
    state = np.concatenate([y.ravel(), [0.0]])
    t = 0.0
    k1 = f(state)
    stats["nfev"] += 1
    h, _, memory = control.init(None, t, None, None, 0, math.inf)
    for target in times[1:]:
        while t < target:
            if stats["steps"] + stats["rejected"] >= max_steps:
                raise RuntimeError(f"max_steps={max_steps} reached at t={t:.6g} before the last save time {times[-1]:g}.")
            last = h >= target - t
            step = target - t if last else h
            ks = [k1]
            for row in a_rows[1:]:
                ks.append(f(state + step * (row @ np.array(ks))))
            stats["nfev"] += tab.stages - 1
            K = np.array(ks)
            new = state + step * (b @ K)
            err = step * (b_err @ K)
            scale = atol + rtol * np.maximum(np.abs(state), np.abs(new))
            e = float(np.sqrt(np.mean((err / scale) ** 2)))
            if not math.isfinite(e):
                raise FloatingPointError(f"the state became non-finite near t={t:.6g}.")
            accepted, h, memory = control.adapt(step, e, memory)
            if not accepted:
                stats["rejected"] += 1
                continue
            stats["steps"] += 1
            stats["max_step"] = max(stats["max_step"], step)
            k = len(counts)
            pts = new[: k * d].reshape(k, d)
            pts = pts / np.linalg.norm(pts, axis=1, keepdims=True)
            t = float(target) if last else t + step
            pts = merge(t, pts)
            state = np.concatenate([pts.ravel(), new[-1:]])
            k1 = f(state)  # not FSAL's last stage: the state was renormalised (and maybe merged)
            stats["nfev"] += 1
            if every_step:
                step_t.append(t)
                step_x.append(pts[owner].copy())
                step_s.append(float(state[-1]))
        k = len(counts)
        saved_x.append(state[: k * d].reshape(k, d)[owner].copy())
        saved_s.append(float(state[-1]))
    if usa_model and not rescaled_time:  # back to the model's time t
        back = math.exp(-log_scale)
        times = np.asarray(ts, dtype=np.float64)
        merges = [(t * back, i, j) for t, i, j in merges]
        saved_s = [v * back for v in saved_s]
        step_t, step_s = [v * back for v in step_t], [v * back for v in step_s]
    return LongTrajectory(
        ts=times,
        xs=np.stack(saved_x),
        merges=merges,
        clock=np.array(saved_s) if clock_pair is not None else None,
        stats=stats,
        steps={"t": np.array(step_t), "xs": np.stack(step_x), "clock": np.array(step_s)} if every_step else None,
    )
