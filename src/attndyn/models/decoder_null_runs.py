"""The three nulls of the decoder page run on the prompts: ``null_values(decoder, ids)``.

It stands apart from :mod:`attndyn.models.decoder_nulls` (which draws the nulls) and
:mod:`attndyn.models.decoder_geometry` (which measures a forward pass), which it joins: the geometry module
uses the nulls' uniform causal attention, so neither may import the other back (no import circles).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from attndyn.core.parallel import pmap
from attndyn.models import decoder_geometry as geo
from attndyn.models.decoder import Decoder, forward, with_dtype
from attndyn.models.decoder_nulls import INIT_STD, NULL_DTYPE, RANDOM_DRAWS, SHUFFLE_DRAWS, random_decoder_on, shuffled


def null_values(dec: Decoder, ids: list[list[int]], dtype: torch.dtype = NULL_DTYPE, *, random_draws: int = RANDOM_DRAWS,
                shuffle_draws: int = SHUFFLE_DRAWS, seed: int = 0,
                stds: tuple[float, ...] = (INIT_STD,),
                progress: Callable[[int, int], None] | None = None) -> tuple[dict, dict]:  # fmt: skip
    """The three nulls' per-layer values (:data:`~attndyn.models.decoder_geometry.NULL_KEYS`) on the prompts ``ids``,
    run in ``dtype``, ``{null: {key: (prompts, draws, L + 1)}}``, and each null's number of draws: uniform causal
    attention (one draw), ``random_draws`` random-weight models (drawn from seed + k at each of ``stds``, the
    second scale's as the null ``random_2``) and ``shuffle_draws`` permutations of each prompt. One pool of jobs
    over the worker processes (a random-weight model a job, run on every prompt; then a forward a job), each
    reduced to its values and depending on its index alone: the numbers do not depend on the worker count.
    ``progress(i, n)``: ``i`` of the ``n`` forward passes done (0 first)."""
    keep = 1 if dec.add_bos and dec.bos_id is not None else 0
    rng = np.random.default_rng(seed)
    shuffles = [[shuffled(i, rng, keep) for i in ids] for _ in range(shuffle_draws)]
    run = with_dtype(dec, dtype)  # the network's weights cast once, shared by the workers

    def values(model: Decoder, i: list[int], attention: str) -> dict:
        fw = forward(model, i, dtype=dtype, attention=attention, logits=False)
        v = geo.layer_values([fw], clusters=False, keys=geo.NULL_KEYS)
        return {key: v[key][0] for key in geo.NULL_KEYS}

    tokens = sorted({t for i in ids for t in i})  # a shuffle permutes a prompt's tokens: no other rows are read

    def random_job(k: int, std: float) -> list[dict]:
        model, rows = random_decoder_on(dec, seed + k, tokens, std)  # drawn in float32, the prompts' rows alone
        model = model if dtype == torch.float32 else with_dtype(model, dtype)
        return [values(model, rows(i), "softmax") for i in ids]

    P = len(ids)
    R = random_draws * len(stds)
    jobs: list[Callable[[], object]] = [lambda k=k, s=s: random_job(k, s) for s in stds for k in range(random_draws)]  # the longest first
    jobs += [lambda i=i: values(run, i, "uniform") for i in ids]
    jobs += [lambda i=i: values(run, i, "softmax") for draw in shuffles for i in draw]
    cost = [P] * R + [1] * (len(jobs) - R)  # forward passes: a random-weight model runs every prompt
    if progress is not None:
        progress(0, sum(cost))
    out = pmap(lambda j: jobs[j](), len(jobs), progress=progress, cost=cost)
    runs = {
        "uniform": [out[R : R + P]],
        "random": out[:random_draws],
        "shuffled": [out[R + P * (1 + s) : R + P * (2 + s)] for s in range(shuffle_draws)],
    }
    if len(stds) > 1:
        runs["random_2"] = out[random_draws : 2 * random_draws]
    stacked = {
        name: {key: np.stack([np.stack([v[key] for v in draw]) for draw in draws], axis=1) for key in geo.NULL_KEYS} for name, draws in runs.items()
    }
    return stacked, {name: len(draws) for name, draws in runs.items()}
