"""Microseconds per `schedule()` + `update_from_output()` with many running decodes (not a test).

    .venv/bin/python bench/bench_scheduler.py            # 256 and 1024 decodes, three histories,
                                                         # then 256 decodes in pools of 4 sizes

Every request is a running decode (prefix caching on, block size 16). The history a request carries
into the timed steps is either short (a 32-token prompt), a long prompt (4096 tokens, prefilled in one
step), or long outputs (a 32-token prompt plus 1024 tokens generated before timing starts). The timed
steps measure only the scheduler's two calls, with a pre-built `ModelRunnerOutput`; the best of 3 runs
is reported, since the machine may be shared. The scheduler itself touches O(1) state per request and
step (it sends diffs), so the time per step should stay flat in the history length; and it never
walks the block pool (the free queue is a linked list, the prefix-cache index a dict), so it should
stay flat in the pool size too: the second table runs the same 256 decodes in pools from just
enough blocks up to the 131,073 blocks a GPU gives the embedded model. Compare rows of one run,
not runs: only ratios measured together mean anything on a shared machine.
"""
import argparse, gc, time

from minivllm.core.sched.output import ModelRunnerOutput
from minivllm.request import Request
from minivllm.sampling_params import SamplingParams
from minivllm.config import CacheConfig, SchedulerConfig
from minivllm.core.sched.scheduler import Scheduler

BS = 16


def cdiv(a, b): return -(-a // b)


def setup(num_reqs: int, prompt_len: int, num_outputs: int, steps: int,
          num_blocks: int | None = None) -> tuple[Scheduler, ModelRunnerOutput]:
    "A scheduler whose `num_reqs` requests decode (`num_blocks=None`: just enough blocks)."
    mml = prompt_len + num_outputs + steps + 8
    budget = num_reqs * prompt_len  # every prompt in one step: no chunks
    num_blocks = max(num_blocks or 0, num_reqs * cdiv(mml, BS) + 1)
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=num_reqs, max_model_len=mml),
                  CacheConfig(block_size=BS, num_gpu_blocks=num_blocks, enable_prefix_caching=True),
                  log_stats=False)
    for i in range(num_reqs):
        prompt = [7 + i] + list(range(1000, 1000 + prompt_len - 1))  # distinct first token: no cross-request hits
        s.add_request(Request(f"r{i}", prompt, SamplingParams(max_tokens=num_outputs + steps + 1, ignore_eos=True)))
    ids = [f"r{i}" for i in range(num_reqs)]
    mro = ModelRunnerOutput(ids, {r: i for i, r in enumerate(ids)}, [[5] for _ in ids])
    for _ in range(num_outputs):  # the prefill step, then decodes up to the wanted history
        s.update_from_output(s.schedule(), mro)
    return s, mro


def bench(num_reqs: int, prompt_len: int, num_outputs: int, steps: int = 64, repeats: int = 3,
          num_blocks: int | None = None) -> float:
    "Microseconds per schedule() + update_from_output(): best mean over `repeats` runs of `steps` decode steps."
    best = float("inf")
    for _ in range(repeats):
        s, mro = setup(num_reqs, prompt_len, max(num_outputs, 1), steps, num_blocks)
        gc.collect(); gc.disable()
        t0 = time.perf_counter()
        for _ in range(steps):
            out = s.schedule()
            assert out.total_num_scheduled_tokens == num_reqs
            s.update_from_output(out, mro)
        best = min(best, (time.perf_counter() - t0) / steps * 1e6)
        gc.enable()
    return best


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=64)
    args = ap.parse_args()
    histories = {"short (32 prompt)": (32, 1), "long prompt (4096)": (4096, 1), "long outputs (32+1024)": (32, 1024)}
    print(f"{'decodes':>8} {'history':>24} {'us/step':>10} {'us/request':>11}")
    for n in (256, 1024):
        for name, (prompt_len, num_outputs) in histories.items():
            us = bench(n, prompt_len, num_outputs, args.steps, repeats=3 if num_outputs == 1 else 1)
            print(f"{n:>8} {name:>24} {us:>10.0f} {us / n:>11.2f}", flush=True)
    print(f"\n{'decodes':>8} {'pool blocks':>24} {'us/step':>10} {'vs smallest':>11}")
    base = None
    for num_blocks in (None, 16_385, 65_537, 131_073):   # None: just enough (256 x 3 blocks + 1)
        us = bench(256, 32, 1, args.steps, repeats=3, num_blocks=num_blocks)
        base = base or us
        label = "just enough" if num_blocks is None else str(num_blocks)
        print(f"{256:>8} {label:>24} {us:>10.0f} {us / base:>10.2f}x", flush=True)
