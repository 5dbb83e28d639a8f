"""Progress inside every stage of the decoder page and of ``attndyn intervene`` (issue 52 item 3):
off a terminal each stage's count of work done (i of n) is printed, and ``decoder_report``'s
``progress(stage, i, n)`` receives every stage from 0 to n in order.

Oracles: the stages' jobs written out from what each stage runs (the nulls, counted in forward passes:
a random-weight model at each initialiser scale runs every prompt, then a forward per prompt for uniform
attention and per prompt for each shuffle; the prompts: a forward and a table of values per prompt; the
heads: the regimes, the head table, the regimes' null and a twin per twin layer and twin prompt;
intervene: each executor run's layers and then its prompts' losses); the heartbeat against a stage that
says nothing for a while.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attndyn.models import decoder_nulls as nulls  # noqa: E402

from .test_decoder_parallel import WORDS, _tiny_folder  # noqa: E402

PROMPTS = [" ".join(WORDS), " ".join(reversed(WORDS)), " ".join(WORDS[::2] + WORDS[1::2])]
HELD = [" ".join(WORDS[1::2])]
TWIN_LAYERS = (0, 1)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _expected(folder, held: int, workers: int = 1) -> list[tuple[str, list[int]]]:
    """Each stage's start of message and its jobs' costs (in the order one worker runs them), in the page's order:
    the nulls' jobs each run every prompt (a random-weight model, uniform attention, a draw of permutations); a set's
    forwards are one layer-major run a worker, then a job a prompt for its geometry."""
    from attndyn.models.decoder_files import load_decoder

    scales = len(nulls.initializer_scales(load_decoder(str(folder))))
    runs = lambda n: [len(range(i, n, min(workers, n))) for i in range(min(workers, n))]  # noqa: E731
    P, H = len(PROMPTS), held
    stages = [
        ("reading the model", [1]),
        (f"the three nulls of {P + H} prompts", [P + H] * (nulls.RANDOM_DRAWS * scales + 1 + nulls.SHUFFLE_DRAWS)),
        (f"forward passes and token geometry of {P} prompts", runs(P) + [1] * P),
    ]
    if H:
        stages.append((f"the held-out set: {H} prompts", runs(H) + [1] * H))
    stages += [("spectra of every head", [1] * (3 + len(TWIN_LAYERS))), ("figures and the page", [1])]
    return stages


def test_pmap_counts_the_jobs_as_they_end_here_in_the_parent():
    import os

    from attndyn.core.parallel import pmap

    parent, costs = os.getpid(), [5, 1, 1, 3, 1, 2]
    for workers in (1, 2):
        seen: list[tuple[int, int, int]] = []
        out = pmap(lambda i: i * i, len(costs), workers=workers, progress=lambda d, n, seen=seen: seen.append((d, n, os.getpid())), cost=costs)
        assert out == [i * i for i in range(len(costs))]
        assert {(n, pid) for _, n, pid in seen} == {(sum(costs), parent)}
        done = [0, *(d for d, _, _ in seen)]
        assert sorted(np.diff(done)) == sorted(costs), (workers, done)  # one step a job, its cost
        if workers == 1:
            assert done == list(np.cumsum([0, *costs])), done
    with pytest.raises(ValueError, match="2 costs for 3 jobs"):
        pmap(lambda i: i, 3, cost=[1, 1])


def test_the_page_s_callback_receives_each_stage_from_0_to_n_in_order(tmp_path, monkeypatch):
    """Two workers (the counts come as jobs end in other processes, in any order of jobs)."""
    from attndyn.app.decoder_page import decoder_report

    monkeypatch.setenv("ATTNDYN_THREADS", "2")
    folder = _tiny_folder(tmp_path)
    events: list[tuple[str, int, int]] = []
    decoder_report(
        str(folder), prompts=PROMPTS, held_out=HELD, out=tmp_path / "page", twin_layers=TWIN_LAYERS, dtype=torch.float64,
        progress=lambda stage, i, n: events.append((stage, i, n)),
    )  # fmt: skip
    stages = list(dict.fromkeys(stage for stage, _, _ in events))
    expected = _expected(folder, len(HELD), workers=2)
    assert len(stages) == len(expected), stages
    for stage, (start, costs) in zip(stages, expected, strict=True):
        assert stage.startswith(start), (stage, start)
        counts = [(i, m) for s, i, m in events if s == stage]
        n = sum(costs)
        assert {m for _, m in counts} == {n}, (stage, counts)
        done = [i for i, _ in counts]
        assert (done[0], done[-1], len(done)) == (0, n, len(costs) + 1), (stage, done)
        # the jobs end in any order over two workers: each step is one job's cost
        assert sorted(np.diff(done)) == sorted(costs), (stage, done)
    # the stages do not interleave: each one's events are one run
    assert [s for k, (s, _, _) in enumerate(events) if k == 0 or events[k - 1][0] != s] == stages


def test_checkpoint_off_a_terminal_prints_each_stage_with_its_counts(tmp_path, monkeypatch, one_worker):
    from typer.testing import CliRunner

    from attndyn.app import cli_common
    from attndyn.app.cli import app

    monkeypatch.setattr(cli_common, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(cli_common, "STAGE_LINE", 0.0)  # every count, not one every 10 s
    folder = _tiny_folder(tmp_path)
    texts = tmp_path / "prompts.txt"
    texts.write_text("\n\n".join(PROMPTS))
    result = CliRunner().invoke(app, ["checkpoint", str(folder), "--prompts", str(texts), "--twin-layers", "0,1", "--out", str(tmp_path / "page")])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "page" / "decoder.json").read_text())  # --dtype auto: a tiny model runs in float64, and says why
    assert record["dtype"] == "float64"
    assert record["dtype_rule"].startswith("chosen by size: 0 M parameters, at most 1 B")
    assert record["dtype_rule"] in (tmp_path / "page" / "index.html").read_text()
    lines = [line for line in result.output.splitlines() if line.startswith("checkpoint: ")]
    line = re.compile(r"^checkpoint: (.+): (\d+) of (\d+)(, about \d+ (?:s|min|h) left)?, \d+ s elapsed$")
    seen: dict[str, list[tuple[int, int]]] = {}
    for text in lines:
        m = line.match(text)
        assert m, text
        seen.setdefault(m.group(1), []).append((int(m.group(2)), int(m.group(3))))
    expected = _expected(folder, 0)  # the given prompts: no held-out set
    assert len(seen) == len(expected), list(seen)
    for (stage, counts), (start, costs) in zip(seen.items(), expected, strict=True):
        assert stage.startswith(start), (stage, start)
        # one worker: the jobs end in order; a heartbeat may repeat a count
        assert sorted(set(counts)) == [(int(i), sum(costs)) for i in np.cumsum([0, *costs])], (stage, counts)
        assert counts == sorted(counts), (stage, counts)


def test_a_stage_that_says_nothing_gets_a_line_every_heartbeat(monkeypatch, capsys):
    from attndyn.app import cli_common

    monkeypatch.setattr(cli_common, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(cli_common, "HEARTBEAT", 0.2)
    with cli_common.stage_progress("checkpoint", "reading the model") as stage:
        stage("the nulls", 0, 4)
        stage("the nulls", 1, 4)
        time.sleep(3.5)  # one job running, no count moving
        stage("the nulls", 4, 4)
    lines = capsys.readouterr().err.splitlines()
    beats = [line for line in lines if line.startswith("checkpoint: the nulls: 1 of 4, about ")]
    assert len(beats) >= 2, lines  # the heartbeat's thread looks each second: about one line a second here
    assert not any(line.startswith("checkpoint: the nulls: 1 of 4") for line in lines[:1]), lines  # the count itself waits 10 s
    assert lines[-1].startswith("checkpoint: the nulls: 4 of 4, "), lines


def test_intervene_off_a_terminal_prints_each_run_s_layers_and_losses(tmp_path, monkeypatch, capsys):
    """``attndyn intervene --edit ... --study depth``: the edits' run, then the study's two runs, each counted
    as its L layers (every branch through a layer) then its prompts' losses."""
    from attndyn.app import cli_common
    from attndyn.app.cli import entry
    from attndyn.models.decoder_files import load_decoder
    from tests.models.test_executor import _folder_with_prompts

    monkeypatch.setattr(cli_common, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(cli_common, "STAGE_LINE", 0.0)
    folder, prompts = _folder_with_prompts(tmp_path)
    L, P = len(load_decoder(str(folder)).layers), len([p for p in prompts.read_text().split("\n\n") if p.strip()])
    argv = ["intervene", str(folder), "--prompts", str(prompts), "--out", str(tmp_path / "iv"), "--edit", "skip:block=0", "--study", "depth"]
    assert entry(argv) == 0
    line = re.compile(r"^intervene: (.+): (\d+) of (\d+)(, about \d+ (?:s|min|h) left)?, \d+ s elapsed$")
    seen: dict[str, list[tuple[int, int]]] = {}
    err = capsys.readouterr().err
    for text in (t for t in err.splitlines() if t.startswith("intervene: ")):  # not the tiny model's writing (transformers)
        m = line.match(text)
        assert m, err
        seen.setdefault(m.group(1), []).append((int(m.group(2)), int(m.group(3))))
    starts = ["1 edit(s) beside 5 draws of their nulls", "study depth: the plain prompts", "study depth: its edits beside 5 draws"]
    assert len(seen) == len(starts), list(seen)
    for (stage, counts), start in zip(seen.items(), starts, strict=True):
        assert stage.startswith(start), (stage, start)
        assert sorted(set(counts)) == [(i, L + P) for i in range(L + P + 1)], (stage, counts)
