"""The CPU KV cache on huge pages against the same cache on ordinary pages, in one process.

`ModelRunner.initialize_kv_cache` (chapter 14) gives a CPU engine's KV caches one block on 2 MiB pages.
This builds the default engine (`LLM()`), runs the batched workload of bench_cpu.py (32 random prompts of
16-256 tokens, greedy, `ignore_eos`) and times the decode kernel's calls (`_cpu_attention` with 32 rows, the
rows of 32 running requests) and the KV writes, with the caches switched in turn between the engine's own
block and copies on ordinary 4 KiB pages (`clone()` of each layer's cache, as `torch.zeros` allocated them
before). Each round runs both, in alternating order; per call, the mean of a round. Run it alone.
Usage: python bench/bench_kv_huge_pages.py [--rounds 3] [--max-tokens 40]
"""
import argparse
import time
from collections import defaultdict

from bench_cpu import minivllm_generate, random_prompts
from minivllm import LLM
from minivllm import _custom_ops as ops
from minivllm.model_executor.model_loader import huge_page_kib

TIMED = ("cpu_attention_with_kv_cache", "cpu_attn_reshape_and_cache")


def time_calls(totals: dict):
    "Wrap the kernels' calls: `totals[(name, rows)] = [calls, seconds]`."
    for name in TIMED:
        kernel = getattr(ops, name)
        def timed(*args, kernel=kernel, name=name):
            t = time.perf_counter()
            out = kernel(*args)
            entry = totals[name, args[0].shape[0]]
            entry[0] += 1
            entry[1] += time.perf_counter() - t
            return out
        setattr(ops, name, timed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=40)
    args = ap.parse_args()
    llm = LLM(num_gpu_blocks=1024, block_size=16)
    runner = llm.engine_core.model_executor
    sets = {"huge pages": runner.kv_caches, "4 KiB pages": [c.clone() for c in runner.kv_caches]}
    print(f"KV cache: {sum(c.numel() * 4 for c in runner.kv_caches) / 1e6:.0f} MB in {len(sets['huge pages'])} "
          f"layers; on huge pages: {huge_page_kib(sets['huge pages'][0]) / 1024:.0f} MiB of its block")
    prompts = random_prompts(32, 16, 256, llm.model.config.vocab_size)
    minivllm_generate(llm, prompts, 4)                                    # compile, warm up
    totals = defaultdict(lambda: [0, 0.0])
    time_calls(totals)
    for r in range(args.rounds):
        line = []
        for name in list(sets)[r % 2:] + list(sets)[:r % 2]:
            runner.kv_caches = sets[name]
            llm.model.bind_kv_caches(sets[name])
            totals.clear()
            t = time.perf_counter()
            minivllm_generate(llm, prompts, args.max_tokens)
            run = time.perf_counter() - t
            attend, write = (totals[kernel, 32] for kernel in TIMED)
            line.append(f"{name}: decode attention {attend[1] / attend[0] * 1e6:.0f} us/call, "
                        f"KV write {write[1] / write[0] * 1e6:.0f} us/call, run {run:.2f} s")
        print(f"round {r + 1}: " + "; ".join(line), flush=True)


if __name__ == "__main__":
    main()
