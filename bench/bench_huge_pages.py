"""The default model's parameters on huge pages against the same parameters on ordinary pages, in one process.

`load_model` gives a CPU model's parameters their storage in one block asked for on 2 MiB pages
(`params_on_huge_pages`, chapter 13). This builds the default engine (`LLM()`), keeps a copy of every parameter in
ordinary memory (each its own allocation, as `to_empty` gives them) and switches the model between the two sets,
alternating: the read bandwidth of all parameters (a sum over each, best of 5) and a single stream of 128 greedy
tokens after 26 (best of `--repeat`), for each set in each round. Prints what the operating system gave (the
parameters' huge-page KiB from /proc/self/smaps). Run it alone: another process on the cores moves the times by
more than the difference.
Usage: python bench/bench_huge_pages.py [--rounds 3] [--repeat 2]
"""
import argparse
import random
import time
from pathlib import Path

import torch

from minivllm import LLM, SamplingParams


def huge_page_kib(t: torch.Tensor) -> int:
    "KiB of the mapping holding `t` that Linux backs with huge pages (0 if none, or not Linux)."
    smaps, kib, inside = Path("/proc/self/smaps"), 0, False
    for line in (smaps.read_text().splitlines() if smaps.exists() else []):
        if "-" in line.split()[0]:
            lo, hi = (int(a, 16) for a in line.split()[0].split("-"))
            inside = lo <= t.data_ptr() < hi
        elif inside and line.startswith("AnonHugePages:"): kib = int(line.split()[1])
    return kib


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
    sets = {"huge pages": [p.data for p in params], "ordinary pages": [p.data.clone() for p in params]}
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

    tokens = {}
    for r in range(args.rounds):
        line = []
        for name in (sets if r % 2 == 0 else reversed(sets)):      # each first in alternate rounds
            for p, data in zip(params, sets[name]): p.data = data
            single_ms()                                             # one run to settle
            ms, tokens[name] = min(single_ms() for _ in range(args.repeat))
            line.append(f"{name}: read {read_gb_s(params):.1f} GB/s, single stream {ms:.2f} ms/token")
        print(f"round {r + 1}: " + "; ".join(line), flush=True)
    assert len({tuple(t) for t in tokens.values()}) == 1, "the two sets gave different tokens"


if __name__ == "__main__":
    main()
