"""minivllm on a CPU against the machine's limits and against the tools a CPU user would pick, in one run.

0. The machine's limits, measured first and again after the batched runs (the better of the two counts): the
   float32 matmul peak (oneDNN on packed weights, the best of a few large products, GFLOP/s) and the memory read
   bandwidth (a sum over 512 MB, GB/s).
1. Start-up: `LLM()` with the embedded SmolLM2-135M-Instruct in a fresh process, cold (PyTorch's compile cache in an
   empty folder) and warm (a second process on the same folder), and `enforce_eager=True` for reference.
2. Batched: 32 random-token prompts of 16-256 tokens, 64 greedy tokens each (`ignore_eos`), float32: `LLM.generate`
   against transformers' left-padded batched `generate` on the same prompts, and against the **compute floor**: the
   workload's FLOPs (every processed token through every layer's products and attention, one logits row per
   generated token) divided by the measured matmul peak; and against the **roofline floor**: each step as the
   scheduler made it, at least its FLOPs at the peak or its bytes (every weight once, the KV cache of each request
   it runs) at the read bandwidth, whichever is longer. A step of 32 decode rows does 16 FLOPs per weight byte, about
   the ratio of the peak to the bandwidth on a 2-core AVX-512 machine: such a step is bound by both at once.
3. Where a batched step goes: torch.profiler over the same prompts (8 tokens each): per product (by weight shape and
   rows), attention and the compiled layers' own time, time and GFLOP/s against the measured peak.
4. Single stream: 128 greedy tokens after a 26-token chat prompt, against llama.cpp (llama-cpp-python) on the same
   float32 weights when `llama_cpp` is importable and the f32 GGUF exists (`make llama-cpp` builds both), and
   against the **bandwidth floor**: the bytes a token must read (every weight once, the KV cache) divided by the
   measured read bandwidth. Then where a single-stream token goes (attention, logits, the rest, the engine).

Every figure is a ratio measured in the same run (the runs interleave engines, best of `--repeat`): on a shared
machine absolute speeds mean little. Run it alone for numbers that compare with the model chapter's table:

    python bench/bench_cpu.py [--threads N] [--repeat 2] [--gguf PATH] [--skip-batched] [--skip-startup]
                              [--compare-tree OTHER_CHECKOUT]

With `--compare-tree`, start-up and the single-stream, batched and decoding (32 prompts of 16 tokens, 64 tokens
each: a step of mostly 32-row products) speeds of another checkout are measured in the same run, in child processes
interleaved with this checkout's: the before/after of a change.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from minivllm.entrypoints.llm import LLM
from minivllm.envs import cache_dir
from minivllm.model_executor.model_loader import default_model_path
from minivllm.transformers_utils.config import get_head_dim
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


# ---- 0. the machine's limits

def matmul_peak(repeat=10):
    """Best float32 GFLOP/s of oneDNN over a few large products: the shapes of the batched run's prefill (its MLP in
    chunks of 1267 rows, its 3799 rows through qkv_proj) and a cube, the weights packed for oneDNN as the model
    packs them (plain weights measure a few percent less: the products of a run then exceed its "peak")."""
    onednn = torch.ops.mkldnn._linear_pointwise
    best = 0.0
    for m, n, k in [(1267, 3072, 576), (1267, 576, 1536), (3799, 960, 576), (1024, 1024, 1024)]:
        x, w = torch.randn(m, k), torch.ops.mkldnn._reorder_linear_weight(torch.randn(n, k))
        t, _ = best_of(repeat, lambda: onednn(x, w, None, "none", [], ""))
        best = max(best, 2 * m * n * k / t / 1e9)
    return best


def read_bandwidth(repeat=5, mb=512):
    "Best GB/s of a sum over `mb` MB of float32 (more than any cache): the rate weights stream in."
    x = torch.ones(mb * 2**20 // 4)
    t, _ = best_of(repeat, lambda: x.sum())
    return x.numel() * 4 / t / 1e9


# ---- 1. start-up

STARTUP = """
import sys, time
t0 = time.perf_counter()
from minivllm.entrypoints.llm import LLM
t1 = time.perf_counter()
LLM(sys.argv[1], num_gpu_blocks=256, block_size=16, enforce_eager=sys.argv[2] == "eager")
print(f"{t1 - t0:.3f} {time.perf_counter() - t1:.3f}")
"""


SPEED = """
import random, sys, time, torch
from minivllm.entrypoints.llm import LLM
from minivllm.sampling_params import SamplingParams
llm = LLM(sys.argv[1], num_gpu_blocks=1024, block_size=16)
rng = random.Random(32)
batch = [[rng.randrange(100, 49152) for _ in range(rng.randint(16, 256))] for _ in range(32)]
single = [[rng.randrange(100, 49152) for _ in range(26)]]
decode = [[rng.randrange(100, 49152) for _ in range(16)] for _ in range(32)]    # short prompts
def run(prompts, n):
    sp = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
    llm.reset_prefix_cache()                  # a repeat must not reuse the last run's prompts
    t = time.perf_counter(); llm.generate(prompts, sp, use_tqdm=False); return time.perf_counter() - t
run(single, 4)
t1 = min(run(single, 128) for _ in range(2))
tb = run(batch, 64)
td = run(decode, 64)
print(f"{128 / t1:.2f} {32 * 64 / tb:.2f} {32 * 64 / td:.2f}")
"""


def child_env(threads, cache, tree=None):
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if cache: env.update(TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=str(Path(cache) / "triton"))
    if tree: env["PYTHONPATH"] = str(tree)        # that checkout's minivllm first (`-c`: cwd is the tree)
    return env


def run_child(code, args, env, cwd=None):
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, check=True, cwd=cwd,
                       capture_output=True, text=True)
    return tuple(map(float, r.stdout.splitlines()[-1].split()))


def start_up(path, threads, trees=(None,)):
    "Seconds of `import` and `LLM()` in new processes: cold, warm, eager, per tree, interleaved."
    out = {tree: {} for tree in trees}
    with tempfile.TemporaryDirectory(prefix="minivllm-compile-cache-") as d:
        for kind in ("cold", "warm", "eager"):
            for i, tree in enumerate(trees):               # a fresh cache folder per tree
                env = child_env(threads, str(Path(d) / str(i)), tree)
                out[tree][kind] = run_child(STARTUP, [path, kind], env, cwd=tree)
    return out


# ---- 2. batched

def minivllm_generate(llm, prompts, max_tokens):
    "Greedy tokens; every run starts with an empty prefix cache (a repeat must not reuse the last run's)."
    llm.reset_prefix_cache()
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


def layer_params(c):
    "Weights of one decoder layer's four products (qkv, o, gate_up, down)."
    d = get_head_dim(c)
    q, kv, h, i = c.num_attention_heads * d, c.num_key_value_heads * d, c.hidden_size, c.intermediate_size
    return h * (q + 2 * kv) + q * h + h * 2 * i + i * h


def positions_flops(c, start, end):
    "FLOPs of one request's positions [start, end): every layer's products, and attention over p + 1 keys at p."
    keys = (end * (end + 1) - start * (start + 1)) // 2
    return ((end - start) * 2 * layer_params(c) + 4 * c.num_attention_heads * get_head_dim(c) * keys) \
        * c.num_hidden_layers


def logits_flops(c):
    "FLOPs of one row of logits (the head's product)."
    return 2 * c.hidden_size * c.vocab_size


def workload_flops(c, prompt_lens, max_tokens):
    "FLOPs of generating `max_tokens` after each prompt: products, attention, one logits row per token."
    # the last sampled token is never fed back: n + max_tokens - 1 positions run
    return sum(positions_flops(c, 0, n + max_tokens - 1) + max_tokens * logits_flops(c) for n in prompt_lens)


def weight_bytes(model):
    "Bytes of every weight once (a tied head is the embedding)."
    return sum(p.numel() * p.element_size() for p in model.parameters())


def kv_bytes_per_token(c):
    "Bytes of K and V one token keeps in the cache, over all layers (float32)."
    return c.num_hidden_layers * 2 * c.num_key_value_heads * get_head_dim(c) * 4


def roofline_floor(llm, run, peak, bw):
    """Seconds of `run()`'s steps at the machine's limits: each step (recorded as the scheduler made it) takes the
    longer of its FLOPs at the matmul peak and its bytes at the read bandwidth (every weight once, each scheduled
    request's whole KV cache). Returns (the floor, what `run()` returned)."""
    c, executor, requests = llm.model.config, llm.engine_core.model_executor, llm.engine_core.scheduler.requests
    weights, context, floor = weight_bytes(llm.model), {}, [0.0]
    def execute_model(so, *args, **kwargs):
        flops, nbytes = 0, weights
        for rid, n in so.num_scheduled_tokens.items():
            start = context.get(rid, 0)
            context[rid] = end = start + n
            flops += positions_flops(c, start, end)
            flops += logits_flops(c) * (end >= requests[rid].num_prompt_tokens)   # a row that samples
            nbytes += end * kv_bytes_per_token(c)
        floor[0] += max(flops / (peak * 1e9), nbytes / (bw * 1e9))
        return original(so, *args, **kwargs)
    original = executor.execute_model
    executor.execute_model = execute_model
    try: out = run()
    finally: del executor.execute_model
    return floor[0], out


# ---- 3. where a batched step goes

def product_name(c, n, k):
    d = get_head_dim(c)
    h, q, kv, i = c.hidden_size, c.num_attention_heads * d, c.num_key_value_heads * d, c.intermediate_size
    return {(q + 2 * kv, h): "qkv_proj", (h, q): "o_proj", (2 * i, h): "gate_up_proj", (h, i): "down_proj",
            (c.vocab_size, h): "lm_head"}.get((n, k), f"{n}x{k}")


def op_table(fn, llm, peak):
    "torch.profiler over `fn()`: per product / attention / compiled layer: ms, share, GFLOP/s, % of peak."
    from torch.profiler import ProfilerActivity, profile, record_function
    import minivllm._custom_ops as ops
    kernel = ops.cpu_gemm
    def named_cpu_gemm(x, panels, bias=None):             # our kernel's calls (ctypes) made visible
        with record_function(f"cpu_gemm {x.shape[0]} {panels.shape[0] * panels.shape[2]} {x.shape[1]}"):
            return kernel(x, panels, bias)
    ops.cpu_gemm = named_cpu_gemm
    # a compiled layer calls its generated code directly (inductor_call): its own time (the fused small
    # kernels, the code's Python) is a layer call's time less the ops the profiler sees inside it
    runs, c = llm.engine_core.model_executor.model, llm.model.config   # the compiled wrapper, if any
    compiled = [(name, vars(runs)[name]) for name in ("one_row", "more_rows") if vars(runs).get(name)]
    for name, call in compiled:
        def timed(*args, call=call):
            with record_function("## compiled layer"):
                return call(*args)
        setattr(runs, name, timed)
    try:
        t = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            fn()
        wall = (time.perf_counter() - t) * 1e3
    finally:
        ops.cpu_gemm = kernel
        for name, call in compiled: setattr(runs, name, call)
    rows = {}                                   # name -> [calls, ms, flops]
    def add(name, calls, us, flops):
        r = rows.setdefault(name, [0, 0.0, 0])
        r[0] += calls; r[1] += us / 1e3; r[2] += flops
    def add_product(m, n, k, calls, us, kernel):
        kind = "1 row" if m == 1 else f"{m} rows" if m <= 64 else ">64 rows"
        add(f"{product_name(c, n, k)}, {kind}{kernel}", calls, us, 2 * m * n * k * calls)
    for e in prof.key_averages(group_by_input_shape=True):
        shapes = e.input_shapes
        if e.key.startswith("cpu_gemm "):
            m, n, k = map(int, e.key.split()[1:])
            add_product(m, n, k, e.count, e.cpu_time_total, " (ours)")
        elif e.key in ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm") and shapes:
            a, b = (shapes[0], shapes[1]) if e.key != "aten::addmm" else (shapes[1], shapes[2])
            if len(a) != 2 or len(b) != 2: continue
            m, k = a
            add_product(m, b[0] if e.key == "mkldnn::_linear_pointwise" else b[1], k, e.count,
                        e.self_cpu_time_total, "")
        elif e.key == "aten::scaled_dot_product_attention" and len(shapes) > 1 and len(shapes[0]) == 4:
            (hkv, b, mq, d), l = shapes[0], shapes[1][2]          # time with its children: the whole call
            add("attention (SDPA)", e.count, e.cpu_time_total, 4 * hkv * b * mq * d * l * e.count)
        elif e.key == "minivllm::layer_attention":     # its own time: the C++ kernel, Python
            add("attention op (C++ kernel, Python)", e.count, e.self_cpu_time_total, 0)
        elif e.key == "minivllm::cpu_layer_attention":  # the op in C++: the KV write, the kernel
            add("attention op (C++: write, kernel)", e.count, e.self_cpu_time_total, 0)
        elif e.key == "## compiled layer":
            add("layers' own (fused ops, Python)", e.count, e.self_cpu_time_total, 0)
    accounted = sum(r[1] for r in rows.values())
    lines = [f"    {'':34} {'calls':>6} {'ms':>8} {'share':>6} {'GFLOP/s':>8} {'of peak':>8}"]
    for name, (calls, ms, flops) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        g = flops / ms / 1e6 if ms and flops else 0
        lines.append(f"    {name:34} {calls:>6} {ms:>8.1f} {ms / wall:>6.0%} "
                     + (f"{g:>8.1f} {g / peak:>8.0%}" if flops else f"{'':>8} {'':>8}"))
    lines.append(f"    {'everything else (other ops, Python)':34} {'':>6} {wall - accounted:>8.1f} "
                 f"{(wall - accounted) / wall:>6.0%}")
    return "\n".join(lines)


# ---- 4. single stream

def llama_cpp_generate(lcpp, prompt, max_tokens):
    "llama.cpp's greedy tokens after `prompt` (its generator does not stop at EOS: exactly `max_tokens`)."
    lcpp.reset()
    out = []
    for tok in lcpp.generate(prompt, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(tok)
        if len(out) == max_tokens: break
    return out


def token_bytes(model, context):
    "Bytes one decode token must read: every weight once (a tied head is the embedding), the KV cache."
    return weight_bytes(model) + context * kv_bytes_per_token(model.config)


def token_breakdown(llm, prompt, max_tokens=128):
    """Wall ms per token of a single stream in attention, the logits, the rest of the model and the engine (no profiler).
    Attention is timed where Python calls the backend: compiled one-token steps attend inside their graphs (the C++
    op of chapter 12), so theirs counts in the rest of the model."""
    model, backend = llm.engine_core.model_executor.model, llm.model.attn_backend   # what the runner runs
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
    parts = {"attention from Python (write + attend)": spent["attention"],
             "rest of the model": spent["model forward"] - spent["attention"], "logits": spent["logits"],
             "engine (outside the model)": total - spent["model forward"] - spent["logits"]}
    ms = lambda sec: sec / max_tokens * 1e3
    return f"{ms(total):.1f} ms per token: " + ", ".join(f"{k} {ms(v):.1f} ms" for k, v in parts.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="default: torch's, every core")
    ap.add_argument("--repeat", type=int, default=2, help="runs per engine; the best one counts")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--gguf", type=Path, default=GGUF, help="f32 GGUF of the same weights for llama.cpp")
    ap.add_argument("--skip-batched", action="store_true")
    ap.add_argument("--skip-startup", action="store_true")
    ap.add_argument("--compare-tree", type=Path, help="another checkout (e.g. `git worktree add /tmp/before "
                    "HEAD~1`): its start-up and speeds too, interleaved with this one's")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = default_model_path()
    print(f"SmolLM2-135M-Instruct, float32, {args.threads} threads, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start", flush=True)

    # ---- 0. limits
    peak, bw = matmul_peak(), read_bandwidth()
    print(f"machine: float32 matmul peak {peak:.0f} GFLOP/s (oneDNN), memory read {bw:.1f} GB/s", flush=True)

    # ---- 1. start-up
    if not args.skip_startup:
        trees = (None, *([args.compare_tree] if args.compare_tree else []))
        for tree, s in start_up(path, args.threads, trees).items():
            print(f"start-up{' of ' + str(tree) if tree else ''}, LLM() in a new process: " + ", ".join(
                f"{k} {v[1]:.1f} s" for k, v in s.items()) + f" (import minivllm {s['warm'][0]:.1f} s more); "
                f"cold {'<=' if s['cold'][1] <= 30 else '>'} 30 s, warm {'<=' if s['warm'][1] <= 5 else '>'} 5 s",
                flush=True)
    if args.compare_tree:               # the same speeds of both checkouts, in child processes, interleaved
        best = {}
        for i in range(args.repeat):            # each checkout first in every other round
            for tree in (None, args.compare_tree)[::-1 if i % 2 else 1]:
                got = run_child(SPEED, [path], child_env(args.threads, None, tree), cwd=tree)
                best[tree] = tuple(map(max, best.get(tree, got), got))
        (s1, b1, d1), (s0, b0, d0) = best[None], best[args.compare_tree]
        print(f"this checkout vs {args.compare_tree}: single stream {s1:.1f} vs {s0:.1f} tok/s ({s1 / s0:.2f}x), "
              f"batched 32 x 64 {b1:.1f} vs {b0:.1f} tok/s ({b1 / b0:.2f}x), decoding 32 x 64 after 16-token "
              f"prompts {d1:.1f} vs {d0:.1f} tok/s ({d1 / d0:.2f}x)", flush=True)

    llm = LLM(path, num_gpu_blocks=1024, block_size=16)
    tok, c = llm.get_tokenizer(), llm.model.config
    vocab, pad = c.vocab_size, tok.pad_token_id

    # ---- 2. batched
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
        # the limits once more: a neighbour on a shared host can halve a second's measurement, and a floor
        # from such a moment would flatter every ratio against it; the better of the two counts
        peak, bw = max(peak, matmul_peak()), max(bw, read_bandwidth())
        print(f"machine, measured again after the batched runs (the better measurement counts): float32 matmul "
              f"peak {peak:.0f} GFLOP/s, memory read {bw:.1f} GB/s", flush=True)
        roofline, _ = roofline_floor(llm, lambda: minivllm_generate(llm, prompts, 64), peak, bw)
        n = args.num_prompts * 64
        assert all(len(o) == 64 for o in ours) and all(len(o) == 64 for o in theirs)
        same = sum(a == b for a, b in zip(ours, theirs))
        flops = workload_flops(c, [len(p) for p in prompts], 64)
        floor = n / (flops / (peak * 1e9))
        print(f"batched {args.num_prompts} x 64 tokens ({flops / 1e12:.2f} TFLOP): minivllm {n / t_ours:.1f} tok/s, "
              f"transformers generate {n / t_hf:.1f} tok/s: {t_hf / t_ours:.2f}x transformers; compute floor "
              f"{floor:.0f} tok/s: minivllm at {n / t_ours / floor:.0%} of it, transformers at "
              f"{n / t_hf / floor:.0%}  ({same}/{len(ours)} completions identical)", flush=True)
        print(f"batched, roofline floor (each step bound by its FLOPs at the peak or its bytes at the bandwidth, "
              f"whichever takes longer: weights and KV cache read once a step) {n / roofline:.0f} tok/s: minivllm "
              f"at {roofline / t_ours:.0%} of it", flush=True)
        del hf
        # ---- 3. per op
        print(f"where a batched run goes ({args.num_prompts} prompts, 8 tokens each), per op vs the "
              f"{peak:.0f} GFLOP/s peak:")
        print(op_table(lambda: minivllm_generate(llm, prompts, 8), llm, peak), flush=True)

    # ---- 4. single stream
    chat = tok.apply_chat_template([{"role": "user", "content": "Tell me a story about a lighthouse."}],
                                   add_generation_prompt=True, tokenize=True)
    chat = list(chat["input_ids"] if isinstance(chat, dict) or hasattr(chat, "keys") else chat)
    prompt = (chat * 2)[:26] if len(chat) < 26 else chat[-26:]
    minivllm_generate(llm, [prompt], 4)
    t_single, _ = best_of(args.repeat, lambda: minivllm_generate(llm, [prompt], 128))
    nbytes = token_bytes(llm.model, 26 + 64)
    floor = bw * 1e9 / nbytes
    line = (f"single stream, 128 tokens after 26: minivllm {128 / t_single:.1f} tok/s; bandwidth floor "
            f"{floor:.0f} tok/s ({nbytes / 1e6:.0f} MB a token): minivllm at {128 / t_single / floor:.0%} of it")
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
        t_lcpp = float("inf")
        for _ in range(args.repeat):                   # interleaved, as above
            t_lcpp = min(t_lcpp, best_of(1, lambda: llama_cpp_generate(lcpp, prompt, 128))[0])
            t_single = min(t_single, best_of(1, lambda: minivllm_generate(llm, [prompt], 128))[0])
        line = (f"single stream, 128 tokens after 26: minivllm {128 / t_single:.1f} tok/s, llama.cpp (f32 GGUF, "
                f"{args.threads} threads) {128 / t_lcpp:.1f} tok/s: {t_lcpp / t_single:.2f}x llama.cpp; bandwidth "
                f"floor {floor:.0f} tok/s ({nbytes / 1e6:.0f} MB a token): minivllm at {128 / t_single / floor:.0%}"
                f", llama.cpp at {128 / t_lcpp / floor:.0%}")
    print(line, flush=True)
    print("single stream, where a token goes:", token_breakdown(llm, prompt))
    print(f"load average {os.getloadavg()[0]:.1f} at the end (above the thread count: the run shared the cores)")


if __name__ == "__main__":
    main()
