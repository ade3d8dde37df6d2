"""What `TimelineScheduler` costs: vLLM 0.33's scheduler on a CPU, 256 requests decoding.

    build/vllm-venv/bin/python bench/bench_vllm_plugin.py [--requests 256] [--steps 300] [--json F]

Run in vLLM's venv (`make vllm-env`). Two runs of the same workload, vLLM's `Scheduler` and
`TimelineScheduler`, each stepping `schedule()` and `update_from_output()` with a fake worker that
samples one token per request. Only the steps where all requests run one decode token count. Times
are CPU time of this thread (`time.thread_time`), so other processes on the machine do not inflate
them; medians over the counted steps. The plugin's cost per step is the time inside its `record`
(the only code it adds), reported against plain vLLM's `schedule()` and against a whole scheduler
step (`schedule()` + `update_from_output()`). The goal: under 5% of `schedule()`.
"""
import argparse, json, os, platform, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import minivllm.integrations.vllm as integration

for k, v in integration.CPU_ENV.items(): os.environ.setdefault(k, v)


def run(cls, n: int, steps: int, prompt: int = 128, path: Path | None = None) -> dict:
    "Per counted step: schedule(), update_from_output() and (plugin) record() CPU seconds."
    from vllm.v1.outputs import ModelRunnerOutput
    config = dict(block_size=16, num_blocks=n * (prompt + steps + 48) // 16 + 16, max_num_seqs=n,
                  max_num_batched_tokens=8192, max_model_len=4096)
    s = integration.cpu_scheduler(config, cls)
    record_times = []
    if path is not None:
        s.timeline.path, record = path, s.timeline.record
        def timed(*args):
            t = time.thread_time(); out = record(*args)
            record_times.append(time.thread_time() - t)
            return out
        s.timeline.record = timed
    for i in range(n):   # prompt lengths spread over a block: requests fill blocks at all steps
        length = prompt + i % 16
        r = dict(id=f"r{i}", prompt_token_ids=list(range(i * 1000, i * 1000 + length)),
                 max_tokens=10 ** 6)
        s.add_request(integration.cpu_request(s, i, r))
    times = dict(schedule=[], update=[], record=[])
    for step in range(steps):
        t0 = time.thread_time(); so = s.schedule(); t1 = time.thread_time()
        ids = list(so.num_scheduled_tokens)
        sampled = [[] if s.requests[r].num_computed_tokens < s.requests[r].num_tokens
                    else [5 + step] for r in ids]
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: j for j, r in enumerate(ids)},
                                sampled_token_ids=sampled)
        t2 = time.thread_time(); s.update_from_output(so, mro); t3 = time.thread_time()
        if len(s.running) == n and so.total_num_scheduled_tokens == n:    # a decode step
            times["schedule"].append(t1 - t0); times["update"].append(t3 - t2)
            if record_times: times["record"].append(record_times[-1])
    if path is not None: s.timeline.close()
    return {k: statistics.median(v) * 1e6 for k, v in times.items() if v} | \
        {"counted_steps": len(times["schedule"])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args(argv)
    import vllm
    from vllm.v1.core.sched.scheduler import Scheduler
    plain, plugin = [], []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.repeats):   # alternate, so that both see the same machine
            plain.append(run(Scheduler, args.requests, args.steps))
            plugin.append(run(integration.TimelineScheduler, args.requests, args.steps,
                              path=Path(d) / "bench.jsonl"))
        line_bytes = (Path(d) / "bench.jsonl").stat().st_size / args.steps
    best = lambda runs, k: min(r[k] for r in runs)      # the least disturbed of the repeats
    sched, step = best(plain, "schedule"), best(plain, "schedule") + best(plain, "update")
    rec = best(plugin, "record")
    result = dict(vllm=vllm.__version__, machine=f"{platform.machine()}, {os.cpu_count()} CPUs",
                  running_requests=args.requests, counted_steps=plain[0]["counted_steps"],
                  schedule_us=round(sched, 1),
                  update_from_output_us=round(best(plain, "update"), 1),
                  plugin_record_us=round(rec, 1), ratio_to_schedule=round(rec / sched, 4),
                  ratio_to_step=round(rec / step, 4),
                  plugin_step_us=round(best(plugin, "schedule") + best(plugin, "update"), 1),
                  bytes_per_step=round(line_bytes))
    print(f"vLLM {result['vllm']}, {args.requests} running requests, decode steps "
          f"(CPU time, median, best of {args.repeats}):")
    print(f"  schedule()            {sched:8.1f} us")
    print(f"  update_from_output()  {result['update_from_output_us']:8.1f} us")
    print(f"  plugin record()       {rec:8.1f} us = {rec / sched:.1%} of schedule(), "
          f"{rec / step:.1%} of the scheduler's step")
    print(f"  ratio {rec / sched:.4f} (goal < 0.05); {line_bytes:.0f} bytes written per step")
    if args.json: Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
