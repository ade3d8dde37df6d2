"""What a single-stream token costs besides its kernels: SmolLM2-135M against a model of its depth and no width.

Builds a random Llama of SmolLM2-135M's 30 layers but of width 128 (2 query heads over 1 KV head of 64, a
256-token vocabulary: its products and attention take next to nothing) and runs the same single stream on both
(128 greedy tokens after a 26-token prompt, the engine's defaults: compiled layers, the C++ attention kernel),
each in a process of its own (two engines in one process slow each other), alternated, the best of `--repeat`
rounds each. The narrow model's time is the floor that the calls around the kernels set, whatever the width: the
engine's step, and per layer the compiled graph's call (its Python, its kernels' thread launches) and the attention
op (its checks, the `ctypes` calls). Then one more run of each is split as `bench_cpu.py` splits a token (timers
around the calls, no profiler). Run it alone.
Usage: python bench/bench_overhead.py [--repeat 3]
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile

from bench_cpu import best_of, minivllm_generate, token_breakdown
from minivllm.entrypoints.llm import LLM
from minivllm.model_executor.model_loader import default_model_path
from minivllm.testing.tiny_models import make_tiny_model


def child(path, repeat):
    "In a process of its own: the best ms a token of `path`'s single stream, and one run's split."
    llm = LLM(path, num_gpu_blocks=256)
    prompt = [random.Random(26).randrange(3, llm.model.config.vocab_size) for _ in range(26)]
    minivllm_generate(llm, [prompt], 4)
    t, _ = best_of(repeat, lambda: minivllm_generate(llm, [prompt], 128))
    print(json.dumps([t / 128 * 1e3, token_breakdown(llm, prompt)]))


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
        best = {name: (float("inf"), "") for name in models}
        for _ in range(args.repeat):                       # the two alternated, round by round
            for name, path in models.items():
                out = subprocess.run([sys.executable, __file__, "--child", str(path)], check=True,
                                     capture_output=True, text=True).stdout
                best[name] = min(best[name], tuple(json.loads(out.splitlines()[-1])))
    for name, (ms, split) in best.items(): print(f"{name}: best {ms:.2f} ms a token; its run: {split}")
    (wide, _), (floor, _) = best.values()
    print(f"the narrow model's token is {floor / wide:.0%} of SmolLM2-135M's")


if __name__ == "__main__":
    main()
