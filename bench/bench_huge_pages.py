"""The default model's parameters on huge pages against the same parameters on ordinary pages, in one process.

`load_model` gives a CPU model's parameters their storage in one block asked for on 2 MiB pages
(`params_on_huge_pages`, chapter 13). This builds the default engine (`LLM()`) and two more sets of the same
parameters on ordinary 4 KiB pages: loaded as before that change (`load_model` with `params_on_huge_pages` a no-op:
each parameter its own allocation from `to_empty`, the checkpoint copied in) and fresh copies (`clone()` of each,
made after everything else). It switches the engine's model between the three sets, in turn: the read bandwidth of
all parameters (a sum over each, best of 5) and a single stream of 128 greedy tokens after 26 (best of `--repeat`),
for each set in each round. Prints where each set's pages lie in physical memory (the mean run of physically
consecutive 4 KiB pages, from /proc/self/pagemap: root only) and what the operating system gave (the
parameters' huge-page KiB from /proc/self/smaps). Run it alone: another process on the cores moves the times by
more than the difference.
Usage: python bench/bench_huge_pages.py [--rounds 3] [--repeat 2]
"""
import argparse
import random
import struct
import time
from pathlib import Path
from unittest.mock import patch

import torch

from minivllm import LLM, SamplingParams
from minivllm.model_executor import model_loader
from minivllm.model_executor.model_loader import huge_page_kib


def contiguous_run(tensors) -> float | None:
    "Mean length, in 4 KiB pages, of the runs of physically consecutive pages under `tensors` (None: not root)."
    pagemap = Path("/proc/self/pagemap")
    if not pagemap.exists(): return None
    pages = runs = 0
    with pagemap.open("rb") as f:
        for t in tensors:
            first, last = t.data_ptr() // 4096, (t.data_ptr() + t.numel() * t.element_size() - 1) // 4096
            f.seek(first * 8)
            entries = struct.unpack(f"{last - first + 1}Q", f.read((last - first + 1) * 8))
            frames = [e & ((1 << 55) - 1) for e in entries]       # bits 0-54: the physical frame
            if not any(frames): return None                       # hidden from non-root users
            pages += len(frames)
            runs += 1 + sum(b != a + 1 for a, b in zip(frames, frames[1:]))
    return pages / runs


def read_gb_s(params) -> float:
    "GB/s of summing every parameter once, best of 5."
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for p in params: p.sum()
        best = min(best, time.perf_counter() - t)
    return sum(p.numel() * p.element_size() for p in params) / best / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2, help="single-stream runs per set and round; the best counts")
    args = ap.parse_args()
    llm = LLM()
    params = list(llm.model.parameters())
    with patch.object(model_loader, "params_on_huge_pages", lambda model: None):
        before = [p.data for p in model_loader.load_model(model_loader.default_model_path()).parameters()]
    sets = {"huge pages": [p.data for p in params], "4 KiB, loaded as before": before,
            "4 KiB, fresh copies": [p.data.clone() for p in params]}
    print(f"{torch.get_num_threads()} threads; {sum(p.numel() * p.element_size() for p in params) / 1e6:.0f} MB "
          f"of parameters; on huge pages: {huge_page_kib(params[0]) / 1024:.0f} MiB of their block")
    rng = random.Random(0)
    prompt = [rng.randrange(100, 49152) for _ in range(26)]
    sp = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)

    def single_ms():
        llm.reset_prefix_cache()
        t = time.perf_counter()
        out = llm.generate([prompt], sp, use_tqdm=False)[0].outputs[0].token_ids
        return (time.perf_counter() - t) / 128 * 1e3, out

    for name, tensors in sets.items():
        run = contiguous_run(tensors)
        print(f"{name}: physically consecutive runs of " + (f"{run:.0f} pages" if run else "? pages (not root)"))
    tokens = {}
    for r in range(args.rounds):
        line = []
        names = list(sets)
        for name in names[r % 3:] + names[:r % 3]:                # each first in one round of three
            for p, data in zip(params, sets[name]): p.data = data
            single_ms()                                             # one run to settle
            ms, tokens[name] = min(single_ms() for _ in range(args.repeat))
            line.append(f"{name}: read {read_gb_s(params):.1f} GB/s, {ms:.2f} ms/token")
        print(f"round {r + 1}: " + "; ".join(line), flush=True)
    assert len({tuple(t) for t in tokens.values()}) == 1, "the sets gave different tokens"


if __name__ == "__main__":
    main()
