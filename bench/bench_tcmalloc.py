"""TCMalloc against glibc's malloc for a CPU engine: the batched workload through `LLM` and through `AsyncLLM`.

    python bench/bench_tcmalloc.py [--pairs 2] [--repeat 3] [--only {llm,async_llm}]

bench_cpu.py's batched workload (32 random-token prompts of 16-256 tokens, 64 greedy tokens each, `ignore_eos`)
with the embedded SmolLM2-135M-Instruct, compiled, float32, at the machine's default thread count, best of
`--repeat` runs after a warm-up, and the minor page faults of the process that runs the engine:

- `LLM`: the engine runs in the caller's process, so each allocator gets a fresh child process, started with
  TCMalloc in `LD_PRELOAD` or without it;
- `AsyncLLM`: the engine runs in the process it spawns, which `engine_process_env` starts with TCMalloc
  (chapter 13, vLLM's CPU platform does the same); for glibc the front end leaves it out.

`--pairs` pairs of each, alternated, and the ratios. Needs a TCMalloc (Debian: libtcmalloc-minimal4). Run it
alone: another process on the cores moves the speeds by more than the differences.
"""
import argparse, asyncio, json, os, random, resource, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def workload(seed: int = 32):
    "bench_cpu.py's batched prompts (token ids; another `seed`, other prompts) and sampling parameters."
    from bench_cpu import random_prompts
    from minivllm import SamplingParams
    return (random_prompts(32, 16, 256, 49152, seed=seed),
            SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))


def faults(pid: int) -> int:
    "Minor page faults of process `pid` so far."
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def run_llm(repeat: int) -> dict:
    "Tokens per second of `LLM.generate` here, best of `repeat`, and this process's faults per run."
    from bench_cpu import minivllm_generate       # every run from an empty prefix cache
    from minivllm import LLM
    prompts, _ = workload()
    llm = LLM(num_gpu_blocks=1024, block_size=16)
    minivllm_generate(llm, prompts[:2], 4)
    f0, speeds = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, []
    for _ in range(repeat):
        t = time.perf_counter()
        n = sum(map(len, minivllm_generate(llm, prompts, 64)))
        speeds.append(n / (time.perf_counter() - t))
    f = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) // repeat
    return {"tok_s": max(speeds), "faults": f, "tcmalloc": "libtcmalloc" in Path("/proc/self/maps").read_text()}


def run_async_llm(repeat: int, tcmalloc: bool) -> dict:
    "The same through `AsyncLLM`, its engine process with or without TCMalloc."
    import minivllm.engine.async_llm as async_llm
    if not tcmalloc: async_llm.engine_process_env = lambda device: {}
    _, sp = workload()

    async def generate(llm, batch):
        async def one(i, p):
            async for out in llm.generate(p, sp, request_id=f"{i}-{time.monotonic_ns()}"): last = out
            return len(last.outputs[0].token_ids)
        t = time.perf_counter()
        return sum(await asyncio.gather(*(one(i, p) for i, p in enumerate(batch)))) / (time.perf_counter() - t)

    with async_llm.AsyncLLM(num_gpu_blocks=1024, block_size=16) as llm:
        asyncio.run(generate(llm, workload(0)[0][:2]))
        f0 = faults(llm.proc.pid)   # other prompts each run: nothing comes from the prefix cache
        speeds = [asyncio.run(generate(llm, workload(32 + r)[0])) for r in range(repeat)]
        f = (faults(llm.proc.pid) - f0) // repeat
        mapped = "libtcmalloc" in Path(f"/proc/{llm.proc.pid}/maps").read_text()
    return {"tok_s": max(speeds), "faults": f, "tcmalloc": mapped}


def child(args) -> dict:
    "Run one measurement in a fresh process (the allocator is chosen when a process starts)."
    from minivllm.platforms.cpu import find_tcmalloc
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if args[0] == "llm" and args[1] == "tcmalloc": env["LD_PRELOAD"] = find_tcmalloc()
    out = subprocess.run([sys.executable, __file__, "--child", *args], env=env, capture_output=True,
                         text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["llm", "async_llm"], help="one of the two front ends")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    if args.child:
        front, allocator, repeat = args.child
        result = (run_llm(int(repeat)) if front == "llm" else
                  run_async_llm(int(repeat), allocator == "tcmalloc"))
        print(json.dumps(result)); return
    from minivllm.platforms.cpu import find_tcmalloc
    if find_tcmalloc() is None: sys.exit("no TCMalloc here (Debian: apt-get install libtcmalloc-minimal4)")
    print(f"{os.cpu_count()} CPUs, TCMalloc: {find_tcmalloc()}, load average {os.getloadavg()[0]:.1f} at the start")
    for front in [args.only] if args.only else ("llm", "async_llm"):
        for pair in range(args.pairs):
            order = ("glibc", "tcmalloc")[::-1 if pair % 2 else 1]
            got = {a: child([front, a, str(args.repeat)]) for a in order}
            assert got["tcmalloc"]["tcmalloc"] and not got["glibc"]["tcmalloc"], got
            print(f"{'LLM' if front == 'llm' else 'AsyncLLM'}, pair {pair + 1}: " + ", ".join(
                f"{a} {got[a]['tok_s']:.1f} tok/s ({got[a]['faults']:,} faults a run)" for a in order) +
                f": TCMalloc {got['tcmalloc']['tok_s'] / got['glibc']['tok_s']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
