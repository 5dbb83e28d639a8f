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
from attndyn.models.decoder import Decoder, in_dtype
from attndyn.models.decoder_nulls import INIT_STD, NULL_DTYPE, RANDOM_DRAWS, SHUFFLE_DRAWS, random_decoder_on, shuffled
from attndyn.models.executor import forwards


def null_values(dec: Decoder, ids: list[list[int]], dtype: torch.dtype = NULL_DTYPE, *, random_draws: int = RANDOM_DRAWS,
                shuffle_draws: int = SHUFFLE_DRAWS, seed: int = 0,
                stds: tuple[float, ...] = (INIT_STD,),
                progress: Callable[[int, int], None] | None = None) -> tuple[dict, dict]:  # fmt: skip
    """The three nulls' per-layer values (:data:`~attndyn.models.decoder_geometry.NULL_KEYS`) on the prompts ``ids``,
    run in ``dtype``, ``{null: {key: (prompts, draws, L + 1)}}``, and each null's number of draws: uniform causal
    attention (one draw), ``random_draws`` random-weight models (drawn from seed + k at each of ``stds``, the
    second scale's as the null ``random_2``) and ``shuffle_draws`` permutations of each prompt. One pool of jobs
    over the worker processes (a random-weight model a job, uniform attention one, each draw of permutations one),
    each running all its prompts layer-major (:func:`attndyn.models.executor.forwards`: a layer built once a job,
    the random layers drawn one at a time, no copy of a model held), each forward reduced to its values, each job
    depending on its index alone: the numbers do not depend on the worker count. ``progress(i, n)``: ``i`` of the
    ``n`` forward passes done (0 first; a job's at its end)."""
    keep = 1 if dec.add_bos and dec.bos_id is not None else 0
    rng = np.random.default_rng(seed)
    shuffles = [[shuffled(i, rng, keep) for i in ids] for _ in range(shuffle_draws)]
    run = in_dtype(dec, dtype)  # the network's layers built in dtype as each job reaches them: no copy of the model

    def values(model: Decoder, prompts: list[list[int]], attention: str) -> list[dict]:
        # every prompt through each layer before the next (each layer built once a job), each reduced to its values
        out = []
        for fw in forwards(model, [(i, attention) for i in prompts], dtype=dtype):
            v = geo.layer_values([fw], clusters=False, keys=geo.NULL_KEYS)
            out.append({key: v[key][0] for key in geo.NULL_KEYS})
        return out

    tokens = sorted({t for i in ids for t in i})  # a shuffle permutes a prompt's tokens: no other rows are read

    def random_job(k: int, std: float) -> list[dict]:
        model, rows = random_decoder_on(dec, seed + k, tokens, std)  # drawn in float32 a layer at a time, the prompts' rows alone
        return values(model if dtype == torch.float32 else in_dtype(model, dtype), [rows(i) for i in ids], "softmax")

    P = len(ids)
    R = random_draws * len(stds)
    jobs: list[Callable[[], object]] = [lambda k=k, s=s: random_job(k, s) for s in stds for k in range(random_draws)]  # the longest first
    jobs += [lambda: values(run, ids, "uniform")]
    jobs += [lambda draw=draw: values(run, draw, "softmax") for draw in shuffles]
    if progress is not None:
        progress(0, len(jobs) * P)
    out = pmap(lambda j: jobs[j](), len(jobs), progress=progress, cost=[P] * len(jobs))  # each job runs every prompt once
    runs = {
        "uniform": [out[R]],
        "random": out[:random_draws],
        "shuffled": out[R + 1 :],
    }
    if len(stds) > 1:
        runs["random_2"] = out[random_draws : 2 * random_draws]
    stacked = {
        name: {key: np.stack([np.stack([v[key] for v in draw]) for draw in draws], axis=1) for key in geo.NULL_KEYS} for name, draws in runs.items()
    }
    return stacked, {name: len(draws) for name, draws in runs.items()}
