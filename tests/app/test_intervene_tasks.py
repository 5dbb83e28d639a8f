"""``attndyn intervene --workers/--scheduler``: the executor's branches split into tasks of prompts give the
same numbers, bit for bit, as one run in one process (every branch is computed operation for operation as
there; the mean, the patch and the nulls' choices read every prompt's plain state, which every task holds),
on a local Dask cluster too, where each worker reads the model once."""

from __future__ import annotations

import json

import pytest
import torch

from attndyn.app.intervene_tasks import chunks, run_in_tasks
from attndyn.models.decoder_files import load_decoder
from attndyn.models.executor import run
from attndyn.models.interventions import intervene, parse_all

pytest.importorskip("transformers")
from tests.models.test_executor import _folder_with_prompts, _offline  # noqa: E402, F401
from tests.models.test_families import tiny  # noqa: E402

SPECS = ["zero:block=0,token=1,dim=5", "mean:block=0,token=1,dim=7", "patch:block=0,token=2,from=1", "skip:block=1"]
PROMPTS = [[5, 17, 3, 60, 42, 42, 1, 33, 23, 9, 51], [7, 8, 9, 10, 11, 12, 13, 14, 2], [3, 4, 5, 6, 7, 8, 9, 10], [11, 40, 41, 12, 13, 14, 50, 2, 9]]


def test_chunks_group_the_branches_by_their_prompt():
    branches = [(i % 4, ()) for i in range(8)]
    assert chunks(branches, 4, 3) == [[0, 1, 2, 4, 5, 6], [3, 7]]
    assert chunks(branches, 5, 1) == [[0, 4], [1, 5], [2, 6], [3, 7]]  # prompt 4 has no branch: no task
    with pytest.raises(ValueError, match="chunk size 0"):
        chunks(branches, 4, 0)


@pytest.mark.parametrize("size", [1, 3])
def test_tasks_of_prompts_give_the_one_run_s_numbers_bit_for_bit(tmp_path, size):
    _, folder = tiny("llama", tmp_path)
    dec = load_decoder(folder)
    branches = [(i, parse_all(s)) for s in SPECS for i in range(len(PROMPTS))]
    plain, edited, counts = run(dec, PROMPTS, branches)
    p2, e2, c2 = run_in_tasks(dec, PROMPTS, branches, size=size)
    for a, b in zip([*plain, *edited], [*p2, *e2], strict=True):
        assert a.prompt == b.prompt
        assert a.edits == b.edits
        assert torch.equal(a.nll, b.nll)
        assert (a.kl is None and b.kl is None) or torch.equal(a.kl, b.kl)
    assert c2["tasks"] == -(-len(PROMPTS) // size)
    extra = (c2["tasks"] - 1) * len(PROMPTS) * len(dec.layers)  # each further task runs the plain prompts again
    assert c2["block_runs"] == counts["block_runs"] + extra
    # the whole record, nulls and intervals included, is the same
    one = intervene(dec, PROMPTS, SPECS, draws=2)
    split = intervene(dec, PROMPTS, SPECS, draws=2, runner=lambda *a, **k: run_in_tasks(*a, size=size, **k))
    one.pop("counts"), split.pop("counts")
    assert json.dumps(one, sort_keys=True) == json.dumps(split, sort_keys=True)


def test_intervene_on_a_local_dask_cluster_reads_the_model_once_a_worker(tmp_path, capsys):
    pytest.importorskip("distributed")
    from attndyn.app.cli import entry

    folder, prompts = _folder_with_prompts(tmp_path)
    args = ["intervene", str(folder), "--prompts", str(prompts), "--edit", "mean:block=0,token=1,dim=7", "--edit", "skip:block=1", "--draws", "2"]
    assert entry([*args, "--out", str(tmp_path / "here")]) == 0
    assert entry([*args, "--out", str(tmp_path / "dask"), "--workers", "1", "--chunk", "2"]) == 0
    assert "starting a local Dask cluster of 1 worker process for 2 tasks" in capsys.readouterr().out
    here, there = (json.loads((tmp_path / name / "interventions.json").read_text()) for name in ("here", "dask"))
    assert there["edits"] == here["edits"]
    assert there["nll"] == here["nll"]
    assert there["counts"]["tasks"] == 2
    assert there["counts"]["model_reads"] == 1  # one worker, two tasks: the model read once


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--workers", "0"], "--workers 0 must be at least 1"),
        (["--workers", "1", "--scheduler", "tcp://127.0.0.1:1"], "give one of them"),
        (["--chunk", "2"], "sizes the tasks of --workers or --scheduler"),
        (["--scheduler", "nonsense"], "is not a scheduler address"),
        (["--scheduler", "bogus://x"], "unknown address scheme 'bogus'"),  # exit 1 ("a bug") before
    ],
)
def test_bad_task_options_exit_2_naming_them(tmp_path, capsys, extra, said):
    from attndyn.app.cli import entry

    folder, prompts = _folder_with_prompts(tmp_path)
    out = tmp_path / "iv"
    assert entry(["intervene", str(folder), "--prompts", str(prompts), "--edit", "skip:block=1", "--out", str(out), *extra]) == 2
    assert said in capsys.readouterr().err
    assert not (out / "interventions.json").exists()


def _without_counts(record: dict) -> str:
    drop = {"counts", "seconds", "cpu_seconds", "forwards"}

    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if k not in drop}
        return [clean(x) for x in v] if isinstance(v, list) else v

    return json.dumps(clean(record), sort_keys=True, default=str)


@pytest.mark.parametrize("size", [1, 3])
def test_the_theory_and_massive_studies_in_tasks_give_the_one_run_s_numbers(tmp_path, size):
    """The studies' edits go through the runner (tasks on Dask with --workers) with the same numbers bit for bit."""
    from attndyn.models.interventions import run_study
    from attndyn.models.interventions_massive import massive_study

    _, folder = tiny("llama", tmp_path)
    dec = load_decoder(folder)
    tasks = lambda *a, **k: run_in_tasks(*a, size=size, **k)  # noqa: E731
    one = run_study(dec, PROMPTS, "theory", layers=[0, 1])
    split = run_study(dec, PROMPTS, "theory", layers=[0, 1], runner=tasks)
    assert split["counts"]["tasks"] == -(-len(PROMPTS) // size)
    assert _without_counts(one) == _without_counts(split)
    # a massive entry planted in the recorded states (token 0, dim 3, from block 0 on): the study then edits it
    plain, _, _ = run(dec, PROMPTS, record=True)
    hidden = [r.hidden.clone() for r in plain]
    for h in hidden:
        h[1:, 0, 3] = 1e4 * h[1:].abs().median()
    told = []
    one = massive_study(dec, PROMPTS, hidden, draws=2, progress=lambda i, n: told.append((i, n)))
    split = massive_study(dec, PROMPTS, hidden, draws=2, runner=tasks)
    assert told[0][0] == 0  # the edits' run says where it is, from its start
    assert told[-1][0] == told[-1][1]  # to its end
    assert one["block"] == 0
    assert one["edits"]  # the zero and mean edits and their nulls ran
    assert split["counts"]["tasks"] == -(-len(PROMPTS) // size)  # the edits ran in tasks
    assert _without_counts(one) == _without_counts(split)
