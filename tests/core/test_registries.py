"""The normalization-scheme table (attndyn.core.schemes) is the one list every part reads: a scheme
that lacks any part, or a part that keeps its own list, fails here."""

import math
import typing

import numpy as np
import pytest
import torch

import attndyn as ad
from attndyn.core import schemes
from attndyn.core.dynamics import Scheme, prepare, vector_field
from attndyn.core.schemes import SCHEME_TABLE, SCHEMES, SchemeRule


def table_problems(table: dict) -> list[str]:
    """What each entry lacks of the parts the module docstring lists."""
    out = []
    for name, rule in table.items():
        if not isinstance(rule, SchemeRule):
            out.append(f"{name}: not a SchemeRule")
            continue
        if not (isinstance(rule.summary, str) and rule.summary.strip()):
            out.append(f"{name}: no summary")
        if not callable(rule.velocity):
            out.append(f"{name}: no velocity")
        if not isinstance(rule.unit_start, bool):
            out.append(f"{name}: unit_start is not a bool")
        if rule.unit_speed is not None and not callable(rule.unit_speed):
            out.append(f"{name}: unit_speed is neither None nor callable")
        if rule.compiled not in ("all", "before_tau", "none"):
            out.append(f"{name}: compiled is not 'all', 'before_tau' or 'none'")
        if rule.unit_speed is not None and not rule.unit_start:
            out.append(f"{name}: a unit_speed form needs unit tokens (unit_start)")
    return out


def test_every_scheme_has_every_part():
    assert table_problems(SCHEME_TABLE) == []


def test_a_scheme_lacking_a_part_is_caught():
    broken = {**SCHEME_TABLE, "half": SchemeRule("", None, unit_start="yes", unit_speed=3.0)}
    found = table_problems(broken)
    assert {p.split(": ")[1] for p in found} >= {"no summary", "no velocity", "unit_start is not a bool", "unit_speed is neither None nor callable"}


def test_the_model_the_schema_and_the_normalization_claim_read_the_table():
    from attndyn.claims import normalization
    from attndyn.workflow.schema import ModelSpec

    assert typing.get_args(Scheme) == SCHEMES
    assert typing.get_args(ModelSpec.model_fields["scheme"].annotation) == SCHEMES
    for name in SCHEMES:
        assert ModelSpec(geometry="sphere", scheme=name).scheme == name
        ad.Model(ad.Weights.identity(2), geometry="sphere", scheme=name)
    with pytest.raises(ValueError, match="scheme"):
        ModelSpec(geometry="sphere", scheme="no-such-scheme")
    assert normalization.SCHEMES == list(SCHEMES)
    assert {s for s, _ in normalization.CASES} == set(SCHEMES)  # the claim's exact check covers every scheme


@pytest.mark.parametrize("name", SCHEMES)
def test_each_scheme_s_velocity_keeps_its_radius_law(name):
    """From the table's definition: schemes with r' = 0 keep every radius (<x, x'> = 0); Pre-LN's
    x' = A moves radii. The field is the dynamics' (vector_field), which reads the table."""
    rng = np.random.default_rng(2)
    x = torch.as_tensor(rng.normal(size=(5, 3)))
    if SCHEME_TABLE[name].unit_start:  # the scheme's tokens live on the unit sphere
        x = x / x.norm(dim=-1, keepdim=True)
    model = ad.Model(ad.Weights.identity(3), geometry="sphere", scheme=name, scheme_tau=0.5)
    for t in (0.0, 1.0):
        v = vector_field(t, x, prepare(model, x, check=True))
        assert torch.isfinite(v).all()
        radial = (v * x).sum(-1) / x.norm(dim=-1)
        keeps = name in ("post", "ngpt", "sqrt") or (name == "mix" and t < 0.5)
        assert (radial.abs().max().item() < 1e-12) == keeps, (name, t)


def test_unit_speed_is_c_times_post_ln_from_unit_tokens():
    for name, rule in SCHEME_TABLE.items():
        if rule.unit_speed is None:
            continue
        x = torch.as_tensor(ad.sphere_start(6, 3, seed=1))
        model = ad.Model(ad.Weights.identity(3), geometry="sphere", scheme=name, scheme_tau=2.0)
        post = ad.Model(ad.Weights.identity(3), geometry="sphere")
        for t in (0.0, 1.0):
            c = rule.unit_speed(t, prepare(model, x))
            expected = {"sqrt": 1 / math.sqrt(t + 1), "mix": 1.0}[name]  # s = sqrt(t + 1); Mix-LN before tau is Post-LN
            assert c == pytest.approx(expected, rel=1e-15)
            torch.testing.assert_close(ad.velocity(t, x, model), c * ad.velocity(t, x, post), rtol=1e-12, atol=1e-14)


def test_the_module_docstring_names_each_part():
    for part in ("summary", "velocity", "unit_start", "unit_speed"):
        assert f"``{part}" in schemes.__doc__
