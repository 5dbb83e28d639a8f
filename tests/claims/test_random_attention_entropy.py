"""random-attention-entropy's trained-head measure (attndyn.claims.random_attention_entropy.head_rows) against a
direct per-row computation from the logits themselves (not from log P), on causal rows of known logits."""

from __future__ import annotations

import math

import numpy as np

from attndyn.claims import random_attention_entropy as rae


def test_head_rows_from_the_attention_equal_the_logits_own_spread_and_entropy():
    rng = np.random.default_rng(2)
    L, H, n, min_keys = 2, 3, 40, 16
    scales = np.array([0.3, 1.5, 6.0])  # the last head well above the freezing scale
    logits = rng.standard_normal((L, H, n, n)) * scales[None, :, None, None]
    causal = np.tril(np.ones((n, n), dtype=bool))
    z = np.where(causal, logits, -np.inf)
    A = np.exp(z - z.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    got = rae.head_rows(A, min_keys)
    for layer in range(L):
        for head in range(H):
            ent, sig, gaps, below = [], [], [], []
            for i in range(min_keys - 1, n):
                g = logits[layer, head, i, : i + 1]
                p = np.exp(g - g.max())
                p /= p.sum()
                s = g.std()  # the logits' own spread (population)
                h = float(-(p * np.log(p)).sum())
                ent.append(h)
                sig.append(s)
                if s < math.sqrt(2 * math.log(i + 1)):
                    gaps.append(h - (math.log(i + 1) - s * s / 2))
                    below.append(1)
                else:
                    below.append(0)
            want = [np.mean(ent), np.mean(sig), np.mean(gaps) if gaps else np.nan, np.mean(below)]
            np.testing.assert_allclose(got[layer, head], want, rtol=1e-10, atol=1e-12, equal_nan=True)
    assert np.isnan(got[:, 2, 2]).all()  # sigma = 6 lies above sqrt(2 ln 40) = 2.7 in every row: no gap
    assert (got[:, 0, 3] == 1).all()


def test_the_trainability_diagram_reports_both_collapses_where_the_scales_put_them():
    """A 2 x 2 diagram of random decoders: rank collapse at a small query/key scale with large residual branches
    (the cosine of uniform-like attention averaging), entropy collapse above the freezing scale, neither at small
    scales of both; the counts in the report are those of the cells."""
    config = rae.Config(seed=0, qk_scales=[0.25, 4.0], residual_scales=[0.1, 16.0], train_layers=12, train_draws=1, trained_prompts=0)
    arrays = rae.trainability(config)
    cells = arrays["train_cells"]
    assert cells.shape == (2, 2, 1, 4)
    cos, ent = cells[..., 0, 0], cells[..., 0, 1]
    assert cos[1, 0] > rae.RANK_COLLAPSE > cos[0, 0]  # residual scale 16 at qk 0.25 against 0.1
    assert ent[0, 1] < rae.ENTROPY_COLLAPSE < ent[0, 0]  # qk 4 above (2 ln 64)^(1/4) = 1.70, qk 0.25 below
    checks = rae._trainability_checks(arrays, config)
    neither = checks["trainability at initialisation: cells with neither rank nor entropy collapse (qk scale, residual scale)"]
    assert neither.value == int(((cos <= rae.RANK_COLLAPSE) & (ent >= rae.ENTROPY_COLLAPSE)).sum())
    assert "(0.25, 0.1)" in neither.note
    assert "0 of 2 below it" in checks["trainability: the freezing qk scale (2 ln n)^(1/4), with the entropy-collapsed cells below and above it"].note
