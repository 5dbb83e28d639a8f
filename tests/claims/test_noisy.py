"""noisy (issue 33, finding 9): judged above and below the threshold against the n-particle Gibbs law.

Oracles independent of the claim's prediction: a Metropolis sampler of the Gibbs measure exp(kappa n R^2 / 2) on the
torus (it never uses the saddle point), and the two limits the prediction must reach (R(kappa) above the threshold as
n grows, with an O(1/n) gap; the Rayleigh floor below it).
"""

import math

import numpy as np
import pytest

from attndyn.claims import noisy


def metropolis_order(kappa: float, n: int, chains: int, sweeps: int, seed: int) -> tuple[float, float]:
    """E R under exp(kappa n R^2 / 2) on the torus by single-angle Metropolis, and its standard error over chains."""
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0, 2 * math.pi, (chains, n))
    s = np.exp(1j * theta).sum(1)
    kept = []
    for sweep in range(sweeps):
        for i in range(n):
            new = theta[:, i] + rng.normal(0.0, 1.0, chains)
            s_new = s - np.exp(1j * theta[:, i]) + np.exp(1j * new)
            accept = np.log(rng.uniform(size=chains)) < kappa / (2 * n) * (np.abs(s_new) ** 2 - np.abs(s) ** 2)
            theta[accept, i] = new[accept]
            s = np.where(accept, s_new, s)
        if sweep >= sweeps // 5:
            kept.append(np.abs(s) / n)
    per_chain = np.array(kept).mean(0)
    return float(per_chain.mean()), float(per_chain.std(ddof=1) / math.sqrt(chains))


@pytest.mark.parametrize(("kappa", "n"), [(4.0, 16), (1.5, 16), (6.0, 8)])
def test_the_gibbs_prediction_matches_a_metropolis_sampler_of_the_gibbs_law(kappa, n):
    # 5 standard errors of the sampler (the saddle point's O(1/n^2) error is below 2e-3 at these n; measured
    # 4e-5 at kappa = 4, 1.5e-3 at kappa = 1.5, 1.5e-4 at kappa = 6 with 400 chains)
    mc, se = metropolis_order(kappa, n, chains=200, sweeps=600, seed=1)
    assert abs(noisy.gibbs_order(kappa, n) - mc) <= 5 * se + 2e-3, (noisy.gibbs_order(kappa, n), mc, se)


def test_the_gibbs_prediction_reaches_both_limits():
    # above: R(kappa) + c / n with c bounded (the O(1/n) term: n (E_n R - R) settles as n doubles)
    for kappa in (3.0, 4.0, 6.0):
        c = [n * (noisy.gibbs_order(kappa, n) - noisy.stationary_order(kappa)) for n in (2048, 4096, 8192)]
        assert abs(c[2] - c[1]) < 0.6 * abs(c[1] - c[0]) + 1e-3, c
    # below: the Rayleigh floor once kappa n r^2 is small against n r^2 (the nonlinearity saturates it by O(1/sqrt n))
    for kappa in (0.5, 1.0, 1.5):
        ratio = noisy.gibbs_order(kappa, 200_000, 200_001) / noisy.floor(kappa, 200_000)
        assert abs(ratio - 1) < 3e-3, (kappa, ratio)


def test_noisy_is_judged_above_and_below_the_threshold():
    from tests.tiny_claims import tiny_result

    assert noisy.CLAIM.kind == "pass/fail"
    result = tiny_result("noisy")
    judged = {name: c for name, c in result.checks.items() if c.passed is not None}
    assert any(name.startswith("above the threshold") for name in judged), list(result.checks)
    assert any(name.startswith("below the threshold") for name in judged), list(result.checks)
    assert result.verdict == "pass"
    # the budget has its three parts, each measured in the run
    for key in ("step_error", "step_error_se", "sampling_se"):
        assert len(result.info[key]) == len(result.params["kappas"]), key


def test_a_kappa_of_2_is_refused_naming_it():
    with pytest.raises(ValueError, match="kappa = 2"):
        noisy.Config(seed=0, kappas=[1.0, 2.0])
