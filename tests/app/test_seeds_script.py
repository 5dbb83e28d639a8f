"""benchmarks/seeds.py (`make seeds`) sees the same modules as `attndyn reproduce` (issue 46).

Run as a script, Python puts benchmarks/ first on sys.path, where benchmarks/kernels.py shadowed the
installed `kernels` package that transformers imports: trained-interventions raised ImportError at every
seed, in process and in every worker.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "seeds.py"


def test_the_seeds_script_takes_its_own_folder_off_the_import_path(monkeypatch):
    """As `python benchmarks/seeds.py` runs it: its folder first on sys.path; loading it must remove it,
    so that no neighbour (kernels.py, common.py, ...) can stand in for an installed module."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("seeds_script_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert all(Path(p or os.curdir).resolve() != SCRIPT.parent for p in sys.path)
    found = importlib.util.find_spec("kernels")
    assert found is None or Path(found.origin).resolve().parent != SCRIPT.parent


@pytest.mark.slow
def test_seeds_script_runs_trained_interventions():
    """End to end, as `make seeds` runs it (about 12 s): the claim passes at seed 100 instead of raising."""
    pytest.importorskip("transformers")
    env = {**os.environ, "ATTNDYN_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    args = [sys.executable, str(SCRIPT), "--seeds", "100", "--claims", "trained-interventions"]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert "ImportError" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
