"""The ledger of ``attndyn intervene --workers/--scheduler`` (issue 50 item 5): a run killed after some tasks
resumes with only the others, and its numbers equal one uninterrupted run bit for bit; a row that does not
verify (edited bytes, another user's key) or holds other branches is computed again, never used.

The oracle is :func:`attndyn.models.executor.run` over all branches in one call, with no ledger."""

from __future__ import annotations

import json
import sqlite3

import pytest
import torch

from attndyn.app import intervene_ledger
from attndyn.app.intervene_ledger import TaskLedger
from attndyn.app.intervene_tasks import run_in_tasks
from attndyn.models import executor
from attndyn.models.decoder_files import load_decoder
from attndyn.models.interventions import parse_all

pytest.importorskip("transformers")
from tests.app.test_intervene_tasks import PROMPTS, SPECS  # noqa: E402
from tests.models.test_executor import _folder_with_prompts, _offline  # noqa: E402, F401
from tests.models.test_families import tiny  # noqa: E402


@pytest.fixture
def model(tmp_path):
    _, folder = tiny("llama", tmp_path)
    dec = load_decoder(folder)
    branches = [(i, parse_all(s)) for s in SPECS for i in range(len(PROMPTS))]
    return dec, branches


def _same(a, b) -> None:
    plain, edited, _ = a
    p2, e2, _ = b
    for x, y in zip([*plain, *edited], [*p2, *e2], strict=True):
        assert x.prompt == y.prompt
        assert x.edits == y.edits
        assert torch.equal(x.nll, y.nll)
        assert (x.kl is None and y.kl is None) or torch.equal(x.kl, y.kl)


class Calls:
    """executor.run counted, raising KeyboardInterrupt (a Ctrl-C, as a kill stops the driver) at call ``stop``."""

    def __init__(self, monkeypatch, stop: int | None = None):
        self.n, self.stop, self.real = 0, stop, executor.run
        monkeypatch.setattr(executor, "run", self)

    def __call__(self, *args, **kwargs):
        self.n += 1
        if self.n == self.stop:
            raise KeyboardInterrupt
        return self.real(*args, **kwargs)


def test_a_killed_run_resumes_with_the_tasks_it_had_not_finished(tmp_path, model, monkeypatch):
    dec, branches = model
    whole = executor.run(dec, PROMPTS, branches)
    ledger = TaskLedger(tmp_path)
    calls = Calls(monkeypatch, stop=3)
    with pytest.raises(KeyboardInterrupt):
        run_in_tasks(dec, PROMPTS, branches, size=1, ledger=ledger)
    ledger.close()
    assert calls.n == 3  # two tasks finished and were kept, the third was stopped
    monkeypatch.undo()
    calls = Calls(monkeypatch)
    ledger = TaskLedger(tmp_path)
    resumed = run_in_tasks(dec, PROMPTS, branches, size=1, ledger=ledger)
    assert calls.n == len(PROMPTS) - 2
    assert resumed[2]["from_ledger"] == 2
    assert ledger.found == 2
    _same(whole, resumed)
    calls.n = 0
    again = run_in_tasks(dec, PROMPTS, branches, size=1, ledger=ledger)  # the same command once more: nothing runs
    assert calls.n == 0
    _same(whole, again)


def test_a_row_that_does_not_verify_is_computed_again(tmp_path, model, monkeypatch):
    dec, branches = model
    whole = executor.run(dec, PROMPTS, branches)
    ledger = TaskLedger(tmp_path)
    run_in_tasks(dec, PROMPTS, branches, size=2, ledger=ledger)
    ledger.close()
    db = sqlite3.connect(tmp_path / intervene_ledger.LEDGER)
    key, data = db.execute("SELECT key, data FROM intervene_tasks ORDER BY key LIMIT 1").fetchone()
    edited = bytearray(data)
    edited[-3] ^= 0x40  # a changed loss: the HMAC no longer verifies
    with db:
        db.execute("UPDATE intervene_tasks SET data = ? WHERE key = ?", (bytes(edited), key))
    db.close()
    calls = Calls(monkeypatch)
    ledger = TaskLedger(tmp_path)
    out = run_in_tasks(dec, PROMPTS, branches, size=2, ledger=ledger)
    assert calls.n == 1
    assert ledger.rejected == 1
    _same(whole, out)


def test_a_row_under_another_users_key_is_not_used(tmp_path, model, monkeypatch):
    dec, branches = model
    ledger = TaskLedger(tmp_path)
    run_in_tasks(dec, PROMPTS, branches, size=2, ledger=ledger)
    ledger.close()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "another-home"))  # another key: rows signed by someone else
    calls = Calls(monkeypatch)
    ledger = TaskLedger(tmp_path)
    run_in_tasks(dec, PROMPTS, branches, size=2, ledger=ledger)
    assert calls.n == 2
    assert ledger.rejected == 2


def test_other_prompts_or_edits_share_no_task(tmp_path, model, monkeypatch):
    dec, branches = model
    ledger = TaskLedger(tmp_path)
    run_in_tasks(dec, PROMPTS, branches, size=2, ledger=ledger)
    calls = Calls(monkeypatch)
    run_in_tasks(dec, [*PROMPTS[:3], PROMPTS[3][:-1]], branches, size=2, ledger=ledger)  # one token fewer
    assert calls.n == 2
    calls.n = 0
    run_in_tasks(dec, PROMPTS, [(i, parse_all("skip:block=0")) for i in range(len(PROMPTS))], size=2, ledger=ledger)
    assert calls.n == 2
    assert ledger.found == 0


def test_decode_refuses_a_row_of_other_branches(model):
    dec, branches = model
    plain, edited, counts = executor.run(dec, PROMPTS, branches[:2])
    data = intervene_ledger.encode(plain, edited, counts)
    with pytest.raises(ValueError, match="other branches"):
        intervene_ledger.decode(data, branches[2:5])


def test_the_command_keeps_its_tasks_and_a_rerun_uses_them(tmp_path, capsys):
    pytest.importorskip("distributed")
    from attndyn.app.cli import entry

    folder, prompts = _folder_with_prompts(tmp_path)
    args = ["intervene", str(folder), "--prompts", str(prompts), "--edit", "skip:block=1", "--draws", "2", "--workers", "1", "--chunk", "2"]
    out = tmp_path / "iv"
    assert entry([*args, "--out", str(out)]) == 0
    first = json.loads((out / "interventions.json").read_text())
    assert "found finished" not in capsys.readouterr().out
    assert sqlite3.connect(out / "ledger.sqlite").execute("SELECT count(*) FROM intervene_tasks").fetchone() == (2,)
    assert entry([*args, "--out", str(out)]) == 0
    said = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert f"2 task(s) were found finished in {out / 'ledger.sqlite'}" in said
    second = json.loads((out / "interventions.json").read_text())
    assert second["edits"] == first["edits"]
    assert second["nll"] == first["nll"]
