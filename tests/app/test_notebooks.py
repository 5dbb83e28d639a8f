"""The notebooks of examples/ run top to bottom with the project's kernel, and are stored clean (issue 12)."""

import json
import time

import pytest

from tests.helpers import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel", reason="the notebooks need ipykernel for the project's kernel")

EXAMPLES = ROOT / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
BUDGET = 60.0  # seconds per notebook on 2 cores


def test_there_are_four_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01-quickstart.ipynb", "02-checkpoint.ipynb", "03-phase-diagram.ipynb", "04-trained-decoder.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path.name}: a code cell has stored outputs"
            assert cell["execution_count"] is None


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    if path.stem.startswith("02"):
        from attndyn.models import bert as checkpoints

        ok, why = checkpoints.minilm_available()
        if not ok:
            pytest.skip(why)
    if path.stem.startswith("04"):
        from attndyn.models.decoder_files import smollm2_available

        ok, why = smollm2_available()
        if not ok:
            pytest.skip(why)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # one thread, the suite's process default under the thread policy: beside a competing process two
    # threads made the checkpoint notebook's spectra cell pass its 60 s budget (measured)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # kernel "python3" is the interpreter running the tests (ipykernel's native spec): the project's .venv
    client = nbclient.NotebookClient(nb, timeout=BUDGET, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    seconds = time.perf_counter() - start
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    assert seconds <= BUDGET, f"{path.name} took {seconds:.0f} s"
    # every notebook draws something
    assert any(o.get("data", {}).get("image/png") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
