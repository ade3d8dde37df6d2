"""Host time per engine step with a no-op model (issue 21): what the CPU spends around the GPU.

    python bench/bench_host.py [--running 1 64 256] [--steps 200] [--vocab 256] [--gc-freeze] [--cpu-clock]
                               [--json FILE]

The real scheduler, the real model runner (its host part: input batch, block tables, metadata, the
sampler) and the real output processor, around a model that does nothing: `forward` returns a
preallocated hidden state, `compute_logits` preallocated logits. N requests are admitted and
prefilled first; then every measured step is N synchronous decodes, timed per phase:
schedule | runner (execute_model) | update_from_output | outputs (OutputProcessor.process_outputs).
`--gc-freeze` moves everything built during start-up out of the garbage collector's reach
(gc.freeze(), as vLLM does after start-up), to show what that saves.
Only public names of `minivllm` are used.
"""
import argparse, gc, json, statistics, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn

from minivllm import (CacheConfig, EngineCore, ModelRunner, OutputProcessor, Request, SamplingParams, Scheduler,
                      SchedulerConfig)

PHASES = ("schedule", "runner", "update", "outputs")


class NoOpModel(nn.Module):
    "A model that computes nothing: fixed hidden states and logits (greedy picks token 1, never EOS)."
    def __init__(self, max_tokens: int, vocab_size: int, hidden_size: int = 8):
        super().__init__()
        self.vocab_size = vocab_size
        self.hidden = torch.zeros(max_tokens, hidden_size)
        self.logits = torch.zeros(max_tokens, vocab_size)
        self.logits[:, 1] = 1.0

    def forward(self, input_ids, positions, attn_metadata=None):
        return self.hidden[: input_ids.shape[0]]

    def compute_logits(self, hidden):
        return self.logits[: hidden.shape[0]]


def build(num_running: int, vocab: int, prompt_len: int, max_tokens: int, block_size: int = 16):
    "Scheduler + ModelRunner(no-op model) + EngineCore + OutputProcessor, as LLM builds them."
    max_model_len = prompt_len + max_tokens + block_size
    batched = max(2048, num_running)
    blocks = num_running * -(-max_model_len // block_size) + 1
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=batched, max_num_seqs=num_running,
                                          max_model_len=max_model_len),
                          CacheConfig(block_size=block_size, num_gpu_blocks=blocks))
    runner = ModelRunner(NoOpModel(batched, vocab), num_running, max_model_len, batched, block_size,
                         device="cpu", eos_token_id=None, vocab_size=vocab)
    return EngineCore(scheduler, runner), OutputProcessor(None)


def measure(num_running: int, steps: int, vocab: int, gc_freeze: bool, cpu_clock: bool = False,
            prompt_len: int = 32) -> dict:
    core, processor = build(num_running, vocab, prompt_len, max_tokens=steps + 64)
    sp = SamplingParams(temperature=0, max_tokens=steps + 64, ignore_eos=True)
    for i in range(num_running):
        r = Request(str(i), [(7 * i + j) % (vocab - 2) + 2 for j in range(prompt_len)], sp, eos_token_id=None)
        processor.add_request(r, None)
        core.add_request(r)
    sched, runner = core.scheduler, core.model_executor
    while len(sched.running) < num_running or any(r.num_computed_tokens < r.num_prompt_tokens
                                                   for r in sched.running):
        processor.process_outputs(core.step()[0].outputs)       # admit and prefill everyone
    for _ in range(5): processor.process_outputs(core.step()[0].outputs)   # warm decodes
    gc.collect()
    if gc_freeze: gc.freeze()
    times = {p: [] for p in PHASES}
    clock = time.thread_time if cpu_clock else time.perf_counter
    for _ in range(steps):
        t0 = clock(); so = sched.schedule()
        t1 = clock(); mro = runner.execute_model(so)
        t2 = clock(); eco = sched.update_from_output(so, mro)
        t3 = clock(); processor.process_outputs(eco.outputs)
        t4 = clock()
        assert so.total_num_scheduled_tokens == num_running, "not a pure decode step"
        for p, a, b in zip(PHASES, (t0, t1, t2, t3), (t1, t2, t3, t4)): times[p].append((b - a) * 1e3)
    if gc_freeze: gc.unfreeze()
    res = {p: statistics.fmean(v) for p, v in times.items()}            # means: the phases add up
    totals = [sum(x) for x in zip(*times.values())]
    res["total"] = statistics.fmean(totals)
    res["median_total"] = statistics.median(totals)
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--running", type=int, nargs="+", default=[1, 64, 256])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--vocab", type=int, default=256, help="logit columns the sampler reads")
    p.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after start-up (as vLLM)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the host side of a GPU run: 1)")
    p.add_argument("--cpu-clock", action="store_true",
                   help="time with this thread's CPU clock (time.thread_time): on a loaded machine, the work "
                        "without the waits for a core (wall clock by default)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"host ms per synchronous decode step, no-op model, vocab {args.vocab}, mean of {args.steps} steps, "
          f"{'CPU' if args.cpu_clock else 'wall'} clock{', gc frozen' if args.gc_freeze else ''}")
    print(f"{'running':>8} " + " ".join(f"{p:>9}" for p in (*PHASES, "total", "median")))
    out = {}
    for n in args.running:
        r = measure(n, args.steps, args.vocab, args.gc_freeze, args.cpu_clock)
        out[n] = r
        print(f"{n:>8} " + " ".join(f"{r[p]:>9.3f}" for p in (*PHASES, "total", "median_total")), flush=True)
    if args.json: Path(args.json).write_text(json.dumps({"gc_freeze": args.gc_freeze, "cpu_clock": args.cpu_clock,
                                                         "ms_per_step": out}, indent=1))
    return out


if __name__ == "__main__":
    main()
