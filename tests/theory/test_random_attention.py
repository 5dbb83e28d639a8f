"""Random attention spectra (SPEC §9.3): the quarter-circle moments against numerical integration of
the density."""

import math

import pytest
from scipy.integrate import quad

from attndyn.theory import random_attention


@pytest.mark.parametrize("sigma", [0.5, 1.0])
def test_quarter_circle_moments_integrate_the_density(sigma):
    s2, s4 = random_attention.quarter_circle_moments(sigma)
    s = math.sqrt(math.expm1(sigma**2))

    def density(x):
        return math.sqrt(max(4 * s * s - x * x, 0.0)) / (math.pi * s * s)

    assert quad(density, 0, 2 * s)[0] == pytest.approx(1.0, abs=1e-9)
    assert quad(lambda x: x * x * density(x), 0, 2 * s)[0] == pytest.approx(s2, rel=1e-9)
    assert quad(lambda x: x**4 * density(x), 0, 2 * s)[0] == pytest.approx(s4, rel=1e-9)
