"""scipy.integrate.solve_ivp as the independent oracle (DESIGN §5.2, §5.3)."""

import numpy as np
import pytest
import scipy.linalg as sla
from scipy.integrate import solve_ivp
from scipy.special import softmax

import attndyn as ad
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


def reference(W, x0, T, *, rescaled=False, beta=1.0):
    n, d = x0.shape
    f = numpy_field(W, beta=beta, rescaled=rescaled)
    sol = solve_ivp(f, (0, T), x0.ravel(), method="DOP853", args=(n, d), **SCIPY_REF)
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


def fitted_order(run, dts, ref):
    errs = [np.abs(run(dt) - ref).max() for dt in dts]
    return np.polyfit(np.log(dts), np.log(errs), 1)[0]


ORDER_PROBLEM_T = 1.0


def order_problem():
    rng = np.random.default_rng(7)
    W = random_weights(rng, 2, scale=0.8)
    x0 = rng.normal(size=(5, 2))
    return W, x0, reference(W, x0, ORDER_PROBLEM_T)


DTS = {"euler": [0.05, 0.025, 0.0125, 0.00625], "heun": [0.1, 0.05, 0.025, 0.0125], "rk4": [0.2, 0.1, 0.05, 0.025]}
ORDERS = {"euler": (ad.Euler, 1), "heun": (ad.Heun, 2), "rk4": (ad.RK4, 4)}


@pytest.mark.parametrize("name", ["euler", "heun", "rk4"])
def test_convergence_order(name):
    W, x0, ref = order_problem()
    solver, order = ORDERS[name]
    model = ad.Model(W)

    def run(dt):
        return ad.simulate(model, x0, [0, ORDER_PROBLEM_T], solver=solver(), step=ad.FixedStep(dt)).xs[-1].numpy()

    slope = fitted_order(run, DTS[name], ref)
    assert abs(slope - order) < ORDER_SLACK, f"{name}: fitted order {slope:.3f}, expected {order}"


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
    slope = fitted_order(lambda dt: frozen_attention_rk4(W, x0, ORDER_PROBLEM_T, dt), DTS["rk4"], ref)
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
