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

ARGS = None
RESULTS: dict = {}
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
    global RUN_T0
    if remaining() < 5:
        items[key] = {"status": "not run: stage out of time"}; save(); return None
    t, RUN_T0 = time.time(), None
    try:
        with time_limit(limit): out = fn(*args, **kw)
        items[key] = {"status": "ok", "seconds": round(time.time() - t, 2), **(out or {})}
    except TimeUp as e:
        items[key] = {"status": f"timeout: {e}", "seconds": round(time.time() - t, 2)}
        if RUN_T0 is not None: items[key]["measured_s"] = round(time.time() - RUN_T0, 2)   # unfinished
    except Exception as e:   # noqa: BLE001 -- a failing item must not stop the stage
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
               triton_interpret=os.environ.get("TRITON_INTERPRET"))
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, sm_count=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                   capability=f"{p.major}.{p.minor}")
    return env


def git_commit() -> str:
    try: return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except Exception: return "unknown"   # noqa: BLE001


# ---------------------------------------------------------------- stage a: native Triton
def stage_a():
    import torch
    RESULTS["pytest"] = run_pytest()
    save()
    attempt("int64_cache", int64_cache_case, 60)
    # every dtype and head size with GQA 1, 4 and 16 first, then GQA 2 and 8: a stage stopped by its
    # time limit has still covered the corners
    grid = [(dt, d, qpk, name) for qpks in ((1, 4, 16), (2, 8)) for dt in (torch.bfloat16, torch.float16,
            torch.float32) for d in (128, 64) for qpk in qpks for name in SWEEP_CASES]
    if ARGS.dry_run: grid = [(torch.float32, 64, 1, "decode"), (torch.float32, 64, 4, "prefix_hits")]
    for dtype, head, qpk, name in grid:
        key = f"sweep/{str(dtype).removeprefix('torch.')}/d{head}/qpk{qpk}/{name}"
        attempt(key, sweep_case, 30, dtype, head, qpk, SWEEP_CASES[name])


def run_pytest() -> dict:
    "tests/test_attention.py on this machine (a subset at toy size in the dry run)."
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_attention.py"]
    if ARGS.dry_run: cmd += ["-k", "reshape_and_cache_strided"]
    else:
        try:
            import xdist  # noqa: F401  -- the device image has pytest-xdist: compile kernels in parallel
            cmd += ["-n", "8"]
        except ImportError: pass
    t = time.time()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(10, remaining() * 0.5))
        tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
        return {"rc": p.returncode, "summary": tail[-1] if tail else "", "tail": tail,
                "seconds": round(time.time() - t, 1)}
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "summary": "pytest timed out", "seconds": round(time.time() - t, 1)}


# q_lens, ctx_lens, share_prefix (blocks shared by the requests whose context covers them)
SWEEP_CASES = {
    "decode": ([1] * 6, [0, 15, 16, 31, 200, 700], 0),
    "prefill": ([300, 17, 64], [0, 0, 0], 0),
    "mixed": ([1, 300, 17, 1, 64, 2, 33, 1], [70, 0, 15, 1, 32, 100, 16, 257], 0),
    "prefix_hits": ([40, 7, 1, 16], [64, 64, 80, 64], 4),
}
TOL = {"float32": 1e-4, "float16": 3e-3, "bfloat16": 2e-2}   # relative L2 error allowed


def rel_err(out, ref) -> float:
    return float((out.float().cpu() - ref.float().cpu()).norm() / ref.float().cpu().norm().clamp_min(1e-30))


def sweep_case(dtype, head, qpk, case) -> dict:
    "One batch through the Triton KV write and attention, against the fp32 reference."
    from minivllm.attention import get_attn_backend, paged_attention_ref, reshape_and_cache_ref
    from minivllm.testing import make_paged_batch
    q_lens, ctx_lens, share = case
    hkv = 2 if qpk <= 8 else 1
    query, key, value, cache, md = make_paged_batch(q_lens, ctx_lens, num_kv_heads=hkv, qpk=qpk, head_dim=head,
                                                    dtype=dtype, device=device(), share_prefix=share, pad=3,
                                                    seed=head + qpk)
    backend = get_attn_backend("triton", device())
    ref_cache = cache.clone()
    reshape_and_cache_ref(key, value, ref_cache, md.slot_mapping)
    backend.write_kv(key, value, cache, md.slot_mapping)
    write_ok = bool(torch_equal(cache, ref_cache))
    scale = head ** -0.5
    out = backend.forward(query, cache, md, scale)
    sync()
    ref = paged_attention_ref(query.float().cpu(), ref_cache.float().cpu(), md_cpu(md), scale)
    n = int(md.query_start_loc[-1])
    err = rel_err(out[:n], ref[:n])
    tol = TOL[str(dtype).removeprefix("torch.")]
    finite = bool(out.isfinite().all())
    ok = write_ok and finite and err <= tol and float(out[n:].abs().sum()) == 0
    return {"rel_err": err, "tol": tol, "kv_write_equal": write_ok, "finite": finite, "pass": ok}


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
    from minivllm.attention import get_attn_backend, make_attn_metadata, paged_attention_ref
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


# ---------------------------------------------------------------- stage b: exactness against transformers
ARCHS = ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"]


def stage_b():
    from minivllm.testing import make_tiny_model
    work = Path(tempfile.mkdtemp(prefix="gpu_check_b_"))
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 250) for _ in range(rng.randrange(3, 40))] for _ in range(3 if ARGS.dry_run else 6)]
    max_tokens = 4 if ARGS.dry_run else 32
    paths = {arch: make_tiny_model(work / arch, arch) for arch in ARCHS}
    for arch in ARCHS:                                   # exactness first, then the bf16 statistics
        attempt(f"{arch}/fp32", exactness_fp32, 60, paths[arch], prompts, max_tokens)
    for arch in ARCHS if not ARGS.dry_run else ARCHS[-1:]:   # the dry run checks the bf16 path once
        attempt(f"{arch}/bf16", match_rate_bf16, 60, paths[arch], prompts, max_tokens)


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
    from minivllm.cuda_graphs import CUDAGraphWrapper
    from minivllm.engine import LLM
    if ARGS.dry_run: kw.setdefault("attention_backend", "torch")   # the interpreter is for stage a
    llm = LLM(path, device=device(), enforce_eager=not graphs, **kw)
    runner = llm.engine_core.model_executor
    if graphs and ARGS.dry_run:
        width = runner.input_batch.block_table.block_table.shape[1]
        runner.model = CUDAGraphWrapper(llm.model, max_num_seqs=llm.scheduler_config.max_num_seqs,
                                        max_num_blocks_per_req=width, device=device())
    if graphs and not isinstance(runner.model, CUDAGraphWrapper):
        raise RuntimeError("LLM(enforce_eager=False) did not wrap the model in CUDAGraphWrapper")
    return llm


def wrapper_stats(llm) -> dict:
    return dict(getattr(llm.engine_core.model_executor.model, "stats", {}))


def llm_greedy(llm, prompts, max_tokens) -> list[list[int]]:
    from minivllm.request import SamplingParams
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]


def exactness_fp32(path, prompts, max_tokens) -> dict:
    ref = hf_greedy(path, "float32", prompts, max_tokens)
    res = {}
    for graphs in (False, True):
        llm = make_llm(path, graphs, dtype="float32", max_num_seqs=8, num_gpu_blocks=128)
        got = llm_greedy(llm, prompts, max_tokens)
        name = "graphs" if graphs else "eager"
        res[name] = {"equal": got == ref, "stats": wrapper_stats(llm),
                     "first_mismatch": next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)}
        del llm
    res["pass"] = res["eager"]["equal"] and res["graphs"]["equal"] and (
        ARGS.dry_run or res["graphs"]["stats"].get("replay", 0) > 0)
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
    try:
        from minivllm.testing import worked_examples_on_engine
    except ImportError:
        RESULTS["skipped"] = ("minivllm.testing has no `worked_examples_on_engine` (chapter 14): the worked "
                              "examples were not run on the engine")
        save(); log(RESULTS["skipped"]); return
    work = Path(tempfile.mkdtemp(prefix="gpu_check_c_"))
    r = attempt("weights", save_random_model, 30, "SmolLM2-135M", work / "model", {"vocab_size": 4096})
    if r and r["status"] == "ok":
        run = one_example_on_engine if ARGS.dry_run else worked_examples_on_engine
        attempt("worked_examples", worked_examples, remaining() - 5, run, work)


def one_example_on_engine(device, full, figures_dir, **llm_kwargs) -> dict:
    "The dry run's stand-in for `worked_examples_on_engine`: E1 alone, through the same functions."
    from minivllm.testing import (e1_workload, llms_for, plot_timeline, record_workload, replay_on_engine,
                                  schedule_difference)
    wl = e1_workload()
    llm = llms_for([wl], device=device, **llm_kwargs)[wl["config"]["block_size"]]
    fake, real = record_workload(wl), replay_on_engine(wl, llm)
    diff = schedule_difference(fake, real)
    Path(figures_dir).mkdir(parents=True, exist_ok=True)
    plot_timeline(real, title="E1 on the real engine").savefig(Path(figures_dir) / "E1.png", dpi=60)
    return {"E1": dict(equal=diff is None, difference=diff, steps=len(real), seconds=None)}


def worked_examples(run, work: Path) -> dict:
    "Every scheduling example through LLM on this device: its schedule must equal the model-free worker's."
    figs = work / "figures"
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    kw = {"attention_backend": "torch"} if ARGS.dry_run else {}
    results = run(device=device(), full=not ARGS.dry_run, figures_dir=figs, model=str(work / "model"),
                  dtype=dtype, **kw)
    examples = {name: {"equal": bool(r["equal"]), "difference": r.get("difference"), "steps": r.get("steps"),
                       "seconds": r.get("seconds")} for name, r in results.items()}
    montage(sorted(figs.glob("*.png")), Path(ARGS.work) / "fig_examples.png")
    return {"examples": examples, "pass": all(e["equal"] for e in examples.values())}


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
    work = Path(tempfile.mkdtemp(prefix="gpu_check_d_"))
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
    limit = 60 if ARGS.dry_run else 50
    if ARGS.dry_run: runs = [r for r in runs if r[0] == "SmolLM2-135M"]     # every engine, one model
    for name, engine in runs:
        if name in paths: attempt(f"{name}/{engine}", throughput, limit, engine, paths[name], prompts, outs)


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
    from minivllm.attention import make_attn_metadata
    from minivllm.cuda_graphs import CUDAGraphWrapper
    from minivllm.model import load_model, make_kv_caches
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    # the dry run takes the torch backend: the interpreter would take minutes; a CPU captures nothing
    model = load_model(path, dtype=dtype, device=device(), attn_backend="torch" if ARGS.dry_run else "triton")
    c, ctx, bs = speed_config(name), (40 if ARGS.dry_run else 1000), 16
    batches = [1, 4] if ARGS.dry_run else [1, 256]
    per_req = -(-(ctx + 1) // bs)
    num_layers, hkv, hd, dt = model.kv_cache_spec()
    model.bind_kv_caches(make_kv_caches(num_layers, hkv, hd, dt, per_req * max(batches) + 1, bs, device()))
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    wrapper = CUDAGraphWrapper(model, max_num_seqs=max(batches), max_num_blocks_per_req=per_req, device=device())
    wrapper.capture_sizes = sorted(batches)          # only the sizes timed here (capture stays short)
    wrapper.capture()
    res = {"weight_bytes": weight_bytes, "context": ctx}
    for b in batches:
        tables = [list(range(i * per_req, (i + 1) * per_req)) for i in range(b)]
        positions, md = make_attn_metadata(tables, [ctx] * b, [1] * b, bs, device())
        ids = torch.randint(0, c["vocab_size"], (b,), device=device())
        with torch.no_grad():
            eager = time_fn(lambda: model(ids, positions, md))
            graph = time_fn(lambda: wrapper(ids, positions, md))
        kv = b * ctx * kv_bytes_per_token(c, 4 if ARGS.dry_run else 2)
        roofline = (weight_bytes + kv) / bandwidth if bandwidth else None
        res[f"batch{b}"] = {"eager_ms": eager * 1e3, "graph_ms": graph * 1e3, "kv_bytes": kv,
                            "roofline_ms": roofline * 1e3 if roofline else None,
                            "graph_over_roofline": graph / roofline if roofline else None,
                            "eager_over_graph": eager / graph}
    res["replays"] = wrapper.stats.get("replay", 0)
    del wrapper, model
    return res


def time_fn(fn, n=None) -> float:
    "Median seconds per call, host clock around a synchronised loop of `n` calls."
    n = n or (3 if ARGS.dry_run else 50)
    fn(); fn(); sync()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n): fn()
        sync(); times.append((time.perf_counter() - t) / n)
    return sorted(times)[1]


def throughput(engine, path, prompts, outs) -> dict:
    if engine.startswith("minivllm"): return minivllm_throughput(engine == "minivllm_graphs", path, prompts, outs)
    if engine == "hf_generate_batch": return hf_continuous_batching(path, prompts, outs)
    return hf_padded_generate(path, prompts, outs)


def minivllm_throughput(graphs, path, prompts, outs) -> dict:
    "Output tokens/s of LLM.generate on the workload; host time in schedule/update vs execute_model."
    from minivllm.request import SamplingParams
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
    stats = wrapper_stats(llm)
    del llm, res
    return {"run_s": elapsed, "output_tokens": produced, "tok_per_s": produced / elapsed,
            "startup_s": startup, "wrapper_stats": stats, **timers,
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
        manager.stop(block=True, timeout=10)
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
    for s in "abcd":
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


def goals(data) -> list[tuple[str, str, str]]:
    "The issue's goals for this report: (goal, measured, verdict)."
    out = []
    d = data.get("d", {}).get("items", {})
    for name in SPEED_CONFIGS:
        st = d.get(f"{name}/step_times", {})
        b1 = st.get("batch1", {})
        ratio = b1.get("eager_over_graph")
        out.append((f"{name}: graphs >= 3x eager, batch-1 decode step", fmt(ratio),
                    "n/a" if ratio is None else ("PASS" if ratio >= 3 else "FAIL")))
        g, h = d.get(f"{name}/minivllm_graphs", {}), d.get(f"{name}/hf_generate_batch", {})
        if g.get("tok_per_s") and h.get("tok_per_s"):
            r = g["tok_per_s"] / h["tok_per_s"]
            out.append((f"{name}: >= 5x transformers generate_batch throughput", fmt(r), "PASS" if r >= 5 else "FAIL"))
        else:
            out.append((f"{name}: >= 5x transformers generate_batch throughput", "n/a", "n/a"))
        b256 = st.get("batch256", {}).get("graph_over_roofline")
        out.append((f"{name}: batch-256 decode step within 3x of the HBM roofline", fmt(b256),
                    "n/a" if b256 is None else ("PASS" if b256 <= 3 else "FAIL")))
    return out


def report():
    work, out = Path(ARGS.work), Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    data = load(work)
    env = next((data[s]["env"] for s in "abcd" if data.get(s, {}).get("env")), {})
    L = [f"# minivllm GPU check{' (dry run on CPU)' if ARGS.dry_run else ''}", "",
         f"Commit `{git_commit()}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
         f"Environment: {', '.join(f'{k} {v}' for k, v in env.items())}.", "",
         "| stage | exit | seconds |", "|---|---|---|"]
    L += ["| " + " | ".join((row + ["", ""])[:3]) + " |" for row in data["stages"]]
    L += ["", "## Goals", "", "| goal | measured | verdict |", "|---|---|---|"]
    L += [f"| {g} | {m} | {'n/a (dry run)' if ARGS.dry_run else v} |" for g, m, v in goals(data)]
    a = data.get("a", {})
    summary = a.get("pytest", {}).get("summary", "not run")
    L += ["", "## a. Native Triton", "", f"pytest tests/test_attention.py: `{summary}`",
          "", "| case | status | rel. error | tolerance | pass |", "|---|---|---|---|---|"]
    for k, v in a.get("items", {}).items():
        L.append(f"| {k} | {v.get('status', '')[:60]} | {fmt(v.get('rel_err'))} | {fmt(v.get('tol'))} | "
                 f"{v.get('pass', '')} |")
    b = data.get("b", {})
    L += ["", "## b. Exactness against transformers (greedy)", "",
          "| model | status | eager == HF | graphs == HF | wrapper steps | bf16 match rate "
          "| logit gaps at first difference |",
          "|---|---|---|---|---|---|---|"]
    for arch in ARCHS:
        f, h = b.get("items", {}).get(f"{arch}/fp32", {}), b.get("items", {}).get(f"{arch}/bf16", {})
        L.append(f"| {arch} | {f.get('status', 'not run')[:40]} / {h.get('status', 'not run')[:40]} | "
                 f"{f.get('eager', {}).get('equal', '')} | {f.get('graphs', {}).get('equal', '')} | "
                 f"{f.get('graphs', {}).get('stats', '')} | {fmt(h.get('match_rate'))} | "
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
    errors = [(s, k, v.get("traceback") or v.get("status")) for s in "abcd"
              for k, v in data.get(s, {}).get("items", {}).items() if str(v.get("status", "")).startswith("error")]
    if errors:
        L += ["", "## Errors", ""] + [f"### {s}: {k}\n```\n{t}\n```" for s, k, t in errors]
    (out / "report.md").write_text("\n".join(L) + "\n")
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    logs = [f"===== {p.name}\n" + p.read_text(errors="replace")[-400_000:] for p in sorted(work.glob("stage_*.log"))]
    (out / "log.txt").write_text("\n".join(logs))
    print("\n".join(L[:12 + len(goals(data))]))
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


# ---------------------------------------------------------------- main
def main(argv=None):
    global ARGS, DEADLINE
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["a", "b", "c", "d", "report"])
    p.add_argument("--work", required=True, help="folder for the stages' JSON files and logs")
    p.add_argument("--out", help="report folder (report only)")
    p.add_argument("--budget", type=float, default=120, help="seconds this stage may take")
    p.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU (Triton interpreter)")
    ARGS = p.parse_args(argv)
    Path(ARGS.work).mkdir(parents=True, exist_ok=True)
    if ARGS.stage == "report": return report()
    DEADLINE = time.time() + ARGS.budget
    RESULTS["env"] = environment()
    RESULTS["started"] = time.strftime("%H:%M:%S")
    save()
    import torch
    if not ARGS.dry_run and not torch.cuda.is_available():
        RESULTS["skipped"] = "no CUDA device (use --dry-run on a CPU)"; save(); log(RESULTS["skipped"]); return 1
    try:
        {"a": stage_a, "b": stage_b, "c": stage_c, "d": stage_d}[ARGS.stage]()
    except KeyboardInterrupt:
        RESULTS["interrupted"] = "stopped by the stage's time limit"
    finally:
        RESULTS["finished"] = time.strftime("%H:%M:%S")
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
