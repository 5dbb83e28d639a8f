"""``attndyn atlas``: the same protocol on each installed decoder, side by side (issue 49 item 5)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from attndyn.app.cli_common import FORCE_ADOPT, console, decoder_with_ids, fail, prompt_texts, stage_progress, writable

NAMED = ("smollm2", "gemma3", "qwen2.5-0.5b", "qwen2.5-1.5b")


def installed() -> list[str]:
    """The named decoders installed here, in :data:`NAMED`'s order."""
    from attndyn.models import named
    from attndyn.models.decoder_files import gemma3_available, smollm2_available

    found = {"smollm2": smollm2_available()[0], "gemma3": gemma3_available()[0]}
    return [m for m in NAMED if (found[m] if m in found else named.available(m)[0])]


def atlas(
    models: Annotated[
        list[str] | None,
        typer.Argument(
            help="Decoders: smollm2, gemma3, qwen2.5-0.5b, qwen2.5-1.5b, a .gguf file or a Hugging Face folder (default: every named one installed)."
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("atlas"),
    prompts: Annotated[Path | None, typer.Option("--prompts", help="Prompts, one per paragraph (default: the shipped ones).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="float32 (default) or float64.")] = "float32",
    shuffles: Annotated[int, typer.Option("--shuffles", help="Permutations of each prompt for the shuffled-token null.")] = 10,
    force_adopt: Annotated[bool, typer.Option("--force-adopt", help=FORCE_ADOPT)] = False,
) -> None:
    """One page with the same protocol on each decoder, side by side.

    Per model: Sun's massive-activation ratio after every attention and feed-forward sublayer, the sublayer
    that writes the spike (its step-up), its plateau and fall, its dimensions and tokens; per block the sink
    rate and whether the spike's token is the sink token; secondary sinks and the feed-forward output that
    made them; a sentence on norm placement. Each value with its bootstrap interval over prompts, beside
    shuffled tokens and uniform causal attention. It writes atlas.json and index.html."""
    import torch

    from attndyn.app.atlas_page import page
    from attndyn.models import atlas as atl
    from attndyn.models.bert import CheckpointError
    from attndyn.models.file_checks import display_name
    from attndyn.workflow import ownership
    from attndyn.workflow.files import write_json

    if dtype not in ("float64", "float32"):
        fail(f"--dtype {dtype!r} is not float64 or float32")
    if shuffles < 1:
        fail(f"--shuffles {shuffles} is below 1")
    names = list(models or []) or installed()
    if not names:
        fail(f"none of the named decoders ({', '.join(NAMED)}) is installed; name a .gguf file or a Hugging Face folder")
    for name in names:
        if name.lower() not in NAMED and not Path(name).exists():
            fail(f"{name!r} is neither a named decoder ({', '.join(NAMED)}) nor an existing .gguf file or folder")
    writable(out, "atlas", "attndyn atlas", force_adopt)
    texts = prompt_texts(prompts)
    t0 = time.perf_counter()
    torch_dtype = getattr(torch, dtype)
    records = []
    with stage_progress("atlas", f"{len(names)} decoders") as stage:
        for name in names:
            started = time.perf_counter()
            stage(f"{name}: reading")
            decoder, ids = decoder_with_ids(name, texts)
            what = f"{name}: {len(ids)} prompts, {shuffles} shuffles of each and uniform attention, block by block"
            try:
                rec = atl.measure(decoder, ids, dtype=torch_dtype, shuffles=shuffles, progress=lambda i, n, what=what: stage(what, i, n))
            except (ValueError, CheckpointError) as err:
                fail(f"{name}: {err}")
            rec.update(model=display_name(Path(decoder.source).name), source=name, seconds=time.perf_counter() - started)
            records.append(rec)
            del decoder
    placement = atl.placement_sentence(records)
    seconds = time.perf_counter() - t0
    record = {"models": records, "placement": placement, "dtype": dtype, "seconds": seconds, "prompts": len(texts)}
    for r in records:
        r["findings"] = atl.findings(r)
    owner = ownership.claim(out, "atlas", "attndyn atlas", force_adopt=force_adopt)
    ownership.clear(owner)
    write_json(owner.folder / "atlas.json", record)
    page(records, owner.folder, placement=placement, seconds=seconds)
    for r in records:
        m = r["massive"]
        step = "no step-up" if m["step_up"] is None else f"step-up at {atl.sublayer_name(m['step_up'])}"
        console.print(f"{r['model']}: {step}; spike token = sink token in {r['coupling']['rate']:.2f} {r['coupling']['ci']} of the middle blocks")
    console.print(placement)
    console.print(f"wrote {owner.folder / 'atlas.json'} and index.html in {seconds:.1f} s")
