"""The layer-major executor and the edits: the empty edit is bit-identical to the plain forward; each edit
kind equals transformers with the same edit made by forward hooks (float64, 1e-10 in the logits)."""

from __future__ import annotations

import pytest
import torch

from attndyn.models.decoder import forward
from attndyn.models.decoder_files import load_decoder
from attndyn.models.executor import run
from attndyn.models.interventions import decide, effects, parse, parse_all

transformers = pytest.importorskip("transformers")
from tests.models.test_families import exact_reference, reference, tiny  # noqa: E402

PROMPTS = [[5, 17, 3, 60, 42, 42, 1, 33, 23, 9, 51], [7, 8, 9, 10, 11, 12, 13, 14, 2]]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt_neox"])
def test_the_empty_edit_is_bit_identical_to_the_plain_forward(tmp_path, family):
    _, folder = tiny(family, tmp_path)
    dec = load_decoder(folder)
    for dtype in (torch.float64, torch.float32):
        plain, edited, counts = run(dec, PROMPTS, [(0, ()), (1, ())], dtype=dtype, record=True, keep_logits=True)
        for i, p in enumerate(PROMPTS):
            ref = forward(dec, p, dtype=dtype)
            assert torch.equal(plain[i].hidden, ref.hidden)
            assert torch.equal(plain[i].logits, ref.logits)
            assert torch.equal(edited[i].logits, ref.logits)
            assert float(edited[i].kl.abs().max()) == 0.0
        assert counts["layers_built"] == len(dec.layers)


def test_specs_are_parsed_and_malformed_ones_refused_with_the_forms():
    e = parse("zero:block=11,token=0,dim=507")
    assert (e.kind, e.blocks, e.token, e.dim) == ("zero", (11, 11), 0, 507)
    assert parse("skip:blocks=3-5").blocks == (3, 5)
    assert parse("scale:block=3,dim=12,by=0.5").by == 0.5
    assert parse("attention:block=4,with=no-first-key").with_ == "no-first-key"
    assert len(parse_all("skip:block=1;zero:block=0,dim=2")) == 2
    for bad in ("zero", "zero:block=x", "frob:block=1", "scale:block=1", "skip:blocks=5-3", "zero:block=1,bogus=2", "attention:block=1,with=foo"):
        with pytest.raises(ValueError, match=r"accepted forms|not|runs backwards|needs"):
            parse(bad)


def _hook_reference(model, ids, spec, prompts):
    """transformers' model with the edit made by forward hooks (independent of the executor)."""
    e = parse(spec)
    blocks = model.model.layers if hasattr(model, "model") else model.gpt_neox.layers
    handles = []
    if e.kind in ("zero", "scale", "patch", "mean"):
        if e.kind in ("patch", "mean"):
            others = [reference(model, p).hidden_states[e.blocks[0] + 1][0] for p in prompts]

        def hook(mod, args, out):
            h = out[0] if isinstance(out, tuple) else out
            h = h.clone()
            rows = slice(None) if e.token is None else e.token
            cols = slice(None) if e.dim is None else e.dim
            if e.kind == "zero":
                h[0, rows, cols] = 0
            elif e.kind == "scale":
                h[0, rows, cols] *= e.by
            elif e.kind == "patch":
                h[0, e.token] = others[e.source][e.token]
            else:
                h[0, rows, cols] = torch.stack([o[e.token, cols] for o in others]).mean(0)
            return (h, *out[1:]) if isinstance(out, tuple) else h

        handles.append(blocks[e.blocks[0]].register_forward_hook(hook))
    elif e.kind == "skip" and e.head is None and e.sublayer is None:
        for k in range(e.blocks[0], e.blocks[1] + 1):
            handles.append(
                blocks[k].register_forward_hook(
                    lambda mod, args, out, **kw: (args[0], *out[1:]) if isinstance(out, tuple) else args[0], with_kwargs=False
                )
            )
    elif e.kind == "skip" and e.sublayer == "attention":
        attn = blocks[e.blocks[0]].self_attn
        handles.append(attn.register_forward_hook(lambda mod, args, out: (torch.zeros_like(out[0]), *out[1:])))
    elif e.kind == "skip" and e.head is not None:
        o_proj = blocks[e.blocks[0]].self_attn.o_proj
        hd = model.config.hidden_size // model.config.num_attention_heads

        def pre(mod, args):
            z = args[0].clone()
            z[..., e.head * hd : (e.head + 1) * hd] = 0
            return (z,)

        handles.append(o_proj.register_forward_pre_hook(pre))
    try:
        return reference(model, ids).logits[0]
    finally:
        for h in handles:
            h.remove()


SPECS = [
    "zero:block=0,token=1,dim=5",
    "zero:block=0,dim=3",
    "scale:block=0,token=2,by=0.5",
    "mean:block=0,token=1,dim=7",
    "patch:block=0,token=2,from=1",
    "skip:block=1",
    "skip:blocks=0-1",
    "skip:block=1,sublayer=attention",
    "skip:block=1,head=2",
]


@pytest.mark.parametrize("spec", SPECS)
def test_each_edit_equals_transformers_with_the_same_edit_made_by_hooks(tmp_path, spec):
    model, folder = tiny("llama", tmp_path)
    model = exact_reference(model)
    dec = load_decoder(folder)
    edits = (parse(spec),)
    _, edited, _ = run(dec, PROMPTS, [(0, edits)], keep_logits=True)
    want = _hook_reference(model, PROMPTS[0], spec, PROMPTS)
    err = float((edited[0].logits - want).abs().max() / want.abs().max())
    assert err < 1e-10, f"{spec}: {err}"
    plain = reference(model, PROMPTS[0]).logits[0]
    if spec != "skip:blocks=0-1":
        assert float((plain - want).abs().max()) > 1e-6, f"{spec}: the edit changes nothing, so the oracle cannot fail"


def test_effects_pool_the_loss_over_every_predicted_token(tmp_path):
    _, folder = tiny("llama", tmp_path)
    dec = load_decoder(folder)
    plain, edited, _ = run(dec, PROMPTS, [(0, ()), (1, ())])
    out = effects(plain, edited, resamples=200)
    total, count = 0.0, 0
    for p in PROMPTS:  # independent: log-softmax of the plain forward's logits
        lp = torch.log_softmax(forward(dec, p).logits[:-1], -1)
        total -= float(lp.gather(1, torch.tensor(p[1:])[:, None]).sum())
        count += len(p) - 1
    assert abs(out["nll"] - total / count) < 1e-12
    assert out["ppl_ratio"] == 1.0
    assert out["kl"] == 0.0
    assert out["ppl_ratio_interval"] == [1.0, 1.0]


def test_the_decision_rule():
    assert decide([0.1] * 5, [0.3] * 5) == "exceeds"
    assert decide([-0.3] * 5, [-0.1] * 5) == "falls below"
    assert decide([0.1, -0.1, 0.1, 0.1, 0.1], [0.3] * 5) == "undetermined (depends on the draw)"
    assert decide([-0.1] * 5, [0.1] * 5) == "cannot be told"
    assert decide([0.1] * 4, [0.3] * 4) == "undetermined (depends on the draw)"  # fewer than 5 draws: no decision (issue 47)


def _folder_with_prompts(tmp_path):
    from tests.models.test_families import _word_tokenizer

    _, folder = tiny("llama", tmp_path)
    texts = _word_tokenizer(folder)
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n\n".join([*texts, " ".join(texts[0].split()[3:]), " ".join(texts[1].split()[2:])]) + "\n")
    return folder, prompts


def test_intervene_writes_the_edits_with_intervals_and_nulls(tmp_path):
    import json

    from attndyn.app.cli import entry

    folder, prompts = _folder_with_prompts(tmp_path)
    out = tmp_path / "iv"
    specs = ["zero:block=0,token=1,dim=5", "skip:block=1", "attention:block=1,with=uniform"]
    args = ["intervene", str(folder), "--prompts", str(prompts), "--out", str(out), "--study", "depth"]
    assert entry([*args, *(x for s in specs for x in ("--edit", s))]) == 0
    record = json.loads((out / "interventions.json").read_text())
    assert record["model"] == folder.name  # the folder (or file) read, as the findings pages name it
    assert [e["edit"] for e in record["edits"]] == specs
    for e in record["edits"]:
        for key in ("nll", "kl"):
            lo, hi = e[f"{key}_interval"]
            assert lo <= e[key] <= hi
        assert e["ppl_ratio_interval"][0] <= e["ppl_ratio_interval"][1]
    assert record["edits"][0]["null"]["ppl_ratio_draws"]
    assert len(record["edits"][0]["null"]["edits"]) == 5
    assert record["edits"][2]["null"] is None  # uniform attention has no random place
    assert (out / "index.html").exists()
    assert (out / "edits.png").exists()
    assert (out / "depth.png").exists()


@pytest.mark.parametrize("spec", ["zero:block=9", "zero:block=0,dim=99", "nonsense", "skip:block=0,head=9"])
def test_intervene_refuses_a_bad_edit_with_exit_2_and_writes_nothing(tmp_path, spec, capsys):
    from attndyn.app.cli import entry

    folder, prompts = _folder_with_prompts(tmp_path)
    out = tmp_path / "iv"
    assert entry(["intervene", str(folder), "--prompts", str(prompts), "--out", str(out), "--edit", spec]) == 2
    assert not (out / "interventions.json").exists()
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("family", ["qwen2", "mistral", "qwen3", "olmo2", "phi3", "gemma2", "llama+attention_bias"])
@pytest.mark.parametrize(
    "spec", ["zero:block=0,token=1,dim=5", "mean:block=0,token=1,dim=7", "skip:block=1", "skip:block=0,head=2", "skip:block=1,sublayer=attention"]
)
def test_the_edits_equal_transformers_hooks_in_the_other_families(tmp_path, family, spec):
    model, folder = tiny(family, tmp_path)
    model = exact_reference(model)
    dec = load_decoder(folder)
    _, edited, _ = run(dec, PROMPTS, [(0, (parse(spec),))], keep_logits=True)
    want = _hook_reference(model, PROMPTS[0], spec, PROMPTS)
    err = float((edited[0].logits - want).abs().max() / want.abs().max())
    assert err < 1e-10, f"{family} {spec}: {err}"


def test_intervene_runs_the_sinks_study(tmp_path):
    """``--study sinks`` (it raised TypeError in the command before: the layer spread shadowed the progress
    callback): the first key removed at every layer of a 2-layer model, each loss equal to a separate run
    of that edit, pooled over every predicted token here."""
    import json

    from attndyn.app.cli import entry

    folder, prompts = _folder_with_prompts(tmp_path)
    out = tmp_path / "iv"
    assert entry(["intervene", str(folder), "--prompts", str(prompts), "--out", str(out), "--study", "sinks"]) == 0
    study = json.loads((out / "interventions.json").read_text())["studies"]["sinks"]
    assert study["layers"] == [0, 1]
    assert [e["edit"] for e in study["edits"]] == [f"attention:block={k},with=no-first-key" for k in (0, 1)]
    dec = load_decoder(folder)
    ids = [dec.encode(t) for t in prompts.read_text().split("\n\n") if t.strip()]
    for k, e in zip((0, 1), study["edits"], strict=True):
        _, edited, _ = run(dec, ids, [(i, (parse(f"attention:block={k},with=no-first-key"),)) for i in range(len(ids))])
        pooled = sum(float(r.nll.sum()) for r in edited) / sum(len(r.nll) for r in edited)
        assert abs(e["nll"] - pooled) < 1e-12
        assert e["null"] is not None
        assert len(e["null"]["edits"]) == 5
    assert (out / "sinks.png").exists()
    geometry = study["geometry"]  # the attention after each removal: block k's first key is gone (query 0 keeps it)
    assert [e["edit"] for e in geometry["edits"]] == [e["edit"] for e in study["edits"]]
    for k, e in zip((0, 1), geometry["edits"], strict=True):
        assert abs(e["attention_on_first"][k + 1] - sum(1 / len(p) for p in ids) / len(ids)) < 1e-14
    assert (out / "sinks-geometry.png").exists()
