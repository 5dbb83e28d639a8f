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
    assert "worst" in printed  # the column header (Rich may fold it)
    assert judged[0]["worst_case"].split(" ")[0] in printed
