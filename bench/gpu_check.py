"""The GPU check's stages (bench/gpu_check.sh runs each in its own process, with its own time limit).

    python bench/gpu_check.py STAGE --work DIR [--budget SECONDS] [--dry-run]     STAGE: a, b, c or d
    python bench/gpu_check.py report --work DIR --out DIR [--dry-run]

a  native Triton: tests/test_attention.py, then a sweep of the kernels against the torch reference
   (decode, prefill, mixed, prefix hits; GQA 1-16; head sizes 64 and 128; bf16, fp16, fp32) and a
   KV cache of more than 2^31 elements (int64 addressing).
b  exactness: greedy LLM == transformers for tiny random Llama, Qwen2 and Qwen3 in fp32, with and
   without CUDA graphs; in bf16, the match rate and the logit gap at the first difference.
c  the worked examples through the real engine (the function chapter 14 exports for that).
d  speed: nano-vllm's workload (256 sequences, input and output lengths uniform in 100-1024,
   ignore_eos) with SmolLM2-135M and Qwen3-0.6B shapes (random weights made on the GPU): output
   tokens/s eager and with graphs, against transformers' continuous batching (generate_batch's
   manager) and padded generate; decode step time at batch 1 and 256 against the HBM roofline;
   host vs GPU time of the engine's steps.

Each stage writes WORK/STAGE.json after every result, so a stage stopped by its time limit keeps
what it measured. `--dry-run` runs every stage at toy size on the CPU (Triton interpreter): that
is what `make test` runs, so the script keeps working without a GPU. `report` turns the JSON files
into report.md, results.json, log.txt and figures in OUT (at most 8 files: the device tool's limit).
"""
import argparse, gc, json, math, os, random, signal, subprocess, sys, tempfile, time, traceback
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Non-public helpers, in this one place (public names come from `minivllm` itself): name -> module.
# Re-point here when the package moves; tests/test_gpu_check.py checks each one resolves.
_ATTN = "minivllm.attention.backends.triton_attn"
HELPERS = {
    "worked_examples_on_engine": "minivllm.testing.worked_examples",
    "make_tiny_model": "minivllm.testing.tiny_models",
    "make_paged_batch": "minivllm.testing.attention",
    "profile_kv_cache_memory": "minivllm.worker.gpu_worker",
    "CUDAGraphWrapper": "minivllm.compilation.cuda_graph",
    "make_kv_caches": "minivllm.model_executor.model_loader",
    "make_attn_metadata": "minivllm.worker.utils",
    **{name: _ATTN for name in (
        "paged_attention_ref", "reshape_and_cache_ref", "kernel_config", "SPLIT_KV_NUM_SEGMENTS",
        "SPLIT_KV_MAX_PROGRAMS", "_unified_attention_kernel", "_split_kv_decode_kernel", "_reduce_segments_kernel",
        "_reshape_and_cache_kernel")},
}


def helper(name: str):
    "A non-public helper of minivllm, from its module in HELPERS."
    import importlib
    return getattr(importlib.import_module(HELPERS[name]), name)


ARGS = None
RESULTS: dict = {}
SCALE = float(os.environ.get("GPU_CHECK_SCALE", 1))   # a slower machine: every item's limit times this
DEADLINE = math.inf
RUN_T0 = None      # when the measured part of a throughput run began (for the bound of a timeout)


# ---------------------------------------------------------------- plumbing
def save():
    "Write this stage's results now (a stage killed later keeps them)."
    path = Path(ARGS.work) / f"{ARGS.stage}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(RESULTS, indent=1, default=str))
    tmp.replace(path)


def log(*a):
    print(f"[{ARGS.stage} {time.strftime('%H:%M:%S')}]", *a, flush=True)


def remaining() -> float:
    return DEADLINE - time.time()


class TimeUp(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    "Raise TimeUp in the main thread after `seconds` (Python code only: a long kernel finishes first)."
    seconds = max(1, int(min(seconds, remaining() - 3)))
    def handler(signum, frame): raise TimeUp(f"stopped after {seconds} s")
    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try: yield
    finally:
        signal.alarm(0); signal.signal(signal.SIGALRM, old)


def attempt(key: str, fn, limit: float, *args, **kw):
    "Run one item under a time limit; store its result or its error under RESULTS['items'][key]."
    items = RESULTS.setdefault("items", {})
    limit *= SCALE
    global RUN_T0
    if remaining() < 5:
        items[key] = {"status": "not run: stage out of time"}; save(); return None
    t, cpu, RUN_T0 = time.time(), time.process_time(), None
    try:
        with time_limit(limit): out = fn(*args, **kw)
        items[key] = {"status": "ok", "seconds": round(time.time() - t, 2),
                      "cpu_s": round(time.process_time() - cpu, 2), **(out or {})}
    except TimeUp as e:
        items[key] = {"status": f"timeout: {e}", "seconds": round(time.time() - t, 2)}
        if RUN_T0 is not None: items[key]["measured_s"] = round(time.time() - RUN_T0, 2)   # unfinished
    except Exception as e:   # noqa: BLE001 -- a failing item must not stop the stage
        if "TimeUp(" in str(e):                              # raised inside the interpreter, wrapped by it
            items[key] = {"status": f"timeout: {str(e)[-60:]}", "seconds": round(time.time() - t, 2)}
            log(key, items[key]["status"]); save(); free_memory(); return items[key]
        items[key] = {"status": f"error: {type(e).__name__}: {e}"[:500],
                      "traceback": traceback.format_exc()[-2000:], "seconds": round(time.time() - t, 2)}
    log(key, items[key]["status"], f"{items[key]['seconds']} s")
    save()
    free_memory()
    return items[key]


def free_memory():
    import torch
    gc.collect()
    if torch.cuda.is_available(): torch.cuda.empty_cache()


def device() -> str:
    return "cpu" if ARGS.dry_run else "cuda"


def sync():
    import torch
    if torch.cuda.is_available() and not ARGS.dry_run: torch.cuda.synchronize()


def environment() -> dict:
    import torch, transformers, triton
    env = dict(python=sys.version.split()[0], torch=torch.__version__, triton=triton.__version__,
               transformers=transformers.__version__, dry_run=ARGS.dry_run,
               triton_interpret=os.environ.get("TRITON_INTERPRET"), minivllm_installed=installed("minivllm"),
               fastcore=installed("fastcore"))
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, sm_count=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                   capability=f"{p.major}.{p.minor}")
    return env


def installed(dist: str):
    "The distribution's installed version, or None (the device run has the project on PYTHONPATH only)."
    from importlib.metadata import PackageNotFoundError, version
    try: return version(dist)
    except PackageNotFoundError: return None


def git_commit() -> str:
    try: return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except Exception: return "unknown"   # noqa: BLE001


# ---------------------------------------------------------------- stage a: native Triton
def stage_a():
    import torch
    # Qwen3-0.6B's decode configuration first (bf16, head 128, 8 KV heads, 64 sequences: the unified
    # kernel, as the engine runs it above 16 sequences), then every dtype and head size with GQA 1, 4
    # and 16, then GQA 2 and 8: a stage stopped by its time limit has still covered the corners. The
    # sweep goes before pytest: its cases are the report's rows; pytest gets what time is left.
    attempt("sweep/bfloat16/d128/qpk2/qwen3_decode64", sweep_case, 60, torch.bfloat16, 128, 2,
            SWEEP_CASES["qwen3_decode64"])
    attempt("int64_cache", int64_cache_case, 60)
    grid = [(dt, d, qpk, name) for qpks in ((1, 4, 16), (2, 8)) for dt in (torch.bfloat16, torch.float16,
            torch.float32) for d in (128, 64) for qpk in qpks for name in SWEEP_CASES if name != "qwen3_decode64"]
    if ARGS.dry_run: grid = [(torch.float32, 64, 1, "decode"), (torch.float32, 64, 3, "mixed"),
                             (torch.float32, 64, 4, "prefix_hits")]
    for dtype, head, qpk, name in grid:
        if remaining() < 0.35 * ARGS.budget: break            # leave pytest its share
        key = f"sweep/{str(dtype).removeprefix('torch.')}/d{head}/qpk{qpk}/{name}"
        attempt(key, sweep_case, 30, dtype, head, qpk, SWEEP_CASES[name])
    RESULTS["sweep_planned"] = len(grid) + 1
    RESULTS["pytest"] = run_pytest()
    save()


def run_pytest() -> dict:
    "tests/test_attention.py on this machine, in the time the stage has left."
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_attention.py"]
    if not ARGS.dry_run:
        # not the CPU paths' grids and hypothesis sweeps (`make test` runs them; ~30 s each here):
        # the GPU's tests, and the C++ op's build and refusals against the device's torch
        cmd += ["-k", "not random_batches and not torch_backend and not cpu_backend_grid "
                      "and not op_writes"]
        try:
            import xdist  # noqa: F401  -- the device image has pytest-xdist: compile kernels in parallel
            cmd += ["-n", str(min(16, os.cpu_count() or 1))]
        except ImportError: pass
    else:  # the Triton tests a CPU runs, but the sm_90 compile (stage k is that) and the 27-case mixed-batch grid
        cmd += ["-k", "not torch and not sm90 and not mixed_batch"]   # (the sweep's mixed case; `make test` runs it)
    t = time.time()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(10, remaining() - 5))
        tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
        return {"rc": p.returncode, "summary": tail[-1] if tail else "", "tail": tail,
                "seconds": round(time.time() - t, 1), "pass": p.returncode == 0}
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "summary": "pytest timed out", "seconds": round(time.time() - t, 1), "pass": False}


# q_lens, ctx_lens, share_prefix (blocks shared by the requests whose context covers them), KV heads
# (None: 2 up to 8 query heads per KV head, else 1)
SWEEP_CASES = {
    "qwen3_decode64": ([1] * 64, [(37 * i) % 41 + (i % 3) * 16 for i in range(64)], 0, 8),   # 3 KV heads dry
    "decode": ([1] * 6, [0, 15, 16, 31, 200, 700], 0, None),
    "prefill": ([300, 17, 64], [0, 0, 0], 0, None),
    "mixed": ([1, 300, 17, 1, 64, 2, 33, 1], [70, 0, 15, 1, 32, 100, 16, 257], 0, None),
    "prefix_hits": ([40, 7, 1, 16], [64, 64, 80, 64], 4, None),
}
TOL = {"float32": 1e-4, "float16": 3e-3, "bfloat16": 2e-2}   # relative L2 error allowed


def rel_err(out, ref) -> float:
    return float((out.float().cpu() - ref.float().cpu()).norm() / ref.float().cpu().norm().clamp_min(1e-30))


def kernel_path(num_seqs: int, max_q: int, hkv: int) -> str:
    "Which Triton kernel the backend picks for a batch (triton_paged_attention's rule)."
    split = max_q <= 1 and num_seqs * hkv <= helper("SPLIT_KV_MAX_PROGRAMS")
    return "split_kv" if split else ("decode" if max_q <= 1 else "prefill")


def sweep_case(dtype, head, qpk, case) -> dict:
    "One batch through the Triton KV write and attention, against the fp32 reference."
    from minivllm import get_attn_backend
    make_paged_batch, paged_attention_ref, reshape_and_cache_ref = (
        helper(n) for n in ("make_paged_batch", "paged_attention_ref", "reshape_and_cache_ref"))
    q_lens, ctx_lens, share, hkv = case
    hkv = hkv or (2 if qpk <= 8 else 1)
    if ARGS.dry_run and hkv == 8: hkv = 3   # the same compiled kernel (KV heads are a grid axis), 3/8 the programs
    query, key, value, cache, md = make_paged_batch(q_lens, ctx_lens, num_kv_heads=hkv, qpk=qpk, head_dim=head,
                                                    dtype=dtype, device=device(), share_prefix=share, pad=3,
                                                    seed=head + qpk)
    backend = get_attn_backend("triton", device())
    ref_cache = cache.clone()
    reshape_and_cache_ref(key, value, ref_cache, md.slot_mapping)
    backend.write_kv(key, value, cache, md.slot_mapping)
    write_ok = bool(torch_equal(cache, ref_cache))
    scale = head ** -0.5
    sync(); t = time.perf_counter()
    out = backend.forward(query, cache, md, scale)           # the first call compiles (on a GPU)
    sync(); first = time.perf_counter() - t
    second = None
    if not ARGS.dry_run:                                     # the interpreter has nothing to compile
        t = time.perf_counter()
        out = backend.forward(query, cache, md, scale)
        sync(); second = time.perf_counter() - t
    ref = paged_attention_ref(query.float().cpu(), ref_cache.float().cpu(), md_cpu(md), scale)
    n = int(md.query_start_loc[-1])
    err = rel_err(out[:n], ref[:n])
    tol = TOL[str(dtype).removeprefix("torch.")]
    finite = bool(out.isfinite().all())
    ok = write_ok and finite and err <= tol and float(out[n:].abs().sum()) == 0
    return {"rel_err": err, "tol": tol, "kv_write_equal": write_ok, "finite": finite, "pass": ok,
            "kernel": kernel_path(len(q_lens), max(q_lens), hkv), "num_seqs": len(q_lens), "kv_heads": hkv,
            "first_call_s": round(first, 3), "second_call_s": second and round(second, 4)}


def torch_equal(a, b) -> bool:
    import torch
    return torch.equal(a, b)


def md_cpu(md):
    from dataclasses import replace
    return replace(md, query_start_loc=md.query_start_loc.cpu(), seq_lens=md.seq_lens.cpu(),
                   block_table=md.block_table.cpu(), slot_mapping=md.slot_mapping.cpu())


def int64_cache_case() -> dict:
    "A KV cache of more than 2^31 elements; the requests' blocks sit at its far end (int64 offsets)."
    import torch
    from minivllm import get_attn_backend
    make_attn_metadata, paged_attention_ref = helper("make_attn_metadata"), helper("paged_attention_ref")
    dtype = torch.float32 if ARGS.dry_run else torch.bfloat16
    hkv, d, bs, qpk = (2, 64, 16, 2) if ARGS.dry_run else (8, 128, 16, 2)
    per_block = 2 * bs * hkv * d
    num_blocks = 40 if ARGS.dry_run else 2**31 // per_block + 64
    q_lens, ctx_lens = [1, 1, 37], [100, 5, 60]
    nblk = [-(-(q + c) // bs) for q, c in zip(q_lens, ctx_lens)]
    top = list(range(num_blocks - 1, num_blocks - 1 - sum(nblk), -1))            # the last blocks
    tables, i = [], 0
    for n in nblk: tables.append(top[i:i + n]); i += n
    cache = torch.zeros(num_blocks, 2, bs, hkv, d, dtype=dtype, device=device())
    g = torch.Generator().manual_seed(0)
    for blocks in tables:                                                       # random context
        for b in blocks: cache[b].copy_(torch.randn(2, bs, hkv, d, generator=g).to(dtype))
    positions, md = make_attn_metadata(tables, ctx_lens, q_lens, bs, device())
    n = sum(q_lens)
    query = torch.randn(n, hkv * qpk, d, generator=g).to(dtype).to(device())
    key, value = (torch.randn(n, hkv, d, generator=g).to(dtype).to(device()) for _ in range(2))
    backend = get_attn_backend("triton", device())
    backend.write_kv(key, value, cache, md.slot_mapping)
    out = backend.forward(query, cache, md, d ** -0.5)
    sync()
    # reference on a compact copy: the same blocks renumbered 0..k-1
    used = sorted({b for t in tables for b in t})
    small = cache[torch.tensor(used, device=device())].float().cpu()
    remap = {b: j for j, b in enumerate(used)}
    _, md_small = make_attn_metadata([[remap[b] for b in t] for t in tables], ctx_lens, q_lens, bs)
    ref = paged_attention_ref(query.float().cpu(), small, md_small, d ** -0.5)
    err = rel_err(out, ref)
    tol = TOL[str(dtype).removeprefix("torch.")]
    return {"cache_elements": cache.numel(), "over_2_31": cache.numel() > 2**31, "rel_err": err, "tol": tol,
            "pass": err <= tol and (ARGS.dry_run or cache.numel() > 2**31)}


# ---------------------------------------------------------------- stage k: every kernel configuration for sm_90
def compile_cases():
    "(name, kernel, signature, constexprs, num_warps): every KERNEL_CONFIGS entry, the reduce and the KV write."
    import torch
    kernel_config, segs = helper("kernel_config"), helper("SPLIT_KV_NUM_SEGMENTS")
    unified, split, reduce_, write = (helper(n) for n in ("_unified_attention_kernel", "_split_kv_decode_kernel",
                                                          "_reduce_segments_kernel", "_reshape_and_cache_kernel"))
    out = []
    for dt, tdt in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        for head in (64, 128, 256):
            for kind in ("prefill", "decode", "split_kv"):
                cfg = kernel_config(kind, tdt, head)
                qpk = 3 if kind == "prefill" else 4
                common = dict(QPK=qpk, BLOCK_M=cfg.block_m, TILE=cfg.tile, BLOCK_SIZE=16, HEAD_DIM=head,
                              HEAD_PAD=head, UPCAST=False, IEEE=dt == "fp32")
                if kind == "split_kv":
                    sig = dict(q_ptr=f"*{dt}", cache_ptr=f"*{dt}", cu_q_ptr="*i32", seq_lens_ptr="*i32",
                               bt_ptr="*i32", scale="fp32", acc_ptr="*fp32", m_ptr="*fp32", l_ptr="*fp32",
                               num_heads="i32")
                    out.append((f"{dt}/d{head}/split_kv", split, sig, dict(common, NUM_SEGMENTS=segs), cfg.num_warps))
                else:
                    sig = dict(q_ptr=f"*{dt}", cache_ptr=f"*{dt}", out_ptr=f"*{dt}", cu_q_ptr="*i32",
                               seq_lens_ptr="*i32", bt_ptr="*i32", scale="fp32", num_seqs="i32")
                    out.append((f"{dt}/d{head}/{kind}", unified, sig, dict(common, BLOCK_Q=cfg.block_m // qpk),
                                cfg.num_warps))
            sig = dict(out_ptr=f"*{dt}", cu_q_ptr="*i32", acc_ptr="*fp32", m_ptr="*fp32", l_ptr="*fp32",
                       num_heads="i32")
            out.append((f"{dt}/d{head}/reduce", reduce_, sig, dict(HEAD_DIM=head, HEAD_PAD=head, NUM_SEGMENTS=segs), 4))
        sig = dict(key_ptr=f"*{dt}", value_ptr=f"*{dt}", cache_ptr=f"*{dt}", slot_ptr="*i64")
        out.append((f"{dt}/reshape_and_cache", write, sig, dict(BLOCK_SIZE=16, NUM_KV_HEADS=3, HEAD_DIM=64, TILE=256), 4))
    return out


def compile_sm90(kernel, sig, constexprs, num_warps) -> dict:
    "Compile one kernel for sm_90 on this machine (no GPU needed); ptxas's spill count and the seconds it took."
    import re, triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia import compiler as nvidia
    from triton.compiler import ASTSource
    ptxas = os.path.join(os.path.dirname(nvidia.__file__), "bin", "ptxas")
    sig = {**sig, **{a: "i32" for a in kernel.arg_names if a.startswith("stride")},
           **{k: "constexpr" for k in constexprs}}
    t = time.perf_counter()
    k = triton.compile(ASTSource(kernel, sig, constexprs=constexprs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": num_warps})
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f: f.write(k.asm["ptx"])
    r = subprocess.run([ptxas, "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
    os.unlink(f.name)
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    if r.returncode or not m: raise RuntimeError(f"ptxas: {r.stderr[-1500:]}")
    spilled = int(m[1]) + int(m[2])
    return {"spilled_bytes": spilled, "compile_s": round(time.perf_counter() - t, 2), "num_warps": num_warps,
            "triton": triton.__version__, "pass": spilled == 0}


def stage_k():
    "Every Triton kernel configuration compiled for sm_90 by this machine's Triton (the rehearsal: 3.6), no spills."
    os.environ["TRITON_INTERPRET"] = "0"      # the compiler, not the interpreter (kernels not yet defined)
    for name, kernel, sig, cx, warps in compile_cases():
        attempt(f"compile/{name}", compile_sm90, 120, kernel, sig, cx, warps)


# ---------------------------------------------------------------- stage b: exactness against transformers
ARCHS = ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"]


def stage_b():
    make_tiny_model = helper("make_tiny_model")
    work = Path(ARGS.work) / "stage_b"
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 250) for _ in range(rng.randrange(3, 40 if not ARGS.dry_run else 20))]
               for _ in range(2 if ARGS.dry_run else 6)]
    max_tokens = 3 if ARGS.dry_run else 32
    paths = {arch: make_tiny_model(work / arch, arch) for arch in ARCHS}
    for arch in ARCHS:                                   # exactness first, then the bf16 statistics
        attempt(f"{arch}/fp32", exactness_fp32, 60, paths[arch], prompts, max_tokens)
    for arch in ARCHS if not ARGS.dry_run else ARCHS[-1:]:   # the dry run checks the bf16 path once
        attempt(f"{arch}/bf16", match_rate_bf16, 60, paths[arch], prompts, max_tokens)
    attempt("kv_cache_profile", kv_cache_profile, 60, paths["Qwen3ForCausalLM"])     # last: it can assert


@contextmanager
def cpu_as_cuda_memory(total=8 << 30):
    "The dry run: torch.cuda's memory calls answered for the CPU, so the profiling code runs unchanged."
    import torch
    names = ("empty_cache", "reset_peak_memory_stats", "synchronize", "max_memory_allocated", "mem_get_info",
             "memory_reserved")
    saved = {n: getattr(torch.cuda, n) for n in names}
    fake = dict(empty_cache=lambda *a, **k: None, reset_peak_memory_stats=lambda *a, **k: None,
                synchronize=lambda *a, **k: None, max_memory_allocated=lambda *a, **k: 300 << 20,
                mem_get_info=lambda *a, **k: (total - (400 << 20), total), memory_reserved=lambda *a, **k: 320 << 20)
    for n in names: setattr(torch.cuda, n, fake[n])
    try: yield
    finally:
        for n in names: setattr(torch.cuda, n, saved[n])


def kv_cache_profile(path) -> dict:
    "The engine's KV-cache sizing on this device: one profiling step of the largest batch (Triton backend)."
    from minivllm import load_model
    profile = helper("profile_kv_cache_memory")
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    model = load_model(path, dtype=dtype, device=device(), attn_backend="triton")
    # one sequence of num_tokens tokens: no more than the model's positions (the tiny model has 1,024)
    num_tokens = 128 if ARGS.dry_run else min(8192, model.config.max_position_embeddings)
    seqs, bs, util = (16 if ARGS.dry_run else 256), 16, 0.9
    if ARGS.dry_run:
        with cpu_as_cuda_memory(): budget = profile(model, num_tokens, seqs, bs, util)
        total = 8 << 30
    else:
        import torch
        budget = profile(model, num_tokens, seqs, bs, util)
        total = torch.cuda.mem_get_info()[1]
    backend = backend_of(model)
    del model
    return {"num_tokens": num_tokens, "kv_budget_bytes": budget, "total_bytes": total, "backend": backend,
            "pass": isinstance(budget, int) and 0 < budget < total * util}


def hf_greedy(path, dtype, prompts, max_tokens) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM
    hf = no_eos(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device()).eval())
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = hf.generate(torch.tensor([p], device=device()), max_new_tokens=max_tokens, do_sample=False)
            out.append(ids[0, len(p):].tolist())
    del hf
    return out


def no_eos(hf):
    "vLLM's ignore_eos for transformers: no end-of-sequence token (min_new_tokens would mask it instead)."
    hf.generation_config.eos_token_id, hf.generation_config.pad_token_id = None, 0
    return hf


def make_llm(path, graphs: bool, **kw):
    "LLM on the check's device; `graphs` on a CPU wraps the runner's model by hand (padded eager path)."
    from minivllm import LLM
    CUDAGraphWrapper = helper("CUDAGraphWrapper")
    kw.setdefault("attention_backend", "triton")       # the device's backend; the interpreter in the dry run
    kw.setdefault("block_size", 16)                    # vLLM's GPU default, in the dry run too
    # on a CPU, enforce_eager=False means torch.compile, a path the device never takes: graphs are wrapped below
    llm = LLM(path, device=device(), enforce_eager=not graphs or ARGS.dry_run, **kw)
    executor = llm.engine_core.model_executor
    runner = getattr(executor, "driver_worker", executor)      # async scheduling: UniProcExecutor
    if graphs and ARGS.dry_run:
        width = runner.input_batch.block_table.block_table.shape[1]
        runner.model = CUDAGraphWrapper(llm.model, max_num_seqs=llm.scheduler_config.max_num_seqs,
                                        max_num_blocks_per_req=width, device=device())
    if graphs and not isinstance(runner.model, CUDAGraphWrapper):
        raise RuntimeError("LLM(enforce_eager=False) did not wrap the model in CUDAGraphWrapper")
    return llm


def backend_of(model) -> str:
    "The attention backend a loaded model runs (e.g. TritonBackend), to show the dry run took the device's."
    return type(getattr(model, "attn_backend", None)).__name__


def wrapper_stats(llm) -> dict:
    return dict(getattr(llm.engine_core.model_executor.model, "stats", {}))   # UniProcExecutor.model too


def llm_greedy(llm, prompts, max_tokens) -> list[list[int]]:
    from minivllm import SamplingParams
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]


def exactness_fp32(path, prompts, max_tokens) -> dict:
    ref = hf_greedy(path, "float32", prompts, max_tokens)
    res = {}
    # async scheduling (chapter 14): the runner's device thread, the next step's decode inputs copied
    # on the device, the copies to the host waited for by an event
    for name, graphs, kw in (("eager", False, {}), ("graphs", True, {}),
                             ("graphs_async", True, {"async_scheduling": True})):
        llm = make_llm(path, graphs, dtype="float32", max_num_seqs=8, num_gpu_blocks=128, **kw)
        got = llm_greedy(llm, prompts, max_tokens)
        res[name] = {"equal": got == ref, "stats": wrapper_stats(llm), "backend": backend_of(llm.model),
                     "first_mismatch": next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)}
        llm.engine_core.shutdown()
        del llm
    res["pass"] = all(r["equal"] for r in res.values()) and (
        ARGS.dry_run or all(res[n]["stats"].get("replay", 0) > 0 for n in ("graphs", "graphs_async")))
    return res


def match_rate_bf16(path, prompts, max_tokens) -> dict:
    "bf16 LLM (graphs) vs bf16 transformers: matched prefix share; fp32 logit gap where they part."
    import torch
    from transformers import AutoModelForCausalLM
    ref = hf_greedy(path, "bfloat16", prompts, max_tokens)
    llm = make_llm(path, True, dtype="bfloat16", max_num_seqs=8, num_gpu_blocks=128)
    got = llm_greedy(llm, prompts, max_tokens)
    del llm
    hf32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device()).eval()
    matched, gaps = [], []
    for p, a, b in zip(prompts, got, ref):
        k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        matched.append(k / len(a))
        if k < len(a):
            with torch.no_grad():
                logits = hf32(torch.tensor([p + a[:k]], device=device())).logits[0, -1].float()
            gaps.append(abs(float(logits[a[k]] - logits[b[k]])))
    del hf32
    return {"match_rate": sum(matched) / len(matched), "per_prompt": matched, "logit_gaps_at_first_diff": gaps,
            "pass": True}


# ---------------------------------------------------------------- stage c: worked examples on the engine
def stage_c():
    work = Path(ARGS.work) / "stage_c"
    r = attempt("weights", save_random_model, 30, "SmolLM2-135M", work / "model", {"vocab_size": 4096})
    if r and r["status"] == "ok":
        attempt("worked_examples", worked_examples, remaining() - 5, work)


NUM_WORKED_EXAMPLES = 15


def worked_examples(work: Path) -> dict:
    "Every scheduling example through LLM on this device: its schedule must equal the model-free worker's."
    run = helper("worked_examples_on_engine")
    figs = work / "figures"
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    # on a CPU, enforce_eager=False is torch.compile, a path the device never takes (it captures graphs)
    results = run(device=device(), full=not ARGS.dry_run, figures_dir=figs, model=str(work / "model"),
                  dtype=dtype, attention_backend="triton", enforce_eager=ARGS.dry_run)
    examples = {name: {"equal": bool(r["equal"]), "difference": r.get("difference"), "steps": r.get("steps"),
                       "seconds": r.get("seconds")} for name, r in results.items()}
    montage(sorted(figs.glob("*.png")), Path(ARGS.work) / "fig_examples.png")
    return {"examples": examples, "num_examples": len(examples),
            "pass": len(examples) == NUM_WORKED_EXAMPLES and all(e["equal"] for e in examples.values())}


def montage(pngs, dest: Path, keep=("E5", "E6_variant", "E10_priority,_victim_itself", "E12")):
    "The worked examples' timelines on the engine, a few in one figure (the tool returns 8 files)."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    chosen = [p for p in pngs if any(p.stem == k for k in keep)][:4] or list(pngs)[:4]
    if not chosen: return
    fig, axes = plt.subplots(len(chosen), 1, figsize=(10, 3.2 * len(chosen)))
    for ax, p in zip(axes if len(chosen) > 1 else [axes], chosen):
        ax.imshow(plt.imread(p)); ax.axis("off")
    fig.tight_layout(); fig.savefig(dest, dpi=90); plt.close(fig)


# ---------------------------------------------------------------- stage d: speed
SPEED_CONFIGS = {  # the real models' shapes; weights are random, made on the GPU
    "SmolLM2-135M": dict(arch="LlamaForCausalLM", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                         rms_norm_eps=1e-5, rope_theta=100000.0, max_position_embeddings=8192,
                         tie_word_embeddings=True),
    "Qwen3-0.6B": dict(arch="Qwen3ForCausalLM", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                       tie_word_embeddings=True),
}
TOY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=16, max_position_embeddings=512)


def workload(seed=0):
    "nano-vllm's benchmark: 256 sequences, random ids, input and output lengths uniform in 100..1024."
    rng = random.Random(seed)
    n, lo, hi = (4, 4, 12) if ARGS.dry_run else (256, 100, 1024)
    prompts = [[rng.randrange(0, 10000 if not ARGS.dry_run else 250) for _ in range(rng.randint(lo, hi))]
               for _ in range(n)]
    outs = [rng.randint(lo, hi) for _ in range(n)]
    return prompts, outs


def stage_d():
    attempt("bandwidth", copy_bandwidth, 30)
    prompts, outs = workload()
    RESULTS["workload"] = {"num_seqs": len(prompts), "input_tokens": sum(map(len, prompts)),
                           "output_tokens": sum(outs), "max_input": max(map(len, prompts)), "max_output": max(outs)}
    work = Path(ARGS.work) / "stage_d"
    order = ["Qwen3-0.6B", "SmolLM2-135M"]
    paths = {}
    for name in order:
        r = attempt(f"{name}/weights", save_random_model, 60, name, work / name)
        if r and r["status"] == "ok": paths[name] = work / name
    bw = RESULTS["items"].get("bandwidth", {}).get("bytes_per_s")
    for name in order:
        if name in paths: attempt(f"{name}/step_times", step_times, 60, name, paths[name], bw)
    # the throughput runs, most telling first; each has its own limit, the stage's deadline wins
    # a run stopped by its limit still bounds its throughput: < output tokens / limit (see the report)
    runs = [(m, e) for e in ("minivllm_graphs", "hf_generate_batch") for m in order] + \
           [(m, e) for e in ("minivllm_eager", "hf_padded_generate") for m in order]
    if ARGS.dry_run: runs = [r for r in runs if r[0] == "SmolLM2-135M"]     # every engine, one model
    for name, engine in runs:
        if name in paths:
            attempt(f"{name}/{engine}", throughput, run_limit(name, engine), engine, paths[name], prompts, outs)


def run_limit(name, engine) -> float:
    """A throughput run's seconds: 50, but transformers' continuous batching gets what decides the 5x
    goal when it is cut off (10 s to load, then 5x the seconds minivllm's graphs took), at most 90."""
    if ARGS.dry_run: return 60
    ours = RESULTS["items"].get(f"{name}/minivllm_graphs", {})
    if engine != "hf_generate_batch" or ours.get("status") != "ok": return 50
    return min(90, 10 + 5 * RESULTS["workload"]["output_tokens"] / ours["tok_per_s"])


def copy_bandwidth() -> dict:
    "Device-to-device copy bandwidth, counting bytes read and written (median of 10)."
    import torch
    n = (64 << 20) if ARGS.dry_run else (4 << 30)
    a = torch.empty(n // 2, dtype=torch.float16, device=device()).normal_()
    b = torch.empty_like(a)
    times = []
    for _ in range(13):
        sync(); t = time.perf_counter(); b.copy_(a); sync(); times.append(time.perf_counter() - t)
    t = sorted(times[3:])[len(times[3:]) // 2]
    return {"bytes_per_s": 2 * n / t, "tb_per_s": round(2 * n / t / 1e12, 3)}


def speed_config(name):
    c = dict(SPEED_CONFIGS[name])
    if ARGS.dry_run: c.update(TOY)
    return c


def save_random_model(name, path, overrides=None) -> dict:
    "The model's config with random bf16 weights, initialised on the device, saved as safetensors."
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    c = speed_config(name)
    if ARGS.dry_run: c.update(overrides or {})      # e.g. a larger toy vocabulary for the examples' ids
    arch = c.pop("arch")
    config = AutoConfig.for_model({"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}[arch], **c)
    config.architectures = [arch]
    config.initializer_range = 0.02
    torch.manual_seed(0)
    dtype = torch.float32 if ARGS.dry_run else torch.bfloat16
    with torch.device(device()):
        hf = AutoModelForCausalLM.from_config(config, dtype=dtype)
    hf.save_pretrained(path)
    n = sum(p.numel() for p in hf.parameters())
    del hf
    return {"params": n, "dtype": str(dtype)}


def kv_bytes_per_token(c, dtype_bytes=2) -> int:
    return c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * c["head_dim"] * dtype_bytes


def step_times(name, path, bandwidth) -> dict:
    "One decode step at batch 1 and 256 (1,000-token contexts): eager wall time, graph replay, HBM roofline."
    import torch
    from minivllm import load_model
    make_attn_metadata, CUDAGraphWrapper, make_kv_caches = (
        helper(n) for n in ("make_attn_metadata", "CUDAGraphWrapper", "make_kv_caches"))
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    model = load_model(path, dtype=dtype, device=device(), attn_backend="triton")   # a CPU captures nothing
    c, ctx, bs = speed_config(name), (40 if ARGS.dry_run else 1000), 16
    batches = [1, 4] if ARGS.dry_run else [1, 256]
    per_req = -(-(ctx + 1) // bs)
    num_layers, hkv, hd, dt = model.kv_cache_spec()
    model.bind_kv_caches(make_kv_caches(num_layers, hkv, hd, dt, per_req * max(batches) + 1, bs, device()))
    weight_bytes = forward_weight_bytes(model, c["vocab_size"])
    wrapper = CUDAGraphWrapper(model, max_num_seqs=max(batches), max_num_blocks_per_req=per_req, device=device())
    wrapper.capture_sizes = sorted(batches)          # only the sizes timed here (capture stays short)
    wrapper.capture()
    res = {"weight_bytes": weight_bytes, "context": ctx, "backend": backend_of(model)}
    for b in batches:
        tables = [list(range(i * per_req, (i + 1) * per_req)) for i in range(b)]
        positions, md = make_attn_metadata(tables, [ctx] * b, [1] * b, bs, device())
        ids = torch.randint(0, c["vocab_size"], (b,), device=device())
        with torch.no_grad():
            eager = time_fn(lambda: model(ids, positions, md))
            graph = time_fn(lambda: wrapper(ids, positions, md))
        kv = b * ctx * kv_bytes_per_token(c, 4 if ARGS.dry_run else 2)
        rows = b * c["hidden_size"] * (4 if ARGS.dry_run else 2)        # the embedding rows gathered
        roofline = (weight_bytes + rows + kv) / bandwidth if bandwidth else None
        res[f"batch{b}"] = {"eager_ms": eager * 1e3, "graph_ms": graph * 1e3, "kv_bytes": kv,
                            "roofline_ms": roofline * 1e3 if roofline else None,
                            "graph_over_roofline": graph / roofline if roofline else None,
                            "eager_over_graph": eager / graph}
    res["replays"] = wrapper.stats.get("replay", 0)
    del wrapper, model
    return res


def forward_weight_bytes(model, vocab_size: int) -> int:
    "Bytes of the weights one forward pass reads in full: not the embedding table (it gathers rows) nor the LM head."
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.shape[0] != vocab_size)


def time_fn(fn, n=None) -> float:
    "Median seconds per call, host clock around a synchronised loop of `n` calls."
    n = n or (1 if ARGS.dry_run else 50)
    fn(); fn(); sync()
    times = []
    for _ in range(1 if ARGS.dry_run else 3):
        t = time.perf_counter()
        for _ in range(n): fn()
        sync(); times.append((time.perf_counter() - t) / n)
    return sorted(times)[len(times) // 2]


def throughput(engine, path, prompts, outs) -> dict:
    if engine.startswith("minivllm"): return minivllm_throughput(engine == "minivllm_graphs", path, prompts, outs)
    if engine == "hf_generate_batch": return hf_continuous_batching(path, prompts, outs)
    return hf_padded_generate(path, prompts, outs)


def minivllm_throughput(graphs, path, prompts, outs) -> dict:
    "Output tokens/s of LLM.generate on the workload; host time in schedule/update vs execute_model."
    from minivllm import SamplingParams
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    max_len = max(map(len, prompts)) + max(outs)
    t0 = time.time()
    llm = make_llm(path, graphs, dtype=dtype, max_num_seqs=len(prompts), max_model_len=max_len,
                   **({"num_gpu_blocks": 512} if ARGS.dry_run else {}))
    startup = time.time() - t0
    llm_greedy(llm, [p[:50] for p in prompts[:8]], 4)          # warm-up: compile the prefill kernels
    core = llm.engine_core
    timers = {"schedule_update_s": 0.0, "execute_model_s": 0.0, "steps": 0, "decode_steps": 0}
    sched_schedule, sched_update, execute = core.scheduler.schedule, core.scheduler.update_from_output, \
        core.model_executor.execute_model
    def timed(fn, key, count=False):
        def wrapper(*a, **k):
            t = time.perf_counter(); out = fn(*a, **k); timers[key] += time.perf_counter() - t
            if count:
                timers["steps"] += 1
                so = a[0]
                if so.total_num_scheduled_tokens == len(so.num_scheduled_tokens): timers["decode_steps"] += 1
            return out
        return wrapper
    core.scheduler.schedule = timed(sched_schedule, "schedule_update_s")
    core.scheduler.update_from_output = timed(sched_update, "schedule_update_s")
    core.model_executor.execute_model = timed(execute, "execute_model_s", count=True)
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True) for o in outs]
    global RUN_T0
    RUN_T0 = time.time()
    t = time.perf_counter()
    res = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t
    produced = sum(len(o.outputs[0].token_ids) for o in res)
    stats, backend = wrapper_stats(llm), backend_of(llm.model)
    del llm, res
    return {"run_s": elapsed, "output_tokens": produced, "tok_per_s": produced / elapsed,
            "startup_s": startup, "wrapper_stats": stats, "backend": backend, **timers,
            "host_share": timers["schedule_update_s"] / elapsed}


def hf_continuous_batching(path, prompts, outs) -> dict:
    "transformers' continuous batching (the manager behind generate_batch), per-request max_new_tokens."
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    dtype = torch.float32 if ARGS.dry_run else torch.bfloat16
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device()).eval()
    gc_ = GenerationConfig(max_new_tokens=max(outs), do_sample=False, eos_token_id=None, pad_token_id=0)
    kw = {}
    if ARGS.dry_run:
        from transformers import ContinuousBatchingConfig
        kw["continuous_batching_config"] = ContinuousBatchingConfig(num_blocks=64, max_batch_tokens=128)
    manager = hf.init_continuous_batching(generation_config=gc_, **kw)
    if hasattr(manager, "warmup"): manager.warmup()
    manager.start()
    global RUN_T0
    try:
        RUN_T0 = time.time()
        t = time.perf_counter()
        uniform = False
        for i, (p, o) in enumerate(zip(prompts, outs)):
            try: manager.add_request(p, request_id=str(i), max_new_tokens=o)
            except TypeError:                 # an older manager: every request gets max(outs) tokens
                manager.add_request(p, request_id=str(i)); uniform = True
        done, produced = set(), 0
        while len(done) < len(prompts):
            r = manager.get_result(timeout=1)
            if r is not None and r.is_finished() and r.request_id not in done:
                done.add(r.request_id); produced += len(r.generated_tokens)
            elif r is None and not manager.is_running(): raise RuntimeError("the generation thread stopped")
        elapsed = time.perf_counter() - t
    finally:
        manager.stop(block=True, timeout=2)     # its thread ends after the step it is in
    del manager, hf
    return {"run_s": elapsed, "output_tokens": produced, "tok_per_s": produced / elapsed,
            "uniform_lengths": uniform}


def hf_padded_generate(path, prompts, outs) -> dict:
    "Plain generate on the whole batch, left-padded, to the longest output; counts the requested tokens."
    import torch
    from transformers import AutoModelForCausalLM
    dtype = torch.float32 if ARGS.dry_run else torch.bfloat16
    hf = no_eos(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device()).eval())
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p); mask[i, width - len(p):] = 1
    global RUN_T0
    RUN_T0 = time.time()
    t = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(ids.to(device()), attention_mask=mask.to(device()), max_new_tokens=max(outs),
                          do_sample=False)
    sync()
    elapsed = time.perf_counter() - t
    generated = (out.shape[1] - width) * len(prompts)
    del hf, out
    return {"run_s": elapsed, "output_tokens": sum(outs), "generated_tokens": generated,
            "tok_per_s": sum(outs) / elapsed}


# ---------------------------------------------------------------- report
def load(work: Path) -> dict:
    data = {}
    for s in "kabcd":
        f = work / f"{s}.json"
        if f.exists():
            try: data[s] = json.loads(f.read_text())
            except json.JSONDecodeError as e: data[s] = {"error": f"unreadable: {e}"}
    stages = work / "stages.tsv"
    data["stages"] = [line.split("\t") for line in stages.read_text().splitlines()] if stages.exists() else []
    return data


def fmt(x, nd=2):
    if x is None: return "n/a"
    if isinstance(x, float): return f"{x:.{nd}g}" if abs(x) < 1e-2 else f"{x:,.{nd}f}"
    return str(x)


def verdict(ok) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def item_verdict(v: dict) -> str:
    "A correctness item: not run when absent; FAIL when it erred, timed out or did not run to its end."
    if not v: return "not run"
    return verdict(v.get("pass")) if v.get("status") == "ok" else "FAIL"


def correctness(data) -> list[tuple[str, str, str]]:
    "The report's first table: (check, measured, verdict); a check with nothing measured is 'not run'."
    rows = []
    a, b, c = (data.get(s, {}) for s in "abc")
    items_a = a.get("items", {})
    for dt in ("bfloat16", "float16", "float32"):
        cases = {k: v for k, v in items_a.items() if k.startswith(f"sweep/{dt}/")}
        worst = max((v["rel_err"] / v["tol"] for v in cases.values() if "rel_err" in v), default=None)
        ok = sum(1 for v in cases.values() if v.get("pass") and v.get("status") == "ok")
        rows.append((f"a: Triton kernels within the {dt} tolerance ({TOL[dt]:g} rel. L2) vs the fp32 reference",
                     f"{ok}/{len(cases)} cases, worst {fmt(worst)} x tol" if cases else "not run",
                     verdict(ok == len(cases)) if cases else "not run"))
    q = items_a.get("sweep/bfloat16/d128/qpk2/qwen3_decode64", {})
    rows.append(("a: Qwen3 decode (bf16, head 128, 64 seqs: the unified kernel) vs the reference",
                 f"{q.get('kernel', '')} kernel, rel. err {fmt(q.get('rel_err'))}" if "rel_err" in q else
                 q.get("status", "not run")[:60], item_verdict(q)))
    i64 = items_a.get("int64_cache", {})
    rows.append(("a: KV cache over 2^31 elements (int64 offsets)", f"rel. err {fmt(i64.get('rel_err'))}"
                 if "rel_err" in i64 else i64.get("status", "not run")[:60], item_verdict(i64)))
    pt = a.get("pytest")
    rows.append(("a: pytest tests/test_attention.py", (pt or {}).get("summary", "not run")[:80],
                 verdict(pt.get("pass", pt.get("rc") == 0)) if pt else "not run"))
    for arch in ARCHS:
        f = b.get("items", {}).get(f"{arch}/fp32", {})
        for mode in ("eager", "graphs", "graphs_async"):
            m = f.get(mode, {})
            rows.append((f"b: {arch} fp32 greedy tokens == transformers ({mode})",
                         str(m.get("equal", f.get("status", "not run")))[:60],
                         verdict(m.get("equal")) if m else ("FAIL" if f else "not run")))
        g = f.get("graphs", {}).get("stats", {})
        if not data.get("dry_run_report"):
            rows.append((f"b: {arch} CUDA graphs replayed", f"{g.get('replay', 0)} replays" if f else "not run",
                         verdict(g.get("replay", 0) > 0) if f else "not run"))
    kv = b.get("items", {}).get("kv_cache_profile", {})
    rows.append(("b: KV-cache profiling (profile_kv_cache_memory) on the Triton backend",
                 f"{fmt(kv.get('kv_budget_bytes', 0) / 2**30, 3)} GiB for the KV cache" if "kv_budget_bytes" in kv
                 else kv.get("status", "not run")[:60], item_verdict(kv)))
    w = c.get("items", {}).get("worked_examples", {})
    ex = w.get("examples", {})
    rows.append((f"c: the {NUM_WORKED_EXAMPLES} worked examples' schedules on the engine == the model-free worker's",
                 f"{sum(e['equal'] for e in ex.values())}/{len(ex)} equal" if ex else w.get("status", "not run")[:60],
                 item_verdict(w)))
    k = data.get("k", {}).get("items", {})
    if k:
        bad = [n for n, v in k.items() if not v.get("pass")]
        tv = next((v.get("triton") for v in k.values() if v.get("triton")), "?")
        rows.append((f"k: every kernel configuration compiles for sm_90 with Triton {tv}, 0 bytes spilled",
                     f"{len(k) - len(bad)}/{len(k)} clean" + (f"; failing: {', '.join(bad)[:200]}" if bad else ""),
                     verdict(not bad)))
    return rows


def goals(data) -> list[tuple[str, str, str]]:
    "The issue's speed goals: (goal, measured, verdict)."
    out = []
    d = data.get("d", {})
    items = d.get("items", {})
    for name in SPEED_CONFIGS:
        st = items.get(f"{name}/step_times", {})
        ratio = st.get("batch1", {}).get("eager_over_graph")
        out.append((f"{name}: graphs >= 3x eager, batch-1 decode step", fmt(ratio), verdict(None if ratio is None
                                                                                          else ratio >= 3)))
        g, h = items.get(f"{name}/minivllm_graphs", {}), items.get(f"{name}/hf_generate_batch", {})
        goal = f"{name}: >= 5x transformers generate_batch throughput"
        ours = g.get("tok_per_s") if g.get("status") == "ok" else None
        if ours and h.get("status") == "ok" and h.get("tok_per_s"):
            r = ours / h["tok_per_s"]
            out.append((goal, fmt(r), verdict(r >= 5)))
        elif ours and str(h.get("status", "")).startswith("timeout") and h.get("measured_s") and d.get("workload"):
            # transformers did not finish the workload in measured_s: its rate < all tokens / measured_s
            bound = ours / (d["workload"]["output_tokens"] / h["measured_s"])
            out.append((goal, f">= {fmt(bound)} (transformers cut off)", "PASS" if bound >= 5 else "n/a (bound < 5)"))
        else:
            out.append((goal, "n/a", "n/a"))
        b256 = st.get("batch256", {}).get("graph_over_roofline")
        out.append((f"{name}: batch-256 decode step within 1.5x of the HBM roofline (bytes a forward reads)",
                    fmt(b256), verdict(None if b256 is None else b256 <= 1.5)))
    return out


# seconds per stage on the H200: the plan fits 8 minutes with the processes' start and the report
STAGE_LIMITS = {"a": 130, "b": 45, "c": 45, "d": 230}
OVERHEAD_S = 30        # four interpreters started, the wheel installed, the report and its figures
PLAN_S = 480


def time_plan(data) -> list[str]:
    "The time plan: each stage's limit and what it took; stage a's compile time from the measured kernels."
    ran = {row[0]: row[2] for row in data.get("stages", []) if len(row) >= 3}
    L = ["| stage | H200 limit s | took s (here) |", "|---|---|---|"]
    L += [f"| {s} | {lim} | {ran.get(s, 'not run')} |" for s, lim in STAGE_LIMITS.items()]
    L.append(f"| start-up + report | {OVERHEAD_S} | |")
    L.append(f"| **total** | **{sum(STAGE_LIMITS.values()) + OVERHEAD_S}** (plan: <= {PLAN_S}) | |")
    k = data.get("k", {}).get("items", {})
    if k:
        per = {}
        for name, v in k.items():
            if "compile_s" in v: per.setdefault(name.split("/")[-1], []).append(v["compile_s"])
        L += ["", "Compile time per kernel for sm_90 (stage k, this machine): " +
              ", ".join(f"{kind} {sum(t) / len(t):.2f} s (max {max(t):.2f}, n={len(t)})" for kind, t in per.items())
              + f"; all {len(k)}: {sum(sum(t) for t in per.values()):.0f} s."]
        if {"prefill", "split_kv", "reduce", "reshape_and_cache"} <= set(per):
            mean = {kind: sum(t) / len(t) for kind, t in per.items()}
            # the device's sweep: per dtype x head x GQA a unified (prefill) and a split-KV compile, per
            # dtype x head a reduce, per dtype x KV heads x head a KV write, and the Qwen3 decode kernel
            n = dict(prefill=3 * 2 * 5, split_kv=3 * 2 * 5, reduce=3 * 2, reshape_and_cache=3 * 2 * 2)
            est = sum(n[kind] * mean[kind] for kind in n) + mean.get("decode", 0)
            reserve = 0.35 * STAGE_LIMITS["a"]
            L += ["", f"Stage a on the device: its full sweep compiles about {sum(n.values()) + 1} kernels, "
                  f"{est:.0f} s at those means, against {STAGE_LIMITS['a'] - reserve:.0f} s for the sweep "
                  f"(pytest keeps 35% of {STAGE_LIMITS['a']} s): "
                  + ("it fits." if est <= STAGE_LIMITS["a"] - reserve else
                     "the sweep stops at its share, after Qwen3's decode case and the GQA 1/4/16 corners.")]
    a = data.get("a", {}).get("items", {})
    first = [v["first_call_s"] - (v.get("second_call_s") or 0) for v in a.values() if "first_call_s" in v]
    if first:
        what = "first calls (interpreted)" if data.get("dry_run_report") else "first call minus second (compile)"
        L += ["", f"Stage a: {len(first)} sweep cases, {what} {sum(first):.1f} s in all, "
              f"max {max(first):.2f} s; {data.get('a', {}).get('sweep_planned', '?')} planned."]
    return L


def report():
    work, out = Path(ARGS.work), Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    data = load(work)
    data["dry_run_report"] = ARGS.dry_run
    env = next((data[s]["env"] for s in "abcdk" if data.get(s, {}).get("env")), {})
    L = [f"# minivllm GPU check{' (dry run on CPU)' if ARGS.dry_run else ''}", "",
         f"Commit `{git_commit()}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
         f"Environment: {', '.join(f'{k} {v}' for k, v in env.items())}.", "",
         "## Correctness", "", "| check | measured | verdict |", "|---|---|---|"]
    L += [f"| {g} | {m} | {v} |" for g, m, v in correctness(data)]
    L += ["", "## Speed goals", "", "| goal | measured | verdict |", "|---|---|---|"]
    L += [f"| {g} | {m} | {'n/a (dry run)' if ARGS.dry_run else v} |" for g, m, v in goals(data)]
    L += ["", "## Stages and time plan", "", "| stage | exit | seconds |", "|---|---|---|"]
    L += ["| " + " | ".join((row + ["", ""])[:3]) + " |" for row in data["stages"]]
    L += [""] + time_plan(data)
    fails = [f"{s}: {f}" for s in "kabcd" for f in data.get(s, {}).get("failures", [])]
    if fails: L += ["", "Failures: " + "; ".join(fails)[:3000]]
    a = data.get("a", {})
    summary = a.get("pytest", {}).get("summary", "not run")
    L += ["", "## a. Native Triton", "", f"pytest tests/test_attention.py: `{summary}`",
          "", "| case | status | rel. error | tolerance | pass |", "|---|---|---|---|---|"]
    for k, v in a.get("items", {}).items():
        L.append(f"| {k} | {v.get('status', '')[:60]} | {fmt(v.get('rel_err'))} | {fmt(v.get('tol'))} | "
                 f"{v.get('pass', '')} |")
    b = data.get("b", {})
    L += ["", "## b. Exactness against transformers (greedy)", "",
          "| model | status | eager == HF | graphs == HF | graphs + async scheduling == HF | wrapper steps "
          "| bf16 match rate | logit gaps at first difference |",
          "|---|---|---|---|---|---|---|---|"]
    for arch in ARCHS:
        f, h = b.get("items", {}).get(f"{arch}/fp32", {}), b.get("items", {}).get(f"{arch}/bf16", {})
        L.append(f"| {arch} | {f.get('status', 'not run')[:40]} / {h.get('status', 'not run')[:40]} | "
                 f"{f.get('eager', {}).get('equal', '')} | {f.get('graphs', {}).get('equal', '')} | "
                 f"{f.get('graphs_async', {}).get('equal', '')} | {f.get('graphs', {}).get('stats', '')} | {fmt(h.get('match_rate'))} | "
                 f"{', '.join(fmt(g, 3) for g in h.get('logit_gaps_at_first_diff', []))} |")
    c = data.get("c", {})
    L += ["", "## c. Worked examples on the engine", ""]
    if "skipped" in c: L.append(f"Skipped: {c['skipped']}")
    for k, v in c.get("items", {}).items():
        L.append(f"- {k}: {v.get('status')}")
        L += [f"  - {n}: {'same schedule' if e['equal'] else 'DIFFERENT: ' + str(e.get('difference'))[:300]}"
              f" ({e.get('steps')} steps)" for n, e in v.get("examples", {}).items()]
    d = data.get("d", {})
    items = d.get("items", {})
    bw = items.get("bandwidth", {})
    L += ["", "## d. Speed", "", f"Copy bandwidth: {fmt(bw.get('tb_per_s'), 3)} TB/s (read + write). "
          f"Workload: {d.get('workload')}.", "",
          "| model | batch | eager ms | graph ms | roofline ms | graph / roofline | eager / graph |",
          "|---|---|---|---|---|---|---|"]
    for name in SPEED_CONFIGS:
        st = items.get(f"{name}/step_times", {})
        for k, v in st.items():
            if k.startswith("batch"):
                L.append(f"| {name} | {k[5:]} | {fmt(v['eager_ms'])} | {fmt(v['graph_ms'])} | "
                         f"{fmt(v['roofline_ms'])} | {fmt(v['graph_over_roofline'])} | {fmt(v['eager_over_graph'])} |")
    L += ["", "| model | engine | status | output tok/s | seconds | host share (schedule+update) | steps |",
          "|---|---|---|---|---|---|---|"]
    for k, v in items.items():
        if "/" in k and k.split("/")[1] in ("minivllm_graphs", "minivllm_eager", "hf_generate_batch",
                                            "hf_padded_generate"):
            m, e = k.split("/")
            tps = fmt(v.get("tok_per_s"), 0)
            if str(v.get("status", "")).startswith("timeout") and d.get("workload") and v.get("measured_s"):
                tps = f"< {d['workload']['output_tokens'] / v['measured_s']:,.0f}"   # unfinished after that
            L.append(f"| {m} | {e} | {v.get('status', '')[:50]} | {tps} | "
                     f"{fmt(v.get('run_s'))} | {fmt(v.get('host_share'))} | {v.get('steps', '')} |")
    figures = draw_figures(data, out)
    if (work / "fig_examples.png").exists():
        (out / "fig_examples.png").write_bytes((work / "fig_examples.png").read_bytes())
        figures.append("fig_examples.png")
    L += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    errors = [(s, k, v.get("traceback") or v.get("status")) for s in "kabcd"
              for k, v in data.get(s, {}).get("items", {}).items() if str(v.get("status", "")).startswith("error")]
    errors += [(s, "the stage itself", data[s]["traceback"]) for s in "kabcd" if data.get(s, {}).get("traceback")]
    if errors:
        L += ["", "## Errors", ""] + [f"### {s}: {k}\n```\n{t}\n```" for s, k, t in errors]
    (out / "report.md").write_text("\n".join(L) + "\n")
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    logs = [f"===== {p.name}\n" + p.read_text(errors="replace")[-400_000:] for p in sorted(work.glob("stage_*.log"))]
    (out / "log.txt").write_text("\n".join(logs))
    print("\n".join(L[:14 + len(correctness(data)) + len(goals(data))]))
    print(f"report: {out / 'report.md'}")


def draw_figures(data, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = []
    a = data.get("a", {}).get("items", {})
    pts = [(k.split("/")[1], v["rel_err"] / v["tol"]) for k, v in a.items()
           if k.startswith("sweep/") and "rel_err" in v]
    if pts:
        fig, ax = plt.subplots(figsize=(6, 3))
        kinds = sorted({p[0] for p in pts})
        for i, kind in enumerate(kinds):
            ys = [y for x, y in pts if x == kind]
            ax.scatter([i] * len(ys), ys, alpha=0.6)
        ax.axhline(1, color="r", ls="--", label="tolerance")
        ax.set(xticks=range(len(kinds)), xticklabels=kinds, yscale="log", ylabel="rel. error / tolerance",
               title="Triton kernels vs the fp32 reference")
        ax.legend(); fig.tight_layout(); fig.savefig(out / "fig_kernels.png", dpi=90); plt.close(fig)
        names.append("fig_kernels.png")
    items = data.get("d", {}).get("items", {})
    engines = ["minivllm_graphs", "minivllm_eager", "hf_generate_batch", "hf_padded_generate"]
    rows = [(m, e, items.get(f"{m}/{e}", {}).get("tok_per_s")) for m in SPEED_CONFIGS for e in engines]
    if any(r[2] for r in rows):
        fig, ax = plt.subplots(figsize=(7, 3))
        for i, m in enumerate(SPEED_CONFIGS):
            for j, e in enumerate(engines):
                v = items.get(f"{m}/{e}", {}).get("tok_per_s") or 0
                ax.bar(i * (len(engines) + 1) + j, v, color=f"C{j}", label=e if i == 0 else None)
        ax.set(xticks=[i * (len(engines) + 1) + 1.5 for i in range(len(SPEED_CONFIGS))],
               xticklabels=list(SPEED_CONFIGS), ylabel="output tokens/s",
               title=f"{data.get('d', {}).get('workload', {}).get('num_seqs', '?')} sequences, same device")
        ax.legend(fontsize=7); fig.tight_layout(); fig.savefig(out / "fig_throughput.png", dpi=90); plt.close(fig)
        names.append("fig_throughput.png")
    st = [(m, items.get(f"{m}/step_times", {})) for m in SPEED_CONFIGS]
    if any(s for _, s in st):
        fig, ax = plt.subplots(figsize=(7, 3))
        x = 0
        for m, s in st:
            for k, v in s.items():
                if not k.startswith("batch"): continue
                for j, (lab, key) in enumerate([("eager", "eager_ms"), ("graph", "graph_ms"),
                                                ("HBM roofline", "roofline_ms")]):
                    ax.bar(x + j, v.get(key) or 0, color=f"C{j}", label=lab if x == 0 else None)
                ax.text(x + 1, 0, f"{m}\nbatch {k[5:]}", ha="center", va="top", fontsize=7)
                x += 4
        ax.set(yscale="log", ylabel="ms per decode step", xticks=[], title="decode step time")
        ax.legend(fontsize=7); fig.tight_layout(); fig.savefig(out / "fig_step_time.png", dpi=90); plt.close(fig)
        names.append("fig_step_time.png")
    return names


# ---------------------------------------------------------------- verify (the rehearsal)
def verify_paths(data) -> list[str]:
    "What the dry run must have done for it to rehearse the device run; each missing path is one line."
    problems = []
    def item(s, key): return data.get(s, {}).get("items", {}).get(key, {})
    stages = {row[0]: row[1] for row in data.get("stages", []) if len(row) >= 2}
    for s in "kabcd":
        if stages.get(s) != "0": problems.append(f"stage {s} exited {stages.get(s, 'not run')}")
    env = data.get("a", {}).get("env", {})
    if env.get("minivllm_installed"): problems.append(f"minivllm is installed ({env['minivllm_installed']}): "
                                                      "the device has it on PYTHONPATH only")
    for s in "abcd":
        if data.get(s, {}).get("env", {}).get("triton_interpret") != "1":
            problems.append(f"stage {s} did not run under the Triton interpreter")
    k = data.get("k", {}).get("items", {})
    if len(k) < 39 or not all(v.get("pass") for v in k.values()):
        problems.append(f"stage k: {sum(bool(v.get('pass')) for v in k.values())}/{len(k)} of >= 39 kernels clean")
    q = item("a", "sweep/bfloat16/d128/qpk2/qwen3_decode64")
    if not (q.get("pass") and q.get("kernel") == "decode" and q.get("num_seqs") == 64):
        problems.append(f"the bf16 64-sequence decode (unified kernel) did not pass: {q.get('status', 'not run')}")
    if not data.get("a", {}).get("pytest", {}).get("pass"): problems.append("stage a's pytest did not pass")
    backends = [item("b", f"{arch}/fp32").get(m, {}).get("backend") for arch in ARCHS for m in ("eager", "graphs")]
    backends += [item("b", "kv_cache_profile").get("backend"), item("d", "SmolLM2-135M/step_times").get("backend")]
    backends += [item("d", f"SmolLM2-135M/{e}").get("backend") for e in ("minivllm_graphs", "minivllm_eager")]
    if not all(b and "Triton" in b for b in backends): problems.append(f"not the Triton backend everywhere: {backends}")
    if not item("b", "kv_cache_profile").get("pass"): problems.append("the KV-cache profiling did not run")
    w = item("c", "worked_examples")
    if w.get("num_examples") != NUM_WORKED_EXAMPLES or not w.get("pass"):
        problems.append(f"worked examples: {w.get('num_examples')} of {NUM_WORKED_EXAMPLES}, pass {w.get('pass')}")
    return problems


def verify() -> int:
    data = json.loads((Path(ARGS.out) / "results.json").read_text())
    problems = verify_paths(data)
    for p in problems: print("REHEARSAL:", p)
    print(f"rehearsal paths: {'all taken' if not problems else f'{len(problems)} missing'}")
    return 1 if problems else 0


# ---------------------------------------------------------------- main
def main(argv=None):
    global ARGS, DEADLINE
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["a", "b", "c", "d", "k", "report", "verify"])
    p.add_argument("--work", required=True, help="folder for the stages' JSON files and logs")
    p.add_argument("--out", help="report folder (report only)")
    p.add_argument("--budget", type=float, default=120, help="seconds this stage may take")
    p.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU (Triton interpreter)")
    ARGS = p.parse_args(argv)
    if ARGS.stage != "verify": Path(ARGS.work).mkdir(parents=True, exist_ok=True)
    if ARGS.stage == "report": return report()
    if ARGS.stage == "verify": return verify()
    DEADLINE = time.time() + ARGS.budget
    RESULTS["env"] = environment()
    RESULTS["started"] = time.strftime("%H:%M:%S")
    save()
    import torch
    if ARGS.stage != "k" and not ARGS.dry_run and not torch.cuda.is_available():
        RESULTS["skipped"] = "no CUDA device (use --dry-run on a CPU)"; save(); log(RESULTS["skipped"]); return 1
    try:
        {"a": stage_a, "b": stage_b, "c": stage_c, "d": stage_d, "k": stage_k}[ARGS.stage]()
    except KeyboardInterrupt:
        RESULTS["interrupted"] = "stopped by the stage's time limit"
    except Exception as e:   # noqa: BLE001 -- recorded, and the stage fails
        RESULTS["error"] = f"{type(e).__name__}: {e}"[:500]; RESULTS["traceback"] = traceback.format_exc()[-2000:]
    finally:
        RESULTS["finished"] = time.strftime("%H:%M:%S")
        RESULTS["failures"] = failures(RESULTS)
        save()
    for f in RESULTS["failures"]: log("FAILED", f)
    return 1 if RESULTS["failures"] else 0


THROUGHPUT_ENGINES = ("minivllm_graphs", "minivllm_eager", "hf_generate_batch", "hf_padded_generate")


def failures(results: dict) -> list[str]:
    "Why this stage fails: items that erred, did not pass or did not run (a throughput run cut off is a bound)."
    out = [f"{k}: {results[k]}" for k in ("skipped", "interrupted", "error") if results.get(k)]
    if "pytest" in results and not results["pytest"].get("pass", results["pytest"].get("rc") == 0):
        out.append(f"pytest: {results['pytest'].get('summary')}")
    for key, v in results.get("items", {}).items():
        status = str(v.get("status", ""))
        if key.split("/")[-1] in THROUGHPUT_ENGINES and status.startswith("timeout"): continue
        if status != "ok": out.append(f"{key}: {status[:200]}")
        elif v.get("pass") is False: out.append(f"{key}: did not pass")
    return out


if __name__ == "__main__":
    sys.exit(main())
