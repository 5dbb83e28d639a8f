"""The claim module contract (attndyn.claims.common.CONTRACT) holds for every claim."""

import inspect

import pytest

from attndyn.claims import EXPERIMENTS, common, load


@pytest.mark.parametrize("claim_id", sorted(EXPERIMENTS))
def test_every_claim_keeps_the_contract(claim_id):
    module = load(claim_id)
    assert common.contract_problems(module) == [], claim_id
    assert module.CLAIM.id == claim_id
    assert len(inspect.signature(module.judge).parameters) == 2  # (arrays, config)
    assert len(inspect.signature(module.run).parameters) == 1  # (config)
    ok, reason = common.available(module)
    assert isinstance(ok, bool)
    assert ok or reason


def test_the_contract_check_names_what_a_module_lacks():
    import types

    module = load("polytope")
    partial = types.SimpleNamespace(**{k: getattr(module, k) for k in common.CONTRACT if k != "judge"})
    assert common.contract_problems(partial) == [f"no judge ({common.CONTRACT['judge']})"]
    wrong = types.SimpleNamespace(**{**{k: getattr(module, k) for k in common.CONTRACT}, "QUICK": {"no_such_field": 1}})
    assert common.contract_problems(wrong)[0].startswith("QUICK is not a dict of Config fields")
    assert common.available(partial) == (True, "")  # the default of OPTIONAL["available"]


def test_the_contract_is_written_in_the_package_docs():
    import attndyn.claims

    for name in (*common.CONTRACT, *common.OPTIONAL):
        assert f"``{name}``" in attndyn.claims.__doc__
