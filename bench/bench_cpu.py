"""minivllm on a CPU, in one run: batched throughput vs transformers, single stream vs llama.cpp, where a step goes.

1. Batched: 32 random-token prompts of 16-256 tokens, 64 greedy tokens each (`ignore_eos`), SmolLM2-135M-Instruct
   in float32: `LLM.generate` against transformers' left-padded batched `generate` on the same prompts.
2. Single stream: 128 greedy tokens after a 26-token chat prompt, tokens per second of the whole request, against
   llama.cpp (llama-cpp-python) on the same float32 weights when `llama_cpp` is importable and the f32 GGUF exists
   (`make llama-cpp` builds both), with the same number of threads.
3. Where a step goes: the single stream's milliseconds per token in attention, the logits, the rest of the model and
   the engine, timed around those calls; then torch.profiler over the single-stream decode and over a batched decode:
   the share of the wall time in matmuls (oneDNN, `aten::mm`), compiled graphs, attention (SDPA), the other torch ops,
   and outside torch.
4. What `torch.compile` buys: the single stream again with `enforce_eager=True`, and the start-up time it costs
   (the compile, or loading the compiled code from PyTorch's on-disk cache on later runs).

Every figure is a ratio measured in the same run (the runs interleave engines, best of `--repeat`): on a shared
machine absolute speeds mean little.

    python bench/bench_cpu.py [--threads N] [--repeat 2] [--gguf PATH] [--skip-batched]
"""
import argparse
import os
import random
import time
from pathlib import Path

import torch

from minivllm.entrypoints.llm import LLM
from minivllm.model_executor.model_loader import cache_dir, default_model_path
from minivllm.sampling_params import SamplingParams

GGUF = cache_dir() / "SmolLM2-135M-Instruct-f32.gguf"   # written by `make llama-cpp`


def random_prompts(n, lo, hi, vocab_size, seed=0):
    "`n` prompts of random token ids (avoiding SmolLM2's first 100, special tokens) with lengths in [lo, hi]."
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab_size) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def best_of(repeat, fn):
    "Smallest wall time of `repeat` calls of `fn` and the last result."
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def minivllm_generate(llm, prompts, max_tokens):
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    outs = llm.generate(prompts, sp, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


def hf_generate(hf, prompts, max_tokens, pad_id):
    width = max(map(len, prompts))
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=mask, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                          do_sample=False, pad_token_id=pad_id)
    return out[:, width:].tolist()


def llama_cpp_generate(lcpp, prompt, max_tokens):
    "llama.cpp's greedy tokens after `prompt` (its generator does not stop at EOS: exactly `max_tokens`)."
    lcpp.reset()
    out = []
    for tok in lcpp.generate(prompt, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(tok)
        if len(out) == max_tokens: break
    return out


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise")


def step_shares(fn):
    "Run `fn` under torch.profiler: shares of wall time in matmuls, compiled graphs, attention, other ops, Python."
    from torch.profiler import ProfilerActivity, profile
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    wall = (time.perf_counter() - t) * 1e6
    shares = dict.fromkeys(["matmul (oneDNN/MKL)", "compiled graphs", "attention", "other torch ops"], 0.0)
    for e in prof.key_averages():
        if e.key.startswith("## Call CompiledFxGraph"): shares["compiled graphs"] += e.self_cpu_time_total
        elif not e.key.startswith(("aten::", "mkldnn::")): continue
        elif e.key in MATMULS: shares["matmul (oneDNN/MKL)"] += e.self_cpu_time_total
        elif "scaled_dot_product" in e.key or "flash_attention" in e.key: shares["attention"] += e.self_cpu_time_total
        else: shares["other torch ops"] += e.self_cpu_time_total
    # the profiler itself adds per-op overhead: shares are of the profiled run
    shares = {k: v / wall for k, v in shares.items()}
    return {**shares, "outside torch ops": 1 - sum(shares.values())}


def token_breakdown(llm, prompt, max_tokens=128):
    "Wall ms per token of a single stream in attention, the logits, the rest of the model and the engine (no profiler)."
    model, backend = llm.model, llm.model.attn_backend
    spent = dict.fromkeys(["attention", "logits", "model forward"], 0.0)
    wrapped = [(model, "forward", "model forward"), (model, "compute_logits", "logits"),
               (backend, "write_kv", "attention"), (backend, "forward", "attention")]
    def timed(fn, name):
        def run(*args, **kwargs):
            t = time.perf_counter()
            try: return fn(*args, **kwargs)
            finally: spent[name] += time.perf_counter() - t
        return run
    own = [vars(obj).get(attr) for obj, attr, _ in wrapped]   # instance attributes (compiled functions)
    for obj, attr, name in wrapped: setattr(obj, attr, timed(getattr(obj, attr), name))
    try:
        t = time.perf_counter()
        minivllm_generate(llm, [prompt], max_tokens)
        total = time.perf_counter() - t
    finally:                                   # back to the methods or compiled functions they were
        for (obj, attr, _), old in zip(wrapped, own):
            if old is None: delattr(obj, attr)
            else: setattr(obj, attr, old)
    parts = {"attention (write + attend)": spent["attention"],
             "rest of the model": spent["model forward"] - spent["attention"], "logits": spent["logits"],
             "engine (outside the model)": total - spent["model forward"] - spent["logits"]}
    ms = lambda sec: sec / max_tokens * 1e3
    return f"{ms(total):.1f} ms per token: " + ", ".join(f"{k} {ms(v):.1f} ms" for k, v in parts.items())


def fmt_shares(s):
    return ", ".join(f"{k} {v:.0%}" for k, v in s.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="default: torch's, every core")
    ap.add_argument("--repeat", type=int, default=2, help="runs per engine; the best one counts")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--gguf", type=Path, default=GGUF, help="f32 GGUF of the same weights for llama.cpp")
    ap.add_argument("--skip-batched", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = default_model_path()
    t0 = time.perf_counter()
    llm = LLM(path, num_gpu_blocks=1024)
    t_start = time.perf_counter() - t0
    tok = llm.get_tokenizer()
    vocab, pad = llm.model.config.vocab_size, tok.pad_token_id
    print(f"SmolLM2-135M-Instruct, float32, {args.threads} threads, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs")

    # ---- 1. batched
    if not args.skip_batched:
        from transformers import AutoModelForCausalLM
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        prompts = random_prompts(args.num_prompts, 16, 256, vocab, seed=args.num_prompts)
        warm = random_prompts(2, 16, 32, vocab, seed=99)
        minivllm_generate(llm, warm, 4); hf_generate(hf, warm, 4, pad)
        t_ours = t_hf = float("inf")
        for _ in range(args.repeat):                   # interleaved: a burst of load elsewhere hits both
            t, ours = best_of(1, lambda: minivllm_generate(llm, prompts, 64)); t_ours = min(t_ours, t)
            t, theirs = best_of(1, lambda: hf_generate(hf, prompts, 64, pad)); t_hf = min(t_hf, t)
        n = args.num_prompts * 64
        assert all(len(o) == 64 for o in ours) and all(len(o) == 64 for o in theirs)
        same = sum(a == b for a, b in zip(ours, theirs))
        print(f"batched {args.num_prompts} x 64 tokens: minivllm {n / t_ours:.1f} tok/s, transformers generate "
              f"{n / t_hf:.1f} tok/s: {t_hf / t_ours:.2f}x  ({same}/{len(ours)} completions identical)")
        del hf

    # ---- 2. single stream
    chat = tok.apply_chat_template([{"role": "user", "content": "Tell me a story about a lighthouse."}],
                                   add_generation_prompt=True, tokenize=True)
    chat = list(chat["input_ids"] if isinstance(chat, dict) or hasattr(chat, "keys") else chat)
    prompt = (chat * 2)[:26] if len(chat) < 26 else chat[-26:]
    minivllm_generate(llm, [prompt], 4)
    t_single, _ = best_of(args.repeat, lambda: minivllm_generate(llm, [prompt], 128))
    line = f"single stream, 128 tokens after 26: minivllm {128 / t_single:.1f} tok/s"
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    if llama_cpp is None or not args.gguf.is_file():
        line += f"; llama.cpp not measured ({'no llama_cpp module' if llama_cpp is None else 'no ' + str(args.gguf)}"
        line += ": run `make llama-cpp`)"
    else:
        lcpp = llama_cpp.Llama(str(args.gguf), n_ctx=512, n_threads=args.threads, n_batch=512, verbose=False)
        llama_cpp_generate(lcpp, prompt, 4)
        t_lcpp, _ = best_of(args.repeat, lambda: llama_cpp_generate(lcpp, prompt, 128))
        line += (f", llama.cpp (f32 GGUF, {args.threads} threads) {128 / t_lcpp:.1f} tok/s: "
                 f"{t_lcpp / t_single:.2f}x llama.cpp")
    print(line, flush=True)

    # ---- 3. where a step goes
    print("single stream, where a token goes:", token_breakdown(llm, prompt))
    print("single-stream shares, compiled:", fmt_shares(step_shares(lambda: minivllm_generate(llm, [prompt], 32))))
    batch = random_prompts(32, 16, 64, vocab, seed=7)
    print("batched (32 prompts of 16-64, 16 tokens) shares, compiled:",
          fmt_shares(step_shares(lambda: minivllm_generate(llm, batch, 16))), flush=True)

    # ---- 4. what torch.compile buys
    t0 = time.perf_counter()
    eager = LLM(path, num_gpu_blocks=1024, enforce_eager=True)
    t_start_eager = time.perf_counter() - t0
    minivllm_generate(eager, [prompt], 4)
    t_eager, _ = best_of(args.repeat, lambda: minivllm_generate(eager, [prompt], 128))
    saved = t_eager - t_single
    print(f"torch.compile: single stream {128 / t_single:.1f} tok/s compiled, {128 / t_eager:.1f} eager "
          f"({t_eager / t_single:.2f}x); start-up {t_start:.1f} s compiled, {t_start_eager:.1f} s eager: "
          + (f"the extra start-up is repaid after {128 * (t_start - t_start_eager) / saved:.0f} tokens"
             if saved > 0 else "no gain"))
    print("single-stream shares, eager:", fmt_shares(step_shares(lambda: minivllm_generate(eager, [prompt], 32))))


if __name__ == "__main__":
    main()
