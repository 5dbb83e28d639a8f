"""End to end: short simulations analysed with analyze (issue 3, tests 4), tolerances from SPEC [R]."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import attndyn as ad
from attndyn.app.cli import app

V2 = np.array([[0.64709742, 0.81911926], [0.61210449, 0.63263484]])
# SPEC §2.2 [R]: distance to the nearest vertex ~ 4 e^{-t}; at t = 10 about 2e-4, so 1e-3 has margin.
VERTEX_TOL = 1e-3
BOOLEAN_TOL = 1e-8


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_polytope_every_token_at_a_vertex(seed):
    rng = np.random.default_rng(seed)
    model = ad.Model(ad.Weights.identity(2), rescaled=True)
    traj = ad.simulate(model, rng.uniform(-5, 5, (20, 2)), np.linspace(0, 10, 51), solver=ad.RK4(), step=ad.FixedStep(0.01))
    a = ad.analyze(traj, model)
    assert a.regime.name == "polytope"
    assert a.max_distance_to_prediction < VERTEX_TOL
    assert a.boolean_distance[0] < BOOLEAN_TOL
    assert a.rank[0] == len(a.leaders[0])  # a Boolean P has one independent row per leader column
    assert all(m["monotone"] for m in a.monotone.values())
    assert 0.8 < a.rates["max_i |z_i(t) - z_i(T)|"]["rate"] < 1.2  # SPEC §4.3 (f)


@pytest.mark.parametrize("seed", range(5))
def test_boolean_1d_leaders_are_extreme_tokens(seed):
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-1, 1, (10, 1))
    model = ad.Model(ad.Weights(np.eye(1), np.eye(1), np.eye(1)), rescaled=True)
    traj = ad.simulate(model, x0, np.linspace(0, 10, 51), solver=ad.RK4(), step=ad.FixedStep(0.01))
    a = ad.analyze(traj, model)
    assert a.regime.name == "boolean-1d"
    assert a.rank[0] in (1, 2)
    assert set(a.leaders[0]) <= {int(np.argmin(x0)), int(np.argmax(x0))}
    assert a.monotone["token order (d = 1)"]["monotone"]


def test_V2_at_most_three_hyperplane_values():
    rng = np.random.default_rng(0)
    model = ad.Model(ad.Weights.from_value(V2), rescaled=True)
    traj = ad.simulate(model, rng.uniform(-5, 5, (20, 2)), np.linspace(0, 15, 61), solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-9, atol=1e-11))
    a = ad.analyze(traj, model)
    assert a.regime.name == "hyperplanes"
    assert a.cluster_count <= 3
    assert a.cluster_verdict in ("clusters", "one cluster")  # a count of clusters, not the points of a cloud
    assert a.clusters_reading() in repr(a)  # the count is printed with its verdict
    assert a.clusters_reading() == ("one cluster" if a.cluster_count == 1 else f"{a.cluster_count} clusters")
    assert a.max_distance_to_prediction < 1e-6  # SPEC §4.5 (b): converged to 1e-6
    assert a.monotone["max_i phi1*(z_i) (non-increasing)"]["monotone"]


def test_discrete_trajectory_is_analysed_in_z():
    rng = np.random.default_rng(4)
    model = ad.Model(ad.Weights.identity(2))
    traj = ad.residual_layers(model, rng.uniform(-1, 1, (12, 2)), 150, step_size=0.1)
    a = ad.analyze(traj, model)
    assert a.regime.name == "polytope"
    assert a.space == "z"
    assert a.max_distance_to_prediction < 1e-3
    # Euler with dt <= 1 keeps the hull of z exactly non-increasing (SPEC §1.8)
    assert a.monotone["support function of conv{z_i} (non-increasing)"]["monotone"]


def test_analyze_cli(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "seed = 1\nn = 8\nd = 2\n[init]\nlow = -5.0\nhigh = 5.0\n[model]\nrescaled = true\n"
        '[solver]\nmethod = "rk4"\ndt = 0.05\nt1 = 8.0\nsave_every = 0.5\n'
    )
    runner = CliRunner()
    out = tmp_path / "run"
    assert runner.invoke(app, ["simulate", str(cfg), "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["analyze", str(out)])
    assert result.exit_code == 0, result.output
    assert "polytope" in result.output
    data = json.loads((out / "analysis.json").read_text())
    assert data["regime"]["name"] == "polytope"
    assert data["max_distance_to_prediction"] < 1e-2
    png = (out / "analysis.png").read_bytes()  # the figure of the predicted limit beside the JSON
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    owned = json.loads((out / ".attndyn.json").read_text())["files"]
    assert "analysis.png" in owned  # attndyn's own file: a rerun may replace it


def test_analyze_cli_unreadable_folder(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "does not exist" in result.output
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    result = runner.invoke(app, ["analyze", str(tmp_path / "half")])
    assert result.exit_code == 2
    assert "incomplete" in result.output
    assert len(result.output.strip().splitlines()) == 1
