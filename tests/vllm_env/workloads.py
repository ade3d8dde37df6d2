"""Workloads for the plugin tests and the chapter's recorded runs (the golden traces' format).

Written by the project's venv (the worked examples come from `minivllm.testing.worked_examples`) and
read by vLLM's venv (`run_plugin.py`): the two never import each other.
"""
import json, random
from pathlib import Path


def vllm_valid(workload: dict) -> dict:
    "vLLM requires max_num_batched_tokens >= max_num_seqs; the worked examples leave 128 seqs."
    c = workload["config"]
    c["max_num_seqs"] = min(c.get("max_num_seqs", 128), c["max_num_batched_tokens"])
    return workload


def random_workload(seed: int) -> dict:
    "A small random workload: policy, chunking, caching, block size and a tight pool at random."
    rng = random.Random(seed)
    chunked, bs, mml = rng.random() < 0.7, rng.choice([2, 4, 8]), 64
    shared = list(range(7000, 7016))
    reqs = []
    for i in range(rng.randint(3, 16)):
        own = list(range(100 * (i + 1), 100 * (i + 1) + rng.randint(1, 40)))
        prompt = (shared[:rng.choice([0, bs, 2 * bs, 16])] + own)[:mml - 1]
        reqs.append(dict(id=f"q{i}", prompt_token_ids=prompt, max_tokens=rng.randint(1, 16),
                         arrival_step=rng.randint(0, 12), priority=rng.randint(0, 3)))
    config = dict(block_size=bs, num_blocks=rng.randint(mml // bs + 2, 3 * mml // bs),
                  max_model_len=mml, max_num_batched_tokens=rng.choice([8, 16, 32, 64])
                  if chunked else 64, max_num_seqs=rng.choice([2, 4, 8]),
                  policy=rng.choice(["fcfs", "priority"]), enable_chunked_prefill=chunked,
                  enable_prefix_caching=rng.random() < 0.8, long_prefill_token_threshold=0,
                  scheduler_reserve_full_isl=False)
    return dict(name=f"random {seed}", config=config, requests=reqs, max_steps=2000)


def stream_workload(num_requests: int = 300, seed: int = 0, every: int = 3,
                    num_blocks: int = 160) -> dict:
    "A stream of requests, one every `every` steps or so, on a pool small enough to preempt."
    rng = random.Random(seed)
    system = list(range(50_000, 50_032))         # a shared system prompt: prefix-cache hits
    reqs = []
    for i in range(num_requests):
        own = list(range(100_000 + 1000 * i, 100_000 + 1000 * i + rng.randint(8, 160)))
        reqs.append(dict(id=f"r{i}", prompt_token_ids=(system if rng.random() < 0.5 else []) + own,
                         max_tokens=rng.randint(8, 96), arrival_step=i * every + rng.randint(0, 2)))
    config = dict(block_size=16, num_blocks=num_blocks, max_model_len=512,
                  max_num_batched_tokens=256, max_num_seqs=32, policy="fcfs",
                  enable_chunked_prefill=True, enable_prefix_caching=True,
                  long_prefill_token_threshold=0, scheduler_reserve_full_isl=False)
    return dict(name=f"stream of {num_requests}", config=config, requests=reqs,
                max_steps=100 * num_requests)


def write(workload: dict, path: Path) -> Path:
    path.write_text(json.dumps(workload))
    return path
