"""``attndyn checkpoint``: head spectra and dynamics of a trained encoder, token geometry of a causal decoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from attndyn.app.cli_common import FORCE_ADOPT, console, engine_options, fail, prompt_texts, stage_progress, writable


def checkpoint(
    path: Annotated[
        str,
        typer.Argument(
            help="'minilm' or a BERT-family folder; 'smollm2', 'gemma3', 'qwen2.5-0.5b', 'qwen2.5-1.5b' (see attndyn models), a .gguf file "
            "or a Hugging Face folder of a decoder family (see the guide)."
        ),
    ],
    text: Annotated[str, typer.Option("--text", help="Text whose tokens start the dynamics.")] = "The quick brown fox jumps over the lazy dog.",
    layer: Annotated[int, typer.Option("--layer", help="Layer whose weights drive the dynamics.")] = 0,
    head: Annotated[int | None, typer.Option("--head", help="Head (default: all heads summed).")] = None,
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("checkpoint-report"),
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Load a pytorch_model.bin with torch.load(weights_only=True).")] = False,
    device: Annotated[str, typer.Option("--device", help="Device of the simulated dynamics: cpu, cuda or cuda:N.")] = "cpu",
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype",
            help="auto (default: decoders in float64 up to 1e9 parameters and float32 above, said on the page; encoders in float64), "
            "float64 or float32.",
        ),
    ] = "auto",
    prompts: Annotated[Path | None, typer.Option("--prompts", help="Decoders: a text file of prompts, one per paragraph.")] = None,
    twin_layers: Annotated[str | None, typer.Option("--twin-layers", help="Decoders: particle-twin layers, e.g. 0,7,15.")] = None,
    regime_layers: Annotated[
        str,
        typer.Option("--regime-layers", help="Decoders: layers whose heads get the paper's regime: all (default), twins, or e.g. 0,7,15."),
    ] = "all",
    table: Annotated[bool, typer.Option("--table", help="Also print the per-head table (it is in heads.csv / checkpoint.json either way).")] = False,
    spectra_only: Annotated[
        bool, typer.Option("--spectra-only", help="Encoders: the head spectra alone (no text, so no tokenizer.json or vocab.txt needed).")
    ] = False,
    force_adopt: Annotated[bool, typer.Option("--force-adopt", help=FORCE_ADOPT)] = False,
    compare: Annotated[
        list[Path] | None,
        typer.Option(
            "--compare",
            help="Decoder pages side by side: PATH and each --compare FOLDER are folders attndyn checkpoint wrote for a decoder "
            "(with decoder.json); writes compare.html in --out (repeatable; the other options are not used).",
        ),
    ] = None,
) -> None:
    """Head spectra and dynamics of a trained checkpoint.

    Encoders (MiniLM, BERT folders): spectra of every head, and the dynamics its weights drive
    against its hidden states. Causal decoders (SmolLM2, GGUF files, folders of the families in models/architectures.py): token geometry
    of every layer on a set of prompts, attention sinks and leaders, head spectra, and the particle
    twin of chosen layers.
    """
    from attndyn.app.checkpoint_page import checkpoint_report
    from attndyn.models.bert import CheckpointError

    if dtype not in ("auto", "float64", "float32"):
        fail(f"--dtype {dtype!r} is not auto, float64 or float32")
    dev, torch_dtype = engine_options(device, "float64" if dtype == "auto" else dtype)
    if compare:
        _compare([Path(path), *compare], out, force_adopt)
        return
    writable(out, "checkpoint", "attndyn checkpoint", force_adopt)
    if _is_decoder(path):
        record = _decoder(path, out, prompts, twin_layers, regime_layers, layer, head, None if dtype == "auto" else torch_dtype)
        if table:
            _head_table(
                record["per_head"],
                ("layer", "head", "kv_group", "regime", "determined", "effective_beta_folded", "lambda1_real", "modulus_gap", "qk_cos"),
            )
        return
    p = Path(path)
    if path.lower() != "minilm" and p.is_file():
        fail(
            f"{path!r} is a file: give the folder that holds config.json and the *.safetensors weights "
            "(or 'minilm', 'smollm2', 'gemma3', a .gguf file)"
        )
    if path.lower() != "minilm" and not p.exists() and "/" in path and not path.startswith((".", "/", "~")):
        fail(f"{path!r} is not a folder here; attndyn never downloads: a hub id needs its files on disk (config.json, *.safetensors)")

    try:
        with stage_progress("checkpoint", "loading checkpoint") as stage:
            record = checkpoint_report(
                path,
                text=text,
                layer=layer,
                head=head,
                out=out,
                allow_pickle=allow_pickle,
                progress=stage,
                device=dev,
                dtype=torch_dtype,
                spectra_only=spectra_only,
            )
    except CheckpointError as err:
        fail(str(err))
    console.print(
        f"{record['good_triples']} of {record['heads_total']} heads are good triples; report: {(out / 'index.html').resolve()}", markup=False
    )
    if table:
        _head_table(record["per_head"], ("layer", "head", "regime", "good_triple", "effective_beta", "sym_QK_min", "sym_QK_max"))


PAGE_KEYS = ("file", "title", "layers", "per_layer", "findings")  # what side_by_side reads from a decoder.json


def _compare(folders: list[Path], out: Path, force_adopt: bool) -> None:
    """``attndyn checkpoint PATH --compare FOLDER ...``: the decoder pages side by side (``compare.html`` in ``out``)."""
    from attndyn.app.decoder_page import side_by_side

    files: dict[str, Path] = {}
    target = out.resolve()
    for folder in folders:
        if not folder.is_dir():
            fail(f"{str(folder)!r} is not a folder: --compare puts folders that attndyn checkpoint wrote for a decoder side by side")
        page = folder / "decoder.json"
        if not page.is_file():
            fail(f"{str(folder)!r} holds no decoder.json: it is not a page attndyn checkpoint wrote for a decoder")
        try:
            record = json.loads(page.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            fail(f"{str(page)!r} cannot be read as a decoder page ({err.__class__.__name__})")
        missing = [k for k in PAGE_KEYS if not isinstance(record, dict) or k not in record]
        if missing:
            fail(f"{str(page)!r} is not a decoder page: it lacks {', '.join(missing)}")
        name = str(record["file"])
        if name in files:
            fail(f"{str(folder)!r} and {str(files[name])!r} are pages of the same file {name!r}: give pages of different models")
        files[name] = folder
        here = folder.resolve()
        if target == here or target in here.parents or here in target.parents:
            fail(f"--out {str(out)!r} overlaps the page {str(folder)!r}: write the comparison to another folder")
    writable(out, "checkpoint", "attndyn checkpoint", force_adopt)
    path = side_by_side(folders, out)
    console.print(f"{len(folders)} decoders side by side: {path.resolve()}", markup=False)


def _head_table(rows: list[dict], columns: tuple[str, ...]) -> None:
    """The per-head table on the terminal (numbers to 4 significant digits)."""
    from rich.table import Table

    t = Table(title=f"{len(rows)} heads")
    for col in columns:
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(*(f"{r[c]:.4g}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in columns))
    console.print(t)


def _is_decoder(path: str) -> bool:
    p = Path(path)
    from attndyn.models.named import NAMED

    if path.lower() in ("smollm2", "gemma3", *NAMED) or p.suffix == ".gguf":
        return True
    try:
        from attndyn.models.families import encoder_model_types

        # every folder that is not an encoder's goes to the decoder reader, which names an unknown model_type
        return (p / "config.json").is_file() and json.loads((p / "config.json").read_text()).get("model_type") not in encoder_model_types()
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False  # the encoder reader names what is wrong with the folder


def _decoder(
    path: str, out: Path, prompts: Path | None, twin_layers: str | None, regime_layers: str, layer: int, head: int | None, torch_dtype
) -> dict:
    """``attndyn checkpoint`` for causal decoders (see :mod:`attndyn.app.decoder_page`)."""
    from attndyn.app.decoder_page import decoder_report
    from attndyn.workflow import ownership

    texts = prompt_texts(prompts)
    try:
        layers = None if twin_layers is None else tuple(int(v) for v in twin_layers.split(","))
    except ValueError:
        fail(f"--twin-layers {twin_layers!r} is not a comma-separated list of layer numbers")
    regimes: tuple[int, ...] | str = regime_layers
    if regime_layers not in ("all", "twins"):
        try:
            regimes = tuple(int(v) for v in regime_layers.split(","))
        except ValueError:
            fail(f"--regime-layers {regime_layers!r} is not 'all', 'twins' or a comma-separated list of layer numbers")
    ownership.check(out, "checkpoint")
    with stage_progress("checkpoint", "reading the model") as stage:
        record = decoder_report(
            path,
            prompts=texts,
            out=out,
            twin_layers=layers,
            regime_layers=regimes,
            heatmap=None if head is None else (layer, head),
            dtype=torch_dtype,
            progress=stage,
        )
    last = record["per_layer"][-1]
    console.print(
        f"{record['title']}: {record['prompts']} prompts, {record['layers']} layers in {record['seconds']:.1f} s; at the last layer "
        f"mean cosine {last['mean_cosine']:.3f}, sink rate {last['sink_rate']:.2f}; Sink_1 {record['study']['sink_1']['value']:.2f}; "
        f"report: {(out / 'index.html').resolve()}",
        markup=False,
    )
    return record
