"""The command line: simulate a tiny config; bad configs exit 2 with one line."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attndyn.app.cli import app
from attndyn.workflow.files import load_run
from tests.helpers import ROOT

runner = CliRunner()

TINY = """
seed = 3
n = 5
d = 2
[init]
kind = "uniform"
low = -2.0
high = 2.0
[model]
rescaled = true
[solver]
method = "rk4"
dt = 0.05
t1 = 1.0
save_every = 0.25
"""


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("attndyn ")


def simulated(tmp_path, text: str, name: str = "run") -> tuple[Path, Path]:
    """Write ``text`` as a config, run ``attndyn simulate`` on it (which must succeed): (config, run folder)."""
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(text)
    out = tmp_path / name
    result = runner.invoke(app, ["simulate", str(cfg), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return cfg, out


def test_simulate_writes_a_complete_run(tmp_path):
    cfg, out = simulated(tmp_path, TINY)
    run = load_run(out)
    assert run["arrays"]["xs"].shape == (5, 5, 2)
    np.testing.assert_allclose(run["arrays"]["ts"], [0, 0.25, 0.5, 0.75, 1.0])
    assert run["config"]["solver"]["dt"] == 0.05
    assert run["summary"]["stats"] == {"nfev": 80, "steps": 20, "rejected": 0}
    assert (out / "trajectory.png").stat().st_size > 1000
    # same seed, same trajectory
    out2 = tmp_path / "run2"
    assert runner.invoke(app, ["simulate", str(cfg), "--out", str(out2)]).exit_code == 0
    np.testing.assert_array_equal(load_run(out2)["arrays"]["xs"], run["arrays"]["xs"])
    assert not list(out.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (TINY.replace("t1 = 1.0", "t1 = 1.0\ndtt = 3"), "solver.dtt: unknown key; did you mean 'dt'?"),
        (TINY.replace("[model]", "[modle]"), "modle: unknown key; did you mean 'model'?"),
        (TINY.replace("t1 = 1.0", "t1 = 1.0\nzzzz = 3"), "solver.zzzz: unknown key; the keys here are "),
        (TINY.replace('kind = "uniform"', 'kind = "cube"'), "init.kind"),
        (TINY.replace("dt = 0.05", "dt = 0.03"), "not a multiple of dt"),
        (TINY + '\n[weights]\nV = { kind = "diagonal" }\n', "needs the key 'diag'"),
        (TINY.replace("seed = 3", ""), "seed: Field required"),
        ("this is = = not toml", "not valid TOML"),
        (TINY.replace("d = 2", 'd = 2\ndtype = "float16"'), "dtype: Input should be 'float64' or 'float32'"),
        (TINY.replace("d = 2", 'd = 2\ndevice = "banana"'), "device = 'banana' is not a device name"),
    ],
)
def test_bad_config_exits_2_with_one_line(tmp_path, text, expected):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    out = tmp_path / "run"
    result = runner.invoke(app, ["simulate", str(cfg), "--out", str(out)])
    assert result.exit_code == 2
    assert expected in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


SPHERE = """
seed = 4
n = 5
d = 3
[init]
kind = "sphere"
[model]
beta = 20.0
geometry = "sphere"
[solver]
"""
NOISY = SPHERE + 'method = "euler"\ndt = 0.01\nt1 = 0.5\nsave_every = 0.1\nkappa = 4.0\n'
LONG = SPHERE + 'method = "long"\nrtol = 1e-10\natol = 1e-12\nt1 = 1e30\nsave_log = 40\n'


def test_noisy_config_runs_the_sde_with_its_own_seed_stream(tmp_path):
    """solver.kappa: the run equals attndyn.core.noise.simulate_sde with the config's noise seed (so a seed reproduces the path)."""
    from attndyn.core import noise
    from attndyn.workflow.schema import load_config
    from attndyn.workflow.setup import build

    cfg, out = simulated(tmp_path, NOISY)
    xs = load_run(out)["arrays"]["xs"]
    setup = build(load_config(cfg))
    assert setup.kind == "sde"
    _, direct = noise.simulate_sde(setup.model, setup.x0, setup.ts, kappa=4.0, dt=0.01, seed=setup.noise_seed)
    np.testing.assert_array_equal(xs, direct)
    np.testing.assert_allclose(np.linalg.norm(xs, axis=-1), 1.0, atol=1e-12)
    # the noise moves the tokens: not the deterministic run
    _, quiet = simulated(tmp_path, NOISY.replace("kappa = 4.0\n", ""), "quiet")
    assert np.abs(load_run(quiet)["arrays"]["xs"][-1] - xs[-1]).max() > 1e-3


def test_long_config_runs_simulate_long_on_log_spaced_times(tmp_path):
    import attndyn as ad
    from attndyn.workflow.schema import load_config
    from attndyn.workflow.setup import build

    cfg, out = simulated(tmp_path, LONG)
    run = load_run(out)
    ts, xs = run["arrays"]["ts"], run["arrays"]["xs"]
    assert ts[0] == 0
    assert ts[1] == pytest.approx(1e-2)
    assert ts[-1] == pytest.approx(1e30)
    setup = build(load_config(cfg))
    direct = ad.simulate_long(setup.model, setup.x0, setup.ts)
    np.testing.assert_array_equal(xs, direct.xs)
    assert run["summary"]["stats"]["merges"] == len(direct.merges) >= 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NOISY.replace('method = "euler"', 'method = "rk4"'), "projected Euler-Maruyama"),
        (NOISY.replace('geometry = "sphere"', 'geometry = "euclidean"'), "noisy model lives on the sphere"),
        (LONG.replace("rtol = 1e-10\natol = 1e-12", "dt = 0.1"), "method = 'long' chooses its own steps"),
        (LONG.replace('kind = "sphere"', 'kind = "gaussian"'), "unit tokens"),
        (LONG + '[weights]\nV = { kind = "scaled_identity", scale = 2.0 }\n', "V = I"),
        (LONG.replace("save_log = 40", "save_log = 40\nsave_every = 1.0"), "one of save_every, save_times and save_log"),
    ],
)
def test_impossible_noisy_or_long_configs_exit_2_naming_the_option(tmp_path, text, expected):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    result = runner.invoke(app, ["simulate", str(cfg), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert expected in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_missing_config_exits_2(tmp_path):
    result = runner.invoke(app, ["simulate", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_config_with_random_weights_and_feedforward(tmp_path):
    cfg = tmp_path / "ff.toml"
    cfg.write_text(
        TINY
        + """
[weights]
heads = 1
Q = { kind = "random", dist = "gaussian", scale = 0.5, m = 3 }
K = { kind = "random", dist = "uniform", scale = 0.5, m = 3 }
V = { kind = "random", dist = "bbt", scale = 0.7 }
feedforward = { sigma = "tanh", W = { kind = "random", dist = "goe" }, bias = [0.1, -0.1] }
"""
    )
    out = tmp_path / "run"
    result = runner.invoke(app, ["simulate", str(cfg), "--out", str(out)])
    assert result.exit_code == 0, result.output
    arrays = load_run(out)["arrays"]
    assert arrays["Q"].shape == (1, 3, 2)
    np.testing.assert_allclose(arrays["V"][0], arrays["V"][0].T)  # B B^T is symmetric
    assert np.linalg.eigvalsh(arrays["V"][0]).min() >= -1e-12
    assert json.loads((out / "config.json").read_text())["weights"]["feedforward"]["sigma"] == "tanh"


def test_float32_config_runs_in_float32_and_cuda_is_refused_without_a_device(tmp_path):
    import tomllib

    import torch

    from attndyn.workflow.schema import ConfigError, parse_config
    from attndyn.workflow.setup import build

    data = tomllib.loads(TINY)
    setup = build(parse_config({**data, "dtype": "float32"}))
    assert setup.x0.dtype == torch.float32
    ref = build(parse_config(data))
    # the same seed draws the same system in either precision
    np.testing.assert_allclose(setup.x0.double().numpy(), ref.x0.numpy(), rtol=1e-7)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device is available"):
            build(parse_config({**data, "device": "cuda"}))


# --- attndyn meanfield --------------------------------------------------------------------------


def _mf_config(tmp_path, text: str) -> Path:
    path = tmp_path / "mf.toml"
    path.write_text(text)
    return path


MF_OK = """beta = 1.0
M = 64
t1 = 1.0
save_every = 0.25
[init]
kind = "wrapped-cauchy"
R0 = 0.3
"""


def test_meanfield_writes_a_complete_run_folder(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["meanfield", str(_mf_config(tmp_path, MF_OK)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("config.json", "density.npz", "density.png", "order_parameter.png", "density.gif", "summary.json"):
        assert (out / name).is_file(), name
    with np.load(out / "density.npz") as data:
        assert data["rho"].shape == (5, 64)
        np.testing.assert_allclose(data["ts"], [0, 0.25, 0.5, 0.75, 1.0])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mass_drift"] < 1e-12
    assert summary["method"] == "spectral"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (MF_OK.replace("beta = 1.0", "beta = -1.0"), "beta"),
        (MF_OK.replace("beta = 1.0", "beta = 400.0"), "too few"),
        (MF_OK + "colour = 1\n", "colour"),
        (MF_OK.replace('kind = "wrapped-cauchy"\nR0 = 0.3', 'kind = "values"\nvalues = [0.1, 0.2, 0.1, 0.2, 0.1, 0.2, 0.1, 0.2]'), "mass"),
        (MF_OK.replace('kind = "wrapped-cauchy"\nR0 = 0.3', 'kind = "values"\nvalues = [0.5, -0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]'), "negative"),
        (MF_OK.replace("R0 = 0.3", "R0 = 1.3"), "R0"),
        (MF_OK.replace("R0 = 0.3", "R0 = 0.3\nwidth = 2"), "width"),
        ('method = "magic"\n' + MF_OK, "method"),
    ],
)
def test_meanfield_bad_inputs_exit_2_with_one_line(tmp_path, text, needle):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["meanfield", str(_mf_config(tmp_path, text)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert len(result.output.strip().splitlines()) <= 2
    assert not (out / "summary.json").exists()


def test_meanfield_stops_with_exit_1_when_the_grid_is_exhausted(tmp_path):
    text = (
        MF_OK.replace("beta = 1.0", "beta = 8.0")
        .replace("t1 = 1.0", "t1 = 20.0")
        .replace('kind = "wrapped-cauchy"\nR0 = 0.3', 'kind = "uniform"\nmodes = [2]\namplitude = 0.05')
    )
    text = text.replace("M = 64", "M = 128")
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["meanfield", str(_mf_config(tmp_path, text)), "--out", str(out)])
    assert result.exit_code == 1
    assert "finite-volume" in result.output
    assert not (out / "summary.json").exists()
    fv = CliRunner().invoke(app, ["meanfield", str(_mf_config(tmp_path, text + 'method = "finite-volume"\n')), "--out", str(out)])
    assert fv.exit_code == 2  # a key after a table belongs to [init]: refused by name
    text = text.replace("save_every = 0.25", 'save_every = 0.25\nmethod = "finite-volume"')
    fv = CliRunner().invoke(app, ["meanfield", str(_mf_config(tmp_path, text)), "--out", str(out)])
    assert fv.exit_code == 0, fv.output
    assert json.loads((out / "summary.json").read_text())["min_density"] >= 0


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "configs").glob("*.toml") if not p.name.startswith("meanfield")), ids=lambda p: p.name)
def test_every_shipped_simulation_config_builds(path):
    from attndyn.workflow.schema import load_config
    from attndyn.workflow.setup import build

    setup = build(load_config(path))
    assert setup.ts[0] == 0


def test_simulate_movie_writes_an_owned_gif(tmp_path):
    from PIL import Image

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["simulate", str(ROOT / "configs" / "polytope.toml"), "--out", str(out), "--movie"])
    assert result.exit_code == 0, result.output
    gif = out / "trajectory.gif"
    assert gif.read_bytes()[:6] in (b"GIF89a", b"GIF87a")
    with Image.open(gif) as im:
        assert im.n_frames > 10
        assert min(im.size) >= 300  # large enough to read
    assert "trajectory.gif" in json.loads((out / ".attndyn.json").read_text())["files"]


def test_analyze_and_movie_never_overwrite_a_file_attndyn_did_not_write(tmp_path):
    out = tmp_path / "run"
    config = str(ROOT / "configs" / "polytope.toml")
    assert CliRunner().invoke(app, ["simulate", config, "--out", str(out)]).exit_code == 0
    for name, argv in (("analysis.png", ["analyze", str(out)]), ("trajectory.gif", ["simulate", config, "--out", str(out), "--movie"])):
        (out / name).write_bytes(b"mine")
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert "was not written by attndyn" in " ".join(result.output.split())
        assert (out / name).read_bytes() == b"mine"
        (out / name).unlink()


def test_simulate_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch):
    from attndyn.app import cli_common

    monkeypatch.setattr(cli_common, "PROGRESS_DELAY", 0.0)
    cfg = tmp_path / "p.toml"
    cfg.write_text(TINY)
    result = runner.invoke(app, ["simulate", str(cfg), "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("simulate: ")]
    assert [line.split(" %")[0] for line in lines] == [f"simulate: {p}" for p in range(0, 101, 10)], lines
    assert "s elapsed" in lines[-1]


def test_an_adaptive_step_that_collapses_is_said_once_with_the_fixed_step_suggestion():
    from attndyn.app import cli_common

    steps = np.concatenate([np.full(100, 0.1), np.full(cli_common.COLLAPSE_STEPS + 20, 1e-7)])
    ts = np.cumsum(steps)
    with cli_common.err_console.capture() as cap, cli_common.delayed_progress("simulate", float(ts[-1]), delay=1e9, adaptive=True) as update:
        for t in ts:
            update(float(t))
    said = cap.get()
    assert said.count("the adaptive step has collapsed to 1.0e-07") == 1, said
    assert "a fixed step (solver.dt) may serve" in said
    # a short last step before a save time, or a few small steps, is no collapse; nor is anything in a fixed-step run
    for adaptive, small in ((True, cli_common.COLLAPSE_STEPS - 1), (False, cli_common.COLLAPSE_STEPS + 20)):
        ts = np.cumsum(np.concatenate([np.full(100, 0.1), np.full(small, 1e-7), np.full(10, 0.1)]))
        with cli_common.err_console.capture() as cap, cli_common.delayed_progress("simulate", float(ts[-1]), delay=1e9, adaptive=adaptive) as update:
            for t in ts:
                update(float(t))
        assert "collapsed" not in cap.get()


@pytest.mark.parametrize("method", ["spectral", "finite-volume"])
def test_meanfield_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch, method):
    from attndyn.app import cli_common

    monkeypatch.setattr(cli_common, "PROGRESS_DELAY", 0.0)
    text = MF_OK if method == "spectral" else f'method = "finite-volume"\n{MF_OK}'
    result = CliRunner().invoke(app, ["meanfield", str(_mf_config(tmp_path, text)), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("meanfield: ")]
    assert lines, result.output
    assert lines[-1].startswith("meanfield: 100 %"), lines


def test_checkpoint_compare_puts_two_decoder_pages_side_by_side(tmp_path):
    """``attndyn checkpoint PAGE --compare PAGE --out DIR``: compare.html with each page's findings and the
    three depth figures; the pages themselves are left as they were."""
    pages = []
    for name, L in (("a.gguf", 4), ("b.gguf", 6)):
        keys = ("sink_rate", "massive_activation_ratio", "mean_cosine")
        rows = [{"layer": k} | {key: k / L + 0.1 for key in keys} | {f"{key}_ci": [k / L, k / L + 0.2] for key in keys} for k in range(L + 1)]
        record = {"file": name, "title": f"{name} (base)", "layers": L, "per_layer": rows, "findings": f"Findings\n- {name} finding\n"}
        folder = tmp_path / name
        folder.mkdir()
        (folder / "decoder.json").write_text(json.dumps(record))
        pages.append(folder)
    before = {p: (p / "decoder.json").read_bytes() for p in pages}
    result = runner.invoke(app, ["checkpoint", str(pages[0]), "--compare", str(pages[1]), "--out", str(tmp_path / "both")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "both" / "compare.html").read_text()
    assert "a.gguf finding" in page
    assert "b.gguf finding" in page
    assert page.count("<h2>") == 2
    for key in ("sink_rate", "massive_activation_ratio", "mean_cosine"):
        assert (tmp_path / "both" / "figures" / f"compare_{key}.png").is_file()
    assert "compare.html" in result.output
    assert {p: (p / "decoder.json").read_bytes() for p in pages} == before
    assert sorted(q.name for q in pages[0].iterdir()) == ["decoder.json"]


def test_a_misspelt_meanfield_key_is_named_before_the_required_key_it_leaves_missing(tmp_path):
    """`bata` for `beta` is an unknown key and leaves `beta` missing: the unknown key is what to fix."""
    text = (Path(__file__).parents[2] / "configs" / "meanfield-clusters.toml").read_text()
    cfg = tmp_path / "mf.toml"
    cfg.write_text(text.replace("beta = 8.0", "bata = 8.0"))
    result = runner.invoke(app, ["meanfield", str(cfg), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "bata: unknown key; did you mean 'beta'? (and 1 more)" in result.output
