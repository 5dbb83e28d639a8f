"""A decoder's residual states, plain or edited, saved to safetensors with xarray-style coordinates
(``attndyn intervene --save-activations``), and read back as :class:`xarray.DataArray` objects.

One run of the layer-major executor (:func:`attndyn.models.executor.run` with ``record=True``) gives,
for every prompt, its plain branch and one branch per edit (``specs``, each a spec or ``;``-joined
specs made at once): the residual stream ``(L + 1, n, d)``, where entry ``s`` is the state after
0-based block ``s - 1`` (``s = 0``: the embeddings, before any block), so that ``after_block = l``
is the stream an edit at ``block=l`` acts on, as in the findings and the edit specs.

The file holds one tensor per (branch, prompt), named ``plain/prompt{i}`` or ``edit{j}/prompt{i}``,
in the compute dtype, and under the metadata key ``attndyn`` one JSON document with, per tensor,
its dimensions (``after_block``, ``token``, ``dim``), coordinates (``after_block`` from -1 to L - 1,
``token`` the positions, ``token_id`` and ``text`` along ``token``) and attributes (``edit``,
``prompt``), and for the file the model, dtype and provenance. Safetensors holds no code: reading a
file executes nothing. :func:`load` builds the DataArrays; any reader of safetensors gets the raw
tensors and can parse the JSON itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from attndyn.models.decoder import Decoder

FORMAT = "attndyn.activations/1"
DIMS = ("after_block", "token", "dim")


def nbytes(decoder: Decoder, prompts: Sequence[Sequence[int]], n_edits: int, dtype: torch.dtype) -> int:
    """The bytes of the tensors a file of ``n_edits`` edited branches per prompt holds (what
    :func:`record` keeps in memory too)."""
    item = torch.empty((), dtype=dtype).element_size()
    rows = sum(len(p) for p in prompts) * (len(decoder.layers) + 1) * decoder.embed.shape[1]
    return item * rows * (1 + n_edits)


def record(
    decoder: Decoder,
    prompts: list[list[int]],
    specs: Sequence[str] = (),
    *,
    dtype: torch.dtype = torch.float64,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, torch.Tensor], dict]:
    """The residual states of every prompt, plain and under each of ``specs``: ``(tensors, index)``,
    the tensors by name and the JSON index of the module docstring (without model and provenance)."""
    from attndyn.models.edits import parse_all
    from attndyn.models.executor import run

    edits = [parse_all(s) for s in specs]
    branches = [(i, e) for e in edits for i in range(len(prompts))]
    plain, edited, _ = run(decoder, prompts, branches, dtype=dtype, record=True, progress=progress)
    L = len(decoder.layers)
    tensors: dict[str, torch.Tensor] = {}
    entries: dict[str, dict] = {}
    texts = _texts(decoder, prompts)

    def put(name: str, hidden: torch.Tensor, i: int, spec: str | None) -> None:
        tensors[name] = hidden.contiguous()
        entries[name] = {
            "dims": list(DIMS),
            "coords": {
                "after_block": list(range(-1, L)),
                "token": list(range(len(prompts[i]))),
                "token_id": [int(t) for t in prompts[i]],
                "text": texts[i],
            },
            "attrs": {"edit": spec or "", "prompt": i},
        }

    for r in plain:
        put(f"plain/prompt{r.prompt}", r.hidden, r.prompt, None)
    for b, r in enumerate(edited):
        put(f"edit{b // len(prompts)}/prompt{r.prompt}", r.hidden, r.prompt, specs[b // len(prompts)])
    index = {"format": FORMAT, "dtype": str(dtype).removeprefix("torch."), "blocks": L, "edits": list(specs), "tensors": entries}
    return tensors, index


def _texts(decoder: Decoder, prompts: list[list[int]]) -> list[list[str]]:
    """Each token's text where the decoder carries a tokenizer (else empty strings)."""
    if decoder.tokenizer is None:
        return [[""] * len(p) for p in prompts]
    return [[decoder.decode([int(t)]) for t in p] for p in prompts]


def to_bytes(tensors: dict[str, torch.Tensor], index: dict) -> bytes:
    """The safetensors file of :func:`record`'s output (``index`` under the metadata key ``attndyn``)."""
    from safetensors.torch import save

    return save(tensors, metadata={"attndyn": json.dumps(index)})


def load(path: str | Path) -> dict:
    """A file written by :func:`to_bytes` (``intervene --save-activations``): one
    :class:`xarray.DataArray` per tensor, by name, with the dimensions, coordinates and attributes
    of its index (``attrs`` also holds the file's ``model`` and ``dtype``). ValueError, naming the
    file, when it is not such a file."""
    import xarray as xr
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            index = json.loads(meta["attndyn"])
            if index.get("format") != FORMAT:
                raise ValueError(f"{str(path)!r} is not an attndyn activations file (format {index.get('format')!r}, not {FORMAT!r})")
            out = {}
            for name, entry in index["tensors"].items():
                coords = entry["coords"]
                out[name] = xr.DataArray(
                    fh.get_tensor(name).numpy(),
                    dims=entry["dims"],
                    coords={
                        "after_block": coords["after_block"],
                        "token": coords["token"],
                        "token_id": ("token", coords["token_id"]),
                        "text": ("token", coords["text"]),
                    },
                    attrs={**entry["attrs"], "model": index.get("model", ""), "dtype": index["dtype"]},
                    name=name,
                )
    except SafetensorError as err:
        raise ValueError(f"{str(path)!r} is not a safetensors file ({err})") from None
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"{str(path)!r} is not an attndyn activations file (its index lacks {err})") from None
    return out
