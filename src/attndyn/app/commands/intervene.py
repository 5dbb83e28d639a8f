"""``attndyn intervene``: edits of a decoder's forward, each beside its null, with bootstrap intervals."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from attndyn.app.cli_common import FORCE_ADOPT, console, decoder_with_ids, fail, prompt_texts, stage_progress, writable


def intervene(
    path: Annotated[str, typer.Argument(help="'smollm2', 'gemma3', a .gguf file or a Hugging Face folder of a decoder.")],
    edit: Annotated[
        list[str] | None,
        typer.Option("--edit", help="An edit, e.g. zero:block=11,token=0,dim=507 or skip:blocks=3-5 (repeat; ';' joins edits made at once)."),
    ] = None,
    prompts: Annotated[Path | None, typer.Option("--prompts", help="Prompts, one per paragraph (default: the shipped ones).")] = None,
    study: Annotated[list[str] | None, typer.Option("--study", help="massive, depth, sinks or theory (repeatable).")] = None,
    layers: Annotated[
        str | None,
        typer.Option("--layers", help="The theory study's layers: 'all' or 0-based numbers, e.g. 3,7,11 (default: the twin layers)."),
    ] = None,
    draws: Annotated[int, typer.Option("--draws", help="Draws of each edit's null (at least 5 for a decision).")] = 5,
    dtype: Annotated[str, typer.Option("--dtype", help="float64 (default) or float32.")] = "float64",
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("interventions"),
    save_activations: Annotated[
        bool,
        typer.Option(
            "--save-activations",
            help="Also write activations.safetensors: every prompt's residual states, plain and under each --edit (one more run).",
        ),
    ] = False,
    geometry: Annotated[
        bool,
        typer.Option(
            "--geometry",
            help="Also measure each block's geometry (cosine, Sun's ratio, norm ratio, attention on the first token, sink rate), "
            "plain and under each --edit (one more run).",
        ),
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option("--workers", help="Run the edits in tasks on a local Dask cluster of this many worker processes (default: in this process)."),
    ] = None,
    scheduler: Annotated[
        str | None, typer.Option("--scheduler", help="Run the edits in tasks on an existing Dask scheduler (tcp://host:port).")
    ] = None,
    chunk: Annotated[
        int | None, typer.Option("--chunk", help="Prompts per task with --workers or --scheduler (default: the prompts shared evenly).")
    ] = None,
    force_adopt: Annotated[bool, typer.Option("--force-adopt", help=FORCE_ADOPT)] = False,
) -> None:
    """Edit a decoder's forward; each edit's loss beside its null.

    The edits: a residual entry zeroed, set to its mean or scaled; a block, span, sublayer or head
    skipped; a layer's attention made uniform, without the first key, or replaced by its particle twin's
    step or flow; a state patched from another prompt. It writes interventions.json and a page: each
    edit's next-token loss, perplexity ratio and KL from the plain output, with bootstrap intervals over
    prompts, beside its null."""
    import torch

    from attndyn.app.interventions_page import page
    from attndyn.models import interventions as iv
    from attndyn.models.bert import CheckpointError
    from attndyn.models.file_checks import display_name
    from attndyn.workflow import ownership
    from attndyn.workflow.files import write_json

    specs, studies = list(edit or []), list(study or [])
    if not specs and not studies:
        fail("give at least one --edit or --study; accepted edit forms: " + "; ".join(iv.FORMS))
    for s in studies:
        if s not in iv.STUDIES:
            fail(f"--study {s!r} is not one of {', '.join(iv.STUDIES)}")
    for s in specs:
        try:
            iv.parse_all(s)
        except ValueError as err:
            fail(str(err))
    if layers is not None and "theory" not in studies:
        fail(f"--layers {layers!r} chooses the theory study's layers: give --study theory")
    if workers is not None and workers < 1:
        fail(f"--workers {workers} must be at least 1 (leave it out to run in this process)")
    if workers is not None and scheduler is not None:
        fail("--workers starts a local cluster and --scheduler names an existing one: give one of them")
    if chunk is not None and chunk < 1:
        fail(f"--chunk {chunk} must be at least 1")
    if chunk is not None and workers is None and scheduler is None:
        fail(f"--chunk {chunk} sizes the tasks of --workers or --scheduler: give one of them")
    if scheduler is not None:
        from attndyn.app.sweep_driver import check_scheduler
        from attndyn.workflow.schema import SweepError

        try:
            check_scheduler(scheduler)
        except SweepError as err:
            fail(str(err))
    if geometry and not specs:
        fail("--geometry measures the state after each --edit: give at least one --edit")
    if dtype not in ("float64", "float32"):
        fail(f"--dtype {dtype!r} is not float64 or float32")
    if draws < 1:
        fail(f"--draws {draws} is below 1")
    writable(out, "intervene", "attndyn intervene", force_adopt)
    texts = prompt_texts(prompts)
    decoder, ids = decoder_with_ids(path, texts)
    theory_layers = None
    if layers is not None:
        L = len(decoder.layers)
        try:
            theory_layers = list(range(L)) if layers.strip() == "all" else sorted({int(v) for v in layers.split(",")})
        except ValueError:
            fail(f"--layers {layers!r} is not 'all' or a comma-separated list of 0-based layer numbers")
        outside = [k for k in theory_layers if not 0 <= k < L]
        if outside:
            fail(f"--layers {layers!r}: layer {outside[0]} is not in 0..{L - 1} ({decoder.name} has {L} layers)")
    t0 = time.perf_counter()
    torch_dtype = getattr(torch, dtype)
    edits = f"{len(specs)} edit(s) beside {draws} draws of their nulls on {len(ids)} prompts, layer by layer"
    runner, client, cluster, ledger = None, None, None, None
    with stage_progress("intervene", edits) as stage:
        if workers is not None or scheduler is not None:
            import functools

            from attndyn.app.intervene_tasks import dask_client, run_in_tasks

            size = chunk or max(1, -(-len(ids) // (workers or 2)))
            tasks = -(-len(ids) // size)
            edits = f"{len(specs)} edit(s) beside {draws} draws of their nulls on {len(ids)} prompts, in tasks of {size} prompts"
            # the folder is claimed now: its ledger keeps each finished task, so a rerun after a kill resumes
            from attndyn.app.intervene_ledger import LEDGER, TaskLedger

            early = ownership.claim(out, "intervene", "attndyn intervene", force_adopt=force_adopt)
            ledger = TaskLedger(early.folder)
            early.add(LEDGER)
            client, cluster = dask_client(workers, scheduler, tasks, console.print)
            where = str(Path(path).resolve()) if Path(path).exists() else str(path)  # workers elsewhere need no cwd
            runner = functools.partial(run_in_tasks, size=size, submit=client.submit, source=where, ledger=ledger)
        try:
            record = (
                iv.intervene(decoder, ids, specs, draws=draws, dtype=torch_dtype, progress=lambda i, n: stage(edits, i, n), runner=runner)
                if specs
                else {"edits": []}
            )
            record["studies"] = {
                s: iv.run_study(decoder, ids, s, draws=draws, dtype=torch_dtype, layers=theory_layers, progress=stage, runner=runner) for s in studies
            }
        except (ValueError, CheckpointError) as err:
            fail(str(err))
        finally:
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()
            if ledger is not None:
                ledger.close()
        if not specs:  # the theory study's run holds the plain branches: no other plain run for them
            theory = record["studies"].get("theory")
            plain = (
                {k: theory[k] for k in ("nll", "nll_interval", "counts")}
                if theory
                else iv.plain_record(decoder, ids, dtype=torch_dtype, progress=lambda i, n: stage("the plain prompts", i, n))
            )
            record.update(plain)
    if geometry:
        what = f"the geometry of every block, plain and under {len(specs)} edit(s)"
        with stage_progress("geometry", what) as stage:
            try:
                record["geometry"] = iv.geometry_after(decoder, ids, specs, dtype=torch_dtype, progress=lambda i, n: stage(what, i, n))
            except (ValueError, CheckpointError) as err:
                fail(str(err))
    saved = None
    if save_activations:
        from attndyn.models import activations

        size = activations.nbytes(decoder, ids, len(specs), torch_dtype)
        what = f"the residual states of {len(ids)} prompts, plain and under {len(specs)} edit(s) ({size / 2**20:.0f} MiB)"
        with stage_progress("save activations", what) as stage:
            try:
                tensors, index = activations.record(decoder, ids, specs, dtype=torch_dtype, progress=lambda i, n: stage(what, i, n))
            except (ValueError, CheckpointError) as err:
                fail(str(err))
        saved = (tensors, index)
    # the file (or folder) read, as the findings pages name it; a GGUF's internal name ('Smollm2 135M 8k Lc100K ...') beside it
    record.update(model=display_name(Path(decoder.source).name), model_name=decoder.name)
    record.update(dtype=dtype, seconds=time.perf_counter() - t0, draws=draws, prompts=len(ids))
    owner = ownership.claim(out, "intervene", "attndyn intervene", force_adopt=force_adopt)
    ownership.clear(owner)
    if saved is not None:
        from attndyn.workflow.provenance import provenance

        tensors, index = saved
        index.update(model=record["model"], model_name=record["model_name"], provenance=provenance())
        ownership.write_bytes(owner.folder / "activations.safetensors", activations.to_bytes(tensors, index))
        owner.add(owner.folder / "activations.safetensors")
        record["activations"] = {"file": "activations.safetensors", "tensors": len(tensors), "bytes": size}
        del tensors, saved
    write_json(owner.folder / "interventions.json", record)
    page(record, owner.folder)
    for e in record["edits"]:
        console.print(f"{e['edit']}: perplexity x{e['ppl_ratio']:.4g} {e['ppl_ratio_interval']}; {e['decision']}")
    for r in record["studies"].get("theory", {}).get("per_layer", []):
        share = r["share_status"] if r["share"] is None else f"{r['share']:.3g} {r['share_interval']}"
        console.print(f"theory, layer {r['layer']}: gap uniform - plain {r['gap']:.4g} nats {r['gap_interval']}; share closed by the flow {share}")
    if ledger is not None and ledger.found:
        console.print(f"{ledger.found} task(s) were found finished in {ledger.path} (an earlier run of the same edits) and not run again")
    also = " and activations.safetensors" if save_activations else ""
    console.print(f"wrote {owner.folder / 'interventions.json'}, index.html{also} in {record['seconds']:.1f} s")
