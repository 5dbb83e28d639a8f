"""Metastability tools against constructed cases and the reduced two-token ODE (SPEC §8.4)."""

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import attndyn as ad
from attndyn.analysis import metastability as meta
from attndyn.theory import closed_forms as theory


def test_energy_of_tight_clusters_is_the_staircase_level():
    rng = np.random.default_rng(0)
    centres = np.eye(3)  # three orthogonal cluster centres: e^{-beta} between clusters
    sizes = [3, 1, 1]
    x = np.concatenate([np.tile(c, (k, 1)) for c, k in zip(centres, sizes, strict=True)])
    x += 1e-9 * rng.standard_normal(x.shape)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    m = meta.cluster_masses(x, tol=1e-6)
    np.testing.assert_allclose(m, [0.6, 0.2, 0.2])
    assert meta.normalized_energy(x, 60.0) == pytest.approx((m**2).sum(), abs=1e-12)
    assert (m**2).sum() in [pytest.approx(v) for v in theory.staircase_levels(5)]


def test_plateaus_find_the_flat_runs_of_a_staircase_on_log_time():
    ts = np.geomspace(1e-2, 1e6, 801)
    levels = np.where(ts < 1, 0.2, np.where(ts < 1e3, 0.28, 0.52))
    found = meta.plateaus(ts, levels, tol=1e-3, min_decades=1.0)
    assert [round(p.level, 6) for p in found] == [0.2, 0.28, 0.52]
    assert found[1].start == pytest.approx(1.0, rel=0.03)
    assert found[1].decades == pytest.approx(3.0, abs=0.05)
    assert meta.plateaus(ts, np.log(ts), tol=1e-3, min_decades=1.0) == []  # no flat run


def two_token_rate(c, beta):
    """c' for two tokens (SA, Q = K = V = I): each puts weight e^{beta c} / (e^beta + e^{beta c}) on the other."""
    q = np.exp(-beta * (1 - c))
    return 2 * (1 - c**2) * q / (1 + q)


def test_the_engine_follows_the_two_token_ode():
    beta, c0 = 4.0, 0.2
    th = math.acos(c0)
    x0 = np.array([[1.0, 0.0], [math.cos(th), math.sin(th)]])
    ts = np.linspace(0, 20, 41)
    model = ad.Model(ad.Weights.identity(2), beta=beta, geometry="sphere")
    x = ad.simulate(model, x0, ts, solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-11, atol=1e-13)).numpy()[1]
    ref = solve_ivp(lambda t, c: two_token_rate(c, beta), (0, 20), [c0], t_eval=ts, method="DOP853", rtol=1e-12, atol=1e-14).y[0]
    np.testing.assert_allclose((x[:, 0] * x[:, 1]).sum(-1), ref, atol=1e-8)


def test_pairing_clock_makes_the_pair_cosine_a_tanh_at_large_beta():
    """In the clock s = int e^{-beta(1-c)} dt the two-token cosine obeys dc/ds = 2 (1 - c^2) / (1 + e^{-beta(1-c)}):
    tanh(2 s + artanh c0) wherever e^{-beta(1-c)} is negligible."""
    beta, c0 = 200.0, 0.8
    T = math.exp(beta * (1 - c0))  # the pair needs about 0.2 e^{beta (1 - c0)} to pass 0.9
    sol = solve_ivp(lambda t, c: two_token_rate(c, beta), (0, T), [c0], method="LSODA", rtol=1e-11, atol=1e-14, dense_output=True)
    # 50 points inside every solver step: the clock speeds up e-fold for every 1 / beta of c
    ts = np.unique(np.concatenate([np.linspace(a, b, 50) for a, b in zip(sol.t[:-1], sol.t[1:], strict=True)]))
    c = sol.sol(ts)[0]
    s = meta.pairing_clock(ts, c, beta)
    far = beta * (1 - c) > 20
    assert c[far].max() > 0.85
    np.testing.assert_allclose(c[far], theory.pairing_cosine(s[far], c0), atol=1e-4)


def test_bad_inputs():
    with pytest.raises(ValueError, match="same length"):
        meta.plateaus(np.arange(3.0), np.arange(4.0), tol=0.1, min_decades=1)
    with pytest.raises(ValueError, match="must be > 0"):
        meta.plateaus(np.arange(3.0), np.arange(3.0), tol=0.0, min_decades=1)
    with pytest.raises(ValueError, match=r"\(\.\.\., n, d\)"):
        meta.normalized_energy(np.ones(3), 1.0)
