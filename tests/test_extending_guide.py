"""docs/guide/extending.md's worked examples run and do what the page says (the page is kept true)."""

import re
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import attndyn as ad

PAGE = Path(__file__).parents[1] / "docs" / "guide" / "extending.md"


def blocks() -> dict[str, str]:
    """The page's python blocks, by the section they are in."""
    out, section = {}, None
    for part in re.split(r"^(## .*)$", PAGE.read_text(), flags=re.M):
        if part.startswith("## "):
            section = part[3:].strip()
            continue
        code = re.findall(r"```python\n(.*?)```", part, flags=re.S)
        if section and code:
            out[section] = "\n".join(code)
    return out


def run_block(section: str) -> types.ModuleType:
    module = types.ModuleType(f"extending_{section.replace(' ', '_')}")
    exec(compile(blocks()[section], f"{PAGE}:{section}", "exec"), module.__dict__)
    return module


def test_the_page_has_a_worked_example_for_each_thing_and_is_in_the_nav():
    assert set(blocks()) == {"A claim", "A normalization scheme", "A solver", "A checkpoint family"}
    assert "guide/extending.md" in (PAGE.parents[2] / "mkdocs.yml").read_text()


def test_the_example_claim_keeps_the_contract_and_passes():
    from attndyn.claims import common

    claim = run_block("A claim")
    assert common.contract_problems(claim) == []
    result = claim.run(claim.Config(seed=0, **claim.QUICK))
    assert result.verdict == "pass"
    checks, _ = claim.judge({**result.arrays, "gaps": result.arrays["gaps"][::-1].copy()}, claim.Config(seed=0))
    assert common.verdict_of("pass/fail", checks) == "fail"  # a growing gap fails the check


def test_the_example_scheme_has_every_part_and_its_stated_law():
    from attndyn.core.dynamics import prepare
    from tests.core.test_registries import table_problems

    rule = run_block("A normalization scheme").DOUBLE
    assert table_problems({"double": rule}) == []
    x = torch.as_tensor(ad.sphere_start(6, 3, seed=2))
    args = prepare(ad.Model(ad.Weights.identity(3), geometry="sphere"), x)
    post = ad.velocity(0.0, x, ad.Model(ad.Weights.identity(3), geometry="sphere"))
    A = ad.attention_matrix(ad.Model(ad.Weights.identity(3)), x)[0] @ x  # attention at the (unit) directions
    r = x.norm(dim=-1, keepdim=True)
    got = rule.velocity(0.0, A, x / r, r, args)
    torch.testing.assert_close(got, rule.unit_speed(0.0, args) * post, rtol=1e-12, atol=1e-14)


def test_the_example_solver_is_a_valid_tableau_of_its_order():
    from tests.core.test_against_scipy import ORDER_PROBLEM_T, ORDER_SLACK, fitted_order, order_problem

    tableau = run_block("A solver").RALSTON
    W, x0, ref = order_problem()
    slope = fitted_order(lambda dt: ad.simulate(ad.Model(W), x0, [0, ORDER_PROBLEM_T], solver=tableau, step=ad.FixedStep(dt)).xs[-1].numpy(), ref)
    assert abs(slope - tableau.order) < ORDER_SLACK
    with pytest.raises(ValueError, match="order conditions"):
        ad.core.solvers.Tableau("ralston", 2, (0.0, 2 / 3), ((), (2 / 3,)), (1 / 3, 2 / 3))
    assert np.isclose(sum(tableau.b), 1.0)


def test_the_example_family_is_one_row_that_reads_as_transformers_does(tmp_path, monkeypatch):
    """The page's Ministral row, added to the registry: its folder equals transformers in float64 within 1e-10,
    and a forward-changing key it does not implement is refused by name before any tensor is read."""
    transformers = pytest.importorskip("transformers")
    from attndyn.models import architectures
    from attndyn.models.bert import CheckpointError
    from attndyn.models.decoder import forward
    from attndyn.models.decoder_files import load_decoder
    from tests.models.test_families import COMMON, IDS, ROPE, differences, exact_reference, reference

    row = run_block("A checkpoint family").MINISTRAL
    monkeypatch.setitem(architectures.FAMILIES, row.name, row)
    torch.manual_seed(0)
    kwargs = COMMON | ROPE | {"num_key_value_heads": 2, "head_dim": 8, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]}
    model = transformers.MinistralForCausalLM(transformers.MinistralConfig(**kwargs, initializer_range=0.2, attn_implementation="eager")).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "m", safe_serialization=True)
    dec = load_decoder(tmp_path / "m")
    assert dec.windows == (4, None)
    d = differences(dec, forward(dec, IDS), reference(exact_reference(model.double()), IDS))
    assert max(d.values()) < 1e-10, d
    config = (tmp_path / "m" / "config.json").read_text()
    (tmp_path / "m" / "config.json").write_text(config.replace('"model_type"', '"qk_layernorm": true, "model_type"'))
    with pytest.raises(CheckpointError, match="qk_layernorm = True .* ministral family"):
        load_decoder(tmp_path / "m")
