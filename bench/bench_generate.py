"""Offline throughput of `minivllm.LLM.generate` against transformers' batched `generate` (not a test).

Part 1: the same greedy workload on both engines -- SmolLM2-135M-Instruct, N random-token prompts with lengths
uniform in [16, 256], exactly 64 new tokens each (`ignore_eos` here, `min_new_tokens` there); transformers gets one
left-padded batch. Prints output tokens/s and the ratio, measured in the same run.
Part 2: nano-vllm's benchmark shape (random token prompts, input and output lengths uniform in a range,
`ignore_eos`), scaled to about a minute of CPU.

    nice python bench/bench_generate.py [--threads 1] [--sizes 1 8 32] [--repeat 2] [--skip-nano]
"""
import argparse
import random
import time

import torch

from minivllm.entrypoints.llm import LLM
from minivllm.model_executor.model_loader import default_model_path
from minivllm.sampling_params import SamplingParams


def random_prompts(n, lo, hi, vocab_size, seed=0):
    "`n` prompts of random token ids (avoiding the first 100 ids, SmolLM2's special tokens) with lengths in [lo, hi]."
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab_size) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def timed(fn):
    "Run `fn()`; return (wall seconds, CPU seconds of this process, its result)."
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def time_minivllm(llm, prompts, max_tokens):
    "Wall and CPU seconds, output tokens of one `LLM.generate` call with exactly `max_tokens` greedy tokens each."
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    wall, cpu, outs = timed(lambda: llm.generate(prompts, sp, use_tqdm=False))
    return wall, cpu, sum(len(o.outputs[0].token_ids) for o in outs)


def time_transformers(hf, prompts, max_tokens, pad_id):
    "Wall and CPU seconds, output tokens of one batched, left-padded `generate(do_sample=False)` call."
    width = max(map(len, prompts))
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        wall, cpu, out = timed(lambda: hf.generate(ids, attention_mask=mask, max_new_tokens=max_tokens,
                                                   min_new_tokens=max_tokens, do_sample=False, pad_token_id=pad_id))
    return wall, cpu, (out.shape[1] - width) * len(prompts)


def compare(llm, hf, sizes, max_tokens=64, repeat=2):
    "Part 1: print both engines' output tokens/s and their ratio for each batch size (best of `repeat`, interleaved)."
    vocab, pad = llm.model.config.vocab_size, llm.get_tokenizer().pad_token_id
    warm = random_prompts(2, 16, 32, vocab, seed=99)
    time_minivllm(llm, warm, 4); time_transformers(hf, warm, 4, pad)
    print("output tokens per second of wall time, and per CPU-second of the process (steadier on a shared machine)")
    print(f"{'prompts':>7} {'minivllm':>9} {'transformers':>13} {'ratio':>6} | {'minivllm':>9} {'transformers':>13} "
          f"{'ratio':>6}")
    for n in sizes:
        prompts = random_prompts(n, 16, 256, vocab, seed=n)
        runs = [(time_minivllm(llm, prompts, max_tokens), time_transformers(hf, prompts, max_tokens, pad))
                for _ in range(repeat)]  # interleaved, so a burst of load elsewhere hits both engines
        assert all(r[0][2] == r[1][2] == n * max_tokens for r in runs)
        tokens = n * max_tokens
        wall = [tokens / min(r[i][0] for r in runs) for i in (0, 1)]
        cpu = [tokens / min(r[i][1] for r in runs) for i in (0, 1)]
        print(f"{n:>7} {wall[0]:>9.1f} {wall[1]:>13.1f} {wall[0] / wall[1]:>5.2f}x | {cpu[0]:>9.1f} {cpu[1]:>13.1f} "
              f"{cpu[0] / cpu[1]:>5.2f}x", flush=True)


def nano_vllm_workload(llm, num_seqs=40, input_len=(100, 384), output_len=(32, 160), seed=0):
    "Part 2: nano-vllm's bench.py shape (random lengths, ignore_eos), scaled for a CPU."
    rng = random.Random(seed)
    prompts = [[rng.randrange(100, 10000) for _ in range(rng.randint(*input_len))] for _ in range(num_seqs)]
    params = [SamplingParams(temperature=0.6, max_tokens=rng.randint(*output_len), ignore_eos=True)
              for _ in range(num_seqs)]
    wall, cpu, _ = timed(lambda: llm.generate(prompts, params, use_tqdm=False))
    total = sum(p.max_tokens for p in params)
    print(f"nano-vllm shape: {num_seqs} seqs, input {input_len}, output {output_len}: {total} output tokens in "
          f"{wall:.1f} s = {total / wall:.1f} tok/s ({total / cpu:.1f} per CPU-second)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeat", type=int, default=2, help="runs per engine and size; the best one counts")
    ap.add_argument("--skip-nano", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM
    llm = LLM(default_model_path(), num_gpu_blocks=1024, block_size=16)
    hf = AutoModelForCausalLM.from_pretrained(default_model_path(), dtype=torch.float32).eval()
    print(f"SmolLM2-135M-Instruct, float32, {args.threads} threads, {torch.__version__}")
    compare(llm, hf, args.sizes, repeat=args.repeat)
    if not args.skip_nano: nano_vllm_workload(llm)


if __name__ == "__main__":
    main()
