"""``intervene --save-activations``: the residual states in the file equal the plain forward's
(bit for bit) and, for an edited branch, transformers' hidden states with the same edit made by a
forward hook (float64, 1e-10); the coordinates name the blocks and tokens; a rerun into the same
folder replaces the file; a file that is not ours is refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from attndyn.models import activations
from attndyn.models.decoder import forward
from attndyn.models.decoder_files import load_decoder

transformers = pytest.importorskip("transformers")
from tests.models.test_executor import PROMPTS, _folder_with_prompts  # noqa: E402
from tests.models.test_families import exact_reference, reference, tiny  # noqa: E402

SPEC = "zero:block=0,token=1,dim=5"


def _saved(tmp_path, dec, specs):
    tensors, index = activations.record(dec, PROMPTS, specs)
    path = tmp_path / "a.safetensors"
    path.write_bytes(activations.to_bytes(tensors, index))
    return activations.load(path)


def test_saved_plain_states_are_the_forward_s_and_edited_ones_transformers_with_a_hook(tmp_path):
    model, folder = tiny("llama", tmp_path)
    model = exact_reference(model)
    dec = load_decoder(folder)
    arrays = _saved(tmp_path, dec, [SPEC])
    L = len(dec.layers)
    assert sorted(arrays) == sorted([f"plain/prompt{i}" for i in range(2)] + [f"edit0/prompt{i}" for i in range(2)])
    for i, p in enumerate(PROMPTS):
        plain = arrays[f"plain/prompt{i}"]
        assert plain.dims == ("after_block", "token", "dim")
        assert list(plain.after_block.values) == list(range(-1, L))
        assert list(plain.token_id.values) == p
        assert plain.attrs["edit"] == ""
        assert plain.attrs["prompt"] == i
        assert torch.equal(torch.from_numpy(plain.values), forward(dec, p).hidden)

    # the edit by a hook on transformers' block 0 (independent of the executor and of the file)
    def hook(mod, args, out):
        h = (out[0] if isinstance(out, tuple) else out).clone()
        h[0, 1, 5] = 0
        return (h, *out[1:]) if isinstance(out, tuple) else h

    handle = model.model.layers[0].register_forward_hook(hook)
    try:
        want = reference(model, PROMPTS[0]).hidden_states
    finally:
        handle.remove()
    edited = arrays["edit0/prompt0"]
    assert edited.attrs["edit"] == SPEC
    assert float(edited.sel(after_block=0, token=1, dim=5)) == 0.0
    for k in range(L):  # hidden_states[k + 1] is block k's output (transformers' last one is after the final norm)
        got = torch.from_numpy(edited.sel(after_block=k).values)
        ref = want[k + 1][0] if k < L - 1 else None
        if ref is not None:
            err = float((got - ref).abs().max() / ref.abs().max())
            assert err < 1e-10, (k, err)
    later = torch.from_numpy(edited.sel(after_block=L - 1).values - arrays["plain/prompt0"].sel(after_block=L - 1).values)
    assert float(later.abs().max()) > 1e-6  # the edit reaches the last block: the comparison above can fail


def test_intervene_saves_the_activations_and_a_rerun_replaces_them(tmp_path, capsys):
    from attndyn.app.cli import entry

    folder, prompts = _folder_with_prompts(tmp_path)
    out = tmp_path / "iv"
    argv = ["intervene", str(folder), "--prompts", str(prompts), "--out", str(out), "--edit", SPEC, "--draws", "2", "--save-activations"]
    assert entry(argv) == 0
    record = json.loads((out / "interventions.json").read_text())
    arrays = activations.load(out / "activations.safetensors")
    assert record["activations"]["tensors"] == len(arrays) == 2 * record["prompts"]
    assert record["activations"]["bytes"] == sum(a.values.nbytes for a in arrays.values())
    dec = load_decoder(folder)
    texts = [t for t in prompts.read_text().split("\n\n") if t.strip()]
    for i, text in enumerate(texts):
        ids = dec.encode(text)
        assert list(arrays[f"plain/prompt{i}"].token_id.values) == ids
        assert torch.equal(torch.from_numpy(arrays[f"plain/prompt{i}"].values), forward(dec, ids).hidden)
    assert arrays["edit0/prompt0"].attrs["model"] == record["model"]
    assert entry(argv) == 0  # the file is recorded as attndyn's: the rerun moves it aside and writes it again
    assert "activations.safetensors" in capsys.readouterr().out


def test_a_file_that_is_not_an_activations_file_is_refused_by_name(tmp_path):
    from safetensors.torch import save_file

    other = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, str(other))
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00" * 40)
    for path in (other, garbage):
        with pytest.raises(ValueError, match=str(path.name)):
            activations.load(path)
