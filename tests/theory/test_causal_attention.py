"""Causal attention at beta = 0 (SPEC §9.2) against SPEC's reference values and the matrix power."""

import numpy as np
import pytest

from attndyn.theory import causal_attention as causal


def test_rollout_weights_and_the_primacy_tail_match_the_reference_values():
    """SPEC §9.2's scratch values at n = 2000, H = 6, a = 1/2 (4 significant digits)."""
    j = np.array([1, 2, 10, 100, 1000, 1999])
    exact = causal.rollout_weights(2000, 6, 0.5)
    np.testing.assert_allclose(exact[j - 1], [3.120e-2, 1.948e-2, 7.871e-3, 1.808e-3, 1.729e-4, 4.699e-5], rtol=6e-4)
    assert exact[-1] == pytest.approx(0.015672, abs=5e-7)
    assert exact.sum() == pytest.approx(1.0, abs=1e-12)  # a convex combination
    np.testing.assert_allclose(causal.primacy_tail(j, 2000, 6, 0.5), [2.220e-2, 1.649e-2, 7.577e-3, 1.797e-3, 1.726e-4, 4.693e-5], rtol=6e-4)


def test_rollout_is_the_matrix_power():
    n, H, a = 9, 4, 0.3
    M = np.linalg.matrix_power(a * np.eye(n) + (1 - a) * causal.cesaro(n), H)
    np.testing.assert_allclose(causal.rollout_weights(n, H, a), M[-1], atol=1e-15)
