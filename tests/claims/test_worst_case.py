"""A judged check's value is its worst case, named, with its margin (issue 21, item 1)."""

import json

import numpy as np

from attndyn.app.cli import entry
from attndyn.claims.common import at_most, every, every_within, within


def test_every_within_reports_the_case_closest_to_its_bound_not_the_median():
    values = [1e-5, 2e-5, 7e-4, 3e-5]
    c = every_within(values, 0.0, 1e-3, cases=["seed 0", "seed 1", "seed 2", "seed 3"])  # a magnitude: its largest
    assert c.passed
    assert c.value == 7e-4  # the median is 2.5e-5
    assert c.worst_case == "seed 2"
    assert np.isclose(c.margin, 3e-4)
    bad = every_within(values + [2e-3], 0.0, 1e-3)
    assert not bad.passed
    assert bad.value == 2e-3
    assert bad.worst_case == "case 5 of 5"
    assert np.isclose(bad.margin, -1e-3)


def test_two_sided_bands_report_the_value_nearest_either_bound():
    c = every_within([1.95, 2.0, 1.83, 2.1], 1.8, 2.2)
    assert c.value == 1.83
    assert np.isclose(c.margin, 0.03)


def test_margins_of_single_value_checks():
    assert np.isclose(at_most(0.2, 0.5).margin, 0.3)
    assert np.isclose(within(1.9, 1.8, 2.2).margin, 0.1)
    assert within(2.5, 1.8, 2.2).margin < 0
    failing = every([True, False, True], cases=["a", "b", "c"])
    assert failing.worst_case == "b"
    assert failing.margin == -1


def test_counted_checks_name_their_worst_case_with_its_value_threshold_and_margin():
    """A counted check that passes shows how close it came: the case with the largest value / limit, not the first."""
    values, limits = [2e-9, 9e-9, 1e-9], [1e-8, 1e-8, 1e-8]
    c = every([True, True, True], cases=["a", "b", "c"], values=values, limits=limits)
    assert c.passed
    assert c.value == 0
    assert c.worst_case == "b: 9e-09 against <= 1e-08"
    assert np.isclose(c.margin, 1e-9)
    # per-case limits: the ratio decides (3 of 4 is closer than 5 of 10)
    c = every([True, True], cases=["x", "y"], values=[5.0, 3.0], limits=[10.0, 4.0])
    assert c.worst_case.startswith("y: 3")
    assert np.isclose(c.margin, 1.0)
    # a failing case is named before a passing one, whatever their ratios
    bad = every([True, False], cases=["p", "f"], values=[0.9, 0.1], limits=1.0)
    assert not bad.passed
    assert bad.value == 1
    assert bad.worst_case.startswith("f: ")
    # the count without values keeps naming the first failure
    assert every([True, False, False], cases=["a", "b", "c"]).worst_case == "b"


def test_boolean_1d_a_shows_its_closest_system():
    from tests.tiny_claims import tiny_result

    c = next(c for name, c in tiny_result("boolean-1d").checks.items() if name.startswith("(a)"))
    assert c.passed
    assert c.value == 0
    assert "system" in c.worst_case
    assert "against <= 1e-08" in c.worst_case
    assert 0 < c.margin <= 1e-8


def test_judge_and_reproduce_show_the_worst_case(tmp_path, capsys):
    out = tmp_path / "report"
    assert entry(["reproduce", "hardmax", "--quick", "--out", str(out)]) == 0
    checks = json.loads((out / "results.json").read_text())["claims"][0]["checks"]
    judged = [c for c in checks if c["threshold"].startswith("all in") and c["n_judged"] > 1]
    assert judged
    assert all(c["worst_case"] and c["margin"] is not None for c in judged)
    assert "worst case" in (out / "index.html").read_text()
    capsys.readouterr()
    assert entry(["judge", str(out / "runs" / "hardmax")]) == 0
    printed = capsys.readouterr().out
    # not a terminal: one unwrapped line per check (a table at the pipe's width folds cells mid-word)
    lines = printed.splitlines()
    assert lines[0] == "hardmax: pass"
    assert len(lines) == 1 + len(checks)
    for c in judged:
        line = next(line for line in lines if line.startswith(f"pass: {c['name']}; "))
        assert f"value (worst case) {c['value']:.4g} ({c['worst_case']}); threshold {c['threshold']}; margin {c['margin']:.3g}" in line


def test_polytope_counted_checks_show_how_close_they_came():
    """(c) and (d) S-equation pass at the tiny size; each names its closest case with a margin inside its limit."""
    from tests.tiny_claims import tiny_result

    checks = tiny_result("polytope").checks
    for prefix in ("(c) |z(T)", "(d) S-equation", "(a) hull", "(e) P(T) Boolean"):
        c = next(c for name, c in checks.items() if name.startswith(prefix))
        assert c.passed, prefix
        assert " against <= " in c.worst_case, (prefix, c.worst_case)
        assert c.margin >= 0, (prefix, c.margin)
