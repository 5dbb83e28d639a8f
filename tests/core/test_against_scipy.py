"""scipy.integrate.solve_ivp as the independent oracle (DESIGN §5.2, §5.3)."""

import numpy as np
import pytest
import scipy.linalg as sla
from scipy.integrate import solve_ivp
from scipy.special import softmax

import attndyn as ad
from attndyn.core.solvers import SOLVERS
from tests.helpers import random_weights
from tests.tolerances import AGAINST_SCIPY, NFEV_RATIO, ORDER_SLACK, SCIPY_REF


def numpy_field(W, *, beta=1.0, rescaled=False):
    """An independent NumPy vector field of eq:trans_dyn / e:Rres (one head)."""
    Q, K, V = (W.Q[0].numpy(), W.K[0].numpy(), W.V[0].numpy())

    def f(t, y, n, d):
        X = y.reshape(n, d)
        Xs = X @ sla.expm(t * V).T if rescaled else X
        L = beta * (Xs @ Q.T) @ (Xs @ K.T).T
        P = softmax(L, axis=1)
        out = (P @ X - X) @ V.T if rescaled else P @ X @ V.T
        return out.ravel()

    return f


def reference(W, x0, T, *, rescaled=False, beta=1.0, tol=None):
    n, d = x0.shape
    f = numpy_field(W, beta=beta, rescaled=rescaled)
    sol = solve_ivp(f, (0, T), x0.ravel(), method="DOP853", args=(n, d), **(tol or SCIPY_REF))
    assert sol.success
    return sol.y[:, -1].reshape(n, d)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rescaled", [False, True])
def test_dopri5_matches_scipy_dop853(seed, rescaled):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(2, 9)), int(rng.integers(1, 4))
    W = random_weights(rng, d, m=int(rng.integers(1, 4)))
    x0 = rng.normal(size=(n, d))
    ref = reference(W, x0, 1.5, rescaled=rescaled, beta=0.8)
    traj = ad.simulate(ad.Model(W, beta=0.8, rescaled=rescaled), x0, [0, 1.5], solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-10, atol=1e-12))
    scale = max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(traj.xs[-1].numpy(), ref, atol=AGAINST_SCIPY * scale, rtol=0)


def fitted_order(run, ref):
    """The slope of log error against log dt over the steps dt = ORDER_DT0 / 2^k whose error lies in
    ORDER_ERROR_BAND (the same rule for every scheme; at least three such steps)."""
    dts = [ORDER_DT0 / 2**k for k in range(ORDER_HALVINGS)]
    errs = [float(np.abs(run(dt) - ref).max()) for dt in dts]
    kept = [(dt, e) for dt, e in zip(dts, errs, strict=True) if ORDER_ERROR_BAND[0] < e < ORDER_ERROR_BAND[1]]
    assert len(kept) >= 3, f"too few steps in the error band: {dict(zip(dts, errs, strict=True))}"
    return np.polyfit(np.log([dt for dt, _ in kept]), np.log([e for _, e in kept]), 1)[0]


ORDER_PROBLEM_T = 1.0


def order_problem():
    rng = np.random.default_rng(7)
    W = random_weights(rng, 2, scale=0.8)
    x0 = rng.normal(size=(5, 2))
    return W, x0, reference(W, x0, ORDER_PROBLEM_T, tol=ORDER_REF)


# the order problem's reference: DOP853 near its tightest tolerance (errors about 5e-15 here)
ORDER_REF = {"rtol": 3e-14, "atol": 1e-15}
# the fit uses the steps dt = ORDER_DT0 / 2^k whose error lies in this band: above the reference's
# accuracy (below the floor its error and rounding pollute the difference) and in the asymptotic range
# (error well below the solution's scale of 1); every solver gets at least three such steps
ORDER_ERROR_BAND = (1e-12, 1e-2)
ORDER_DT0, ORDER_HALVINGS = 0.5, 9


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_convergence_order(name):
    """Every tableau in SOLVERS converges at the order it states (the order is the tableau's, not a
    list here; the steps are chosen by the error band, the same rule for every solver)."""
    W, x0, ref = order_problem()
    solver = SOLVERS[name]()
    model = ad.Model(W)

    def run(dt):
        return ad.simulate(model, x0, [0, ORDER_PROBLEM_T], solver=solver, step=ad.FixedStep(dt)).xs[-1].numpy()

    slope = fitted_order(run, ref)
    # at least the stated order; up to one more, since a tableau may make its principal error
    # coefficients small (Dormand and Prince minimised Dopri5's: its fit here is 5.5-5.8)
    assert solver.order - ORDER_SLACK < slope < solver.order + 1 + ORDER_SLACK, f"{name}: fitted order {slope:.3f}, expected {solver.order}"


def test_the_order_fit_tells_orders_apart():
    """The fit would catch a tableau one order below what it claims: Heun's steps fit 2, not 3, and
    Euler's 1, not 2 (the same rule as above: a slope below the claimed order minus the slack)."""
    W, x0, ref = order_problem()
    model = ad.Model(W)
    for solver, wrong in ((ad.Heun(), 3), (ad.Euler(), 2)):
        slope = fitted_order(lambda dt, s=solver: ad.simulate(model, x0, [0, ORDER_PROBLEM_T], solver=s, step=ad.FixedStep(dt)).xs[-1].numpy(), ref)
        assert slope <= wrong - ORDER_SLACK


def frozen_attention_rk4(W, x0, T, dt):
    """The authors' scheme (SPEC §6.1): RK4 stages with P frozen at the start of the step."""
    model = ad.Model(W)
    V = W.V[0].numpy()
    x = x0.copy()
    for _ in range(round(T / dt)):
        P = ad.attention_matrix(model, x)[0].numpy()

        def g(y, P=P):
            return P @ y @ V.T

        k1 = g(x)
        k2 = g(x + dt / 2 * k1)
        k3 = g(x + dt / 2 * k2)
        k4 = g(x + dt * k3)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


def test_order_oracle_rejects_frozen_attention():
    """The order test is seen to fail on the authors' bug: frozen attention makes RK4 first order."""
    W, x0, ref = order_problem()
    slope = fitted_order(lambda dt: frozen_attention_rk4(W, x0, ORDER_PROBLEM_T, dt), ref)
    assert abs(slope - 4) >= ORDER_SLACK
    assert abs(slope - 1) < ORDER_SLACK


@pytest.mark.parametrize(("rtol", "atol"), [(1e-4, 1e-7), (1e-6, 1e-9), (1e-8, 1e-10)])
@pytest.mark.parametrize("pi_beta", [0.0, 0.04], ids=["I-controller", "PI-controller"])
def test_dopri5_error_within_tolerance_and_nfev_close_to_scipy_rk45(rtol, atol, pi_beta):
    """Both step controllers (I, and Hairer's PI with beta = 0.04) against scipy's RK45: a step-count regression."""
    rng = np.random.default_rng(3)
    W = random_weights(rng, 2, scale=0.8)
    x0 = rng.normal(size=(6, 2))
    T = 3.0
    ref = reference(W, x0, T)
    traj = ad.simulate(ad.Model(W), x0, [0, T], solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=rtol, atol=atol, pi_beta=pi_beta))
    err = np.abs(traj.xs[-1].numpy() - ref).max()
    # global error of a local-error controller: within a small multiple of the tolerance
    assert err <= 10 * (atol + rtol * np.abs(ref).max())
    sol = solve_ivp(numpy_field(W), (0, T), x0.ravel(), method="RK45", rtol=rtol, atol=atol, args=x0.shape)
    ratio = traj.stats["nfev"] / sol.nfev
    assert abs(ratio - 1) <= NFEV_RATIO, f"nfev {traj.stats['nfev']} vs scipy {sol.nfev}"
