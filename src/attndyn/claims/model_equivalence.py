"""Model-level checks M1-M7: x <-> z, discrete rescaling, invariants, Euler order, mean field, W2 stability, and the
order of every fixed-step tableau on the time-dependent rescaled field."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from pydantic import Field
from scipy.integrate import solve_ivp
from scipy.optimize import linear_sum_assignment

import attndyn as ad
from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, at_most, every_within, report
from attndyn.core.solvers import SOLVERS
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="model-equivalence",
    paper_ref="arXiv:2305.05465v6 §1 (the rescaled variables and the discrete rescaling), §6 (the vector-field lemma and the W2 stability estimate)",
    title="The model: rescaling, discrete time, invariants, mean field and stability",
    statement=(
        r"The rescaled tokens \(z = e^{-tV} x\) solve \(\dot z_i = \sum_j P_{ij} V (z_j - z_i)\) with the same attention; the residual "
        "Transformer is forward Euler and its exact rescaling uses R = I + dt V; P is row-stochastic; the empirical measure "
        "solves the continuity equation with the mean-field vector field, which obeys the bounds of the vector-field lemma (§6); "
        "solutions depend continuously on the data in W_2, with W_2(t) <= e^{L t} max_i |x_i(0) - y_i(0)| for the explicit "
        "L = |V| (1 + 4 |Q^T K| R^2) that the paper's bound on |X| and its Lipschitz bound and the weights' Lipschitz constant give. The exact "
        "identities of the variants are judged here: the feed-forward map with W = I, sigma = id is the rescaled attention equation, and one head of "
        "the multi-head layer is the discrete-time layer equation. Every fixed-step tableau the claims use converges at its "
        "stated order on the rescaled field, which depends on t through e^{tV}."
    ),
    hypotheses="Any Q, K, V (random non-symmetric here).",
    kind="pass/fail",
)


class Config(ExperimentConfig):
    n: int = 6
    d: int = 3
    weight_std: float = 0.3
    T: float = 2.0
    # the perturbation the sensitivity tests make: every engine call runs with V v_factor, while the judge and
    # the NumPy references use V
    v_factor: float = Field(1.0, gt=0)
    # and the feed-forward identity's W = ff_scale I
    ff_scale: float = 1.0


QUICK: dict = {}


DETECTS_V_OFF = "the engine's V off by 1e-9 (the judge and the NumPy references use V)"
DETECTS_V_OFF_1E6 = "the engine's V off by 1e-6 (the judge and the NumPy references use V)"


def field_mean(Q: np.ndarray, K: np.ndarray, V: np.ndarray, support: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The mean-field vector field X[mu](x) of e:vectorfield for the empirical measure on ``support``, at points x."""
    logits = (x @ Q.T) @ (support @ K.T).T
    w = np.exp(logits - logits.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    return w @ support @ V.T


def run(config: Config) -> Result:
    """Every computation of M1-M7 and the identities; the checks are :func:`judge` of the saved arrays."""
    rng = np.random.default_rng(config.seed)
    n, d = config.n, config.d
    Q, K, V = (rng.normal(0, config.weight_std, (d, d)) for _ in range(3))
    W = ad.Weights(Q, K, config.v_factor * V)
    x0 = rng.normal(size=(n, d))
    a = {"Q": Q, "K": K, "V": V, "x0": x0}
    # M1: x and z integrated independently
    ts = np.linspace(0, config.T, 21)
    step = ad.AdaptiveStep(rtol=1e-11, atol=1e-12)
    a["ts"] = ts
    a["tx"] = ad.simulate(ad.Model(W), x0, ts, solver=ad.Dopri5(), step=step).xs.numpy()
    a["tz"] = ad.simulate(ad.Model(W, rescaled=True), x0, ts, solver=ad.Dopri5(), step=step).xs.numpy()
    # M2: residual layers in x and in the exact discrete rescaling
    for dt in M2_STEPS:
        a[f"m2_x_{dt}"] = ad.residual_layers(ad.Model(W), x0, 50, step_size=dt).xs.numpy()
        a[f"m2_z_{dt}"] = ad.residual_layers(ad.Model(W, rescaled=True), x0, 50, step_size=dt).xs.numpy()
    # M3: the engine's velocities along the x trajectory
    a["m3_vel"] = np.stack([ad.velocity(0.0, x, ad.Model(W)) for x in a["tx"]])
    # M4: Euler (residual layers) at T = 1 against a tight reference
    # (the reference is SciPy's DOP853 on the NumPy field, independent of the engine)
    ref = solve_ivp(
        lambda t, y: field_mean(Q, K, V, y.reshape(n, d), y.reshape(n, d)).ravel(), (0.0, 1.0), x0.ravel(), method="DOP853", rtol=1e-12, atol=1e-13
    )
    a["m4_ref"] = ref.y[:, -1].reshape(n, d)
    a["m4_dt"] = np.array(M4_STEPS)
    a["m4_euler"] = np.stack([ad.residual_layers(ad.Model(W), x0, round(1 / dt), step_size=dt).xs[-1].numpy() for dt in M4_STEPS])
    # M5: the engine's field at the initial tokens; random supports and points in the ball of radius R
    a["m5_engine"] = ad.velocity(0.0, x0, ad.Model(W))
    support = rng.normal(size=(50, 8, d))
    support *= M5_R * rng.uniform(0, 1, (50, 8, 1)) / np.linalg.norm(support, axis=-1, keepdims=True)
    points = rng.normal(size=(50, d))
    points *= M5_R * rng.uniform(0, 1, (50, 1)) / np.linalg.norm(points, axis=-1, keepdims=True)
    a["m5_support"], a["m5_points"] = support, points
    # M6: a nearby solution
    a["m6_y0"] = x0 + 1e-3 * rng.normal(size=x0.shape)
    a["ty"] = ad.simulate(ad.Model(W), a["m6_y0"], ts, solver=ad.Dopri5(), step=step).xs.numpy()
    # identities of the variants: feed-forward W = I, sigma = id vs the rescaled equation; one head vs an independent NumPy loop
    z = rng.normal(size=(7, d))
    a["ff_z"] = z
    a["ff_base"] = ad.velocity(0.7, z, ad.Model(W, rescaled=True))
    ff = ad.Weights(Q, K, config.v_factor * V, ad.FeedForward(config.ff_scale * np.eye(d), "identity"))
    a["ff_identity"] = ad.velocity(0.7, z, ad.Model(ff, rescaled=True))
    a["mh_ours"] = ad.residual_layers(ad.Model(ad.Weights(Q[None], K[None], config.v_factor * V[None])), x0, 20, step_size=0.1).xs.numpy()
    # M7: every fixed-step tableau on the rescaled field at two steps, against SciPy's DOP853 on the NumPy field in x
    for case, Vc, T in order_cases(V, config):
        ref = solve_ivp(
            lambda t, y, Vc=Vc: field_mean(Q, K, Vc, y.reshape(n, d), y.reshape(n, d)).ravel(),
            (0.0, T),
            x0.ravel(),
            method="DOP853",
            rtol=M7_REF_RTOL,
            atol=M7_REF_RTOL * 1e-1,
        )
        a[f"m7_ref_{case}"] = ref.y[:, -1].reshape(n, d) @ sla.expm(-T * Vc).T
        model = ad.Model(ad.Weights(Q, K, config.v_factor * Vc), rescaled=True)
        for name, steps in M7_TABLEAUX[case]:
            for N in steps:
                traj = ad.simulate(model, x0, np.array([0.0, T]), solver=SOLVERS[name](), step=ad.FixedStep(T / N))
                a[f"m7_{case}_{name}_{N}"] = traj.xs[-1].numpy()
    checks, info = judge(a, config)
    return Result(CLAIM, checks, config.model_dump(), a, info)


M2_STEPS = (0.1, 0.5)
M4_STEPS = (0.1, 0.05, 0.025)
M5_R = 2.0
M1_TOL = 3e-11  # 3x the relative tolerance (1e-11) of the two independent runs

# M7: the fixed-step tableaux (every one the engine offers: the claims use Euler and RK4) on the rescaled field
# z' = sum_j P_ij(e^{tV} z) V (z_j - z_i), at N and 2N steps, against a converged reference. "any V" is the claim's
# non-symmetric V over [0, T] (the eager loop: the classical RK4 step and the generic tableau step); "V = I" over
# [0, 2T] at 100 and 200 steps is the path of the claims with V = lambda I (boolean-1d, polytope): the compiled RK4
# loop where a C compiler is present. See :func:`observed_orders` for the band.
M7_TABLEAUX = {
    # first order at twice the steps: its O(h) term is the largest (0.13 of an order at 20 and 40 steps, seed 112)
    "any V": [(name, (40, 80) if SOLVERS[name]().order == 1 else (20, 40)) for name in SOLVERS if not SOLVERS[name]().adaptive],
    "V = I": [("rk4", (100, 200))],
}
M7_REF_RTOL = 1e-13  # the reference's relative tolerance (DOP853, atol a tenth of it)
M7_FLOOR = 100 * M7_REF_RTOL  # the finer run's error must be at least this, relative to max |z(T)|
M7_BAND = 0.5  # half an order: the midpoint between the stated order and the nearest defective one
DETECTS_STAGE_TIME = "RK4's middle stages evaluated at t instead of t + dt/2 (in the eager classical RK4 step or the compiled RK4 loop)"


def order_cases(V: np.ndarray, config: Config) -> list[tuple[str, np.ndarray, float]]:
    """M7's fields: (case, V, T); the judge reads the same list."""
    return [("any V", V, config.T), ("V = I", np.eye(len(V)), 2 * config.T)]


def observed_orders(a: dict, config: Config) -> tuple[list[float], list[str], dict]:
    """M7: each fixed-step tableau's observed order log2(e(h) / e(h/2)) minus its stated order p.

    e(h) is the largest error of z(T) at step h against SciPy's DOP853 at rtol 1e-13 on the NumPy field,
    integrated in x and mapped by e^{-TV} (independent of the engine). The band: for a method of order p
    the global error at fixed T is e(h) = C h^p + O(h^{p+1}) (the asymptotic expansion of the global error,
    Hairer, Norsett and Wanner I, II.8), so the observed order is p + O(h). A scheme that misses one order
    condition converges at order p - 1 or lower (a stage evaluated at t instead of t + c_s h misses
    sum_s b_s c_s = 1/2 and converges at order 1 on a field that depends on t), so the band is half an
    order, the midpoint between the stated order and the nearest defective one. The steps (N = 20, 40 over
    [0, T] with the claim's V, 40, 80 for a first-order tableau; 100, 200 over [0, 2T] with V = I) put the
    O(h) term at a few hundredths of an order (measured: at most 0.08 over the seeds 0-29 and 100-129,
    against 3 for RK4 with a stage time off), and the finer run's error at least 100 times the reference's
    rtol of max |z(T)| (a case below that fails: its order cannot be read), so the reference moves the
    observed order by at most 2 (1/100) / ln 2 = 0.03.

    Returns the deviations |observed - p| (inf where the floor is not met), their case names, and the errors.
    """
    devs, names, errors = [], [], {}
    for case, _, _ in order_cases(a["V"], config):
        ref = a[f"m7_ref_{case}"]
        floor = M7_FLOOR * np.abs(ref).max()
        for name, (coarse, fine) in M7_TABLEAUX[case]:
            e = [float(np.abs(a[f"m7_{case}_{name}_{N}"] - ref).max()) for N in (coarse, fine)]
            order = SOLVERS[name]().order
            label = f"{name} (order {order}), {case}, {coarse} and {fine} steps"
            if e[1] >= floor:
                devs.append(abs(np.log2(e[0] / e[1]) - order))
                names.append(f"{label}: observed {np.log2(e[0] / e[1]):.3f}")
            else:
                devs.append(np.inf)
                names.append(f"{label}: the finer error {e[1]:.2g} is below the reference's floor {floor:.2g}")
            errors[f"{name}, {case}"] = e
    return devs, names, errors


def residual_numpy(Q: np.ndarray, K: np.ndarray, V: np.ndarray, x: np.ndarray, layers: int, dt: float) -> np.ndarray:
    """The discrete-time layer equation written out in NumPy (the independent reference for one head)."""
    y = x.copy()
    for _ in range(layers):
        L = (y @ Q.T) @ (y @ K.T).T
        P = np.exp(L - L.max(1, keepdims=True))
        P /= P.sum(1, keepdims=True)
        y = y + dt * P @ y @ V.T
    return y


def w2(a: np.ndarray, b: np.ndarray) -> float:
    cost = ((a[:, None] - b[None]) ** 2).sum(-1)
    r, c = linear_sum_assignment(cost)
    return float(np.sqrt(cost[r, c].mean()))


def judge(a: dict, config: Config) -> tuple[dict, dict]:
    Q, K, V, x0, ts, tx, tz = a["Q"], a["K"], a["V"], a["x0"], a["ts"], a["tx"], a["tz"]
    W = ad.Weights(Q, K, V)
    d = len(V)
    checks = {}
    # M1
    rel = [np.abs(tz[k] @ sla.expm(t * V).T - tx[k]).max() / np.abs(tx[k]).max() for k, t in enumerate(ts)]
    pdiff = [
        np.abs(ad.attention_matrix(ad.Model(W), tx[k])[0].numpy() - ad.attention_matrix(ad.Model(W, rescaled=True), tz[k], t=t)[0].numpy()).max()
        for k, t in enumerate(ts)
    ]
    # M1's band: 3x the two runs' relative tolerance (measured: 8.7e-13 and 8.5e-14)
    checks["M1 |x(t) - e^{tV} z(t)| / |x(t)| at every save (3x the solvers' rtol)"] = every_within(rel, 0.0, M1_TOL, detects=DETECTS_V_OFF)
    checks["M1 |P_x(t) - P_z(t)| at every save (3x the solvers' rtol)"] = every_within(pdiff, 0.0, M1_TOL, detects=DETECTS_V_OFF)
    # M2
    for dt in M2_STEPS:
        xs, zs = a[f"m2_x_{dt}"], a[f"m2_z_{dt}"]
        R = np.eye(d) + dt * V
        err = [np.abs(zs[k] @ np.linalg.matrix_power(R, k).T - xs[k]).max() / np.abs(xs[k]).max() for k in range(len(xs))]
        # The z-recursion evaluates attention at R^k z^k; when R expands some directions and contracts others, that
        # product cancels and float64 can only deliver ~eps * cond(R^k). The identity is checked to 1e-10 or to that floor.
        cond = max(np.linalg.cond(np.linalg.matrix_power(R, k)) for k in range(len(xs)))
        floor = max(64 * np.finfo(float).eps, 10 * np.finfo(float).eps * cond)
        power = DETECTS_V_OFF if floor < 1e-9 else DETECTS_V_OFF_1E6
        checks[f"M2 R^k z^k = x^k, dt = {dt} (relative to |x^k|), every layer"] = every_within(err, 0.0, floor, detects=power)
    # M3 (the growth bound excludes t = 0, where it is an identity)
    Ps = np.stack([ad.attention_matrix(ad.Model(W), x)[0].numpy() for x in tx])
    # reported: an identity of the softmax that no perturbation of the model changes
    checks["M3 rows of P sum to 1 (max deviation), every row and save"] = report(
        np.abs(Ps.sum(-1) - 1).max(), "an identity of the normalisation: no perturbation of Q, K, V or beta moves it"
    )
    vnorm = np.linalg.norm(V, 2)
    speed = np.linalg.norm(a["m3_vel"], axis=-1).max(-1) / (vnorm * np.linalg.norm(tx, axis=-1).max(-1))
    checks["M3 |x_i'| / (|V| max_j |x_j|), every save"] = every_within(
        speed, 0.0, 1.0 + 1e-12, detects="the engine's V scaled by 6 (the bound is not tight: 0.17 of it measured)"
    )
    growth = np.linalg.norm(tx, axis=-1).max(-1)[1:] / (np.exp(vnorm * ts[1:]) * np.linalg.norm(x0, axis=-1).max())
    checks["M3 max|x(t)| / (e^{|V| t} max|x(0)|), every save t > 0"] = report(
        float(growth.max()), "a loose bound: the engine's V scaled by 6 still meets it"
    )
    # M4
    errs = np.abs(a["m4_euler"] - a["m4_ref"]).max((-1, -2))
    checks["M4 Euler error ratios e(dt)/e(dt/2) (first order: 2)"] = every_within(
        errs[:-1] / errs[1:], 1.7, 2.3, detects="the engine's V off by 3e-3 against SciPy's reference on the NumPy field"
    )
    # M5
    checks["M5 X[mu_n](x_i) = sum_j P_ij V x_j (max difference)"] = at_most(
        np.abs(field_mean(Q, K, V, x0, x0) - a["m5_engine"]).max(), 1e-13, n=x0.shape[0], detects=DETECTS_V_OFF
    )
    qk = np.linalg.norm(Q.T @ K, 2)
    bound, lip = [], []
    h = 1e-6
    for support, x in zip(a["m5_support"], a["m5_points"], strict=True):
        bound.append(np.linalg.norm(field_mean(Q, K, V, support, x[None])[0]) / (vnorm * M5_R))
        J = np.stack(
            [(field_mean(Q, K, V, support, (x + h * e)[None])[0] - field_mean(Q, K, V, support, (x - h * e)[None])[0]) / (2 * h) for e in np.eye(d)],
            1,
        )
        lip.append(np.linalg.norm(J, 2) / (2 * qk * vnorm * M5_R**2))
    # the lemma's bounds, evaluated with the NumPy field: loose inequalities, reported with their room
    checks["M5 bound |X[mu](x)| / (|V| R), largest over the draws"] = report(max(bound), "the lemma's bound (1 at most)")
    checks["M5 Lipschitz bound |grad X[mu](x)| / (2 |Q^T K| |V| R^2), largest over the draws (finite differences)"] = report(
        max(lip), "the lemma's bound (1 at most)"
    )
    # M6: W2(t) <= e^{L t} max_i |x_i(0) - y_i(0)| with L = |V| (1 + 4 |Q^T K| R^2), R the largest radius reached
    ty = a["ty"]
    dist = np.array([w2(p, q) for p, q in zip(tx, ty, strict=True)])
    R = max(np.linalg.norm(tx, axis=-1).max(), np.linalg.norm(ty, axis=-1).max())
    L = vnorm * (1 + 4 * qk * R**2)
    start = np.linalg.norm(x0 - a["m6_y0"], axis=-1).max()
    checks["M6 W2(t) / (e^{L t} max_i |x_i(0) - y_i(0)|), explicit L, largest over the saves"] = report(
        float(np.exp(np.minimum(np.log(dist / start) - L * ts, 700.0)).max()), "the stability bound (1 at most): loose, largest at t = 0"
    )
    C = float(np.max(np.log(dist[1:] / dist[0]) / ts[1:]))
    checks["M6 fitted C in log(W2(t)/W2(0)) <= C t, against the explicit L"] = report(C, f"L = {L:.3g}")
    # identities of the variants
    checks["feed-forward W = I, sigma = id reproduces the rescaled attention equation (max difference)"] = at_most(
        np.abs(a["ff_base"] - a["ff_identity"]).max(), 1e-12, detects="W = (1 + 1e-9) I in the feed-forward map"
    )
    ref = residual_numpy(Q, K, V, x0, 20, 0.1)
    checks["multi-head with H = 1 equals e:discreteequation (max relative difference after 20 layers)"] = at_most(
        np.abs(a["mh_ours"][-1] - ref).max() / np.abs(ref).max(), 1e-12, detects=DETECTS_V_OFF
    )
    devs, names, m7_errors = observed_orders(a, config)
    checks["M7 every fixed-step tableau's observed order on the rescaled field, |log2(e(h)/e(h/2)) - p|"] = every_within(
        devs, 0.0, M7_BAND, "against SciPy's DOP853 at rtol 1e-13; the band is half an order", cases=names, detects=DETECTS_STAGE_TIME
    )
    return checks, {"Euler errors": errs.tolist(), "L": float(L), "W2": dist.tolist(), "M7 errors": m7_errors}


def figures(result: Result) -> dict:
    a = result.arrays
    errs = np.abs(a["m4_euler"] - a["m4_ref"]).max((-1, -2))
    dist = np.array(result.info["W2"])
    figs = {
        "euler_order": plots.loglog(
            a["m4_dt"],
            {"Euler error at T = 1": errs},
            ylabel="max error",
            title="M4: Euler converges at first order",
            slopes={"slope 1": (a["m4_dt"], errs[0] * a["m4_dt"] / a["m4_dt"][0])},
        ),
        "w2": plots.distance_log(a["ts"], dist, ylabel=r"$W_2(\mu(t), \nu(t))$", title="M6: W_2 distance of two nearby solutions"),
    }
    figs["euler_order"].axes[0].set_xlabel("dt")
    return figs
