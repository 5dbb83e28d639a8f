"""The twin replacements of a layer's attention (``attention:block=l,with=twin-step|twin``) against an
independent computation: transformers' model with the attention's output replaced, by forward hooks, by the
particle twin written here in NumPy from the layer's own weights (RMSNorm's weight and sqrt(d) folded into
Q, K, V; no RoPE; causal softmax at the directions x / |x|; RK4 for the flow), in float64, to 1e-10."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attndyn.models import interventions as iv
from attndyn.models.decoder_files import load_decoder
from attndyn.models.executor import run
from attndyn.models.interventions import parse, run_study

transformers = pytest.importorskip("transformers")
from tests.models.test_families import exact_reference, reference, tiny  # noqa: E402

PROMPTS = [[5, 17, 3, 60, 42, 42, 1, 33, 23, 9, 51], [7, 8, 9, 10, 11, 12, 13, 14, 2]]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _twin_field(block, config):
    """The particle twin's velocity of one block, from its weights alone: x' = sum_h P_h (theta W_v,h^T) W_o,h^T,
    P_h = causal softmax of <Q_h theta_i, K_h theta_j> / sqrt(hd), theta = sqrt(d) (x / |x|) * w."""
    sd = {k: v.detach().double().numpy() for k, v in block.state_dict().items()}
    w, Wq, Wk, Wv, Wo = (sd[k] for k in ("input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                          "self_attn.v_proj.weight", "self_attn.o_proj.weight"))  # fmt: skip
    d, H, KV = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    hd = d // H

    def field(x):
        n = x.shape[0]
        h = np.sqrt(d) * x / np.linalg.norm(x, axis=1, keepdims=True) * w
        out = np.zeros((n, d))
        for head in range(H):
            g = head // (H // KV)
            q, k, v = h @ Wq[head * hd : (head + 1) * hd].T, h @ Wk[g * hd : (g + 1) * hd].T, h @ Wv[g * hd : (g + 1) * hd].T
            s = q @ k.T / np.sqrt(hd)
            s[np.triu_indices(n, 1)] = -np.inf
            P = np.exp(s - s.max(1, keepdims=True))
            P /= P.sum(1, keepdims=True)
            out += (P @ v) @ Wo[:, head * hd : (head + 1) * hd].T
        return out

    return field


def _rk4(field, x, steps):
    """Classical RK4 from its tableau: stage i evaluates at y + c_i dt k_(i-1); weights 1/6, 1/3, 1/3, 1/6."""
    y, dt = x.copy(), 1.0 / steps
    for _ in range(steps):
        ks = [field(y)]
        for c in (0.5, 0.5, 1.0):
            ks.append(field(y + c * dt * ks[-1]))
        y = y + dt * sum(w * k for w, k in zip((1 / 6, 1 / 3, 1 / 3, 1 / 6), ks, strict=True))
    return y


def _hooked_logits(model, ids, block, steps):
    """Logits of transformers' model with block ``block``'s attention output replaced by the NumPy twin
    (``steps=None``: its velocity; else x(1) - x(0) of its RK4 flow)."""
    layer = model.model.layers[block]
    field = _twin_field(layer, model.config)
    seen = {}

    def grab(mod, args, kwargs):
        seen["x"] = (args[0] if args else kwargs["hidden_states"])[0].detach().numpy()

    def swap(mod, args, out):
        x = seen["x"]
        upd = field(x) if steps is None else _rk4(field, x, steps) - x
        return (torch.from_numpy(upd)[None].to(out[0].dtype), *out[1:])

    handles = [layer.register_forward_pre_hook(grab, with_kwargs=True), layer.self_attn.register_forward_hook(swap)]
    try:
        return reference(model, ids).logits[0]
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize(("spec", "block", "steps"), [
    ("attention:block=0,with=twin-step", 0, None),
    ("attention:block=1,with=twin-step", 1, None),
    ("attention:block=0,with=twin,steps=1", 0, 1),
    ("attention:block=0,with=twin", 0, 8),
    ("attention:block=1,with=twin,steps=3", 1, 3),
])  # fmt: skip
def test_the_twin_replacements_equal_an_independent_numpy_twin(tmp_path, spec, block, steps):
    model, folder = tiny("llama", tmp_path)
    model = exact_reference(model)
    dec = load_decoder(folder)
    _, edited, _ = run(dec, PROMPTS, [(0, (parse(spec),))], keep_logits=True)
    want = _hooked_logits(model, PROMPTS[0], block, steps)
    err = float((edited[0].logits - want).abs().max() / want.abs().max())
    assert err < 1e-10, f"{spec}: {err}"
    plain = reference(model, PROMPTS[0]).logits[0]
    assert float((plain - want).abs().max()) > 1e-6, f"{spec}: the twin changes nothing, so the oracle cannot fail"


def test_the_flow_differs_from_the_step_and_converges_in_its_steps(tmp_path):
    """RK4's one step is not the Euler step (the flow's 1-step output is not twin-step's), and the flow
    converges at fourth order: the difference of 8 and 16 steps is far below that of 1 and 2."""
    _, folder = tiny("llama", tmp_path)
    dec = load_decoder(folder)
    specs = ["attention:block=0,with=twin-step", *(f"attention:block=0,with=twin,steps={s}" for s in (1, 2, 8, 16))]
    _, edited, _ = run(dec, PROMPTS, [(0, (parse(s),)) for s in specs], keep_logits=True)
    step, one, two, eight, sixteen = (r.logits for r in edited)
    assert float((step - one).abs().max()) > 1e-6
    assert float((eight - sixteen).abs().max()) < 1e-2 * float((one - two).abs().max())


@pytest.mark.parametrize("family", ["gemma2", "gpt_neox", "olmo2"])
def test_families_without_a_twin_are_refused_with_their_reason(tmp_path, family):
    from attndyn.models.architectures import twin_refusal

    _, folder = tiny(family, tmp_path)
    dec = load_decoder(folder)
    why = twin_refusal(dec)
    assert why
    with pytest.raises(ValueError, match="particle twin is not offered") as err:
        run(dec, PROMPTS, [(0, (parse("attention:block=0,with=twin"),))])
    assert why in str(err.value)
    with pytest.raises(ValueError, match="particle twin is not offered"):
        run_study(dec, PROMPTS, "theory")


def test_steps_are_validated():
    assert parse("attention:block=2,with=twin,steps=4").steps == 4
    for bad in ("attention:block=2,with=twin,steps=0", "attention:block=2,with=twin-step,steps=4", "attention:block=2,with=uniform,steps=2"):
        with pytest.raises(ValueError, match="steps"):
            parse(bad)


def test_the_theory_study_chains_the_replacements_and_gives_the_share_only_where_the_gap_is_resolved(tmp_path):
    """The differences add up along plain -> twin-step -> twin -> uniform; the share is recomputed here from
    the per-prompt losses of separate executor runs (pooled sums, not the study's code)."""
    _, folder = tiny("llama", tmp_path)
    dec = load_decoder(folder)
    prompts = [*PROMPTS, [3, 4, 5, 6, 7, 8, 9, 10], [11, 40, 41, 12, 13, 14, 50, 2, 9], [60, 61, 2, 3, 17, 18]]
    out = run_study(dec, prompts, "theory")
    assert out["layers"] == [0]  # default_twin_layers(2)
    (row,) = out["per_layer"]
    assert [d["to"] for d in row["differences"]] == ["twin-step", "twin", "uniform"]
    assert abs(sum(d["nll"] for d in row["differences"]) - row["gap"]) < 1e-12
    for d in (*row["differences"], row):
        key = "nll" if "to" in d else "gap"
        lo, hi = d[f"{key}_interval"]
        assert lo <= d[key] <= hi

    def pooled(spec):
        plain, edited, _ = run(dec, prompts, [(i, (parse(spec),)) for i in range(len(prompts))] if spec else [])
        rows = edited if spec else plain
        return sum(float(r.nll.sum()) for r in rows) / sum(len(r.nll) for r in rows)

    base, twin, uniform = pooled(None), pooled("attention:block=0,with=twin"), pooled("attention:block=0,with=uniform")
    assert abs(row["gap"] - (uniform - base)) < 1e-12
    lo, hi = row["gap_interval"]
    if lo > 0 or hi < 0:
        assert abs(row["share"] - (uniform - twin) / (uniform - base)) < 1e-10
        assert row["share_interval"][0] <= row["share"] <= row["share_interval"][1]
    else:
        assert row["share"] is None
        assert row["share_status"].startswith("undetermined")


def test_intervene_runs_the_theory_study_and_draws_its_figure(tmp_path):
    from attndyn.app.cli import entry
    from tests.models.test_executor import _folder_with_prompts

    folder, prompts = _folder_with_prompts(tmp_path)
    out = tmp_path / "iv"
    assert entry(["intervene", str(folder), "--prompts", str(prompts), "--out", str(out), "--study", "theory"]) == 0
    record = json.loads((out / "interventions.json").read_text())
    study = record["studies"]["theory"]
    assert [e["edit"] for e in study["edits"]] == [f"attention:block=0,with={w}" for w in ("twin-step", "twin", "uniform")]
    assert study["per_layer"][0]["share_status"]
    assert record["nll"] == study["nll"]  # the study's plain branches, not a second plain run
    assert (out / "theory.png").exists()
    assert "share closed by the flow" in (out / "index.html").read_text()


def test_intervene_refuses_the_theory_study_for_a_family_without_a_twin(tmp_path, capsys):
    from attndyn.app.cli import entry
    from tests.models.test_families import _word_tokenizer

    _, folder = tiny("gpt_neox", tmp_path)
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n\n".join(_word_tokenizer(folder)) + "\n")
    out = tmp_path / "iv"
    assert entry(["intervene", str(folder), "--prompts", str(prompts), "--out", str(out), "--study", "theory"]) == 2
    assert "particle twin is not offered" in capsys.readouterr().err
    assert not (out / "interventions.json").exists()


def test_the_share_of_the_gap_is_given_only_where_the_gap_is_resolved():
    from attndyn.models.interventions import gap_share

    rng = np.random.default_rng(0)
    plain = 3.0 + 0.01 * rng.standard_normal(4000)
    twin, uniform = plain + 0.5 + 0.01 * rng.standard_normal(4000), plain + 2.0 + 0.01 * rng.standard_normal(4000)
    nll = {"plain": 3.0, "twin": 3.5, "uniform": 5.0}
    out = gap_share(nll, {"plain": plain, "twin": twin, "uniform": uniform})
    assert out["share"] == pytest.approx(0.75, abs=1e-15)  # (5 - 3.5) / (5 - 3)
    ratio = (uniform - twin) / (uniform - plain)
    assert out["share_interval"] == [np.quantile(ratio, 0.025), np.quantile(ratio, 0.975)]
    assert out["gap_interval"] == [np.quantile(uniform - plain, 0.025), np.quantile(uniform - plain, 0.975)]
    unresolved = gap_share(nll | {"uniform": 3.0}, {"plain": plain, "twin": twin, "uniform": plain + 0.1 * rng.standard_normal(4000)})
    assert unresolved["share"] is None
    assert unresolved["share_interval"] is None
    assert unresolved["share_status"].startswith("undetermined: the gap's interval")


def test_the_theory_figure_and_table_show_a_resolved_and_an_unresolved_share(tmp_path):
    from attndyn.app.interventions_page import _theory_table, theory_figure

    def row(layer, share):
        nll = {"plain": 3.0, "twin-step": 3.2, "twin": 3.4, "uniform": 4.0}
        diffs = [{"from": u, "to": v, "nll": nll[v] - nll[u], "nll_interval": [0.0, 0.5]} for u, v in zip(nll, list(nll)[1:], strict=False)]
        resolved = {"share": share, "share_interval": [0.4, 0.8], "share_status": "determined"}
        unresolved = {"share": None, "share_interval": None, "share_status": "undetermined: the gap's interval [-0.1, 2] includes zero"}
        return {"layer": layer, "nll": nll, "differences": diffs, "plain_to": dict.fromkeys(("twin-step", "twin", "uniform"), [0.0, 1.5]),
                "gap": 1.0, "gap_interval": [0.5, 1.5], **(resolved if share is not None else unresolved)}  # fmt: skip

    study = {"per_layer": [row(0, 0.6), row(5, None)]}
    assert theory_figure(study, tmp_path / "theory.png", "t").stat().st_size > 0
    table = _theory_table(study)
    assert "0.6 [0.4, 0.8]" in table
    assert "undetermined: the gap&#x27;s interval" in table


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        ("attention:block=3,with=twin;skip:block=3,head=1", "the particle twin replaces block 3's whole attention sublayer"),
        ("skip:block=2,head=0;attention:block=2,with=twin-step", "the particle twin replaces block 2's whole attention sublayer"),
        ("attention:block=3,with=twin;attention:block=3,with=uniform", "both replace block 3's attention"),
    ],
)
def test_edits_the_executor_cannot_apply_together_are_refused(specs, expected):
    """The twin replaced block k's attention from the layer's folded Q, K, V and a head skipped there was
    dropped without a word; a second attention replacement at one block was ignored the same way."""
    with pytest.raises(ValueError, match=expected):
        iv.parse_all(specs)
    assert len(iv.parse_all("attention:block=3,with=twin;skip:block=4,head=1")) == 2  # other blocks: both apply


def test_intervene_theory_layers_all_and_refusals(tmp_path, capsys):
    """``--layers all`` replaces every layer's attention (the default is the twin layers, [0] here); a layer
    outside the model, a word that is not a list, or --layers without the theory study exit 2 naming it."""
    from attndyn.app.cli import entry
    from tests.models.test_executor import _folder_with_prompts

    folder, prompts = _folder_with_prompts(tmp_path)
    args = ["intervene", str(folder), "--prompts", str(prompts)]
    out = tmp_path / "iv"
    assert entry([*args, "--out", str(out), "--study", "theory", "--layers", "all"]) == 0
    study = json.loads((out / "interventions.json").read_text())["studies"]["theory"]
    assert study["layers"] == [0, 1]
    assert [r["layer"] for r in study["per_layer"]] == [0, 1]
    capsys.readouterr()
    for extra, said in [
        (["--study", "theory", "--layers", "2"], "layer 2 is not in 0..1"),
        (["--study", "theory", "--layers", "one"], "is not 'all' or a comma-separated list"),
        (["--study", "depth", "--layers", "all"], "give --study theory"),
    ]:
        bad = tmp_path / "bad"
        assert entry([*args, "--out", str(bad), *extra]) == 2
        assert said in capsys.readouterr().err
        assert not (bad / "interventions.json").exists()
