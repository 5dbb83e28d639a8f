"""The cross-family atlas (issue 49 item 5), each number against something independent.

* The per-sublayer states against ``transformers``' own models with hooks (the state after attention is the
  input of the norm before the feed-forward block), a pre-norm LLaMA and a sandwich-norm Gemma 3, in float64.
* The block-level ratio, sink rate and sink token of the layer-major run against :func:`forward`'s hidden
  states and attention maps, the uniform null against ``forward(attention="uniform")``, the shuffled null
  against the same shuffles run one at a time.
* The step-up, fall and secondary-sink rules on hand-built arrays with a known answer, the step-up also
  against :func:`attndyn.models.interventions_massive.step_up` on dense states.
* The norm-placement sentence written from the data: it changes when the data change.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndyn.models import atlas
from attndyn.models import decoder_geometry as geo
from attndyn.models.decoder import forward
from attndyn.models.decoder_files import read_hf_llama
from attndyn.models.decoder_nulls import shuffled, uniform_causal
from attndyn.models.interventions_massive import step_up
from tests.models.test_decoders import reference

transformers = pytest.importorskip("transformers")

PROMPTS = [[(7 * i + 3 * k) % 97 for i in range(64)] for k in range(3)]  # 64 tokens: Gu et al.'s T, so the sink rate is defined


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _hooked_states(model, norm_name: str, ids: list[int]) -> torch.Tensor:
    """transformers' residual stream after every sublayer: the input of ``norm_name`` (the norm before the
    feed-forward block reads the state after attention) and each decoder layer's output."""
    rows, hooks = [], []
    for layer in model.model.layers:
        hooks.append(getattr(layer, norm_name).register_forward_pre_hook(lambda m, args: rows.append(args[0][0].clone())))
        hooks.append(layer.register_forward_hook(lambda m, args, out: rows.append((out[0] if isinstance(out, tuple) else out)[0].clone())))
    try:
        out = reference(model, ids)  # with its float64 softmax when the model asks for one (test_decoders)
    finally:
        for h in hooks:
            h.remove()
    return torch.stack([out.hidden_states[0][0], *rows])


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_sublayer_states_equal_transformers_llama(tmp_path):
    from tests.models.test_decoders import IDS, float64_reference, tiny_llama

    model, folder = tiny_llama(tmp_path)
    model = float64_reference(model)
    ours = atlas.sublayer_states(read_hf_llama(folder), IDS, dtype=torch.float64)
    ref = _hooked_states(model, "post_attention_layernorm", IDS)
    assert ours.shape == ref.shape == (2 * 3 + 1, len(IDS), 32)
    for s in range(ref.shape[0]):
        assert _relative(ours[s], ref[s]) < 1e-10, f"row {s}"


def test_sublayer_states_equal_transformers_gemma3(tmp_path):
    """The sandwich: Gemma's state after attention includes the norm after the attention output."""
    from attndyn.models.decoder_files import load_decoder
    from tests.models.test_gemma3 import tiny_gemma3

    model, folder = tiny_gemma3(tmp_path)
    ids = [2, *PROMPTS[0][:20]]
    ours = atlas.sublayer_states(load_decoder(folder), ids, dtype=torch.float64)
    ref = _hooked_states(model, "pre_feedforward_layernorm", ids)
    assert ours.shape == ref.shape
    for s in range(ref.shape[0]):  # transformers' float32 norms and angles in a float64 model bound the agreement (test_gemma3)
        assert _relative(ours[s], ref[s]) < 1e-5, f"row {s}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.models.test_decoders import tiny_llama

    _, folder = tiny_llama(tmp_path_factory.mktemp("atlas"))
    return read_hf_llama(folder)


def test_block_measures_equal_forward(tiny):
    """Every block's after-block ratio (with its token and dimension), sink rate and sink token in the layer-major
    run are the forward pass's; the uniform sequences' after-block ratio is forward(attention='uniform')'s."""
    ms = atlas.run_sequences(tiny, PROMPTS + PROMPTS[:1], [False] * len(PROMPTS) + [True])
    L = len(tiny.layers)
    for p, ids in enumerate(PROMPTS):
        fw = forward(tiny, ids, dtype=torch.float32, logits=False)
        for k in range(L):
            ratio, t, j = geo.massive_activation(fw.hidden[k + 1].double().numpy())
            assert ms[p]["ratio"][2 * k + 1] == pytest.approx(ratio, rel=1e-12)
            assert (ms[p]["token"][2 * k + 1], ms[p]["dim"][2 * k + 1]) == (t, j)
            P = fw.attentions[k].double().numpy()
            assert ms[p]["sink_rate"][k] == pytest.approx(geo.attention_measures(P)["sink_rate"], abs=1e-12)
            assert ms[p]["sink_token"][k] == int(np.argmax(P.mean(0).sum(0)))
            assert ms[p]["spike_token"][k] == geo.massive_activation(fw.hidden[k].double().numpy())[1]
    fu = forward(tiny, PROMPTS[0], dtype=torch.float32, attention="uniform", logits=False)
    for k in range(L):
        assert ms[-1]["ratio"][2 * k + 1] == pytest.approx(geo.massive_activation(fu.hidden[k + 1].double().numpy())[0], rel=1e-12)


def test_measure_record_against_separate_runs(tiny):
    """The record's per-sublayer means: the plain prompts' from sublayer_states one prompt at a time, the shuffled
    null's from the same shuffles run alone, the uniform null's from sublayer_states(uniform=True)."""
    rec = atlas.measure(tiny, PROMPTS, shuffles=2, seed=5)

    def ratios(seqs, uniform=False):
        return np.array([[geo.massive_activation(h.double().numpy())[0] for h in atlas.sublayer_states(tiny, s, uniform=uniform)[1:]] for s in seqs])

    rng = np.random.default_rng(5)
    draws = [[shuffled(p, rng, 0) for p in PROMPTS] for _ in range(2)]
    want = {"ratio": ratios(PROMPTS).mean(0), "shuffled": np.mean([ratios(d) for d in draws], axis=(0, 1)), "uniform": ratios(PROMPTS, True).mean(0)}
    for key, values in want.items():
        np.testing.assert_allclose([r[key] for r in rec["sublayers"]], values, rtol=1e-6, err_msg=key)
    assert rec["norm_placement"] == "pre-norm"
    assert not rec["qk_norm"]
    assert "0 by construction" in rec["uniform_fixed"]["sink_rate"]
    assert len(rec["sublayers"]) == 2 * len(tiny.layers)
    assert len(rec["blocks"]) == len(tiny.layers)


# --- the rules on hand-built arrays ------------------------------------------------------------------


def _dense(masks: list[set], n: int = 4, d: int = 6) -> torch.Tensor:
    """States (S + 1, n, d) whose massive entries after sublayer s are masks[s] (ones elsewhere, 1000 there)."""
    h = torch.ones(len(masks) + 1, n, d)
    for s, m in enumerate(masks):
        for t, j in m:
            h[s + 1, t, j] = 1000.0
    return h


# S = 8 sublayers (L = 4): the window ends at 8 - 1 - 2 = 5
A = [set(), set(), set(), {(0, 3)}, {(0, 3)}, {(0, 3)}, {(0, 3)}, set()]  # appears at 3, stays, gone at 7
B = [set(), set(), set(), {(0, 3)}, {(0, 3)}, {(0, 3)}, set(), set()]  # appears at 3, gone at 6
C = [set(), {(2, 1)}, set(), set(), {(2, 1)}, {(2, 1)}, {(2, 1)}, {(2, 1)}]  # transient at 1, stays from 4


def test_step_up_fall_on_hand_built_masks():
    st = [atlas.stays(m) for m in (A, B, C)]
    has = np.array([[bool(e) for e in s] for s in st])
    assert has.tolist() == [[False] * 3 + [True] * 3, [False] * 3 + [True] * 3, [False] * 4 + [True] * 2]
    assert atlas.step_up_of(has) == 3  # A and B: two of three prompts
    assert atlas.step_up_of(has[[0, 2]]) == 4  # one of two is not more than half
    entries = [s[3] for s in st]
    assert entries == [{(0, 3)}, {(0, 3)}, set()]
    assert atlas.fall_of([A, B, C], entries, 3) == 7  # at 6 one of the two holders has lost it: not more than half
    # the interventions' dense rule on the same entries: the same block and entries
    k, dense = step_up([_dense(m) for m in (A, B, C)])
    assert k == 3
    assert [set(e) for e in dense] == entries


def test_massive_record_on_hand_built_masks():
    D = [set(), set(), set(), {(0, 3), (1, 2), (3, 2)}, *[{(0, 3), (1, 2), (3, 2)}] * 3, set()]  # two later tokens of one text
    ms = [{"masks": m, "ratio": np.full(8, 10.0 * (p + 1))} for p, m in enumerate((A, B, C, D))]
    texts = [["<s>", "a", "b", "a"]] * 4
    m = atlas._massive(ms, texts, 8)
    assert (m["step_up"], m["fall"], m["first_massive"], m["window_end"]) == (3, 7, 1, 5)
    assert m["plateau"]["first"] == 3
    assert m["plateau"]["last"] == 6
    assert m["plateau"]["ratio"] == pytest.approx(np.mean([10.0, 20.0, 30.0, 40.0]))
    assert m["dims"] == [{"dim": 3, "prompts": 3}, {"dim": 2, "prompts": 1}]
    assert m["tokens"] == [{"position": 0, "text": None, "prompts": 3}, {"position": None, "text": "a", "prompts": 1}]  # 'a' twice, one prompt
    assert m["step_up_per_prompt"] == [3, 3, 4, 3]


def test_secondary_sinks_on_hand_built_attention():
    n = 20
    P = np.stack([uniform_causal(np.tril(np.ones((n, n)))), uniform_causal(np.tril(np.ones((n, n))))])
    P[1, 4:, :] = 0.5 / np.arange(5, n + 1)[:, None] * np.tril(np.ones((n, n)))[4:, :]  # half of each row spread ...
    P[1, 4:, 3] += 0.5  # ... and half on token 3
    np.testing.assert_allclose(P.sum(-1), 1.0)
    sinks = atlas.secondary_sinks(P)
    assert [j for j, _ in sinks] == [3]
    assert sinks[0][1] > 0.5
    assert atlas.secondary_sinks(P[:1]) == []
    # uniform attention's largest average over later queries, j = 1: mean over i = 2..n-1 of 1/(i + 1)
    assert atlas.uniform_secondary_max(n) == pytest.approx(np.mean([1 / (i + 1) for i in range(2, n)]))
    assert atlas.uniform_secondary_max(5) == 0.0  # no token has MIN_QUERIES later queries


def _rec(model, placement, rate, ci, qk=False, null=(0.0, 0.1)):
    coupling = {"rate": rate, "ci": ci, "shuffled_ci": list(null)}
    return {"model": model, "norm_placement": placement, "qk_norm": qk, "coupling": coupling, "massive": {"step_up": 23}}


def test_placement_sentence_follows_the_data():
    pre = _rec("smol", "pre-norm", 0.9, [0.85, 0.95])
    apart = atlas.placement_sentence([pre, _rec("gem", "sandwich", 0.2, [0.1, 0.3], qk=True)])
    assert "differs with norm placement" in apart
    assert "higher in the pre-norm model" in apart
    assert "QK-norm" in apart
    assert "cannot separate" in apart
    assert "2603.05498" in apart
    near = atlas.placement_sentence([pre, _rec("gem", "sandwich", 0.88, [0.8, 0.9])])
    assert "does not differ" in near
    assert "QK-norm" not in near
    assert "cannot separate" in near
    assert "share one norm placement" in atlas.placement_sentence([pre])
    assert "feed-forward sublayer" in apart
    assert "smol 0.90 [0.85, 0.95] (step-up in a feed-forward sublayer, apart from its shuffled-token null)" in apart
    same = atlas.placement_sentence([_rec("smol", "pre-norm", 0.9, [0.85, 0.95], null=(0.8, 0.9))])
    assert "not distinguishable from its shuffled-token null" in same
