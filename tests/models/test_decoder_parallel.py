"""The checkpoint page over worker processes (issue 34): the same numbers for one worker and for two.

Oracles: ``pmap`` against the list comprehension it stands for (and against the parent's pid, so the
parallel path is seen to run in other processes); the page's record on a tiny random Llama with one
worker against two, value for value (exact: each job runs whole in one process on one thread); and the
parallel per-prompt layer values and twins against the library's sequential ``layer_values`` and ``twin``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from attndyn.core.parallel import pmap
from attndyn.models import decoder_geometry as geo
from attndyn.models.decoder import forward

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


WORDS = "the cat sat on a mat and looked at birds in an old garden while rain fell".split()


def _tiny_folder(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from .test_decoders import tiny_llama

    _, folder = tiny_llama(tmp_path)
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(["[UNK]", *WORDS])}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_pmap_is_the_list_comprehension_in_order_and_runs_in_other_processes():
    parent = os.getpid()
    out = pmap(lambda i: (i * i, os.getpid()), 7, workers=2)
    assert [v for v, _ in out] == [i * i for i in range(7)]
    assert parent not in {p for _, p in out}  # run in the workers, not here
    inline = pmap(lambda i: (i * i, os.getpid()), 3, workers=1)
    assert inline == [(i * i, parent) for i in range(3)]


def _strip(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("seconds", "findings")}


def _equal(a, b, path="record") -> None:
    """Value for value, NaN equal to NaN (an undefined measure in both)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            _equal(x, y, f"{path}[{k}]")
    elif isinstance(a, float):
        assert a == b or (np.isnan(a) and np.isnan(b)), f"{path}: {a!r} != {b!r}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_the_page_is_the_same_on_one_worker_and_on_two(tmp_path, monkeypatch):
    from attndyn.app.decoder_page import decoder_report

    folder = _tiny_folder(tmp_path)
    prompts = [" ".join(WORDS), " ".join(reversed(WORDS)), " ".join(WORDS[::2] + WORDS[1::2])]
    records = {}
    for k in ("1", "2"):
        monkeypatch.setenv("ATTNDYN_THREADS", k)
        records[k] = decoder_report(str(folder), prompts=prompts, out=tmp_path / f"page{k}", twin_layers=(0, 1), dtype=torch.float64)
    assert len(records["1"]["twin_per_prompt"]) == 2 * 3
    _equal(_strip(records["1"]), _strip(records["2"]))


def test_parallel_layer_values_and_twins_are_the_sequential_ones(tmp_path, monkeypatch):
    from attndyn.models.decoder_files import read_hf_llama
    from attndyn.models.decoder_study import layer_values

    monkeypatch.setenv("ATTNDYN_THREADS", "2")
    dec = read_hf_llama(_tiny_folder(tmp_path))
    fws = [forward(dec, list(range(s, s + 9)), logits=False) for s in (1, 5, 20)]
    ours = layer_values(fws, clusters=True)
    ref = geo.layer_values(fws, clusters=True)
    assert ours.keys() == ref.keys()
    for key in ref:
        np.testing.assert_array_equal(ours[key], ref[key], err_msg=key)
    par = geo.twins(dec, fws, (0, 1))
    seq = [{**geo.twin(dec, fw, layer), "prompt": i} for layer in (0, 1) for i, fw in enumerate(fws)]
    _equal(par, seq)


def _random_factored(heads=3, d=10, r=4, seed=0):
    from attndyn.core.weights import Weights

    g = torch.Generator().manual_seed(seed)
    Q, K = (torch.randn(heads, r, d, generator=g, dtype=torch.float64) for _ in range(2))
    A = torch.randn(heads, d, r, generator=g, dtype=torch.float64)
    B = torch.randn(heads, r, d, generator=g, dtype=torch.float64)
    return Weights(Q, K, A @ B), Weights(Q, K, A @ B, V_factors=(A, B))


@pytest.mark.parametrize("scheme", ["pre", "post"])
def test_the_factored_value_map_is_the_dense_one_to_rounding(scheme):
    """V_h = A_h B_h applied as A_h (B_h x): the field of the dense V to float64 rounding. The band: each
    output entry sums d r + n r products of O(1) terms, so its rounding is below (d r + n r) eps |terms| < 1e-12."""
    from attndyn.core.dynamics import Model, velocity

    dense, factored = _random_factored()
    x = torch.randn(2, 7, 10, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for w in (dense, factored):
        assert w.V.shape == (3, 10, 10)
    kw = dict(beta=0.7, mask="causal", geometry="sphere", scheme=scheme)
    a = velocity(0.0, x, Model(dense, **kw))
    b = velocity(0.0, x, Model(factored, **kw))
    assert torch.allclose(a, b, rtol=0, atol=1e-12 * float(a.abs().max()))
    assert not torch.equal(a, torch.zeros_like(a))


def test_factors_that_are_not_v_are_refused():
    from attndyn.core.weights import Weights

    dense, factored = _random_factored()
    A, B = factored.V_factors
    with pytest.raises(ValueError, match="differs from V"):
        Weights(dense.Q, dense.K, dense.V, V_factors=(A, 1.01 * B))


def test_the_twin_with_factored_values_is_the_dense_twin(tmp_path):
    """The twin's record with V applied through its factors against the dense V (factors dropped): every
    number to 1e-10 relative (rounding, accumulated over the flow's 8 + 16 RK4 steps), the leaders equal."""
    from attndyn.core.weights import Weights
    from attndyn.models.decoder_files import read_hf_llama

    dec = read_hf_llama(_tiny_folder(tmp_path))
    fw = forward(dec, list(range(1, 14)), logits=False)
    w = geo._twin_weights(dec, 1)
    assert w.V_factors is not None
    ours = geo.twin(dec, fw, 1, weights=w)
    ref = geo.twin(dec, fw, 1, weights=Weights(w.Q, w.K, w.V))
    assert ours.keys() == ref.keys()
    for k, v in ref.items():
        if isinstance(v, float):
            assert ours[k] == pytest.approx(v, rel=1e-10, abs=1e-14), k
        else:
            assert ours[k] == v, k


def test_the_workers_end_quietly_under_the_cli_s_sigterm_handler():
    """The CLI turns SIGTERM into Ctrl-C; the pool ends its workers with SIGTERM: they must not inherit that
    handler (they printed KeyboardInterrupt tracebacks at the end of a map, racing the pool's shutdown: ten maps
    showed it every time here)."""
    import subprocess
    import sys

    code = (
        "import signal\n"
        "def _interrupt(s, f):\n    raise KeyboardInterrupt\n"
        "signal.signal(signal.SIGTERM, _interrupt)\n"
        "from attndyn.core.parallel import pmap\n"
        "for _ in range(10):\n    out = pmap(lambda i: i * i, 6, workers=2)\n"
        "print(out)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1, 4, 9, 16, 25]"
    assert "KeyboardInterrupt" not in done.stderr
