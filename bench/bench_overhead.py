"""What a single-stream token costs besides its kernels: SmolLM2-135M against a model of its depth and no width.

Builds a random Llama of SmolLM2-135M's 30 layers but of width 128 (2 query heads over 1 KV head of 64, a
256-token vocabulary: its products and attention take next to nothing) and runs the same single stream on both
(128 greedy tokens after a 26-token prompt, the engine's defaults: compiled layers, the C++ attention kernel),
each in a process of its own (two engines in one process slow each other), alternated, the best of `--repeat`
rounds each. The narrow model's time is what the calls around the kernels cost at the least: the engine's step,
and per layer the compiled graph's call (its Python, its kernels' thread launches) and the attention op (its
checks, the `ctypes` calls). Then one more run of each is split as `bench_cpu.py` splits a token (timers around
the calls, no profiler), and one more times a small eager op (a `[1, hidden]` tensor times 2) as the first thing
the host runs after a step's layers, again right after it, and then in a loop: what the first call pays beyond
the others is the host's code and data fetched again from memory, pushed out of the CPU's caches by what the
step read (SmolLM2's 540 MB of weights stream through them; the narrow model's 12 MB fit in the last one).
Run it alone.
Usage: python bench/bench_overhead.py [--repeat 3]
"""
import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from bench_cpu import best_of, minivllm_generate, token_breakdown
from minivllm.entrypoints.llm import LLM
from minivllm.model_executor.model_loader import default_model_path
from minivllm.testing.tiny_models import make_tiny_model


def first_op_after_layers(llm, prompt, max_tokens=128):
    "Median us of a `[1, hidden]` multiply run first after each step's layers, of the same right after it, in a loop."
    norm = llm.model.model.norm                    # the model's final norm: eager, after the last layer
    probe = torch.ones(1, llm.model.config.hidden_size)
    def multiply():
        t = time.perf_counter()
        probe * 2
        return time.perf_counter() - t
    first, again = [], []
    def forward(*args, **kwargs):
        first.append(multiply()); again.append(multiply())
        return type(norm).forward(norm, *args, **kwargs)
    norm.forward = forward
    try: minivllm_generate(llm, [prompt], max_tokens)
    finally: del norm.forward
    looped = [multiply() for _ in range(max_tokens)]
    return [statistics.median(times) * 1e6 for times in (first, again, looped)]


def child(path, repeat):
    "In a process of its own: the best ms a token of `path`'s single stream, and one run's split."
    llm = LLM(path, num_gpu_blocks=256, block_size=16)
    prompt = [random.Random(26).randrange(3, llm.model.config.vocab_size) for _ in range(26)]
    minivllm_generate(llm, [prompt], 4)
    t, _ = best_of(repeat, lambda: minivllm_generate(llm, [prompt], 128))
    print(json.dumps([t / 128 * 1e3, token_breakdown(llm, prompt), first_op_after_layers(llm, prompt)]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child: return child(args.child, 2)
    with tempfile.TemporaryDirectory() as tmp:
        narrow = make_tiny_model(tmp, num_hidden_layers=30, hidden_size=128, intermediate_size=128,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=64)
        models = {"SmolLM2-135M": default_model_path(), "30 layers of width 128": narrow}
        best = {name: (float("inf"), "", []) for name in models}
        for _ in range(args.repeat):                       # the two alternated, round by round
            for name, path in models.items():
                out = subprocess.run([sys.executable, __file__, "--child", str(path)], check=True,
                                     capture_output=True, text=True).stdout
                best[name] = min(best[name], tuple(json.loads(out.splitlines()[-1])))
    for name, (ms, split, (first, again, looped)) in best.items():
        print(f"{name}: best {ms:.2f} ms a token; its run: {split}; a [1, hidden] multiply as the host's first op "
              f"after a step's layers: median {first:.1f} us, right after it {again:.1f} us, in a loop {looped:.1f} us")
    (wide, *_), (floor, *_) = best.values()
    print(f"the narrow model's token is {floor / wide:.0%} of SmolLM2-135M's")


if __name__ == "__main__":
    main()
