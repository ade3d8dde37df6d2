"""The GPU check's plan and stages (bench/gpu_check.sh runs each stage in its own process).

    python bench/gpu_check.py plan  --work DIR [--dry-run] [--only ITEM ...] [--merge results.json]
    python bench/gpu_check.py STAGE --work DIR --out DIR [--dry-run]     STAGE: k b c m s d a
    python bench/gpu_check.py report --work DIR --out DIR [--dry-run]
    python bench/gpu_check.py examples --results results.json --out DIR

plan  reads the GPU's name and measures its copy bandwidth, then sizes every stage for this GPU kind
      (H100 or H200) so the first call fits 8 minutes, start-up and transfers included, and a rerun
      of what failed (`--only ITEM ...`) 3 minutes; the dry run prints both kinds' plans.
k  (dry run only) every Triton kernel configuration compiled for sm_90: 0 bytes spilled.
b  greedy LLM == transformers, tiny Llama, Qwen2, Qwen3: fp32 token for token (eager, CUDA graphs,
   graphs with async scheduling); bf16 by vLLM's check_logprobs_close rule; the KV-cache profile.
c  the fifteen worked examples through LLM: the same schedule as the model-free worker, every
   schedule record kept in results.json (their timelines are drawn from it).
m  memory pressure: a KV budget small enough to preempt, shared prefixes; tokens equal to the
   unconstrained run, preemptions > 0, prefix hits > 0; its timeline.
s  `minivllm serve` (a real-size random bf16 model): concurrent streaming clients, each greedy
   answer close to LLM.generate's (check_logprobs_close), /metrics scraped, nothing in flight after.
d  speed: decode step times at batch 1 and 256 against the HBM roofline with a torch.profiler
   breakdown of one replay; nano-vllm's benchmark workload (its exact RNG calls) with graphs, its
   whole-run roofline; transformers and eager runs as references (bounds or 'not run').
a  native Triton last: the kernel sweep against the fp32 reference, then tests/test_attention.py.

Every finished item rewrites report.md and results.json in OUT at once, so a call killed on the
way keeps what it measured. `--dry-run` runs everything at toy size on the CPU (the Triton
interpreter): `make gpu-rehearsal`.
"""
import argparse, asyncio, gc, io, json, math, os, random, re, signal, socket, subprocess, sys
import tempfile, time, traceback
from contextlib import contextmanager
from dataclasses import dataclass, fields
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
    "attach_timeline": "minivllm.timeline",
    "StepRecord": "minivllm.timeline",
    "RequestStep": "minivllm.timeline",
    "plot_timeline": "minivllm.viz.timeline",
    "plot_kv_cache": "minivllm.viz.timeline",
    "main": "minivllm.entrypoints.cli.main",            # `minivllm serve`, run as `python -c` (not installed)
    **{name: _ATTN for name in (
        "paged_attention_ref", "reshape_and_cache_ref", "kernel_config", "SPLIT_KV_NUM_SEGMENTS",
        "SPLIT_KV_MAX_PROGRAMS", "_unified_attention_kernel", "_split_kv_decode_kernel",
        "_reduce_segments_kernel", "_reshape_and_cache_kernel")},
}


def helper(name: str):
    "A non-public helper of minivllm, from its module in HELPERS."
    import importlib
    return getattr(importlib.import_module(HELPERS[name]), name)


ARGS = None
RESULTS: dict = {}
PLAN: dict = {}
SCALE = float(os.environ.get("GPU_CHECK_SCALE", 1))   # a slower machine: every limit times this
DEADLINE = math.inf
RUN_T0 = None      # when the measured part of a throughput run began (for the bound of a timeout)


# ---------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Item:
    "One item of the device run: seconds on an H200, and how they change with the GPU kind."
    key: str                   # "STAGE/NAME"
    seconds: float             # measured on the H200 of 2026-12-04 where it ran, else estimated
    memory_bound: float = 0    # share of `seconds` that scales with 1 / copy bandwidth
    want: float = 0            # elastic: gets at least `seconds`, up to `want` as the budget allows
    reference: bool = False    # a reference row: a bound or 'not run', never a failure


ORDER = "kbcmsda"      # correctness first, then speed, then the kernel sweep and pytest (k: dry run)
ARCHS = ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"]
MODELS = ["Qwen3-0.6B", "SmolLM2-135M"]
REFERENCE_ENGINES = ("hf_generate_batch", "minivllm_eager", "hf_padded_generate")
ITEMS = [
    *(Item(f"b/{a}/fp32", 5) for a in ARCHS), *(Item(f"b/{a}/bf16", 5) for a in ARCHS),
    Item("b/kv_cache_profile", 4),
    Item("c/weights", 4), Item("c/worked_examples", 25, 0.1),
    Item("m/weights", 4), Item("m/pressure", 20, 0.3),
    Item("s/weights", 4), Item("s/serve", 40, 0.2),
    Item("d/Qwen3-0.6B/weights", 8), Item("d/SmolLM2-135M/weights", 4),
    Item("d/Qwen3-0.6B/step_times", 16, 0.5), Item("d/SmolLM2-135M/step_times", 13, 0.5),
    Item("d/Qwen3-0.6B/minivllm_graphs", 24, 0.6), Item("d/SmolLM2-135M/minivllm_graphs", 16, 0.5),
    *(Item(f"d/{m}/{e}", 0, 0.8, want, True) for e, want in
      (("hf_generate_batch", 30), ("minivllm_eager", 25), ("hf_padded_generate", 15)) for m in MODELS),
    Item("a/sweep/bfloat16/d128/qpk2/qwen3_decode64", 3), Item("a/int64_cache", 5, 0.2),
    Item("a/sweep", 20, 0, 40), Item("a/pytest", 50, 0, 80),
]
ELASTIC_PRIORITY = ["a/pytest", "a/sweep", *(f"d/{m}/{e}" for e in REFERENCE_ENGINES for m in MODELS)]
KIND_BANDWIDTH = {"H200": 4.2e12, "H100": 3.0e12}   # copy bandwidth, read + write: H200 measured
#                 4.21 TB/s on 2026-12-04; an H100's about 3.0 (issue 53)
CALL_S = {"first": 480, "rerun": 180}   # a call's device time: 8 minutes, then 3 for the rerun
START_S = {"first": 60, "rerun": 35}    # machine start and transfers (2026-12-04: about 30 s a call)
PROBE_S, STAGE_START_S, REPORT_S = 10, 8, 10   # the plan's probe; a stage's interpreter and CUDA; report
MARGIN_S = 15                                   # left unplanned: the call ends inside its budget
# the dry run's stage limits on two idle cores (alone on 2026-12-07: c 205 s, d 224 s); make
# gpu-rehearsal, beside pytest in make test, doubles them (GPU_CHECK_SCALE=2: c took 412 s there)
DRY_STAGE_S = {"k": 180, "b": 200, "c": 360, "m": 240, "s": 240, "d": 360, "a": 180}


def is_reference(key: str) -> bool:
    return key.split("/")[-1] in REFERENCE_ENGINES


def scaled(item: Item, bandwidth: float) -> float:
    "The item's seconds on a GPU of this copy bandwidth (memory-bound share scaled)."
    return item.seconds * (1 - item.memory_bound + item.memory_bound * KIND_BANDWIDTH["H200"] / bandwidth)


def selected(key: str, only) -> bool:
    "Whether item `key` is asked for: no --only, or an --only entry names it, its stage or a prefix."
    return not only or any(key == o or key.startswith(o + "/") for o in only)


def make_plan(kind: str, bandwidth: float | None = None, only=None) -> dict:
    """Every stage's seconds on this GPU: the required items scaled by its bandwidth, then the
    elastic ones (pytest, the sweep's grid, the reference runs) in priority order with what is left."""
    bandwidth = bandwidth or KIND_BANDWIDTH.get(kind, KIND_BANDWIDTH["H100"])
    call = "rerun" if only else "first"
    budget = CALL_S[call] - START_S[call] - PROBE_S - REPORT_S - MARGIN_S
    chosen = [i for i in ITEMS if selected(i.key, only)]
    stages = sorted({i.key[0] for i in chosen}, key=ORDER.index)
    left = budget - STAGE_START_S * len(stages)
    items, dropped = {}, []
    for i in chosen:                                    # the required items, in order
        s = round(scaled(i, bandwidth), 1)
        if i.want: items[i.key] = 0
        elif s <= left: items[i.key], left = s, left - s
        else: dropped.append(i.key)
    elastic = sorted((i for i in chosen if i.want), key=lambda i: ELASTIC_PRIORITY.index(i.key))
    for i in elastic:                                   # each its minimum, then up to what it wants
        if i.seconds and i.seconds <= left: items[i.key], left = i.seconds, left - i.seconds
    for i in elastic:
        more = min(max(0, i.want - items[i.key]), left)
        if more >= 5: items[i.key] += more; left -= more
    stage_s = {s: round(STAGE_START_S + sum(v for k, v in items.items() if k[0] == s)) for s in stages}
    total = START_S[call] + PROBE_S + sum(stage_s.values()) + REPORT_S + MARGIN_S
    return {"kind": kind, "bandwidth": bandwidth, "call": call, "budget_s": CALL_S[call],
            "start_s": START_S[call], "items": items, "stages": stage_s, "total_s": total,
            "dropped": dropped, "only": list(only or [])}


def dry_plan(only=None) -> dict:
    "The dry run's stage limits (generous: CI has two shared cores), GPU_CHECK_SCALE times longer."
    stages = [s for s in ORDER if not only or any(o[0] == s for o in only)]
    return {"kind": "dry run", "call": "dry run", "items": {}, "only": list(only or []),
            "stages": {s: round(DRY_STAGE_S[s] * SCALE) for s in stages}, "dropped": []}


def plan_table(plans: dict) -> list[str]:
    "The plans side by side: each stage's seconds per GPU kind, and the call's total."
    kinds = list(plans)
    L = ["| stage | " + " | ".join(f"{k} s" for k in kinds) + " |", "|---|" + "---|" * len(kinds)]
    stages = sorted({s for p in plans.values() for s in p["stages"]}, key=ORDER.index)
    L.append("| machine start + transfers | " + " | ".join(str(p.get("start_s", "")) for p in plans.values())
             + " |")
    L.append(f"| plan: name and copy bandwidth | " + " | ".join(str(PROBE_S) for _ in kinds) + " |")
    L += [f"| {s} | " + " | ".join(str(p["stages"].get(s, "")) for p in plans.values()) + " |" for s in stages]
    L.append(f"| report | " + " | ".join(str(REPORT_S) for _ in kinds) + " |")
    L.append(f"| margin | " + " | ".join(str(MARGIN_S) for _ in kinds) + " |")
    L.append("| **total** (budget) | " + " | ".join(f"**{p.get('total_s')}** ({p.get('budget_s')})"
                                                   for p in plans.values()) + " |")
    return L


def probe() -> dict:
    "The GPU's name, its kind and copy bandwidth (the dry run: this CPU's)."
    import torch
    if ARGS.dry_run: gpu, kind = "this machine's CPU", "dry run"
    else:
        gpu = torch.cuda.get_device_name(0)
        kind = next((k for k in KIND_BANDWIDTH if k in gpu), "other")    # sized by its bandwidth
    return {"gpu": gpu, "kind": kind, **copy_bandwidth()}


def plan_command() -> int:
    "Probe, plan, write WORK/plan.json, print the plan and the shell's limits (gpu_check.sh evals them)."
    global PLAN
    found = probe()
    only = ARGS.only or None
    if ARGS.dry_run: PLAN = dry_plan(only)
    else: PLAN = make_plan(found["kind"], found["bytes_per_s"], only)
    PLAN.update(found, merge=ARGS.merge, dry_run=ARGS.dry_run,
                plans={k: make_plan(k, only=only) for k in KIND_BANDWIDTH})
    (Path(ARGS.work) / "plan.json").write_text(json.dumps(PLAN, indent=1))
    shown = {**PLAN["plans"], **({} if ARGS.dry_run else {f"this {found['kind']}": PLAN})}
    print(f"plan: {found['gpu']} ({found['kind']}), copy bandwidth {found['tb_per_s']} TB/s, "
          f"{PLAN['call']} call", file=sys.stderr)
    for line in plan_table(shown): print(line, file=sys.stderr)
    for k, p in PLAN["plans"].items():
        if p["dropped"]: print(f"{k}: over the budget, not planned: {', '.join(p['dropped'])}", file=sys.stderr)
    stages = "".join(s for s in PLAN["stages"] if s in (ARGS.stages or ORDER))
    print(f"STAGES={stages}; " + " ".join(f"LIMIT_{s}={v};" for s, v in PLAN["stages"].items()))
    return 0


def load_plan(work: Path) -> dict:
    f = work / "plan.json"
    return json.loads(f.read_text()) if f.exists() else {}


# ---------------------------------------------------------------- plumbing
def save():
    "Write this stage's results now (a stage killed later keeps them), and the report with them."
    path = Path(ARGS.work) / f"{ARGS.stage}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(RESULTS, indent=1, default=str))
    tmp.replace(path)
    if ARGS.out: write_report(Path(ARGS.work), Path(ARGS.out))


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


def item_limit(key: str, default: float) -> float:
    "An item's limit: twice its planned seconds on the device (10 s at least), else `default`."
    planned = PLAN.get("items", {}).get(f"{ARGS.stage}/{key}")
    return max(2 * planned, planned + 10) if planned else default * SCALE


def wanted(key: str) -> bool:
    return selected(f"{ARGS.stage}/{key}", PLAN.get("only"))


def attempt(key: str, fn, limit: float, *args, **kw):
    "Run one item under a time limit; store its result or its error under RESULTS['items'][key]."
    if not wanted(key): return None
    items = RESULTS.setdefault("items", {})
    global RUN_T0
    planned = PLAN.get("items", {}).get(f"{ARGS.stage}/{key}")
    if planned == 0:
        items[key] = {"status": "not run: the plan left no time for it"}; save(); return None
    if remaining() < 5:
        items[key] = {"status": "not run: stage out of time"}; save(); return None
    t, cpu, RUN_T0 = time.time(), time.process_time(), None
    try:
        with time_limit(item_limit(key, limit)): out = fn(*args, **kw)
        items[key] = {"status": "ok", "seconds": round(time.time() - t, 2),
                      "cpu_s": round(time.process_time() - cpu, 2), **(out or {})}
    except TimeUp as e:
        items[key] = {"status": f"timeout: {e}", "seconds": round(time.time() - t, 2)}
        if RUN_T0 is not None: items[key]["measured_s"] = round(time.time() - RUN_T0, 2)   # unfinished
    except Exception as e:   # noqa: BLE001 -- a failing item must not stop the stage
        if "TimeUp(" in str(e):                              # raised inside the interpreter, wrapped by it
            items[key] = {"status": f"timeout: {str(e)[-60:]}", "seconds": round(time.time() - t, 2)}
        else:
            items[key] = {"status": f"error: {type(e).__name__}: {e}"[:500],
                          "traceback": traceback.format_exc()[-2000:], "seconds": round(time.time() - t, 2)}
    log(key, items[key]["status"], f"{items[key]['seconds']} s")
    save()
    free_memory()
    return items[key]


def ok(r) -> bool:
    return bool(r) and r.get("status") == "ok"


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
               fastcore=installed("fastcore"), fastapi=installed("fastapi"), pyzmq=installed("pyzmq"))
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


# ---------------------------------------------------------------- stage a: native Triton (last)
def stage_a():
    import torch
    # Qwen3-0.6B's decode configuration first (bf16, head 128, 8 KV heads, 64 sequences: the unified
    # kernel, as the engine runs it above 16 sequences), then every dtype and head size with GQA 1, 4
    # and 16, then GQA 2 and 8, while the sweep's share lasts; pytest gets what the plan gave it.
    attempt("sweep/bfloat16/d128/qpk2/qwen3_decode64", sweep_case, 60, torch.bfloat16, 128, 2,
            SWEEP_CASES["qwen3_decode64"])
    attempt("int64_cache", int64_cache_case, 60)
    grid = [(dt, d, qpk, name) for qpks in ((1, 4, 16), (2, 8)) for dt in (torch.bfloat16, torch.float16,
            torch.float32) for d in (128, 64) for qpk in qpks for name in SWEEP_CASES if name != "qwen3_decode64"]
    if ARGS.dry_run: grid = [(torch.float32, 64, 1, "decode"), (torch.float32, 64, 3, "mixed"),
                             (torch.float32, 64, 4, "prefix_hits")]
    share = PLAN.get("items", {}).get("a/sweep") or 0.35 * remaining()
    stop = time.time() + share
    RESULTS["sweep_planned"] = len(grid) + 1
    for dtype, head, qpk, name in grid:
        if time.time() > stop: break                  # the rest of the grid: the next call (`--only a/sweep`)
        key = f"sweep/{str(dtype).removeprefix('torch.')}/d{head}/qpk{qpk}/{name}"
        attempt(key, sweep_case, 30, dtype, head, qpk, SWEEP_CASES[name])
    attempt("pytest", run_pytest, remaining())


# Kept off the device (its worker segfaults there; bench/gpu_reports/2026-12-04/README.md): the C++
# op's refusals, a failing TORCH_CHECK with a formatted message. Not Python 3.12 nor torch's CUDA
# build: under Python 3.12.1 with torch 2.13.0+cu130 (and 2.11.0+cu130 under 3.11), built by g++ 12.2
# for an AVX2 CPU, every refusal raises as it should. Left: the device's g++ 13.3 and its CPU
# (-march=native there compiles for AVX-512).
OFF_DEVICE = {"refuses_what_it_cannot_read": "the C++ op cpu_layer_attention segfaulted on the device "
              "image when a TORCH_CHECK with a formatted message failed (g++ 13.3 there; not reproduced "
              "with Python 3.12 and torch's cu130 build here): `make test` runs it"}


def run_pytest() -> dict:
    "tests/test_attention.py on this machine, in the time the stage has left."
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_attention.py"]
    if not ARGS.dry_run:
        # not the CPU paths' grids and hypothesis sweeps (`make test` runs them; ~30 s each here)
        # nor the test that crashes the device's worker (OFF_DEVICE)
        cmd += ["-k", "not random_batches and not torch_backend and not cpu_backend_grid and not op_writes"
                + "".join(f" and not {k}" for k in OFF_DEVICE)]
        for k, why in OFF_DEVICE.items(): log(f"pytest: not on the device: {k}: {why}")
        try:
            import xdist  # noqa: F401  -- the device image has pytest-xdist: compile kernels in parallel
            cmd += ["-n", str(min(16, os.cpu_count() or 1))]
        except ImportError: pass
    else:  # the Triton tests a CPU runs, but the sm_90 compile (stage k is that) and the 27-case mixed-batch grid
        cmd += ["-k", "not torch and not sm90 and not mixed_batch"]   # (the sweep's mixed case; `make test` runs it)
    t = time.time()
    off = {} if ARGS.dry_run else OFF_DEVICE
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(10, remaining() - 5))
    except subprocess.TimeoutExpired:
        return {"summary": "pytest timed out", "seconds": round(time.time() - t, 1), "pass": False,
                "off_device": off}
    tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
    return {"rc": p.returncode, "summary": tail[-1] if tail else "", "tail": tail, "off_device": off,
            "pass": p.returncode == 0}


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
    import torch
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
    write_ok = bool(torch.equal(cache, ref_cache))
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
    ok_ = write_ok and finite and err <= tol and float(out[n:].abs().sum()) == 0
    return {"rel_err": err, "tol": tol, "kv_write_equal": write_ok, "finite": finite, "pass": ok_,
            "kernel": kernel_path(len(q_lens), max(q_lens), hkv), "num_seqs": len(q_lens), "kv_heads": hkv,
            "first_call_s": round(first, 3), "second_call_s": second and round(second, 4)}


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
    import triton
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
NUM_LOGPROBS = 5       # vLLM's tests compare greedy outputs with 5 logprobs a token


def stage_b():
    make_tiny_model = helper("make_tiny_model")
    work = Path(ARGS.work) / "stage_b"
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 250) for _ in range(rng.randrange(3, 40 if not ARGS.dry_run else 20))]
               for _ in range(2 if ARGS.dry_run else 6)]
    max_tokens = 3 if ARGS.dry_run else 32
    paths = {arch: make_tiny_model(work / arch, arch) for arch in ARCHS}
    for arch in ARCHS:                                   # exactness first, then bf16 by its criterion
        attempt(f"{arch}/fp32", exactness_fp32, 60, paths[arch], prompts, max_tokens)
    for arch in ARCHS:
        attempt(f"{arch}/bf16", bf16_logprobs_close, 60, paths[arch], prompts, max_tokens)
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


def hf_greedy(path, dtype, prompts, max_tokens, num_logprobs=0) -> list:
    "transformers' greedy tokens per prompt; with `num_logprobs`, (tokens, top-k logprobs per token)."
    import torch
    from transformers import AutoModelForCausalLM
    hf = no_eos(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device()).eval())
    out = []
    with torch.no_grad():
        for p in prompts:
            g = hf.generate(torch.tensor([p], device=device()), max_new_tokens=max_tokens, do_sample=False,
                            output_logits=bool(num_logprobs), return_dict_in_generate=True)
            ids = g.sequences[0, len(p):].tolist()
            if not num_logprobs: out.append(ids); continue
            tops = []
            for logits in g.logits:
                v, i = logits[0].float().log_softmax(-1).topk(num_logprobs)
                tops.append(dict(zip(i.tolist(), v.tolist())))
            out.append((ids, tops))
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


def llm_outputs(llm, prompts, max_tokens, num_logprobs=None) -> list:
    "Greedy outputs: token ids; with `num_logprobs`, (ids, text, [{token: logprob}] per token)."
    from minivllm import SamplingParams
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, logprobs=num_logprobs)
    outs = [o.outputs[0] for o in llm.generate(prompts, sp, use_tqdm=False)]
    if num_logprobs is None: return [o.token_ids for o in outs]
    return [(list(o.token_ids), o.text, [{t: lp.logprob for t, lp in step.items()} for step in o.logprobs])
            for o in outs]


def shutdown(llm):
    llm.engine_core.shutdown()
    del llm
    free_memory()


def exactness_fp32(path, prompts, max_tokens) -> dict:
    ref = hf_greedy(path, "float32", prompts, max_tokens)
    res = {}
    # async scheduling (chapter 14): the runner's device thread, the next step's decode inputs copied
    # on the device, the copies to the host waited for by an event
    for name, graphs, kw in (("eager", False, {}), ("graphs", True, {}),
                             ("graphs_async", True, {"async_scheduling": True})):
        llm = make_llm(path, graphs, dtype="float32", max_num_seqs=8, num_gpu_blocks_override=128, **kw)
        got = llm_outputs(llm, prompts, max_tokens)
        res[name] = {"equal": got == ref, "stats": wrapper_stats(llm), "backend": backend_of(llm.model),
                     "first_mismatch": next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)}
        shutdown(llm)
    res["pass"] = all(r["equal"] for r in res.values()) and (
        ARGS.dry_run or all(res[n]["stats"].get("replay", 0) > 0 for n in ("graphs", "graphs_async")))
    return res


def logprobs_close(ids_0, lps_0, ids_1, lps_1) -> dict:
    """vLLM's check_logprobs_close (its tests/models/utils.py): the greedy tokens are equal, or where
    they first differ each side's token is among the other side's top-k logprobs; after that the
    sequences diverge and nothing more is compared."""
    for i, (a, b) in enumerate(zip(ids_0, ids_1)):
        if a != b: return {"first_difference": i, "close": a in lps_1[i] and b in lps_0[i]}
    return {"first_difference": None, "close": len(ids_0) == len(ids_1)}


def bf16_logprobs_close(path, prompts, max_tokens) -> dict:
    "bf16 LLM (graphs) vs bf16 transformers, top-5 logprobs each: check_logprobs_close per prompt."
    ref = hf_greedy(path, "bfloat16", prompts, max_tokens, NUM_LOGPROBS)
    llm = make_llm(path, True, dtype="bfloat16", max_num_seqs=8, num_gpu_blocks_override=128)
    got = llm_outputs(llm, prompts, max_tokens, NUM_LOGPROBS)
    shutdown(llm)
    per = [logprobs_close(ids, lps, hf_ids, hf_lps) for (ids, _, lps), (hf_ids, hf_lps) in zip(got, ref)]
    diffs = [p["first_difference"] for p in per]
    return {"per_prompt": per, "equal": sum(d is None for d in diffs), "prompts": len(per),
            "match_rate": sum(max_tokens if d is None else d for d in diffs) / (max_tokens * len(per)),
            "pass": all(p["close"] for p in per)}


# ---------------------------------------------------------------- timelines: records kept, drawn from JSON
_TOKEN_LISTS = ("input_token_ids",)     # the tokens computed in a step: their number only (E12 has thousands)


def timeline_json(recorder) -> dict:
    "Every record of a TimelineRecorder as JSON (the pool snapshots and token values left out)."
    StepRecord = helper("StepRecord")
    keep = [f.name for f in fields(StepRecord) if f.name not in ("pool", "source")]
    def step(r): return {**{k: getattr(r, k) for k in keep}, "requests": [request(q) for q in r.requests]}
    def request(q):
        d = {k: v for k, v in vars(q).items() if k not in _TOKEN_LISTS}
        return {**d, **{f"num_{k}": len(getattr(q, k)) for k in _TOKEN_LISTS}}
    return {"device": recorder.device, "settings": recorder.settings, "records": [step(r) for r in recorder]}


def timeline_from_json(data: dict):
    "A TimelineRecorder holding the records of `timeline_json` (what minivllm's plots read)."
    from minivllm import TimelineRecorder
    StepRecord, RequestStep = helper("StepRecord"), helper("RequestStep")
    rec = TimelineRecorder(device=data["device"])
    rec.settings = data["settings"]
    for r in data["records"]:
        step = StepRecord(**{k: v for k, v in r.items() if k != "requests"})
        step.__dict__["requests"] = [RequestStep(**{k: v for k, v in q.items() if not k.startswith("num_")
                                                    or k in {f.name for f in fields(RequestStep)}})
                                     for q in r["requests"]]
        rec.records.append(step)
    return rec


def figure_pixels(fig, dpi=120, width=1440):
    """A figure as RGB pixels at most `width` px wide: 120 dpi keeps minivllm's 9.5 pt text at 16 px;
    a wider figure gets fewer dots an inch (its text stays above 9 px down to 69 dpi)."""
    import matplotlib.pyplot as plt
    def render(d):
        buf = io.BytesIO()
        fig.savefig(buf, dpi=d, bbox_inches="tight", facecolor="white")
        buf.seek(0)
        return plt.imread(buf)[..., :3]
    im = render(dpi)
    if im.shape[1] > width: im = render(dpi * width / im.shape[1] * 0.99)
    plt.close(fig)
    return im


def stack_pixels(images, dest: Path):
    "Figures one under another in one PNG (each as drawn: its text stays legible)."
    import numpy as np
    import matplotlib.image as mpimg
    w = max(im.shape[1] for im in images)
    rows = []
    for im in images:
        pad = np.ones((im.shape[0], w - im.shape[1], 3), dtype=im.dtype)
        rows += [np.concatenate([im, pad], axis=1), np.ones((12, w, 3), dtype=im.dtype)]
    tmp = dest.with_suffix(".tmp.png")
    mpimg.imsave(tmp, np.concatenate(rows))
    tmp.replace(dest)


def example_figures(examples: dict):
    "Each worked example's timeline, in the articles' order, by minivllm's plot_timeline (it names the device)."
    plot_timeline = helper("plot_timeline")
    for name, e in examples.items():
        if e.get("timeline"):
            yield name, plot_timeline(timeline_from_json(e["timeline"]),
                                      title=f"{name} on the real engine")


def draw_examples(examples: dict, dest: Path, each_dir: Path | None = None) -> int:
    "The worked examples' timelines in one figure file (and one file each in `each_dir`); how many."
    images = []
    for name, fig in example_figures(examples):
        images.append(figure_pixels(fig))
        if each_dir:
            import matplotlib.image as mpimg
            each_dir.mkdir(parents=True, exist_ok=True)
            mpimg.imsave(each_dir / f"{re.sub(r'[^A-Za-z0-9]+', '_', name).strip('_')}.png", images[-1])
    if images: stack_pixels(images, dest)
    return len(images)


def examples_command() -> int:
    "Draw a GPU run's worked examples from its results.json: OUT/fig_examples.png and OUT/examples/*.png."
    data = json.loads(Path(ARGS.results).read_text())
    w = data.get("c", {}).get("items", {}).get("worked_examples", {})
    n = draw_examples(w.get("examples", {}), Path(ARGS.out) / "fig_examples.png", Path(ARGS.out) / "examples")
    print(f"{n} timelines drawn into {ARGS.out}")
    return 0 if n == NUM_WORKED_EXAMPLES else 1


# ---------------------------------------------------------------- stage c: worked examples on the engine
NUM_WORKED_EXAMPLES = 15


def stage_c():
    work = Path(ARGS.work) / "stage_c"
    r = attempt("weights", save_random_model, 30, "SmolLM2-135M", work / "model", {"vocab_size": 4096})
    if ok(r): attempt("worked_examples", worked_examples, remaining() - 5, work)


def worked_examples(work: Path) -> dict:
    "Every scheduling example through LLM on this device: its schedule must equal the model-free worker's."
    run = helper("worked_examples_on_engine")
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    # on a CPU, enforce_eager=False is torch.compile, a path the device never takes (it captures graphs)
    results = run(device=device(), full=not ARGS.dry_run, model=str(work / "model"), dtype=dtype,
                  attention_backend="triton", enforce_eager=ARGS.dry_run)
    examples = {name: {"equal": bool(r["equal"]), "difference": r.get("difference"), "steps": r.get("steps"),
                       "seconds": r.get("seconds"), "timeline": timeline_json(r["real"])}
                for name, r in results.items()}
    return {"examples": examples, "num_examples": len(examples),
            "pass": len(examples) == NUM_WORKED_EXAMPLES and all(e["equal"] for e in examples.values())}


# ---------------------------------------------------------------- stage m: memory pressure
def stage_m():
    work = Path(ARGS.work) / "stage_m"
    if ok(attempt("weights", save_random_model, 30, "SmolLM2-135M", work / "model")):
        attempt("pressure", memory_pressure, 120, work / "model")


def shared_prefix_prompts(vocab: int) -> list[list[int]]:
    "Groups of requests sharing a prompt prefix (whole blocks), each with its own suffix."
    rng = random.Random(1)
    groups, per_group, prefix, (lo, hi) = (1, 4, 16, (12, 15)) if ARGS.dry_run else (4, 8, 64, (8, 40))
    out = []
    for _ in range(groups):
        head = [rng.randrange(3, vocab) for _ in range(prefix)]
        out += [head + [rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(per_group)]
    return out


def memory_pressure(path) -> dict:
    """The same prompts with all the KV cache they want, then with a third of it (decodes cross into
    blocks the pool no longer has: preemptions); fp32 greedy tokens equal (fp32: the batches differ
    between the two runs), preemptions > 0, prefix hits > 0."""
    attach_timeline = helper("attach_timeline")
    prompts, bs = shared_prefix_prompts(speed_config("SmolLM2-135M")["vocab_size"]), 16
    max_tokens = 4 if ARGS.dry_run else 48
    longest = max(map(len, prompts)) + max_tokens
    kw = dict(dtype="float32", max_num_seqs=len(prompts), max_model_len=longest)
    need = [-(-(len(p) + max_tokens) // bs) for p in prompts]
    free = make_llm(path, not ARGS.dry_run, num_gpu_blocks_override=sum(need) + 1, **kw)
    ref = llm_outputs(free, prompts, max_tokens)
    shutdown(free)
    blocks = max(-(-longest // bs) + 1, sum(need) // 3)
    tight = make_llm(path, not ARGS.dry_run, num_gpu_blocks_override=blocks, **kw)
    rec = attach_timeline(tight)
    got = llm_outputs(tight, prompts, max_tokens)
    shutdown(tight)
    steps = [q for r in rec for q in r.requests]
    preemptions = sum(len(r.preempted_req_ids) for r in rec)
    hits = sum(q.prefix_hit_tokens or 0 for q in steps if q.kind == "new")
    return {"requests": len(prompts), "blocks": blocks, "blocks_wanted": sum(need), "steps": len(rec),
            "equal": got == ref, "preemptions": preemptions, "prefix_hit_tokens": hits,
            "resumed_hit_tokens": sum(q.prefix_hit_tokens or 0 for q in steps if q.kind == "resumed"),
            "timeline": timeline_json(rec), "pass": got == ref and preemptions > 0 and hits > 0}


# ---------------------------------------------------------------- stage s: serving
SERVE = f"import sys; from {HELPERS['main']} import main; sys.exit(main())"    # `minivllm ...`, uninstalled


def stage_s():
    work = Path(ARGS.work) / "stage_s"
    if ok(attempt("weights", save_random_model, 30, "SmolLM2-135M", work / "model", None, True)):
        attempt("serve", serve_check, 180, work / "model")


def save_word_tokenizer(path: Path, vocab_size: int):
    "A tokenizer for a random model: token i is the word `w<i>` (3 and up), so text round-trips."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"\u2581w{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(dict(
        tokenizer_class="PreTrainedTokenizerFast", unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        model_max_length=1 << 20)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def http_get(url: str, timeout=5.0):
    import httpx
    return httpx.get(url, timeout=timeout)


def metric(text: str, name: str) -> float | None:
    "A Prometheus sample's value (summed over its label sets)."
    vals = [float(m[1]) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    return sum(vals) if vals else None


async def stream_completion(client, url, model, prompt, max_tokens) -> dict:
    "One streaming completion: its text, token ids and top logprobs per token, from the SSE chunks."
    body = dict(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True, ignore_eos=True,
                logprobs=NUM_LOGPROBS, return_tokens_as_token_ids=True)
    text, ids, tops, finish = "", [], [], None
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        if r.status_code != 200: raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]": continue
            choice = json.loads(line[6:])["choices"][0]
            text += choice.get("text") or ""
            lp = choice.get("logprobs") or {}
            ids += [int(t.removeprefix("token_id:")) for t in lp.get("tokens", [])]
            tops += [{int(t.removeprefix("token_id:")): v for t, v in top.items()}
                     for top in lp.get("top_logprobs", [])]
            finish = choice.get("finish_reason") or finish
    return {"text": text, "ids": ids, "tops": tops, "finish_reason": finish}


async def clients(url, model, prompts, max_tokens) -> list:
    import httpx
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=httpx.Limits(max_connections=256)) as c:
        return await asyncio.gather(*(stream_completion(c, url, model, p, max_tokens) for p in prompts))


def serve_check(path) -> dict:
    """`minivllm serve` on this device: concurrent streaming clients, each answer against LLM.generate's
    (check_logprobs_close: bf16 batches differ between the two runs), /metrics, nothing in flight after."""
    n, max_tokens, (lo, hi) = (4, 4, (3, 8)) if ARGS.dry_run else (64, 48, (8, 40))
    vocab = speed_config("SmolLM2-135M")["vocab_size"]
    rng = random.Random(2)
    prompts = [" ".join(f"w{rng.randrange(3, vocab)}" for _ in range(rng.randint(lo, hi))) for _ in range(n)]
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    engine = dict(dtype=dtype, max_num_seqs=n, max_model_len=512, block_size=16, attention_backend="triton")
    # a CPU interprets the kernels, which copy the whole KV cache each call: a small one there
    memory = {"num_gpu_blocks_override": 64} if ARGS.dry_run else {"gpu_memory_utilization": 0.3}
    llm = make_llm(path, not ARGS.dry_run, **engine, **memory)
    ref = llm_outputs(llm, prompts, max_tokens, NUM_LOGPROBS)
    shutdown(llm)
    port = free_port()
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in {**engine, **memory}.items()]
    cmd = [sys.executable, "-c", SERVE, "serve", str(path), "--host", "127.0.0.1", f"--port={port}",
           f"--device={device()}", *flags, *(["--enforce-eager"] if ARGS.dry_run else [])]
    log_path = Path(ARGS.work) / "stage_s_server.log"
    url, t0 = f"http://127.0.0.1:{port}", time.time()
    with open(log_path, "w") as server_log:
        server = subprocess.Popen(cmd, cwd=ROOT, stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                if server.poll() is not None: raise RuntimeError(f"the server exited {server.returncode}: "
                                                                 + log_path.read_text()[-1500:])
                try:
                    if http_get(f"{url}/health").status_code == 200: break
                except Exception: time.sleep(0.5)   # noqa: BLE001 -- not listening yet
            startup = time.time() - t0
            t = time.time()
            got = asyncio.run(clients(url, path.name, prompts, max_tokens))
            serve_s = time.time() - t
            for _ in range(40):                    # the stats follow the last step: wait for them
                text = http_get(f"{url}/metrics").text
                if metric(text, "vllm:num_requests_running") == 0 and metric(text, "vllm:num_requests_waiting") == 0:
                    break
                time.sleep(0.25)
        finally:
            server.send_signal(signal.SIGTERM)             # uvicorn shuts down gracefully
            try: server.wait(30)
            except subprocess.TimeoutExpired: os.killpg(server.pid, signal.SIGKILL); server.wait()
    per = [logprobs_close(g["ids"], g["tops"], ids, lps) for g, (ids, _, lps) in zip(got, ref)]
    complete = [len(g["ids"]) == max_tokens and g["finish_reason"] == "length" for g in got]
    in_flight = (metric(text, "vllm:num_requests_running"), metric(text, "vllm:num_requests_waiting"))
    generated = metric(text, "vllm:generation_tokens_total") or metric(text, "vllm:generation_tokens")
    return {"clients": n, "max_tokens": max_tokens, "dtype": dtype, "startup_s": round(startup, 1),
            "serve_s": round(serve_s, 2), "complete": sum(complete),
            "text_equal": sum(g["text"] == text_ for g, (_, text_, _) in zip(got, ref)),
            "tokens_equal": sum(g["ids"] == ids for g, (ids, _, _) in zip(got, ref)),
            "logprobs_close": sum(p["close"] for p in per), "in_flight_after": in_flight,
            "generation_tokens_metric": generated, "server_exit": server.returncode,
            "pass": all(complete) and all(p["close"] for p in per) and in_flight == (0, 0)
                    and generated == n * max_tokens}


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

# nano-vllm's published throughputs for this workload (output tokens / s): (engine, GPU, tok/s, source)
PUBLISHED = [
    ("vLLM", "A800", 8588, "quoted in issue 53 (publication not located)"),
    ("vLLM", "A100-80GB PCIe", 9530, "quoted in issue 53 (publication not located)"),
    ("nano-vllm-triton", "A800", 10009, "quoted in issue 53 (publication not located)"),
    ("vLLM", "RTX 4070 Laptop", 1361.84, "nano-vllm's README, Benchmark"),
    ("Nano-vLLM", "RTX 4070 Laptop", 1434.13, "nano-vllm's README, Benchmark"),
]
NANO_VLLM_OUTPUT_TOKENS = 133_966   # nano-vllm's README: the workload's output tokens, both engines


def nano_vllm_workload(num_seqs=256, max_input_len=1024, max_output_len=1024, max_id=10000, lo=100):
    """nano-vllm's bench.py, call for call: `seed(0)`, then every prompt (`randint(lo, max_input_len)`
    ids, each `randint(0, max_id)`), then every request's `randint(lo, max_output_len)` max_tokens."""
    rng = random.Random(0)       # what `random.seed(0)` makes the module-level randint draw from
    prompts = [[rng.randint(0, max_id) for _ in range(rng.randint(lo, max_input_len))] for _ in range(num_seqs)]
    return prompts, [rng.randint(lo, max_output_len) for _ in range(num_seqs)]


def workload():
    "The benchmark workload: nano-vllm's exactly on the device; the same calls at toy size on a CPU."
    if ARGS.dry_run: return nano_vllm_workload(4, 12, 12, 250, 4)
    return nano_vllm_workload()


def stage_d():
    bw = PLAN.get("bytes_per_s") or copy_bandwidth()["bytes_per_s"]     # the plan measured it
    RESULTS["bandwidth"] = {"bytes_per_s": bw, "tb_per_s": round(bw / 1e12, 3)}
    prompts, outs = workload()
    RESULTS["workload"] = {"num_seqs": len(prompts), "input_tokens": sum(map(len, prompts)),
                           "output_tokens": sum(outs), "max_input": max(map(len, prompts)), "max_output": max(outs)}
    work = Path(ARGS.work) / "stage_d"
    paths = {}
    for name in MODELS:
        if any(wanted(f"{name}/{k}") for k in ("step_times", "minivllm_graphs", *REFERENCE_ENGINES)):
            if ok(attempt(f"{name}/weights", save_random_model, 60, name, work / name)): paths[name] = work / name
    for name in paths: attempt(f"{name}/step_times", step_times, 90, name, paths[name], bw)
    # the throughput runs, ours first; the references (transformers, eager) with what the plan left them
    runs = [(m, e) for e in ("minivllm_graphs", *REFERENCE_ENGINES) for m in MODELS]
    if ARGS.dry_run: runs = [r for r in runs if r[0] == "SmolLM2-135M" or r[1] == "minivllm_graphs"]
    for name, engine in runs:
        if name in paths:
            attempt(f"{name}/{engine}", throughput, 60, engine, name, paths[name], prompts, outs, bw)


def copy_bandwidth() -> dict:
    "Device-to-device copy bandwidth, counting bytes read and written (median of 10)."
    import torch
    dry = ARGS.dry_run or not torch.cuda.is_available()
    n = (64 << 20) if dry else (4 << 30)
    dev = "cpu" if dry else "cuda"
    a = torch.empty(n // 2, dtype=torch.float16, device=dev).normal_()
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


def save_random_model(name, path, overrides=None, tokenizer=False) -> dict:
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
    if tokenizer: save_word_tokenizer(Path(path), config.vocab_size)
    n = sum(p.numel() for p in hf.parameters())
    del hf
    return {"params": n, "dtype": str(dtype)}


def kv_bytes_per_token(c, dtype_bytes=2) -> int:
    return c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * c["head_dim"] * dtype_bytes


def step_times(name, path, bandwidth) -> dict:
    """One decode step at batch 1 and 256 (1,000-token contexts): eager wall time, graph replay, HBM
    roofline; and torch.profiler's breakdown of one replay of the largest batch."""
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
            if b == max(batches): res["profile"] = profile_step(lambda: wrapper(ids, positions, md),
                                                                lambda: model(ids, positions, md))
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


KERNEL_CATEGORIES = [   # (category, name fragments): the first that matches a kernel's name
    ("attention", ("unified_attention", "split_kv", "reduce_segments", "attention")),
    ("KV write", ("reshape_and_cache",)),
    ("GEMM", ("gemm", "nvjet", "cutlass", "xmma", "matmul", "aten::mm", "aten::addmm", "aten::linear", "sm90")),
    ("norm", ("norm",)), ("activation", ("silu", "act_and_mul", "gelu")), ("RoPE", ("rotary", "rope")),
    ("embedding", ("embedding", "index_select")),
]


def kernel_category(name: str) -> str:
    low = name.lower()
    return next((cat for cat, frags in KERNEL_CATEGORIES if any(f in low for f in frags)), "other")


def profile_step(replay, eager) -> dict:
    """torch.profiler's view of one decode step: its kernels by category (time, count), the longest
    ones; on a CPU the eager step's operators (nothing is replayed there)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    gpu = not ARGS.dry_run
    fn, what = (replay, "one CUDA-graph replay") if gpu else (eager, "one eager step's operators (CPU)")
    for attempt_ in range(2):
        with profile(activities=[ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]) as prof:
            fn(); sync()
        evts = [e for e in prof.key_averages() if (not gpu or device_us(e) > 0)]
        if not gpu: evts = [e for e in evts if e.key.startswith("aten::") and e.self_cpu_time_total > 0]
        if len(evts) >= 10 or not gpu: break
        fn, what = eager, "one eager step (the replay's kernels were not traced)"
    rows = sorted(((e.key, e.count, device_us(e) if gpu else e.self_cpu_time_total) for e in evts),
                  key=lambda r: -r[2])
    cats: dict = {}
    for name, count, us in rows:
        c = cats.setdefault(kernel_category(name), {"us": 0.0, "count": 0})
        c["us"] += us; c["count"] += count
    return {"what": what, "kernels": sum(r[1] for r in rows), "total_us": sum(r[2] for r in rows),
            "categories": dict(sorted(cats.items(), key=lambda kv: -kv[1]["us"])),
            "top": [{"name": n[:90], "count": c, "us": round(u, 1)} for n, c, u in rows[:12]]}


def device_us(evt) -> float:
    "A profiler event's own device time in microseconds (torch renamed cuda -> device)."
    return getattr(evt, "self_device_time_total", None) or getattr(evt, "self_cuda_time_total", 0) or 0


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


def throughput(engine, name, path, prompts, outs, bandwidth) -> dict:
    if engine.startswith("minivllm"):
        return minivllm_throughput(engine == "minivllm_graphs", name, path, prompts, outs, bandwidth)
    if engine == "hf_generate_batch": return hf_continuous_batching(path, prompts, outs)
    return hf_padded_generate(path, prompts, outs)


def minivllm_throughput(graphs, name, path, prompts, outs, bandwidth) -> dict:
    """Output tokens/s of LLM.generate on nano-vllm's workload (its sampling: temperature 0.6,
    ignore_eos); host time in schedule/update; the whole run's HBM roofline: each step reads the
    weights (LM head included: logits are computed) and every scheduled request's live KV."""
    from minivllm import SamplingParams
    dtype = "float32" if ARGS.dry_run else "bfloat16"
    t0 = time.time()
    # bench.py's max_model_len; the dry run's fits its toy lengths (the interpreter pays for every slot)
    max_len = max(map(len, prompts)) + max(outs) if ARGS.dry_run else 4096
    llm = make_llm(path, graphs, dtype=dtype, max_num_seqs=len(prompts), max_model_len=max_len,
                   **({"num_gpu_blocks_override": 64} if ARGS.dry_run else {}))
    startup = time.time() - t0
    llm.generate([[1, 2, 3]], SamplingParams(), use_tqdm=False)       # bench.py's warm-up request
    c, core = speed_config(name), llm.engine_core
    kv_token = kv_bytes_per_token(c, 4 if ARGS.dry_run else 2)
    weights = forward_weight_bytes(llm.model, c["vocab_size"]) + c["vocab_size"] * c["hidden_size"] * (
        4 if ARGS.dry_run else 2)
    timers = {"schedule_update_s": 0.0, "execute_model_s": 0.0, "steps": 0, "decode_steps": 0, "roofline_bytes": 0}
    sched_schedule, sched_update, execute = core.scheduler.schedule, core.scheduler.update_from_output, \
        core.model_executor.execute_model
    def timed(fn, key, count=False):
        def wrapper(*a, **k):
            t = time.perf_counter(); out = fn(*a, **k); timers[key] += time.perf_counter() - t
            if count:
                so = a[0]
                timers["steps"] += 1
                if so.total_num_scheduled_tokens == len(so.num_scheduled_tokens): timers["decode_steps"] += 1
                timers["roofline_bytes"] += weights + kv_token * live_tokens(so)
            return out
        return wrapper
    core.scheduler.schedule = timed(sched_schedule, "schedule_update_s")
    core.scheduler.update_from_output = timed(sched_update, "schedule_update_s")
    core.model_executor.execute_model = timed(execute, "execute_model_s", count=True)
    params = [SamplingParams(temperature=0.6, max_tokens=o, ignore_eos=True) for o in outs]
    global RUN_T0
    RUN_T0 = time.time()
    t = time.perf_counter()
    res = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t
    produced = sum(len(o.outputs[0].token_ids) for o in res)
    stats, backend = wrapper_stats(llm), backend_of(llm.model)
    shutdown(llm)
    roofline_s = timers["roofline_bytes"] / bandwidth
    return {"run_s": elapsed, "output_tokens": produced, "tok_per_s": produced / elapsed,
            "startup_s": startup, "wrapper_stats": stats, "backend": backend, **timers,
            "host_share": timers["schedule_update_s"] / elapsed, "roofline_s": roofline_s,
            "run_over_roofline": elapsed / roofline_s, "pass": produced == sum(outs)}


def live_tokens(so) -> int:
    "Tokens whose KV a step reads: every scheduled request's computed tokens plus its new ones."
    cached = so.scheduled_cached_reqs
    return (so.total_num_scheduled_tokens + sum(r.num_computed_tokens for r in so.scheduled_new_reqs)
            + sum(cached.num_computed_tokens))


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
FIGURES = {"a": "fig_kernels.png", "d": "fig_speed.png", "c": "fig_examples.png", "m": "fig_pressure.png"}


def load(work: Path) -> dict:
    "This call's results (plan, stages, each stage's JSON), merged over the carried results.json."
    data = {"plan": load_plan(work)}
    for s in ORDER:
        f = work / f"{s}.json"
        if f.exists():
            try: data[s] = json.loads(f.read_text())
            except json.JSONDecodeError as e: data[s] = {"error": f"unreadable: {e}"}
    stages = work / "stages.tsv"
    call = data["plan"].get("call", "")
    data["stages"] = [line.split("\t") + [call] for line in stages.read_text().splitlines()] if stages.exists() else []
    carried = data["plan"].get("merge")
    return merge(json.loads(Path(carried).read_text()), data) if carried else data


def merge(old: dict, new: dict) -> dict:
    "A rerun's results over the carried ones: its items replace theirs, the others stay."
    out = {**old, "plan": new["plan"], "plans_before": old.get("plans_before", []) + [old.get("plan")],
           "stages": old.get("stages", []) + new["stages"]}
    for s in ORDER:
        if s in new:
            items = {**old.get(s, {}).get("items", {}), **new[s].get("items", {})}
            out[s] = {**old.get(s, {}), **{k: v for k, v in new[s].items() if k != "items"}, "items": items}
    return out


def failures(results: dict) -> list[str]:
    "Why a stage fails: items that erred, did not pass or did not run; reference rows never fail."
    out = [f"{k}: {results[k]}" for k in ("skipped", "interrupted", "error") if results.get(k)]
    for key, v in results.get("items", {}).items():
        if is_reference(key): continue
        status = str(v.get("status", ""))
        if status != "ok": out.append(f"{key}: {status[:200]}")
        elif v.get("pass") is False: out.append(f"{key}: did not pass")
    return out


def required(plan: dict) -> list[str]:
    "The items a call must have measured: every planned one but the elastic and reference ones."
    keys = [i.key for i in ITEMS if not i.want and not i.reference and selected(i.key, plan.get("only"))]
    return [k for k in keys if k in plan.get("items", {}) or (plan.get("dry_run") and k[0] in plan["stages"])]


def all_failures(data: dict) -> list[str]:
    "Every stage's failures, and the required items of the stages this call ran that never reported."
    ran = {row[0] for row in data.get("stages", []) if row[-1] == data["plan"].get("call")}
    out = [f"{s}/{f}" for s in ORDER for f in failures(data.get(s, {}))]
    for key in required(data["plan"]):
        s, rest = key.split("/", 1)
        if s in ran and rest not in data.get(s, {}).get("items", {}):
            out.append(f"{key}: not run (its stage stopped before it)")
    return out


def fmt(x, nd=2):
    if x is None: return "n/a"
    if isinstance(x, float): return f"{x:.{nd}g}" if abs(x) < 1e-2 else f"{x:,.{nd}f}"
    return str(x)


def verdict(ok_) -> str:
    return "n/a" if ok_ is None else ("PASS" if ok_ else "FAIL")


def item_verdict(v: dict) -> str:
    "A correctness item: not run when absent; FAIL when it erred, timed out or did not run to its end."
    if not v: return "not run"
    return verdict(v.get("pass")) if v.get("status") == "ok" else "FAIL"


def measured(v: dict, text: str) -> str:
    return text if v.get("status") == "ok" else v.get("status", "not run")[:70]


def correctness(data) -> list[tuple[str, str, str]]:
    "The report's first table: (check, measured, verdict); a check with nothing measured is 'not run'."
    rows = []
    def items(s): return data.get(s, {}).get("items", {})
    a, b = items("a"), items("b")
    for dt in ("bfloat16", "float16", "float32"):
        cases = {k: v for k, v in a.items() if k.startswith(f"sweep/{dt}/")}
        worst = max((v["rel_err"] / v["tol"] for v in cases.values() if "rel_err" in v), default=None)
        good = sum(1 for v in cases.values() if v.get("pass") and v.get("status") == "ok")
        rows.append((f"a: Triton kernels within the {dt} tolerance ({TOL[dt]:g} rel. L2) vs the fp32 reference",
                     f"{good}/{len(cases)} cases, worst {fmt(worst)} x tol" if cases else "not run",
                     verdict(good == len(cases)) if cases else "not run"))
    q = a.get("sweep/bfloat16/d128/qpk2/qwen3_decode64", {})
    rows.append(("a: Qwen3 decode (bf16, head 128, 64 seqs: the unified kernel) vs the reference",
                 measured(q, f"{q.get('kernel', '')} kernel, rel. err {fmt(q.get('rel_err'))}"), item_verdict(q)))
    i64 = a.get("int64_cache", {})
    rows.append(("a: KV cache over 2^31 elements (int64 offsets)", measured(i64, f"rel. err {fmt(i64.get('rel_err'))}"),
                 item_verdict(i64)))
    pt = a.get("pytest", {})
    off = "; kept off the device: " + ", ".join(pt["off_device"]) if pt.get("off_device") else ""
    rows.append(("a: pytest tests/test_attention.py", measured(pt, pt.get("summary", "")[:80] + off), item_verdict(pt)))
    for arch in ARCHS:
        f = b.get(f"{arch}/fp32", {})
        for mode in ("eager", "graphs", "graphs_async"):
            m = f.get(mode, {})
            rows.append((f"b: {arch} fp32 greedy tokens == transformers ({mode})",
                         str(m.get("equal", f.get("status", "not run")))[:60],
                         verdict(m.get("equal")) if m else ("FAIL" if f else "not run")))
        g = f.get("graphs", {}).get("stats", {})
        if not data["plan"].get("dry_run"):
            rows.append((f"b: {arch} CUDA graphs replayed", f"{g.get('replay', 0)} replays" if f else "not run",
                         verdict(g.get("replay", 0) > 0) if f else "not run"))
        h = b.get(f"{arch}/bf16", {})
        rows.append((f"b: {arch} bf16 vs transformers bf16, vLLM's check_logprobs_close (top-{NUM_LOGPROBS})",
                     measured(h, f"{h.get('equal')}/{h.get('prompts')} equal, "
                                 f"{sum(p['close'] for p in h.get('per_prompt', []))}/{h.get('prompts')} close"),
                     item_verdict(h)))
    kv = b.get("kv_cache_profile", {})
    rows.append(("b: KV-cache profiling (profile_kv_cache_memory) on the Triton backend",
                 measured(kv, f"{fmt(kv.get('kv_budget_bytes', 0) / 2**30, 3)} GiB for the KV cache"),
                 item_verdict(kv)))
    w = items("c").get("worked_examples", {})
    ex = w.get("examples", {})
    rows.append((f"c: the {NUM_WORKED_EXAMPLES} worked examples' schedules on the engine == the model-free worker's",
                 measured(w, f"{sum(e['equal'] for e in ex.values())}/{len(ex)} equal, "
                             f"{sum(bool(e.get('timeline')) for e in ex.values())} timelines kept"), item_verdict(w)))
    m = items("m").get("pressure", {})
    rows.append(("m: memory pressure: tokens == the unconstrained run, preemptions > 0, prefix hits > 0",
                 measured(m, f"{m.get('blocks')} of {m.get('blocks_wanted')} blocks: equal {m.get('equal')}, "
                             f"{m.get('preemptions')} preemptions, {m.get('prefix_hit_tokens')} prefix-hit tokens"),
                 item_verdict(m)))
    sv = items("s").get("serve", {})
    rows.append(("s: minivllm serve: streamed greedy answers close to LLM.generate's, /metrics, none in flight after",
                 measured(sv, f"{sv.get('clients')} clients: {sv.get('complete')} complete, {sv.get('logprobs_close')} "
                              f"close ({sv.get('text_equal')} text-equal), in flight after "
                              f"{sv.get('in_flight_after')}, generation tokens "
                              f"{fmt(sv.get('generation_tokens_metric'))}"),
                 item_verdict(sv)))
    k = items("k")
    if k:
        bad = [n for n, v in k.items() if not v.get("pass")]
        tv = next((v.get("triton") for v in k.values() if v.get("triton")), "?")
        rows.append((f"k: every kernel configuration compiles for sm_90 with Triton {tv}, 0 bytes spilled",
                     f"{len(k) - len(bad)}/{len(k)} clean" + (f"; failing: {', '.join(bad)[:200]}" if bad else ""),
                     verdict(not bad)))
    return rows


ROOFLINE_GOAL = 1.3      # the batch-256 decode step, over the bytes a forward reads at copy bandwidth


def goals(data) -> list[tuple[str, str, str]]:
    "The speed goals: (goal, measured, verdict); no verdict on a CPU's toy sizes."
    dry = data.get("plan", {}).get("dry_run")
    return [(g, m, "n/a (dry run)" if dry and v in ("PASS", "FAIL") else v) for g, m, v in speed_goals(data)]


def speed_goals(data) -> list[tuple[str, str, str]]:
    out = []
    d = data.get("d", {})
    items = d.get("items", {})
    for name in SPEED_CONFIGS:
        st = items.get(f"{name}/step_times", {})
        ratio = st.get("batch1", {}).get("eager_over_graph")
        out.append((f"{name}: graphs >= 3x eager, batch-1 decode step", fmt(ratio),
                    verdict(None if ratio is None else ratio >= 3)))
        g, h = items.get(f"{name}/minivllm_graphs", {}), items.get(f"{name}/hf_generate_batch", {})
        goal = f"{name}: >= 5x transformers generate_batch throughput (a reference: a bound when cut off)"
        ours = g.get("tok_per_s") if g.get("status") == "ok" else None
        if ours and h.get("status") == "ok" and h.get("tok_per_s"):
            r = ours / h["tok_per_s"]
            out.append((goal, fmt(r), verdict(r >= 5)))
        elif ours and str(h.get("status", "")).startswith("timeout") and h.get("measured_s") and d.get("workload"):
            # transformers did not finish the workload in measured_s: its rate < all tokens / measured_s
            bound = ours / (d["workload"]["output_tokens"] / h["measured_s"])
            out.append((goal, f">= {fmt(bound)} (transformers cut off)", "PASS" if bound >= 5 else "n/a (bound < 5)"))
        else:
            out.append((goal, h.get("status", "not run")[:60], "n/a"))
        b256 = st.get("batch256", {}).get("graph_over_roofline")
        out.append((f"{name}: batch-256 decode step within {ROOFLINE_GOAL}x of the HBM roofline (bytes a forward "
                    f"reads)", fmt(b256), verdict(None if b256 is None else b256 <= ROOFLINE_GOAL)))
    return out


def time_plan(data) -> list[str]:
    "This call's plan (and the H100 and H200 plans) against what each stage took."
    plan = data["plan"]
    shown = {**plan.get("plans", {}), **({f"this {plan['kind']}": plan} if "total_s" in plan else {})}
    L = [f"GPU: {plan.get('gpu')} ({plan.get('kind')}), copy bandwidth {plan.get('tb_per_s')} TB/s; "
         f"{plan.get('call')} call" + (f", only {' '.join(plan['only'])}" if plan.get("only") else "") + ".", ""]
    L += plan_table(shown) if shown else []
    L += ["", "| stage | exit | seconds | limit s | call |", "|---|---|---|---|---|"]
    L += [f"| {r[0]} | {r[1]} | {r[2]} | {plan.get('stages', {}).get(r[0], '') if r[-1] == plan.get('call') else ''}"
          f" | {r[-1]} |" for r in data.get("stages", []) if len(r) >= 4]
    k = data.get("k", {}).get("items", {})
    if k:
        per = {}
        for name, v in k.items():
            if "compile_s" in v: per.setdefault(name.split("/")[-1], []).append(v["compile_s"])
        L += ["", "Compile time per kernel for sm_90 (stage k, this machine): " +
              ", ".join(f"{kind} {sum(t) / len(t):.2f} s (max {max(t):.2f}, n={len(t)})" for kind, t in per.items())
              + f"; all {len(k)}: {sum(sum(t) for t in per.values()):.0f} s."]
    a = data.get("a", {}).get("items", {})
    first = [v["first_call_s"] - (v.get("second_call_s") or 0) for v in a.values() if "first_call_s" in v]
    if first:
        what = "first calls (interpreted)" if plan.get("dry_run") else "first call minus second (compile)"
        L += ["", f"Stage a: {len(first)} sweep cases, {what} {sum(first):.1f} s in all, "
              f"max {max(first):.2f} s; {data.get('a', {}).get('sweep_planned', '?')} in the grid."]
    return L


def speed_sections(data) -> list[str]:
    d = data.get("d", {})
    items = d.get("items", {})
    bw = d.get("bandwidth", {})
    wl = d.get("workload", {})
    L = ["## d. Speed", "", f"Copy bandwidth: {fmt(bw.get('tb_per_s'), 3)} TB/s (read + write). Workload: "
         f"nano-vllm's bench.py (seed 0, its randint calls): {wl}.", "",
         "| model | batch | eager ms | graph ms | roofline ms | graph / roofline | eager / graph |",
         "|---|---|---|---|---|---|---|"]
    for name in SPEED_CONFIGS:
        for k, v in items.get(f"{name}/step_times", {}).items():
            if k.startswith("batch"):
                L.append(f"| {name} | {k[5:]} | {fmt(v['eager_ms'])} | {fmt(v['graph_ms'])} | "
                         f"{fmt(v['roofline_ms'])} | {fmt(v['graph_over_roofline'])} | {fmt(v['eager_over_graph'])} |")
    for name in SPEED_CONFIGS:
        p = items.get(f"{name}/step_times", {}).get("profile")
        if not p: continue
        L += ["", f"torch.profiler, {name}, {p['what']}: {p['kernels']} kernels, {fmt(p['total_us'] / 1e3)} ms.", "",
              "| category | ms | share | kernels |", "|---|---|---|---|"]
        L += [f"| {c} | {fmt(v['us'] / 1e3)} | {v['us'] / max(p['total_us'], 1e-9):.0%} | {v['count']} |"
              for c, v in p["categories"].items()]
        L += ["", "| longest kernels | calls | us |", "|---|---|---|"]
        L += [f"| `{t['name']}` | {t['count']} | {fmt(t['us'])} |" for t in p["top"][:8]]
    L += ["", "| model | engine | status | output tok/s | seconds | run / HBM roofline | host share | steps |",
          "|---|---|---|---|---|---|---|---|"]
    for k, v in items.items():
        m, _, e = k.partition("/")
        if e in ("minivllm_graphs", *REFERENCE_ENGINES):
            tps = fmt(v.get("tok_per_s"), 0)
            if str(v.get("status", "")).startswith("timeout") and wl and v.get("measured_s"):
                tps = f"< {wl['output_tokens'] / v['measured_s']:,.0f}"   # unfinished after that
            L.append(f"| {m} | {e}{' (reference)' if is_reference(k) else ''} | {v.get('status', '')[:50]} | {tps} | "
                     f"{fmt(v.get('run_s'))} | {fmt(v.get('run_over_roofline'))} | {fmt(v.get('host_share'))} | "
                     f"{v.get('steps', '')} |")
    gpu = data.get("d", {}).get("env", {}).get("gpu", "this machine's CPU (dry run)")
    qwen = items.get("Qwen3-0.6B/minivllm_graphs", {})
    L += ["", f"Qwen3-0.6B on nano-vllm's workload ({NANO_VLLM_OUTPUT_TOKENS:,} output tokens on a GPU), output "
          "tokens/s beside the published figures:", "", "| engine | GPU | output tok/s | source |", "|---|---|---|---|",
          f"| minivllm (graphs) | {gpu} | {fmt(qwen.get('tok_per_s'), 0) if ok(qwen) else 'not run'} | this run |"]
    L += [f"| {e} | {g} | {t:,.0f} | {src} |" for e, g, t, src in PUBLISHED]
    return L


def write_report(work: Path, out: Path, figures=()) -> list[str]:
    "report.md and results.json (and the figures of `figures`' stages) into `out`, each written whole."
    data = load(work)
    dry = bool(data["plan"].get("dry_run") or (ARGS and ARGS.dry_run))
    data["plan"].setdefault("dry_run", dry)
    data["failures"] = fails = all_failures(data)
    out.mkdir(parents=True, exist_ok=True)
    env = next((data[s]["env"] for s in ORDER[::-1] if data.get(s, {}).get("env")), {})   # k compiles: last
    L = [f"# minivllm GPU check{' (dry run on CPU)' if dry else ''}", "",
         f"Commit `{git_commit()}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
         f"Environment: {', '.join(f'{k} {v}' for k, v in env.items())}.", "",
         "## Correctness", "", "| check | measured | verdict |", "|---|---|---|"]
    L += [f"| {g} | {m} | {v} |" for g, m, v in correctness(data)]
    L += ["", "## Speed goals", "", "| goal | measured | verdict |", "|---|---|---|"]
    L += [f"| {g} | {m} | {v} |" for g, m, v in goals(data)]
    L += ["", "## Plan and stages", ""] + time_plan(data)
    L += ["", "Failures: " + ("; ".join(fails)[:3000] if fails else "none")]
    L += ["", "## a. Native Triton", "", "| case | status | rel. error | tolerance | pass |", "|---|---|---|---|---|"]
    for k, v in data.get("a", {}).get("items", {}).items():
        if k.startswith(("sweep", "int64")):
            L.append(f"| {k} | {v.get('status', '')[:60]} | {fmt(v.get('rel_err'))} | {fmt(v.get('tol'))} | "
                     f"{v.get('pass', '')} |")
    pt = data.get("a", {}).get("items", {}).get("pytest", {})
    L += ["", f"pytest: `{pt.get('summary', pt.get('status', 'not run'))}`"]
    L += [f"- kept off the device: `{k}`: {why}" for k, why in pt.get("off_device", {}).items()]
    b = data.get("b", {}).get("items", {})
    L += ["", "## b. Against transformers (greedy)", "",
          "| model | eager == HF | graphs == HF | graphs + async == HF | wrapper steps | bf16: first difference "
          "per prompt (close?) |", "|---|---|---|---|---|---|"]
    for arch in ARCHS:
        f, h = b.get(f"{arch}/fp32", {}), b.get(f"{arch}/bf16", {})
        diffs = ", ".join(f"{p['first_difference']} ({'yes' if p['close'] else 'NO'})" for p in h.get("per_prompt", []))
        L.append(f"| {arch} | {f.get('eager', {}).get('equal', f.get('status', ''))} | "
                 f"{f.get('graphs', {}).get('equal', '')} | {f.get('graphs_async', {}).get('equal', '')} | "
                 f"{f.get('graphs', {}).get('stats', '')} | {diffs or h.get('status', 'not run')} |")
    L += ["", "bf16 criterion: vLLM's `check_logprobs_close` (its tests/models/utils.py): greedy tokens equal, or "
          f"at the first difference each side's token among the other's top-{NUM_LOGPROBS} logprobs (None: all equal)."]
    c = data.get("c", {}).get("items", {})
    L += ["", "## c. Worked examples on the engine", ""]
    for k, v in c.items():
        L.append(f"- {k}: {v.get('status')}")
        L += [f"  - {n}: {'same schedule' if e['equal'] else 'DIFFERENT: ' + str(e.get('difference'))[:300]}"
              f" ({e.get('steps')} steps)" for n, e in v.get("examples", {}).items()]
    m = data.get("m", {}).get("items", {}).get("pressure", {})
    sv = data.get("s", {}).get("items", {}).get("serve", {})
    L += ["", "## m. Memory pressure", "", f"{m.get('status', 'not run')}: {m.get('requests')} requests in groups "
          f"sharing prompt prefixes, {m.get('blocks')} KV blocks of the {m.get('blocks_wanted')} they want; "
          f"{m.get('steps')} steps, {m.get('preemptions')} preemptions, {m.get('prefix_hit_tokens')} prefix-hit "
          f"tokens of new requests ({m.get('resumed_hit_tokens')} of resumed ones); tokens equal to the "
          f"unconstrained run: {m.get('equal')}.",
          "", "## s. Serving", "", f"{sv.get('status', 'not run')}: `minivllm serve` ({sv.get('dtype')}, started in "
          f"{sv.get('startup_s')} s), {sv.get('clients')} concurrent streaming clients of {sv.get('max_tokens')} "
          f"tokens in {sv.get('serve_s')} s: {sv.get('complete')} complete, {sv.get('tokens_equal')} token-equal and "
          f"{sv.get('text_equal')} text-equal to LLM.generate, {sv.get('logprobs_close')} close by "
          f"check_logprobs_close; /metrics after: running, waiting = {sv.get('in_flight_after')}, generation "
          f"tokens {fmt(sv.get('generation_tokens_metric'))}; server exit {sv.get('server_exit')}.", ""]
    L += speed_sections(data)
    if figures:
        try: draw_figures(data, out, figures)
        except Exception:   # noqa: BLE001 -- a figure must not cost the evidence: said in the report
            L += ["", "Figures failed:", "```", traceback.format_exc()[-1500:], "```"]
    L += ["", "## Figures", ""] + [f"![{f}]({f})" for f in FIGURES.values() if (out / f).exists()]
    errors = [(s, k, v.get("traceback") or v.get("status")) for s in ORDER
              for k, v in data.get(s, {}).get("items", {}).items() if str(v.get("status", "")).startswith("error")]
    errors += [(s, "the stage itself", data[s]["traceback"]) for s in ORDER if data.get(s, {}).get("traceback")]
    if errors: L += ["", "## Errors", ""] + [f"### {s}: {k}\n```\n{t}\n```" for s, k, t in errors]
    for name, text in (("report.md", "\n".join(L) + "\n"), ("results.json", json.dumps(data, indent=1, default=str))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text); tmp.replace(out / name)
    return fails


def draw_figures(data, out: Path, stages: str):
    "One figure file per topic (FIGURES), for these stages: kernels, speed, worked examples, memory pressure."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    def save_fig(fig, name):
        tmp = out / f".{name}"
        fig.tight_layout(); fig.savefig(tmp, dpi=110, format="png"); plt.close(fig)
        tmp.replace(out / name)
    a = data.get("a", {}).get("items", {})
    pts = [(k.split("/")[1], v["rel_err"] / v["tol"]) for k, v in a.items() if k.startswith("sweep/") and "rel_err" in v]
    if pts and "a" in stages:
        fig, ax = plt.subplots(figsize=(7, 3.2))
        kinds = sorted({p[0] for p in pts})
        for i, kind in enumerate(kinds):
            ys = [y for x, y in pts if x == kind]
            ax.scatter([i] * len(ys), ys, alpha=0.6)
        ax.axhline(1, color="r", ls="--", label="tolerance")
        ax.set(xticks=range(len(kinds)), xticklabels=kinds, yscale="log", ylabel="rel. error / tolerance",
               title="Triton kernels vs the fp32 reference")
        ax.legend(); save_fig(fig, "fig_kernels.png")
    if "d" in stages and speed_figure(data, plt): save_fig(plt.gcf(), "fig_speed.png")
    ex = data.get("c", {}).get("items", {}).get("worked_examples", {}).get("examples", {})
    if ex and "c" in stages: draw_examples(ex, out / "fig_examples.png")
    m = data.get("m", {}).get("items", {}).get("pressure", {})
    if m.get("timeline") and "m" in stages:
        rec = timeline_from_json(m["timeline"])
        title = f"Memory pressure: {m['blocks']} of the {m['blocks_wanted']} KV blocks wanted"
        stack_pixels([figure_pixels(helper("plot_timeline")(rec, title=title)),
                      figure_pixels(helper("plot_kv_cache")(rec, title=title))], out / "fig_pressure.png")


def speed_figure(data, plt) -> bool:
    "Throughput, decode step time against the roofline, and one step's profile, in one figure."
    items = data.get("d", {}).get("items", {})
    engines = ["minivllm_graphs", *REFERENCE_ENGINES]
    if not any(k.split("/")[-1] in engines + ["step_times"] for k in items): return False
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, m in enumerate(SPEED_CONFIGS):
        for j, e in enumerate(engines):
            v = items.get(f"{m}/{e}", {}).get("tok_per_s") if ok(items.get(f"{m}/{e}")) else 0
            ax.bar(i * (len(engines) + 1) + j, v or 0, color=f"C{j}", label=e if i == 0 else None)
    ax.set(xticks=[i * (len(engines) + 1) + 1.5 for i in range(len(SPEED_CONFIGS))], xticklabels=list(SPEED_CONFIGS),
           ylabel="output tokens/s", title="nano-vllm's workload, same device")
    ax.legend(fontsize=9)
    x, ticks = 0, []
    for m in SPEED_CONFIGS:
        for k, v in items.get(f"{m}/step_times", {}).items():
            if not k.startswith("batch"): continue
            for j, (lab, key) in enumerate([("eager", "eager_ms"), ("graph", "graph_ms"),
                                            ("HBM roofline", "roofline_ms")]):
                bx.bar(x + j, v.get(key) or 0, color=f"C{j}", label=lab if x == 0 else None)
            ticks.append((x + 1, f"{m}\nbatch {k[5:]}")); x += 4
    bx.set(yscale="log", ylabel="ms per decode step", title="decode step time")
    bx.set_xticks([t for t, _ in ticks]); bx.set_xticklabels([s for _, s in ticks], fontsize=9)
    bx.legend(fontsize=9)
    profs = [(m, items.get(f"{m}/step_times", {}).get("profile")) for m in SPEED_CONFIGS]
    cats = [c for c, _ in KERNEL_CATEGORIES] + ["other"]
    for i, (m, p) in enumerate(profs):
        left = 0
        for j, c in enumerate(cats):
            us = (p or {}).get("categories", {}).get(c, {}).get("us", 0) / 1e3
            cx.barh(i, us, left=left, color=f"C{j}", label=c if i == 0 else None); left += us
    cx.set(yticks=range(len(profs)), yticklabels=[m for m, _ in profs], xlabel="ms (one step, largest batch)",
           title="torch.profiler: one decode step by kernel kind")
    cx.legend(fontsize=9, loc="lower right")
    return True


def report_command() -> int:
    "The final report: report.md, results.json, log.txt, the figures; exit 1 when anything failed."
    work, out = Path(ARGS.work), Path(ARGS.out)
    fails = write_report(work, out, "".join(s for s, f in FIGURES.items() if not (out / f).exists()))
    logs = [f"===== {p.name}\n" + p.read_text(errors="replace")[-400_000:] for p in sorted(work.glob("stage_*.log"))]
    (out / "log.txt").write_text("\n".join(logs))
    data = json.loads((out / "results.json").read_text())
    for g, m, v in correctness(data) + goals(data): print(f"{v:>8}  {g}: {m}")
    print("failures: " + ("; ".join(fails) if fails else "none"))
    print(f"report: {out / 'report.md'}")
    return 1 if fails else 0


# ---------------------------------------------------------------- verify (the rehearsal)
def verify_paths(data) -> list[str]:
    "What the dry run must have done for it to rehearse the device run; each missing path is one line."
    problems = []
    def item(s, key): return data.get(s, {}).get("items", {}).get(key, {})
    stages = {row[0]: row[1] for row in data.get("stages", []) if len(row) >= 2}
    for s in ORDER:
        if stages.get(s) != "0": problems.append(f"stage {s} exited {stages.get(s, 'not run')}")
    env = data.get("a", {}).get("env", {})
    if env.get("minivllm_installed"): problems.append(f"minivllm is installed ({env['minivllm_installed']}): "
                                                      "the device has it on PYTHONPATH only")
    for s in ORDER[1:]:
        if data.get(s, {}).get("env", {}).get("triton_interpret") != "1":
            problems.append(f"stage {s} did not run under the Triton interpreter")
    plans = data.get("plan", {}).get("plans", {})
    for kind in KIND_BANDWIDTH:
        p = plans.get(kind, {})
        if not p or p.get("total_s", 1e9) > CALL_S["first"] or p.get("dropped"):
            problems.append(f"no {kind} plan within {CALL_S['first']} s")
    k = data.get("k", {}).get("items", {})
    if len(k) < 39 or not all(v.get("pass") for v in k.values()):
        problems.append(f"stage k: {sum(bool(v.get('pass')) for v in k.values())}/{len(k)} of >= 39 kernels clean")
    q = item("a", "sweep/bfloat16/d128/qpk2/qwen3_decode64")
    if not (q.get("pass") and q.get("kernel") == "decode" and q.get("num_seqs") == 64):
        problems.append(f"the bf16 64-sequence decode (unified kernel) did not pass: {q.get('status', 'not run')}")
    if not item("a", "pytest").get("pass"): problems.append("stage a's pytest did not pass")
    backends = [item("b", f"{arch}/fp32").get(m, {}).get("backend") for arch in ARCHS for m in ("eager", "graphs")]
    backends += [item("b", "kv_cache_profile").get("backend"), item("d", "SmolLM2-135M/step_times").get("backend")]
    backends += [item("d", f"SmolLM2-135M/{e}").get("backend") for e in ("minivllm_graphs", "minivllm_eager")]
    if not all(b and "Triton" in b for b in backends): problems.append(f"not the Triton backend everywhere: {backends}")
    if not item("b", "kv_cache_profile").get("pass"): problems.append("the KV-cache profiling did not run")
    if not item("b", "Qwen3ForCausalLM/bf16").get("per_prompt"): problems.append("the bf16 criterion did not run")
    w = item("c", "worked_examples")
    kept = sum(bool(e.get("timeline", {}).get("records")) for e in w.get("examples", {}).values())
    if w.get("num_examples") != NUM_WORKED_EXAMPLES or not w.get("pass") or kept != NUM_WORKED_EXAMPLES:
        problems.append(f"worked examples: {w.get('num_examples')} of {NUM_WORKED_EXAMPLES}, pass {w.get('pass')}, "
                        f"{kept} timelines kept")
    if not item("m", "pressure").get("pass"): problems.append("the memory-pressure run did not pass")
    sv = item("s", "serve")
    if not sv.get("pass") or not data.get("s", {}).get("env", {}).get("fastapi"):
        problems.append(f"serving did not pass with the carried wheels: {sv.get('status', 'not run')}")
    st = item("d", "SmolLM2-135M/step_times")
    if not st.get("profile", {}).get("categories"): problems.append("no profiler breakdown of a decode step")
    if not item("d", "SmolLM2-135M/minivllm_graphs").get("run_over_roofline"):
        problems.append("no whole-run roofline ratio")
    return problems


def verify() -> int:
    out = Path(ARGS.out)
    data = json.loads((out / "results.json").read_text())
    problems = verify_paths(data)
    files = [p.name for p in out.iterdir() if p.is_file() and not p.name.startswith(".")]
    if len(files) > 8: problems.append(f"{len(files)} files in the report folder (the device tool returns 8): {files}")
    for p in problems: print("REHEARSAL:", p)
    print(f"rehearsal paths: {'all taken' if not problems else f'{len(problems)} missing'}")
    return 1 if problems else 0


# ---------------------------------------------------------------- main
def main(argv=None):
    global ARGS, DEADLINE, PLAN
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=[*ORDER, "plan", "report", "verify", "examples"])
    p.add_argument("--work", help="folder for the plan, the stages' JSON files and logs")
    p.add_argument("--out", help="report folder")
    p.add_argument("--budget", type=float, help="seconds this stage may take (default: the plan's)")
    p.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU (Triton interpreter)")
    p.add_argument("--only", nargs="*", default=[], help="plan: only these items (STAGE or STAGE/NAME...)")
    p.add_argument("--stages", help="plan: only these stages, e.g. bcd")
    p.add_argument("--merge", help="plan: the earlier call's results.json, to merge this call's into")
    p.add_argument("--results", help="examples: a run's results.json")
    ARGS = p.parse_args(argv)
    if ARGS.stage == "examples": return examples_command()
    if ARGS.stage == "verify": return verify()
    Path(ARGS.work).mkdir(parents=True, exist_ok=True)
    if ARGS.stage == "plan": return plan_command()
    if ARGS.stage == "report": return report_command()
    PLAN = load_plan(Path(ARGS.work))
    budget = ARGS.budget or PLAN.get("stages", {}).get(ARGS.stage, 120) - 5
    DEADLINE = time.time() + budget
    RESULTS.clear()
    RESULTS["env"] = environment()
    RESULTS["started"] = time.strftime("%H:%M:%S")
    save()
    import torch
    if ARGS.stage != "k" and not ARGS.dry_run and not torch.cuda.is_available():
        RESULTS["skipped"] = "no CUDA device (use --dry-run on a CPU)"; save(); log(RESULTS["skipped"]); return 1
    try:
        {"a": stage_a, "b": stage_b, "c": stage_c, "m": stage_m, "s": stage_s, "d": stage_d, "k": stage_k}[ARGS.stage]()
    except KeyboardInterrupt:
        RESULTS["interrupted"] = "stopped by the stage's time limit"
    except Exception as e:   # noqa: BLE001 -- recorded, and the stage fails
        RESULTS["error"] = f"{type(e).__name__}: {e}"[:500]; RESULTS["traceback"] = traceback.format_exc()[-2000:]
    finally:
        RESULTS["finished"] = time.strftime("%H:%M:%S")
        RESULTS["failures"] = failures(RESULTS)
        save()
        if ARGS.out:   # with the stage's figure while its time lasts (else the final report draws it)
            write_report(Path(ARGS.work), Path(ARGS.out), ARGS.stage if remaining() > 20 else "")
    for f in RESULTS["failures"]: log("FAILED", f)
    return 1 if RESULTS["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
