"""Run workloads through vLLM 0.33's real scheduler on a CPU, with and without TimelineScheduler.

    build/vllm-venv/bin/python tests/vllm_env/run_plugin.py OUTDIR WORKLOAD.json ... [--no-plain]
                                                            [--tokens]

Run in vLLM's venv (`make vllm-env`), from the repository root or with it on PYTHONPATH. For each
workload it writes OUTDIR/NAME.jsonl (the plugin's record) and prints one JSON line: the workload's
name, whether vLLM's decisions and outputs were the same without the plugin (`same_decisions`;
skipped with --no-plain), the number of steps and the seconds it took. --tokens records the sampled
token ids too (MINIVLLM_TIMELINE_TOKENS=1).
"""
import json, os, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import minivllm.integrations.vllm as integration

for k, v in integration.CPU_ENV.items(): os.environ.setdefault(k, v)


def main(argv):
    plain_too = "--no-plain" not in argv
    if "--tokens" in argv: os.environ[integration.TOKENS_ENV] = "1"
    outdir, *paths = [a for a in argv if not a.startswith("--")]
    from vllm.v1.core.sched.scheduler import Scheduler
    Path(outdir).mkdir(parents=True, exist_ok=True)
    for p in paths:
        w, name = json.loads(Path(p).read_text()), Path(p).name.removesuffix(".json")
        name = name.removesuffix(".workload")
        res = dict(name=name)
        try:
            t0 = time.perf_counter()
            recorded = integration.replay(w, integration.TimelineScheduler,
                                          Path(outdir) / f"{name}.jsonl")
            res.update(num_steps=len(recorded), seconds=round(time.perf_counter() - t0, 3))
            if plain_too: res["same_decisions"] = integration.replay(w, Scheduler) == recorded
        except Exception as e:  # report and go on with the next workload
            res["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
