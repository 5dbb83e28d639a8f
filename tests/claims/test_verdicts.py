"""Verdicts that can fail (issue 8).

Every judged check of a claim that separates its checks from its simulation (``judge(arrays,
config)``) is fed a violating input built from a real reduced-size run, and must fail; a check
over zero cases fails; ``attndyn judge`` agrees with ``reproduce`` and catches tampering.
"""

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

import attndyn as ad
from attndyn.analysis import geometry
from attndyn.app.cli import app
from attndyn.claims import EXPERIMENTS, load
from attndyn.claims.common import at_most, every, every_within, within
from attndyn.claims.runner import judge_folder, run_claim
from attndyn.theory import closed_forms as theory
from tests.tiny_claims import tiny_config, tiny_result

JUDGED = [cid for cid in EXPERIMENTS if hasattr(load(cid), "judge")]
runner = CliRunner()


def judged(claim_id: str, arrays: dict) -> dict:
    checks, _ = load(claim_id).judge(arrays, tiny_config(claim_id))
    return checks


def copy_arrays(claim_id: str) -> dict:
    return {k: np.array(v, copy=True) for k, v in tiny_result(claim_id).arrays.items()}


def failing(checks: dict, prefix: str) -> bool:
    """The one check whose name starts with ``prefix`` was judged and failed."""
    hits = [c for name, c in checks.items() if name.startswith(prefix)]
    assert len(hits) == 1, (prefix, list(checks))
    return hits[0].passed is False


# --- the check helpers ---------------------------------------------------------------------------


def test_a_check_over_zero_cases_fails():
    for c in (every([]), every_within([], 0, 1), at_most(0.0, 1.0, n=0), within(float("nan"), 0, 1)):
        assert c.passed is False
        assert c.n_judged == 0 or c.value != c.value
    ok = every([True, True])
    assert ok.passed is True
    assert ok.n_judged == 2
    bad = every([True, False, False])
    assert bad.passed is False
    assert bad.value == 2


def test_every_within_reports_the_worst_value():
    c = every_within([0.5, 0.52, 0.71], 0.4, 0.6)
    assert c.passed is False
    assert c.value == 0.71
    assert c.n_judged == 3


@pytest.mark.parametrize("claim_id", JUDGED)
def test_judge_of_the_saved_arrays_reproduces_the_run(claim_id):
    result = tiny_result(claim_id)
    again = judged(claim_id, result.arrays)
    assert list(again) == list(result.checks)
    for name, c in result.checks.items():
        assert again[name].passed == c.passed, name
        assert again[name].n_judged == c.n_judged, name
        if c.passed is not None:
            assert c.n_judged >= 1, name
    if load(claim_id).CLAIM.kind == "pass/fail":
        assert result.verdict == "pass"


@pytest.mark.parametrize("claim_id", JUDGED)
def test_no_cases_means_failure(claim_id):
    """With the per-case arrays removed, nothing is judged and nothing passes."""
    if load(claim_id).CLAIM.kind != "pass/fail":
        pytest.skip("report claims judge nothing")
    arrays = copy_arrays(claim_id)
    cases = {k: v for k, v in arrays.items() if not k[-1].isdigit()}
    if len(cases) == len(arrays):
        pytest.skip("this claim has no numbered cases to remove")
    try:
        checks = judged(claim_id, cases)
    except (KeyError, ValueError, IndexError):
        return  # the claim refuses data without cases: also not a pass
    assert all(c.passed is not True for c in checks.values() if c.n_judged is not None and c.n_judged == 0)
    assert any(c.passed is False for c in checks.values())


# --- polytope -----------------------------------------------------------------------------------


def test_polytope_checks_fail_on_violations():
    cid = "polytope"
    base = copy_arrays(cid)
    ts, z = base["ts0"], base["z0"]

    a = copy_arrays(cid)
    a["z0"][-3:, 0] *= 1.05  # the hull grows at the end
    assert failing(judged(cid, a), "(a) hull")

    a = copy_arrays(cid)
    a["z0"][len(ts) // 2, 0, 0] = 3 * np.abs(z[0, 0]).max()  # a token leaves conv{z(0)}
    assert failing(judged(cid, a), "(b) z_i(t) in conv")

    a = copy_arrays(cid)
    keep = ts <= 2.0  # an unconverged run: T too short
    a["ts0"], a["z0"] = ts[keep], z[keep]
    checks = judged(cid, a)
    assert failing(checks, "(c)")
    assert failing(checks, "(e) P(T) Boolean")

    a = copy_arrays(cid)
    p = a["z0"][-1, 0]
    a["z0"][-1, 0, 0] = 0.5 * p.mean(0) + 0.5 * p[0]  # token 0 pulled off its vertex into the interior
    checks = judged(cid, a)
    assert failing(checks, "(d) S-equation")
    assert failing(checks, "(d) limit in dK")

    a = copy_arrays(cid)
    p = a["z0"][-1, 0]
    verts = p[geometry.hull_vertices(p)]
    a["z0"][-1, 0, 0] = 0.5 * (verts[0] + verts[1])  # token 0 halfway between two vertices
    assert failing(judged(cid, a), "(e) leader")

    a = copy_arrays(cid)
    a["z0"][-1, 0] *= 1 - 1e-9  # one run's last save drawn toward the origin: its outermost token moved
    assert failing(judged(cid, a), "(c') the outermost token")


# --- collapse -----------------------------------------------------------------------------------


def test_collapse_checks_fail_on_violations():
    cid = "collapse"
    ts = copy_arrays(cid)["ts"]

    a = copy_arrays(cid)
    a["x0"][ts >= 160, 0] *= 0.5  # the decay from t = 40 to 160 is twice too fast for one seed
    checks = judged(cid, a)
    assert failing(checks, "max|x(4t)|")
    assert failing(checks, "max|P - 1/n|")  # |P - 1/n| ~ |x|^2: its ratio drops to about 1/16

    a = copy_arrays(cid)
    a["x0"][-1, 0] *= 1.5  # max |x_i| jumps up at the end
    assert failing(judged(cid, a), "max_i |x_i| non-increasing")

    a = copy_arrays(cid)
    a["x0"][-1, 0] = a["x0"][0, 0]  # the final state replaced by the initial one
    checks = judged(cid, a)
    assert failing(checks, "conclusion: max_i |x_i(T)|")
    assert failing(checks, "conclusion: max |P(T) - 1/n|")


# --- hyperplanes --------------------------------------------------------------------------------


def _case(arrays, name):
    return next(k for k in range(20) if f"name{k}" in arrays and str(arrays[f"name{k}"]) == name)


def test_hyperplanes_checks_fail_on_violations():
    cid = "hyperplanes"

    a = copy_arrays(cid)
    k = _case(a, "V2")
    a[f"V{k}"] = np.array([[0.5, -1.0], [1.0, 0.5]])  # a complex-leading V is not a good triple
    assert failing(judged(cid, a), "good triples classified")

    a = copy_arrays(cid)
    k = _case(a, "V2")
    _, _, phi = geometry.left_eigenvector(a[f"V{k}"])
    c = a[f"z{k}"] @ geometry.left_eigenvector(a[f"V{k}"])[0]
    top = int(np.argmax(c[-1, 0]))
    a[f"z{k}"][-3:, 0, top] += 0.5 * phi / (geometry.left_eigenvector(a[f"V{k}"])[0] @ phi)  # max_j c_j increases
    assert failing(judged(cid, a), "(a)")

    a = copy_arrays(cid)
    k = _case(a, "V2")
    keep = a[f"ts{k}"] <= 2.0  # unconverged
    a[f"ts{k}"], a[f"z{k}"] = a[f"ts{k}"][keep], a[f"z{k}"][keep]
    assert failing(judged(cid, a), "(b)")

    a = copy_arrays(cid)
    k = _case(a, "V2")
    a[f"V{k}"] = a[f"V{k}"].T  # phi_1 used in place of phi_1*: the coordinates are not the invariant ones
    checks = judged(cid, a)
    assert failing(checks, "(c)") or failing(checks, "(d)")

    a = copy_arrays(cid)
    k = _case(a, "V2")
    phi_star, _, phi = geometry.left_eigenvector(a[f"V{k}"])
    n = a[f"z{k}"].shape[2]
    a[f"z{k}"][-1, 0] += np.outer(np.linspace(-3, 3, n), phi / (phi_star @ phi))  # spread over many levels
    checks = judged(cid, a)
    assert failing(checks, "(c)")
    assert failing(checks, "(d)")

    a = copy_arrays(cid)
    k = _case(a, "real-nonneg2")
    a[f"z{k}"][-1, 0] *= 100  # unbounded z although every eigenvalue is real and >= 0
    assert failing(judged(cid, a), "c:bounded")

    a = copy_arrays(cid)
    a["nottoo_x"] = a["nottoo_x"] * np.exp(0.5 * a["nottoo_ts"])[:, None, None]  # x grows faster than e^{|lambda_k| t}
    assert failing(judged(cid, a), "l:nottoofassst")


def test_hyperplanes_boundedness_always_judges_something():
    checks = tiny_result("hyperplanes").checks
    c = next(c for name, c in checks.items() if name.startswith("c:bounded"))
    assert c.n_judged >= 1


# --- negative control ---------------------------------------------------------------------------


def test_negative_control_checks_fail_on_violations():
    cid = "hyperplanes-negative-control"

    a = copy_arrays(cid)
    a["V"] = np.array([[0.64709742, 0.81911926], [0.61210449, 0.63263484]])  # the paper's V2: a good triple
    a["QK"] = np.eye(2)
    assert failing(judged(cid, a), "regime()")

    a = copy_arrays(cid)
    ts = a["ts"]
    half = np.searchsorted(ts, ts[-1] / 2)
    a["z"][half + 1 :] = a["z"][half]  # converged after T/2: movement decays to 0
    assert failing(judged(cid, a), "movement over [T-1, T]")

    a = copy_arrays(cid)
    a["z"][:] = a["z"][0]  # nothing moves
    assert failing(judged(cid, a), "movement over [T/2-1, T/2]")


# --- sphere -------------------------------------------------------------------------------------


def test_sphere_checks_fail_on_violations():
    cid = "sphere"
    result = tiny_result(cid)
    split = result.info["beta=4 split at T"]["seeds"]
    assert split, "the reduced size keeps beta = 4 seeds that are still split at T = 300"

    a = copy_arrays(cid)
    a["b1_x"][-1, 0] = a["b1_x"][0, 0]  # beta = 1: the final state replaced by the initial one (reported: the count sees it)
    assert _reported(judged(cid, copy_arrays(cid)), "beta = 1: seeds not in one cluster") == 0
    assert _reported(judged(cid, a), "beta = 1: seeds not in one cluster") == 1

    a = copy_arrays(cid)
    a["b4_x"][:, 0] = a["b4_x"][0, 0]  # beta = 4: one seed never clusters
    assert failing(judged(cid, a), "beta = 4: every seed in one cluster")

    a = copy_arrays(cid)
    ts = a["b4_ts"]
    k = np.searchsorted(ts, 300.0)
    s = split[0]
    rng = np.random.default_rng(0)
    x = a["b4_x"][k, s] + 1e-4 * rng.normal(size=a["b4_x"][k, s].shape)
    a["b4_x"][k, s] = x / np.linalg.norm(x, axis=-1, keepdims=True)  # clusters not tight
    assert failing(judged(cid, a), "beta = 4, seeds split at T = 300: k >= 2")

    a = copy_arrays(cid)
    k2 = np.searchsorted(ts, 600.0)
    R = np.array([[np.cos(1e-4), -np.sin(1e-4), 0], [np.sin(1e-4), np.cos(1e-4), 0], [0, 0, 1]])
    a["b4_x"][k + 1 : k2 + 1, s] = a["b4_x"][k + 1 : k2 + 1, s] @ R.T  # centres off the reduced ODE by 1e-4
    assert failing(judged(cid, a), "beta = 4, seeds split at T: cluster centres")

    for flow in ("sa", "usa"):
        a = copy_arrays(cid)
        a[f"energy_{flow}_x"] = a[f"energy_{flow}_x"][::-1].copy()  # time reversed: the energy decreases (reported)
        assert _reported(judged(cid, a), f"E_beta non-decreasing along {flow.upper()}") > 1e-3

        a = copy_arrays(cid)
        a[f"orth_{flow}_x"][-1] = np.linalg.qr(np.random.default_rng(1).normal(size=a[f"orth_{flow}_x"][-1].shape))[0]
        assert failing(judged(cid, a), f"orthogonal start ({flow.upper()}")

    a = copy_arrays(cid)
    a["hemi_ts"] = a["hemi_ts"] * 1.2  # the same run read 20 % slower: rate 2 / 1.2
    assert failing(judged(cid, a), "hemisphere")


# --- attndyn judge ------------------------------------------------------------------------------


@pytest.mark.parametrize("claim_id", ["polytope", "collapse", "hyperplanes-negative-control"])
def test_judge_command_agrees_with_reproduce_and_catches_tampering(tmp_path, claim_id):
    folder = tmp_path / claim_id
    record = run_claim(claim_id, load(claim_id), folder, seed=0, quick=True, config=tiny_config(claim_id))
    again = judge_folder(folder)
    assert again["verdict"] == record["verdict"] == "pass"
    for c in record["checks"]:
        assert again["checks"][c["name"]].value == pytest.approx(c["value"], nan_ok=True)
    result = runner.invoke(app, ["judge", str(folder)])
    assert result.exit_code == 0, result.output
    # tamper: replace the final states by earlier ones (for the negative control, whose claim is that
    # the tokens keep moving, freeze them after T/2)
    with np.load(folder / "arrays.npz") as data:
        arrays = {k: data[k] for k in data.files}
    for key, value in arrays.items():
        if key[0] in "xz" and value.ndim >= 3 and value.shape[0] > 2:
            if claim_id == "hyperplanes-negative-control":
                value[len(value) // 2 :] = value[len(value) // 2]
            else:
                value[-1] = value[1]
    np.savez(folder / "arrays.npz", **arrays)
    # the run folder's signed marker records the arrays' SHA-256: edited arrays are refused before any judging (a
    # referee's edited boolean-1d arrays were judged 'pass' on fewer cases, 120 -> 100)
    result = runner.invoke(app, ["judge", str(folder)])
    assert result.exit_code == 2, result.output
    assert "arrays.npz was changed since attndyn wrote it" in " ".join(result.output.split())
    # a folder copied away from its marker is judged from its data: the edited states fail
    (folder / ".attndyn.json").unlink()
    result = runner.invoke(app, ["judge", str(folder)])
    assert result.exit_code == 1, result.output
    assert "the recorded verdict was 'pass'; judged again from the saved data it is 'fail'" in " ".join(result.output.split())


def test_judge_refuses_incomplete_or_foreign_folders(tmp_path):
    result = runner.invoke(app, ["judge", str(tmp_path)])
    assert result.exit_code == 2
    assert "summary.json" in result.output
    folder = tmp_path / "collapse"
    run_claim("collapse", load("collapse"), folder, seed=0, quick=True, config=tiny_config("collapse"))
    (folder / "arrays.npz").write_bytes(b"not an npz")
    result = runner.invoke(app, ["judge", str(folder)])
    assert result.exit_code == 2
    assert "arrays.npz" in result.output
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["id"] == "collapse"


# --- boolean-1d ---------------------------------------------------------------------------------


def _reported(checks: dict, prefix: str) -> float:
    """The value of the one reported check whose name starts with ``prefix``."""
    hits = [c for name, c in checks.items() if name.startswith(prefix)]
    assert len(hits) == 1, (prefix, list(checks))
    assert hits[0].passed is None, prefix
    return hits[0].value


def test_boolean_1d_checks_fail_on_violations(monkeypatch):
    cid = "boolean-1d"
    base = copy_arrays(cid)
    k = next(j for j in range(20) if f"vq{j}" in base and tuple(base[f"vq{j}"]) == (1.0, 1.0))
    ts, z = base[f"ts{k}"], base[f"z{k}"]
    order = np.argsort(z[0, 0, :, 0])
    lo, hi = order[0], order[-1]

    a = copy_arrays(cid)
    keep = ts <= 2.0  # unconverged: P is not yet Boolean
    a[f"ts{k}"], a[f"z{k}"] = ts[keep], z[keep]
    checks = judged(cid, a)
    assert failing(checks, "(a)")
    assert failing(checks, "(c)")
    assert failing(checks, "(e) z_i of unbounded")

    a = copy_arrays(cid)
    a[f"z{k}"][-1, 0, [lo, hi]] = a[f"z{k}"][-1, 0, [hi, lo]]  # the extreme tokens swap places at the end
    checks = judged(cid, a)
    # (b) and the order are reported (structural in d = 1); their counts see the swap
    assert _reported(checks, "(b)") == 1
    assert _reported(checks, "(d) order") == 1

    a = copy_arrays(cid)
    i, j = order[1], order[2]
    zz = a[f"z{k}"][-1, 0, :, 0]
    zz[j] = zz[i] + 0.9 * (zz[j] - zz[i])  # two tokens move closer at the end (v = q = 1)
    assert failing(judged(cid, a), "(d) distances")

    a = copy_arrays(cid)
    a[f"z{k}"][-1, 0] *= 1.01  # z has not converged
    assert failing(judged(cid, a), "(e) z_i of unbounded")

    a = copy_arrays(cid)
    a[f"z{k}"][-1, 0, order[1:3]] = 1e-5  # two tokens stay near 0
    assert _reported(judged(cid, a), "(e) at most one token") == 1

    # (f) on rows whose -log(1 - P) grows 20 % slower than e^{v t}, and on the true rates e^{v t}, e^{2 v t}
    from attndyn.claims.boolean_1d import exponent_error, row_rate_slopes, saturation_level

    window = np.linspace(8, 14, 13)
    slow = 3.0 * np.exp(0.8 * window)[:, None] * np.ones((1, 4))
    slopes, missed = row_rate_slopes(window, slow, 1.0)
    assert missed == 0
    assert every_within(exponent_error(slopes), 0.0, 0.1).passed is False
    for power in (1.25, 2.5):  # exponents 1 and 2
        slopes, missed = row_rate_slopes(window, slow**power, 1.0)
        assert missed == 0
        assert every_within(exponent_error(slopes), 0.0, 0.1).passed is True
    between = 3.0 * np.exp(1.5 * window)[:, None] * np.ones((1, 4))  # neither 1 nor 2
    assert every_within(exponent_error(row_rate_slopes(window, between, 1.0)[0]), 0.0, 0.1).passed is False
    # the transient is not fitted: saves below the saturation level are left out, a row with too few is counted
    bent = np.where(window < 11, 0.5, 3.0 * np.exp(window - 8))[:, None] * np.ones((1, 4))
    assert row_rate_slopes(window, bent, 1.0)[0] == pytest.approx([1.0] * 4)
    flat = np.full((13, 4), 0.5 * saturation_level(4))
    assert row_rate_slopes(window, flat, 1.0) == ([], 4)
    # and through judge: rows whose fitted rates come out 20 % low (0.8 v in place of v)
    from attndyn.claims import boolean_1d

    real = boolean_1d.row_rate_slopes

    def low(*args):
        slopes, missed = real(*args)
        return [0.8 * r for r in slopes], missed

    monkeypatch.setattr(boolean_1d, "row_rate_slopes", low)
    assert failing(judged(cid, copy_arrays(cid)), "(f) slope")


# --- polytope-subspace --------------------------------------------------------------------------


def test_polytope_subspace_checks_fail_on_violations():
    cid = "polytope-subspace"
    base = copy_arrays(cid)
    V = base["V0"]
    e_F = np.eye(len(V))[0]  # V = diag(1, 1, -0.5): F is spanned by e_1, e_2

    a = copy_arrays(cid)
    a["z0"][-2:, 0] += 2.0 * e_F * np.abs(a["z0"][:, 0, :, 0]).max()  # the F-hull grows at the end
    assert failing(judged(cid, a), "conv{pi_F z_i}")

    a = copy_arrays(cid)
    f_final = a["z0"][-1, 0, :, :2]
    a["z0"][-1, 0, 0, :2] = 0.5 * (f_final.mean(0) + f_final[0])  # token 0's F-part pulled into the interior
    assert failing(judged(cid, a), "pi_F z_i(T) within 1e-3 of the boundary")


# --- model-equivalence --------------------------------------------------------------------------


def test_model_equivalence_checks_fail_on_violations(monkeypatch):
    cid = "model-equivalence"
    cases = {
        "M1 |x(t) - e^{tV} z(t)|": lambda a: a["tz"][-1].__iadd__(1e-3),
        "M1 |P_x(t) - P_z(t)|": lambda a: a["tz"][-1].__imul__(1.5),
        "M2 R^k z^k = x^k, dt = 0.5": lambda a: a["m2_z_0.5"][-1].__imul__(1.001),
        "M2 R^k z^k = x^k, dt = 0.1": lambda a: a["m2_z_0.1"][-1].__imul__(1.001),
        "M3 |x_i'|": lambda a: a["m3_vel"].__imul__(10.0),
        "M4 Euler": lambda a: a.__setitem__("m4_euler", a["m4_ref"] + (a["m4_euler"] - a["m4_ref"]) * a["m4_dt"][:, None, None] / 0.1),
        "M5 X[mu_n](x_i)": lambda a: a["m5_engine"].__iadd__(1e-6),
        "feed-forward W = I": lambda a: a["ff_identity"].__iadd__(1e-9),
        "multi-head with H = 1": lambda a: a["mh_ours"][-1].__iadd__(1e-9),
        # RK4's finer run with half the coarser one's error (first order), and a finer run on the reference (no order to read)
        "M7 every fixed-step tableau": lambda a: a.__setitem__(
            "m7_any V_rk4_40", a["m7_ref_any V"] + 0.5 * (a["m7_any V_rk4_20"] - a["m7_ref_any V"])
        ),
        "M7 every fixed-step tableau's": lambda a: a.__setitem__("m7_V = I_rk4_200", a["m7_ref_V = I"].copy()),
    }
    for prefix, violate in cases.items():
        a = copy_arrays(cid)
        violate(a)
        assert failing(judged(cid, a), prefix), prefix
    # the loose bounds are reported (no small error reaches them): their values cross 1 under a gross violation
    reported = {
        "M3 max|x(t)|": lambda a: a["tx"][-1].__imul__(100.0),
        "M5 bound": lambda a: a["m5_support"].__imul__(10.0),
        "M5 Lipschitz bound": lambda a: a["m5_support"].__imul__(10.0),
        # the nearby solution claimed to start 1e-6 times closer: it then separates faster than e^{L t} allows
        "M6 W2(t)": lambda a: a.__setitem__("m6_y0", a["x0"] + 1e-6 * (a["m6_y0"] - a["x0"])),
    }
    for prefix, violate in reported.items():
        assert _reported(judged(cid, copy_arrays(cid)), prefix) <= 1.0, prefix
        a = copy_arrays(cid)
        violate(a)
        assert _reported(judged(cid, a), prefix) > 1.0, prefix
    # the row sums are the engine's (reported): a P whose rows do not sum to 1 shows in them
    from attndyn.claims import model_equivalence

    real = model_equivalence.ad.attention_matrix
    monkeypatch.setattr(model_equivalence.ad, "attention_matrix", lambda *args, **kw: 1.001 * real(*args, **kw))
    assert _reported(judged(cid, copy_arrays(cid)), "M3 rows of P") > 1e-4


# --- causal and hardmax -------------------------------------------------------------------------


def test_causal_checks_fail_on_violations():
    cid = "causal"
    a = copy_arrays(cid)
    x = a["x0"][-1, 0, 0] + 1e-6
    a["x0"][-1, 0, 0] = x / np.linalg.norm(x)  # the first token moved
    assert failing(judged(cid, a), "Q = K = I: x_1 stationary")

    a = copy_arrays(cid)
    a["x0"][-1, 0, 1:] = a["x0"][0, 0, 1:]  # the final state replaced by the initial one
    assert failing(judged(cid, a), "Q = K = I: every token within 1e-6")

    a = copy_arrays(cid)
    a["x1"][-1, 0, 0] = -a["x1"][-1, 0, 0]
    assert failing(judged(cid, a), "random Q, K: x_1 stationary")

    a = copy_arrays(cid)
    normal = np.cross(a["x0"][50, 3, 0], [0.3, -0.5, 0.8])
    x = a["x0"][50, 3, 1] + 1e-7 * normal / np.linalg.norm(normal)  # token 2 of one seed turned by 1e-7 off its ODE at one save
    a["x0"][50, 3, 1] = x / np.linalg.norm(x)
    # a saved state off its run looks like integration error: the bound on it fails
    assert failing(judged(cid, a), "Q = K = I: token 2's integration error")
    a = copy_arrays(cid)
    a["fine_angle"][50, 3] += 1e-7  # the two runs agree, but both are off the ODE: the integration error is small, the angle wrong
    a["x0"][50, 3, 1] = x / np.linalg.norm(x)
    assert failing(judged(cid, a), "Q = K = I: token 2's angle")


def test_causal_reference_ode_is_more_accurate_than_the_budget_allows_it():
    """Issue 46: token 2's reference angle (SciPy DOP853) is judged against its separable ODE's exact solution,
    t(theta) = int_theta^theta0 dphi / (sin phi g(phi)), g = e^{cos - 1} / (e^{cos - 1} + 1), by quadrature. At rtol
    1e-12 the reference was 6.1e-11 off at this theta0 (seed 110, quick size, system 0), 60x the 1e-12 the
    budget allowed it, and the largest error in the check at four of the seeds 100-129. At REFERENCE_RTOL it is
    within 1e-12, and the judge's bound on it (the same ODE at 10x looser tolerance) is larger than its error."""
    from scipy.integrate import quad
    from scipy.optimize import brentq

    causal = load("causal")
    theta0, ts = 2.3759692810980573, np.arange(6.0)

    def speed(p):
        e = math.exp(math.cos(p) - 1.0)
        return math.sin(p) * e / (e + 1.0)

    def exact(t):
        if t == 0:
            return theta0
        elapsed = lambda th: quad(lambda p: 1.0 / speed(p), th, theta0, epsabs=0.0, epsrel=1e-13, limit=200)[0] - t  # noqa: E731
        return brentq(elapsed, theta0 * math.exp(-t) * 1e-3, theta0, xtol=1e-16, rtol=1e-15)

    truth = np.array([exact(t) for t in ts])
    reference = causal.token2_angle(1.0, theta0, ts)
    error = np.abs(reference - truth).max()
    assert error < 1e-12
    assert np.abs(reference - causal.token2_angle(1.0, theta0, ts, 10 * causal.REFERENCE_RTOL)).max() > error


def test_hardmax_checks_fail_on_violations():
    cid = "hardmax"
    base = copy_arrays(cid)
    z0 = base["z"][0, 0]
    target = (z0 @ z0.T).argmax(1)
    vertex = int(np.flatnonzero(target == np.arange(len(z0)))[0])
    mover = int(np.flatnonzero((target != np.arange(len(z0))) & (target[target] == target))[0])

    a = copy_arrays(cid)
    a["z"][-1, 0, vertex] += 1e-6  # a vertex moves
    assert failing(judged(cid, a), "self-argmax tokens")

    a = copy_arrays(cid)
    a["z"][-5:, 0, mover] += np.array([1e-4, -1e-4])  # off the straight path
    checks = judged(cid, a)
    assert failing(checks, "tokens with a fixed vertex")
    assert failing(checks, "collinearity")
    assert failing(checks, "geometric decay")

    a = copy_arrays(cid)
    a["z"][-1, 0, vertex] += 1e-12  # a vertex moves by far more than rounding
    assert failing(judged(cid, a), "self-argmax tokens")

    # the finite-beta comparison is reported: no small error moves a qualitative trend
    (finite,) = [c for name, c in judged(cid, copy_arrays(cid)).items() if name.startswith("finite beta")]
    assert finite.passed is None


def test_hardmax_passes_at_seed_119_where_a_token_starts_near_its_vertex():
    """Issue 46: at the quick size, seed 119, system 18's token 7 starts 0.0081 from its vertex. Its absolute
    rounding is that of any token (about 9e-15), so its collinearity residual, divided by |z0 - s|^2, was
    1.1e-12 against the old fixed 2e-13 (and its decay 2.64e-11 against 2.52e-11): a false alarm. Each
    token's band now comes from its own z0 and vertex (0.3 s at the quick size)."""
    from attndyn.claims.runner import config_for

    module = load("hardmax")
    result = module.run(config_for(module, seed=119, quick=True))
    checks = {name.split()[0]: c for name, c in result.checks.items()}
    assert result.verdict == "pass", {k: (c.value, c.threshold, c.worst_case) for k, c in checks.items()}
    # the old constant band fails this very run: the near token's own residual is above 2e-13
    zs = result.arrays["z"]
    z = zs[0, 18]
    s = z[(z @ z.T).argmax(1)[7]]
    u, w = zs[:, 18, 7] - s, z[7] - s
    assert np.linalg.norm(w) < 0.01
    residual = np.abs(u[:, 0] * w[1] - u[:, 1] * w[0]).max() / (w @ w)
    assert residual > 2e-13
    assert residual < module.collinearity_band(z[7], s, 0.01)


def test_hardmax_rounding_band_is_absolute_error_over_the_segment():
    """The band is B / |z0 - s| with B = sqrt(2) eps z_max / (1 - R(-h)): it scales with 1 / |z0 - s| and with
    the coordinates' size, and it is about 1.4 eps z_max / h."""
    hm = load("hardmax")
    eps = np.finfo(np.float64).eps
    s = np.array([3.0, -4.0])
    near, far = s + np.array([0.01, 0.0]), s + np.array([-1.0, 0.0])
    h = 0.01
    bound = hm.rounding_bound(near, s, h)
    assert bound == pytest.approx(math.sqrt(2) * eps * 4.0 / h, rel=0.01)
    assert hm.collinearity_band(near, s, h) == pytest.approx(bound / 0.01)
    assert hm.collinearity_band(near, s, h) / hm.collinearity_band(far, s, h) == pytest.approx(100.0)
    ts = np.arange(0, 51) * 0.1
    band = hm.decay_band(near[None], s[None], h, ts)
    assert band.shape == (1, 50)
    assert band.min() >= 3 * 10 * hm.rk4_rate_error(h)
    assert band[0, -1] > band[0, 0]  # the rounding weighs more as d shrinks
    with pytest.raises(ValueError, match="h <= 0.2"):
        hm.rounding_bound(near, s, 0.5)


# --- high-dimensional ---------------------------------------------------------------------------


def test_high_dimensional_checks_fail_on_violations():
    cid = "high-dimensional"
    base = copy_arrays(cid)
    top = int(np.argmax(base["w"]))

    a = copy_arrays(cid)
    a["w"][top] = -a["w"][top] * 1.5  # the eigenvalue of largest modulus is now negative: not a good triple
    assert failing(judged(cid, a), "the top eigenvalue is real")

    a = copy_arrays(cid)
    a["z"][-1, :, top] *= 1.01  # the top coordinate still moving
    assert failing(judged(cid, a), "Thm 4.2: the top eigen-coordinate converged")

    a = copy_arrays(cid)
    c = a["z"][-1, :, top]
    a["z"][-1, :, top] = np.linspace(c.min(), c.max(), len(c))  # limits spread over the whole interval
    checks = judged(cid, a)
    assert failing(checks, "Thm 4.2: every token's top eigen-coordinate")
    assert failing(checks, "Thm 4.2: distinct limits")


# --- the precision horizon ----------------------------------------------------------------------


def test_precision_horizon_separates_rounding_from_dynamics():
    import attndyn as ad
    from attndyn.analysis import numerics
    from attndyn.theory import matrices

    rng = np.random.default_rng(0)
    z0 = rng.uniform(-5, 5, (2, 30, 3))
    ts = np.linspace(0, 30, 61)
    rk4 = {"solver": ad.RK4(), "step": ad.FixedStep(0.02)}
    # Vc with Gaussian Q, K: the slow unstable coordinate (0.253) is decided by rounding after t ~ 16 (SPEC §4.6)
    V = matrices.VC()
    model = ad.Model(ad.Weights(rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), V), rescaled=True)
    h = numerics.precision_horizon(model, z0, ts, quantity=lambda z: geometry.unstable_projection(z, V), **rk4)
    assert np.isfinite(h.t).all()
    assert h.t.max() <= 25
    # at the horizon the two deviations are comparable; before it they keep the ratio of the perturbations
    k = int(np.searchsorted(ts, h.t[0]))
    assert h.small[k, 0] >= 0.1 * h.big[k, 0]
    assert h.small[1, 0] <= 1e-3 * h.big[1, 0]
    # V = I (Thm 3.1): contracting, no horizon within T
    calm = numerics.precision_horizon(ad.Model(ad.Weights.identity(3), rescaled=True), z0, ts, **rk4)
    assert np.isinf(calm.t).all()
    assert numerics.horizon_estimate(np.eye(3), 10.0) == float("inf")
    assert 10 < numerics.horizon_estimate(V, 10.0) < 30


def test_analyze_warns_past_the_precision_horizon():
    import attndyn as ad
    from attndyn.theory import matrices

    rng = np.random.default_rng(1)
    model = ad.Model(ad.Weights.from_value(matrices.VC()), rescaled=True)
    z0 = rng.uniform(-5, 5, (12, 3))
    short = ad.simulate(model, z0, np.linspace(0, 5, 11), solver=ad.RK4(), step=ad.FixedStep(0.05))
    long = ad.simulate(model, z0, np.linspace(0, 30, 31), solver=ad.RK4(), step=ad.FixedStep(0.05))
    assert ad.analyze(short, model).warnings == []
    assert "precision horizon" in ad.analyze(long, model).warnings[0]


# --- coverage: every judged check of every claim has a failing-input test above ----------------

FUNCTION_OF = {
    "polytope": "test_polytope_checks_fail_on_violations",
    "collapse": "test_collapse_checks_fail_on_violations",
    "hyperplanes": "test_hyperplanes_checks_fail_on_violations",
    "hyperplanes-negative-control": "test_negative_control_checks_fail_on_violations",
    "sphere": "test_sphere_checks_fail_on_violations",
    "boolean-1d": "test_boolean_1d_checks_fail_on_violations",
    "polytope-subspace": "test_polytope_subspace_checks_fail_on_violations",
    "model-equivalence": "test_model_equivalence_checks_fail_on_violations",
    "causal": "test_causal_checks_fail_on_violations",
    "hardmax": "test_hardmax_checks_fail_on_violations",
    "high-dimensional": "test_high_dimensional_checks_fail_on_violations",
    "long-context": "test_long_context_checks_fail_on_violations",
    "mode-selection": "test_mode_selection_checks_fail_on_violations",
    "kuramoto-closed-form": "test_kuramoto_checks_fail_on_violations",
    "mean-field-limit": "test_mean_field_limit_checks_fail_on_violations",
    "phase-diagram": "test_phase_diagram_checks_fail_on_violations",
    "normalization": "test_normalization_checks_fail_on_violations",
    "metastability": "test_metastability_checks_fail_on_violations",
    "gaussian-mean-field": "test_gaussian_mean_field_checks_fail_on_violations",
    "causal-position-bias": "test_causal_position_bias_checks_fail_on_violations",
    "rank-collapse": "test_rank_collapse_checks_fail_on_violations",
    "sinks": "test_sinks_checks_fail_on_violations",
    "trained-decoder": "test_trained_decoder_checks_fail_on_violations",
    "trained-interventions": "test_trained_interventions_checks_fail_on_violations",
    "noisy": "test_noisy_checks_fail_on_violations",
    "noisy-transition": "test_noisy_transition_checks_fail_on_violations",
    "common-noise": "test_common_noise_checks_fail_on_violations",
}


def _prefixes_tested(function: str) -> list[str]:
    """The check-name prefixes a violation test asserts as failing (failing(...) calls and dict keys)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "failing" and len(node.args) == 2:
            arg = node.args[1]
            if isinstance(arg, ast.Constant):
                out.append(arg.value)
            elif isinstance(arg, ast.JoinedStr):  # f"... {flow.upper()}": both flows of the loop
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values)
                out += [text.format(f) for f in ("SA", "USA")]
        if isinstance(node, ast.Dict):
            out += [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return out


@pytest.mark.parametrize("claim_id", [c for c in JUDGED if load(c).CLAIM.kind == "pass/fail"])
def test_every_judged_check_has_a_failing_input_test(claim_id):
    assert claim_id in FUNCTION_OF, f"{claim_id} is a pass/fail claim without a violation test"
    prefixes = _prefixes_tested(FUNCTION_OF[claim_id])
    judged_names = [name for name, c in tiny_result(claim_id).checks.items() if c.passed is not None]
    untested = [name for name in judged_names if not any(name.startswith(p) for p in prefixes)]
    assert not untested, f"{claim_id}: judged checks never seen to fail: {untested}"


def test_long_context_checks_fail_on_violations():
    cid = "long-context"
    a = copy_arrays(cid)
    a["cos_dense"][-1, 1] += 1e-9  # one layer off the exact cosine
    assert failing(judged(cid, a), "dense attention")
    a = copy_arrays(cid)
    a["cos_fused"][0, 0] -= 1e-9
    assert failing(judged(cid, a), "fused attention")
    # the closed form's approach to its limits is reported, not judged: no run can fail it
    (approach,) = [c for name, c in judged(cid, copy_arrays(cid)).items() if name.startswith("exact cosine")]
    assert approach.passed is None
    assert 0 < approach.value < 1


def test_mode_selection_checks_fail_on_violations():
    cid = "mode-selection"
    # an engine error moves the run and its half-perturbation twin alike (their difference is the budget)
    a = copy_arrays(cid)
    # particles whose mode 3 grows 3e-3 faster than lambda_3: log-amplitude gains 3e-3 lambda_3 t
    lam3 = theory.growth_rates(5.0, 2, [3])[0]
    for key in ("particle_amp", "particle_amp_half"):
        a[key][0, 0, :, 2] *= np.exp(3e-3 * lam3 * a["particle_ts"][0, 0])
    assert failing(judged(cid, a), "particles:")
    a = copy_arrays(cid)
    # a mean-field USA mode 2 off by 2e-5 relative
    lam2 = theory.growth_rates(5.0, 2, [2], usa=True)[0]
    for key in ("meanfield_amp", "meanfield_amp_half"):
        a[key][0, 1, :, 1] *= np.exp(2e-5 * lam2 * a["meanfield_ts"][0, 1])
    assert failing(judged(cid, a), "mean field:")
    a = copy_arrays(cid)
    # white noise whose spectrum peaks at mode 5 (five clusters, not k_max(5) = 3; mode 5 is resolved from 3 at any size)
    a["noise_power"][0, :, 4] = 2 * a["noise_power"][0].max(1)
    assert failing(judged(cid, a), "white noise at beta = 5")
    a = copy_arrays(cid)
    # S^2 particles whose degree 2 grows 3e-3 faster than lambda_2 (SA, beta = 5)
    lam2 = theory.growth_rates(5.0, 3, [2])[0]
    for key in ("s2_particle_amp", "s2_particle_amp_half", "s2_particle_amp_coarse"):
        a[key][0, 0, :, 1] *= np.exp(3e-3 * lam2 * a["s2_particle_ts"][0, 0])
    assert failing(judged(cid, a), "S^2 particles (d = 3)")
    a = copy_arrays(cid)
    # the S^2 solver's USA degree 1 off by 2e-5 relative
    lam1 = theory.growth_rates(5.0, 3, [1], usa=True)[0]
    for key in ("s2_meanfield_amp", "s2_meanfield_amp_half"):
        a[key][0, 1, :, 0] *= np.exp(2e-5 * lam1 * a["s2_meanfield_ts"][0, 1])
    assert failing(judged(cid, a), "S^2 mean field (zonal solver)")


def test_mode_selection_tolerances_are_measured_in_each_run():
    """Issue 33: no tolerance set from past measurements, no measured error quoted as fixed text; the
    budget is 3x the error the run measures by halving the perturbation."""
    from attndyn.claims import mode_selection as ms_claim

    assert not any(f.endswith("_tol") for f in ms_claim.Config.model_fields)
    assert not any(t in ms_claim.CLAIM.statement for t in ("4.3e-5", "4.3e-7", "2.6e-4", "7.2e-7"))
    checks = judged("mode-selection", copy_arrays("mode-selection"))
    for prefix in ("particles:", "mean field:", "S^2 particles", "S^2 mean field"):
        (c,) = [c for name, c in checks.items() if name.startswith(prefix)]
        assert "measured in this run" in c.note


def _linear_noise(systems: int, rng, boost4: float = 1.0, n: int = 256, saves: int = 61, dt: float = 0.2) -> dict:
    """White noise as linear theory at beta = 5 grows it: each system's mode-k power starts as X / n with X
    exponential (i.i.d. uniform angles) and grows by e^{2 lambda_k t}; ``boost4`` scales mode 4's start."""
    ks = np.arange(1, 41)
    lam = theory.growth_rates(5.0, 2, ks)
    ts = dt * np.arange(saves)
    X = rng.exponential(size=(systems, ks.size))
    X[:, 3] *= boost4
    each = X[None] / n * np.exp(2 * lam * ts[:, None, None])  # (saves, systems, K)
    return {"noise_times": ts[None], "noise_power": each.mean(1)[None], "noise_sample_power": each[..., :12]}


def test_mode_selection_peak_is_judged_where_the_run_resolves_it():
    """Issue 33: at beta = 5, lambda_4 is 12 % below lambda_3, so the peak of a seed average over a few dozen
    systems is mode 4 in some runs of correct dynamics (seed 28 at the quick size). The check accepts mode 4
    only where the run cannot resolve it (predicted gap below 3 measured sigma), and exactly 3 where it can."""
    from attndyn.claims.mode_selection import emerging_count

    name = "white noise at beta = 5"
    rng = np.random.default_rng(0)
    for _ in range(200):  # correct linear dynamics whose 32 systems happen to peak at mode 4
        noise = _linear_noise(32, rng)
        if emerging_count(noise["noise_power"][0], 0.25)[0] == 4:
            break
    else:
        raise AssertionError("no draw of 32 systems peaked at mode 4")
    (check,) = [c for k, c in judged("mode-selection", copy_arrays("mode-selection") | noise).items() if k.startswith(name)]
    assert check.value == 4  # the old rule (peak == k_max = 3) fails this run
    assert check.passed is True, check
    assert "4" in check.threshold
    # 4000 systems resolve mode 4 from mode 3: a peak at 4 (a start biased towards it) fails, a peak at 3 passes
    noise = _linear_noise(4000, rng, boost4=2.5)
    checks = judged("mode-selection", copy_arrays("mode-selection") | noise)
    (check,) = [c for k, c in checks.items() if k.startswith(name)]
    assert check.value == 4
    assert check.threshold == "in {3}"
    assert failing(checks, name)
    noise = _linear_noise(4000, rng)
    (check,) = [c for k, c in judged("mode-selection", copy_arrays("mode-selection") | noise).items() if k.startswith(name)]
    assert check.value == 3
    assert check.threshold == "in {3}"
    assert check.passed is True
    # a run without per-system powers (saved before they were kept) judges nothing and fails
    a = copy_arrays("mode-selection")
    del a["noise_sample_power"]
    assert failing(judged("mode-selection", a), name)


def test_kuramoto_checks_fail_on_violations():
    cid = "kuramoto-closed-form"
    a = copy_arrays(cid)
    a["meanfield_R"][-1] += 1e-11  # a mean field off by more than 3x its discretisation error
    assert failing(judged(cid, a), "mean field:")
    a = copy_arrays(cid)
    a["R_strat512"][-1] += 0.03  # stratified particles 0.03 off R(T) (about 10 standard errors)
    assert failing(judged(cid, a), "stratified particles")
    # the fitted exponent is reported, not judged (issue 33: a band on one slope is not derived and
    # failed correct dynamics at seeds 14 and 18); the stratified check carries the verdict
    (slope,) = [c for name, c in judged(cid, copy_arrays(cid)).items() if name.startswith("particles: fitted exponent")]
    assert slope.passed is None
    assert -1.0 < slope.value < 0.0
    a = copy_arrays(cid)
    Rn = a["R_strat256"]
    Rn[1:] += 12 * Rn[1:].std(1, ddof=1, keepdims=True) / np.sqrt(Rn.shape[1])  # every save 12 standard errors off
    assert failing(judged(cid, a), "stratified particles")


def test_mean_field_limit_checks_fail_on_violations():
    cid = "mean-field-limit"
    a = copy_arrays(cid)
    # one lattice system's cos 2 theta at T (beta = 1) off the mean field by 1e-8 (about 40 times its error budget)
    a["s1_moments_b0"][-1, 2, 1] += 1e-8
    assert failing(judged(cid, a), "S^1: |particle Fourier moment")
    a = copy_arrays(cid)
    a["s1_step_error_b0"][2, 3] = 2e-8  # an integration error above its bound
    assert failing(judged(cid, a), "S^1: integration error")
    # the i.i.d. W1 exponent is reported, not judged: it cannot see a small error in the dynamics
    (slope,) = [c for name, c in judged(cid, copy_arrays(cid)).items() if name.startswith("fitted exponent p")]
    assert slope.passed is None
    a = copy_arrays(cid)
    # every S^2 system's degree-3 moment at T moved by 3e-3 (about 11 standard errors at the tiny size)
    a["s2_moments_b1"][-1, :, 2] += 3e-3
    assert failing(judged(cid, a), "S^2 (d = 3): |particle zonal moment")
    a = copy_arrays(cid)
    a["s2_step_error_b0"][2, 1] = 1.0  # an integration error far above the standard error
    assert failing(judged(cid, a), "S^2 (d = 3): integration error")


def test_phase_diagram_checks_fail_on_violations():
    cid = "phase-diagram"
    a = copy_arrays(cid)
    for key in ("paired_crossing", "halving_crossing"):  # the largest d's boundary half a time unit late, at every lam
        a[key] += 0.5
    a["crossing"][-1] += 0.5
    assert failing(judged(cid, a), "every beta: |t50 - t*|")
    a = copy_arrays(cid)
    for key in ("crossing", "paired_crossing", "halving_crossing"):  # every time read on a clock 3 % fast
        a[key] *= 1.03
    assert failing(judged(cid, a), "every beta: |t50 - t*|")
    a = copy_arrays(cid)
    a["crossing"][-1] = a["crossing"][0] + 1.0  # the largest d crosses a time unit later than the smallest: it moved away
    assert failing(judged(cid, a), "the boundary approaches")
    a = copy_arrays(cid)
    a["orth_rho"][0, -1] += 1e-6  # the orthogonal start off the equiangular ODE
    assert failing(judged(cid, a), "orthogonal start")
    a = copy_arrays(cid)
    a["orth_spread"][0] = 1e-5  # pairs no longer equiangular
    assert failing(judged(cid, a), "orthogonal start")


def test_phase_diagram_budget_is_the_largest_d_own():
    """The largest d's budget is measured in its own run (issue 33): the smaller d's error does not enter it, and
    a bias at lam = 1 that falls as lam^2 is removed by the extrapolation (a bias that does not fall is not)."""
    cid = "phase-diagram"
    name = "every beta: |t50 - t*|"

    def check(a):
        (hit,) = [c for n, c in judged(cid, a).items() if n.startswith(name)]
        return hit

    base = check(copy_arrays(cid))
    assert base.passed is True
    a = copy_arrays(cid)
    a["crossing"][0] += 2.0  # d = 8 two time units late: borrowed, this widened the d = 64 budget by 0.13-0.38 t*
    assert check(a).value == base.value
    # 5 % of t* added to every crossing time at the largest d in proportion to lam^2: a finite-d bias, removed
    stars = np.array([load(cid).t_star(float(b), 32) for b in a["betas"]])[:, None, None, None]
    a = copy_arrays(cid)
    a["crossing"][-1] += 0.05 * stars
    for k, lam in enumerate(a["gram_scales"]):
        a["paired_crossing"][k] += 0.05 * lam**2 * stars
    a["halving_crossing"] += 0.05 * a["gram_scales"][0] ** 2 * stars[:, 0, 0]  # the step-halving run is the first lam's
    moved = check(a)
    assert moved.passed is True
    assert abs(moved.value - base.value) < 0.01 * base.value
    # the same 5 % at every lam is no finite-d bias: it stays in the extrapolated value and fails
    a = copy_arrays(cid)
    a["crossing"][-1] += 0.05 * stars
    a["paired_crossing"] += 0.05 * stars
    a["halving_crossing"] += 0.05 * stars[:, 0, 0]
    assert check(a).passed is False


def test_phase_diagram_richardson_weights_are_exact():
    from attndyn.claims.phase_diagram import richardson

    w = richardson(np.array([0.5, 0.25]))
    assert np.allclose(w, [-1 / 3, 4 / 3], rtol=0, atol=1e-15)
    w3 = richardson(np.array([1.0, 0.5, 0.25]))
    assert np.allclose(w3, [1 / 45, -4 / 9, 64 / 45], rtol=0, atol=1e-15)
    lams = np.array([1.0, 0.5, 0.25])
    assert abs(w3 @ (2.0 + 3.0 * lams**2 - 5.0 * lams**4) - 2.0) < 1e-13  # a quadratic in lam^2 extrapolates exactly


def test_normalization_checks_fail_on_violations():
    cid = "normalization"
    a = copy_arrays(cid)
    a["rates"][4, 2] *= 1 + 1e-9  # Peri-LN's pair rate off the closed form
    assert failing(judged(cid, a), "every scheme and pair")
    a = copy_arrays(cid)
    a["post_rho"] = 1 - (1 - a["post_rho"]) ** 0.8  # Post-LN decaying at rate 1.6, not 2
    assert failing(judged(cid, a), "Post-LN: |rho(t)")
    a = copy_arrays(cid)
    a["post_rho"][200] += 1e-9  # one save off the equiangular ODE by far more than the integration error
    assert failing(judged(cid, a), "Post-LN: |rho(t)")
    a = copy_arrays(cid)
    a["pre_rho"] = 1 - (1 - a["pre_rho"]) ** 0.5  # Pre-LN like t^-1
    assert failing(judged(cid, a), "Pre-LN")


def test_metastability_checks_fail_on_violations():
    cid = "metastability"
    a = copy_arrays(cid)
    a["energy1"] = a["energy1"] * (1 - 3e-3)  # every plateau of one run 3e-3 below sum m^2 (reported: the value sees it)
    assert _reported(judged(cid, a), "every plateau of") > 2e-3
    a = copy_arrays(cid)
    for key in ("pair", "pair_tight"):  # c' = 1.9 (1 - c^2), not 2, in both tolerance runs (their difference is the budget)
        a[f"{key}_c"] = theory.pairing_cosine(a[f"{key}_s"] * 0.95, a[f"{key}_c"][0])
    assert failing(judged(cid, a), "pairing at beta = 100: max |c(s) - exact")
    a = copy_arrays(cid)
    # one judged merge 1e-6 late in ln t (SA: beta = 60's third, USA: beta = 1000's last), in both tolerance runs
    # (the law is judged at the last accepted step before each merge)
    for key, m in (("before_merge_t1", -2), ("before_merge_t_tight1", -2), ("usa_before_merge_t1", -1), ("usa_before_merge_t_tight1", -1)):
        a[key][m] *= 1 + 1e-6
    checks = judged(cid, a)
    assert failing(checks, "plateau lengths: |ln")
    assert failing(checks, "USA (the authors' start")
    a = copy_arrays(cid)
    a["logit_gap"][0] = 800.0  # an interaction below e^-745 was flushed to zero
    assert failing(judged(cid, a), "largest logit gap")
    a = copy_arrays(cid)
    for key in ("mass_before_merge_t0", "mass_before_merge_t_tight0"):  # the unequal-mass merge 1e-6 late in ln t, in both runs
        a[key][-1] *= 1 + 1e-6
    assert failing(judged(cid, a), "unequal masses")


def test_metastability_merge_steps_are_found_by_state_not_by_time():
    """Issue 33 (seeds 24, 29): past t ~ 1e16 a step shorter than t's rounding leaves t unchanged, so the step of a
    merge cannot be found by its time (searchsorted picked an earlier step with the same t, whose tokens were not yet
    merged, and the law was then read from the wrong state). The merge's step is the one at which the tokens first
    share a position; the state before it is the last accepted step."""
    from types import SimpleNamespace

    x = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    merged = x.copy()
    merged[1] = merged[0]
    xs = np.stack([x, x * 1.0, x * 1.0, merged, merged])
    xs[1, 1] = [0.8, 0.6]  # the steps before the merge move token 1 towards token 0
    xs[2, 1] = [0.9, math.sqrt(1 - 0.81)]
    t = np.array([0.0, 1e17, 1e17, 1e17, 2e17])  # three steps at one float64 time
    traj = SimpleNamespace(steps={"t": t, "xs": xs}, merges=[(1e17, 0, 1)], xs=xs)
    a = load("metastability")._merge_arrays(traj, "", "0")
    np.testing.assert_array_equal(a["after_merge0"][0], merged)
    np.testing.assert_array_equal(a["before_merge0"][0], xs[2])
    assert a["before_merge_t0"].tolist() == [1e17]


def test_metastability_law_holds_at_the_step_before_the_merge():
    """The isolated pair (the pairing start, other interactions e^{-139} of the pair's) at beta = 160, c0 = 0.8688
    (seed 24's first merge): ln t at the last accepted step before the merge against the two-cluster law integrated
    to the distance that step holds (an independent quadrature) is within 3x the integration error measured by the
    10x tighter run. The merge time itself overshoots the crossing of the merge distance by up to one step."""
    from attndyn.core.longtime import simulate_long

    meta = load("metastability")
    beta, c0 = 160.0, 0.8688
    model = ad.Model(ad.Weights.identity(3), beta=beta, geometry="sphere")
    x0 = meta.pair_start(c0)
    ts = np.concatenate([[0.0], np.exp(np.linspace(-3.0, beta * (1 - c0) + 5.0, 50))])
    a = {"start": x0, "betas": np.array([beta]), "energy0": np.zeros(1)}
    a |= meta._merge_arrays(simulate_long(model, x0, ts, every_step=True), "", "0")
    a |= meta._merge_arrays(simulate_long(model, x0, ts, every_step=True, **meta.TIGHT), "", "_tight0")
    (row,) = [r for r in meta.merge_table(a, None) if r["masses"] == (1, 1) and r["merge"] == 0]
    assert row["isolation"] < 1e-50
    assert 0 < row["u_end"] < 1e-17
    assert abs(row["log_dt"] - row["law"]) <= 3 * row["integration"] + meta.ROUNDING
    assert row["integration"] < 1e-8


def test_metastability_judges_the_law_s_mass_factor(monkeypatch):
    """Issue 33, finding 6: with the two-cluster law's masses replaced by equal ones (k = 2 in place of
    m_b/m_a + m_a/m_b), the unequal-mass merge is off by ln(5/4) = 0.22 and its check fails; the random
    starts' judged SA merges, all equal-mass, cannot see it."""
    cid = "metastability"
    law = theory.pair_log_time
    checks = judged(cid, copy_arrays(cid))
    name = next(n for n in checks if n.startswith("unequal masses"))
    assert checks[name].passed is True
    assert checks[name].n_judged == 1
    masses = [m["masses"] for m in load(cid).merge_table(copy_arrays(cid), tiny_config(cid), "mass_") if np.isfinite(m["law"])]
    assert sorted(masses[0]) == [1, 2]
    monkeypatch.setattr(theory, "pair_log_time", lambda beta, c0, ma, mb, **kw: law(beta, c0, 1, 1, **kw))
    assert failing(judged(cid, copy_arrays(cid)), "unequal masses")


def test_gaussian_mean_field_checks_fail_on_violations():
    cid = "gaussian-mean-field"
    tampered = {}
    for k in (0, 1):
        a = copy_arrays(cid)
        a[f"moments{k}"][5] *= 1.05  # every moment of every system 5 % off the ODE at t*/4
        a[f"step_error{k}"][3] = 1e-3  # an integration error of the size of the sampling error
        tampered[k] = judged(cid, a)
    assert failing(tampered[0], "Q = K = V = I: |particle moment")
    assert failing(tampered[0], "Q = K = V = I: integration error")
    assert failing(tampered[1], "non-symmetric Q, K, V: |particle moment")
    assert failing(tampered[1], "non-symmetric Q, K, V: integration error")
    a = copy_arrays(cid)
    a["linear_velocity"][3] *= 1 + 1e-9  # the field at one save 1e-9 off the exact identity
    assert failing(judged(cid, a), "linear attention: |C' - 2 beta C^2|")
    a = copy_arrays(cid)
    a["linear"][-1] *= 1 + 1e-9  # an engine error moves both tolerance runs (their difference is the budget)
    a["linear_fine"][-1] *= 1 + 1e-9
    assert failing(judged(cid, a), "linear attention: |C(t) - C0")


def test_causal_position_bias_checks_fail_on_violations():
    cid = "causal-position-bias"
    tampered = {}
    for key in ("euler", "rk4", "flow"):
        a = copy_arrays(cid)
        a[key][-1, 5, 1] += 1e-8  # one coordinate of one token off the exact solution
        if key == "flow":  # an engine error moves both tolerance runs (their difference is the budget)
            a["flow_fine"][-1, 5, 1] += 1e-8
        tampered[key] = judged(cid, a)
    assert failing(tampered["euler"], "beta = 0: Euler steps")
    assert failing(tampered["rk4"], "beta = 0: RK4 steps")
    assert failing(tampered["flow"], "beta = 0: adaptive flow")
    a = copy_arrays(cid)
    a["rollout"][99] *= 1 + 1e-9  # the weight of token 100 off by 1e-9 (relative)
    assert failing(judged(cid, a), "rollout of the engine's attention")
    a = copy_arrays(cid)
    a["rollout"][-1] *= 1 + 1e-9  # the last token's weight off the closed form
    a["rollout_exact"][-1] *= 1 + 1e-9  # and the exact row with it: the closed form still catches it
    assert failing(judged(cid, a), "rollout of the engine's attention")


def test_causal_position_bias_compares_with_values_computed_in_the_run():
    """Issue 33: no reference numbers typed from SPEC; the last weight's closed form (a + (1-a)/n)^H in the run."""
    from attndyn.claims import causal_position_bias as cpb

    assert not any(name.startswith("REFERENCE_W") or name == "REFERENCE_LAST" for name in vars(cpb))
    a = copy_arrays(cid := "causal-position-bias")
    (check,) = [c for name, c in judged(cid, a).items() if name.startswith("rollout of the engine")]
    n, H, w = cpb.REFERENCE_N, cpb.REFERENCE_H, cpb.REFERENCE_A
    assert f"{(w + (1 - w) / n) ** H:.6g}" in check.note
    # the exact row by separate code: the weights of the last token under H steps of a I + (1 - a) C, C_ij = 1/i
    C = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    row = np.eye(n)[-1]
    for _ in range(H):
        row = w * row + (1 - w) * (row @ C)
    np.testing.assert_allclose(a["rollout_exact"], row, rtol=1e-12)


def test_the_polygon_s_jacobian_is_the_engine_s_and_v_minus_i_is_stable():
    """The circulant eigenvalues against a finite-difference Jacobian of the engine's field in angles."""
    from attndyn.claims.rank_collapse import polygon_jacobian_eigenvalues

    n = 8
    for c in (-1.0, 1.0):
        sphere = ad.Model(ad.Weights(np.eye(2), np.eye(2), c * np.eye(2)), beta=1.0, geometry="sphere")

        def angle_speed(th, sphere=sphere):
            x = np.stack([np.cos(th), np.sin(th)], -1)
            v = ad.velocity(0.0, x, sphere)
            return -np.sin(th) * v[:, 0] + np.cos(th) * v[:, 1]

        th0, h = 2 * np.pi * np.arange(n) / n, 1e-6
        J = np.stack([(angle_speed(th0 + h * e) - angle_speed(th0 - h * e)) / (2 * h) for e in np.eye(n)], 1)
        np.testing.assert_allclose(np.sort(np.linalg.eigvalsh((J + J.T) / 2)), np.sort(polygon_jacobian_eigenvalues(n, 1.0, c)), atol=1e-8)
    lam = np.sort(polygon_jacobian_eigenvalues(n, 1.0, -1.0))
    assert lam[-1] == pytest.approx(0.0, abs=1e-15)  # V = -I: only the rotation is neutral
    assert lam[-2] < 0


@pytest.mark.parametrize("w", [2, 3, 4, 8, 9, 31, 32])
def test_the_uniform_matrix_on_a_window_has_second_eigenvalue_one_half(w):
    """Issue 33: windows delay collapse but do not slow it; U is the engine's attention at beta = 0."""
    from attndyn.claims.rank_collapse import second_eigenvalue, uniform_on_mask

    kw = {"mask": "window", "window": w}
    x = np.random.default_rng(0).normal(size=(32, 3))
    U = ad.attention_matrix(ad.Model(ad.Weights.identity(3), beta=0.0, **kw), x)[0].numpy()
    np.testing.assert_allclose(uniform_on_mask(32, kw), U, atol=1e-16)
    assert second_eigenvalue(U) == pytest.approx(0.5, rel=1e-12)
    assert second_eigenvalue(uniform_on_mask(32, {"mask": "causal"})) == pytest.approx(0.5, rel=1e-12)


def test_rank_collapse_judges_no_floor_dependent_rate_and_reports_the_delay():
    cid = "rank-collapse"
    checks = judged(cid, copy_arrays(cid))
    assert not any(name.startswith("median collapse rates ordered") for name in checks)
    (eff,) = [c for name, c in checks.items() if name.startswith("effective rates")]
    (delay,) = [c for name, c in checks.items() if name.startswith("layers to reach")]
    assert eff.passed is None
    assert delay.passed is None
    late = tiny_result(cid).info["late"]
    assert set(late) == {"causal", "window 8", "window 4"}
    for r, ln_lam2, _ in late.values():
        assert ln_lam2 == pytest.approx(math.log(0.5), rel=1e-12)
        assert r == pytest.approx(math.log(0.5), rel=1e-2)


def test_rank_collapse_checks_fail_on_violations():
    cid = "rank-collapse"
    stalled = {}
    for k in range(4):
        a = copy_arrays(cid)
        a[f"mu{k}"][-1, 0] = a[f"mu{k}"][0, 0] * 1e-6  # one system stalls at 1e-6
        stalled[k] = judged(cid, a)
    assert failing(stalled[0], "full: mu(X_L)")
    assert failing(stalled[1], "causal: mu(X_L)")
    assert failing(stalled[2], "window 8: mu(X_L)")
    assert failing(stalled[3], "window 4: mu(X_L)")
    first, late = {}, {}
    for k in range(4):
        a = copy_arrays(cid)
        a[f"first{k}"][1] *= 1 + 1e-9  # A_0's first layer off by 1e-9 for one system
        first[k] = judged(cid, a)
        a = copy_arrays(cid)
        # every layer contracts by 0.55 instead of A(X)'s own factor: late rate ln 0.55, not ln 1/2
        m = a[f"mu{k}"]
        a[f"mu{k}"] = m[0] * 0.55 ** np.arange(m.shape[0])[:, None]
        a[f"first{k}"] = a[f"mu{k}"][1]
        late[k] = judged(cid, a)
    assert failing(first[0], "full: first layer")
    assert failing(first[1], "causal: first layer")
    assert failing(first[2], "window 8: first layer")
    assert failing(first[3], "window 4: first layer")
    assert failing(late[1], "causal: late rate")
    assert failing(late[2], "window 8: late rate")
    assert failing(late[3], "window 4: late rate")
    a = copy_arrays(cid)
    # the flow from the perturbed polygon with V = +I (an equilibrium too, but the gaps grow)
    plus = ad.Model(ad.Weights(np.eye(2), np.eye(2), np.eye(2)), beta=1.0, geometry="sphere")
    a["polygon_flow"] = ad.simulate(plus, a["polygon"], a["polygon_ts"], solver=ad.Dopri5(), step=ad.AdaptiveStep(rtol=1e-10, atol=1e-12)).xs.numpy()
    assert failing(judged(cid, a), "post-LN, V = -I, perturbed polygon")
    a = copy_arrays(cid)
    a["spec0"][:, 0] *= 1.05
    a["spec1"][:, 0] *= 1.05
    checks = judged(cid, a)
    assert failing(checks, "sigma = 0.5: bulk moments")
    assert failing(checks, "sigma = 1: bulk moments")


def test_sinks_checks_fail_on_violations():
    """Issue 33, finding 9: the exact identities are judged (to rounding), not reported."""
    cid = "sinks"
    a = copy_arrays(cid)
    a["drift_unnormalized"][-1] = 1e-12  # USA's other tokens at the largest b 1e-12 off b = 0's
    assert failing(judged(cid, a), "USA: max |x_i(t; b)")
    moved = {}
    for flow in ("softmax", "unnormalized"):
        a = copy_arrays(cid)
        a[f"sink_{flow}"][0] = 1e-12  # the sink moved
        moved[flow] = judged(cid, a)
    assert failing(moved["softmax"], "softmax: the sink never moves")
    assert failing(moved["unnormalized"], "USA: the sink never moves")


def test_trained_decoder_checks_fail_on_violations():
    """Issue 34, item 9: the derivable identities of the real SmolLM2 run are judged, each seen to fail."""
    from attndyn.models.decoder_files import smollm2_available

    ok, why = smollm2_available()
    if not ok:
        pytest.skip(why)
    cid = "trained-decoder"
    a = copy_arrays(cid)
    a["twin_vs_sublayer"] = a["twin_vs_sublayer"] + 1e-9  # the twin's step 1e-9 off the sublayer
    assert failing(judged(cid, a), "the twin's one step is the attention sublayer")
    a = copy_arrays(cid)
    a["twin_one_step_rope_ffn"][0] = 1e-8
    assert failing(judged(cid, a), "the layer's own maps with RoPE")
    a = copy_arrays(cid)
    a["twin_ffn_share_shapley"][0] += 1e-5
    assert failing(judged(cid, a), "the Shapley shares of attention and feed-forward")
    a = copy_arrays(cid)
    a["uniform_leaders"][0, -1] = [0, 2, 1]
    assert failing(judged(cid, a), "uniform causal attention's leaders")
    a = copy_arrays(cid)
    a["uniform_sink_rate"][0, -1] = 1.0 - a["uniform_sink_rate"][0, -1]
    assert failing(judged(cid, a), "uniform causal attention's sink rate")


def test_trained_interventions_checks_fail_on_violations():
    """Issue 50, item 7: each judged check of the interventions claim fails on a violating input (the saved arrays
    edited), and the hook oracle cannot pass when transformers did not run."""
    cid = "trained-interventions"
    a = copy_arrays(cid)
    a["identity_diff"][-1] = 2e-16  # scale by 1 at the last block moved one logit by one unit in the last place
    assert failing(judged(cid, a), "identity edits change nothing")
    a = copy_arrays(cid)
    a["zeroed_skip_diff"][0] = 1e-16
    assert failing(judged(cid, a), "a block whose update is zeroed")
    a = copy_arrays(cid)
    a["uniform_block_err"][1] = 2e-12
    assert failing(judged(cid, a), "uniform attention at block 1 equals uniform causal attention computed in NumPy")
    a = copy_arrays(cid)
    a["uniform_null_err"][0] = 2e-12
    assert failing(judged(cid, a), "uniform attention at every block equals the uniform null")
    a = copy_arrays(cid)
    a["hook_err"][3] = 2e-10  # one edit 2e-10 off transformers with hooks
    assert failing(judged(cid, a), "the hook oracle")
    a = copy_arrays(cid)
    a["hook_moved"][0] = 1e-7  # an edit that does not move the logits: the oracle could not have failed on it
    assert failing(judged(cid, a), "the hook oracle")
    a = copy_arrays(cid)
    a["hook_plain_err"][0] = 1e-9  # the unedited forward off transformers
    assert failing(judged(cid, a), "the hook oracle")
    a = copy_arrays(cid)
    a["hook_ran"][0], a["hook_err"], a["hook_moved"], a["hook_plain_err"] = 0.0, np.zeros(0), np.zeros(0), np.zeros(0)
    checks = judged(cid, a)
    assert failing(checks, "the hook oracle")
    (oracle,) = [c for name, c in checks.items() if name.startswith("the hook oracle")]
    assert "transformers is not importable" in oracle.note


def test_noisy_checks_fail_on_violations():
    """Issue 33, finding 9: the order parameter is judged against the n-particle Gibbs law above and below the threshold.

    A violation moves both runs (dt and dt / 2) alike: one that moved only the dt / 2 run would be read as step error.
    """
    cid = "noisy"
    kappas = list(tiny_result(cid).arrays["kappas"])
    a = copy_arrays(cid)
    k = kappas.index(6.0)
    a[f"R{k}"], a[f"R_half{k}"] = a[f"R{k}"] + 0.01, a[f"R_half{k}"] + 0.01  # kappa = 6 read 0.01 high (budget about 0.004)
    assert failing(judged(cid, a), "above the threshold (kappa > 2)")
    a = copy_arrays(cid)
    k = kappas.index(1.5)
    a[f"R{k}"], a[f"R_half{k}"] = a[f"R{k}"] * 1.5, a[f"R_half{k}"] * 1.5  # the floor read 1.5x, as the old quick size did
    assert failing(judged(cid, a), "below the threshold (kappa < 2)")


def test_noisy_transition_checks_fail_on_violations():
    """Issue 53: each judged check of noisy-transition fails on a violating input (the saved arrays edited)."""
    cid = "noisy-transition"
    a = copy_arrays(cid)
    a["rate"][0, 2] *= 1 + 1e-5  # the measured kappa_lin 1e-5 off (tolerance 1e-6)
    assert failing(judged(cid, a), "kappa_lin: |measured / closed form - 1|")
    a = copy_arrays(cid)
    a["branch"][0, 3] = -abs(a["branch"][0, 3])  # a subcritical coefficient below beta*
    checks = judged(cid, a)
    assert failing(checks, "direction: the branch's Landau coefficient")
    assert failing(checks, "Landau coefficient: |branch")
    a = copy_arrays(cid)
    a["branch"][0, 5] = a["branch"][0, 8] * 0.99  # a hysteresis window below beta*
    assert failing(judged(cid, a), "hysteresis: kappa_sn < kappa_lin")
    a = copy_arrays(cid)
    a["branch"][-3, 5] = a["branch"][-3, 8]  # no window at beta = 3 > beta*
    assert failing(judged(cid, a), "hysteresis: kappa_sn < kappa_lin")


def test_common_noise_checks_fail_on_violations():
    """Issue 53: each judged check of common-noise fails on a violating input (the saved arrays edited)."""
    cid = "common-noise"
    a = copy_arrays(cid)
    a["moments"][3] += 0.05  # the chain at its largest depth off by 0.05: its error no longer halves
    assert failing(judged(cid, a), "weak convergence: |order-1 Richardson")
    a = copy_arrays(cid)
    a["moments"][-1] += 0.05  # the Ito scheme's finer run off by 0.05
    assert failing(judged(cid, a), "Ito form with its correction vs Stratonovich form")
    a = copy_arrays(cid)
    a["drift_free_d3"][0, 0] = 1e-10  # one path's Gram matrix moved by 1e-10 (tolerance 1e-12)
    assert failing(judged(cid, a), "no drift, antisymmetric noise: max |Gram(T) - Gram(0)|")
    a = copy_arrays(cid)
    a["drift_free_d5"][:, 1] += 0.1  # the one-token mean cosine 0.1 off e^{-(d-1) T / kappa}
    assert failing(judged(cid, a), "one token: |E<X_T, X_0>")
