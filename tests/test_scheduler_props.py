"""Property tests: random workloads through the scheduler and the fake worker, invariants every step.

Arrivals over time, prompts of 1..200 tokens (some sharing prefixes), max_tokens 1..50, EOS / stop ids /
min_tokens, KV pools from barely one max_model_len sequence to plenty (so preemption happens), both
policies, chunked prefill on and off, long-prefill thresholds, random aborts, and now and then a
`reset_prefix_cache(reset_running_requests=True)` while a step is in flight (those requests still get
the step's token). Every step's prefix-cache stats count exactly that step's admissions (new and resumed,
as vLLM 0.33 records them). At the end every request finished with the right reason and length, and
nothing is left behind: all blocks free, no request in any queue.
"""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from minivllm.request import Request, RequestStatus
from minivllm.sampling_params import SamplingParams
from minivllm.config import CacheConfig, SchedulerConfig
from minivllm.core.sched.scheduler import Scheduler
from minivllm.testing.fake_worker import FakeWorker, check_invariants, scheduled_entries

EOS = 2
PREFIXES = [list(range(5000 + 1000 * j, 5000 + 1000 * j + 64)) for j in range(3)]


def cdiv(a, b): return -(-a // b)


@st.composite
def workloads(draw):
    "A scheduler config, requests with arrival steps, aborts and in-flight prefix-cache resets."
    bs = draw(st.sampled_from([4, 8, 16]))
    chunked = draw(st.booleans())
    mml = draw(st.integers(201, 300))
    need = cdiv(mml, bs)
    num_blocks = draw(st.integers(need + 1, need * 6))
    budget = draw(st.integers(mml, 2 * mml)) if not chunked else draw(st.integers(1, 300))
    cfg = dict(max_num_batched_tokens=budget, max_num_seqs=draw(st.integers(1, 12)), max_model_len=mml,
               enable_chunked_prefill=chunked, long_prefill_token_threshold=draw(st.sampled_from([0, 0, 1, 7, 64])),
               policy=draw(st.sampled_from(["fcfs", "priority"])))
    cache = dict(block_size=bs, num_gpu_blocks=num_blocks, enable_prefix_caching=draw(st.booleans()))
    reqs = []
    for i in range(draw(st.integers(1, 10))):
        n = draw(st.integers(1, 200))
        shared = draw(st.sampled_from(PREFIXES))[: draw(st.integers(0, min(n, 64)))]
        prompt = shared + list(range(100_000 * (i + 1), 100_000 * (i + 1) + n - len(shared)))
        max_tokens = draw(st.integers(1, 50))
        sp = dict(max_tokens=max_tokens, min_tokens=draw(st.integers(0, max_tokens)), ignore_eos=draw(st.booleans()),
                  stop_token_ids=draw(st.sampled_from([[], [7], [7, 8]])))
        outputs = draw(st.lists(st.sampled_from([EOS, 7, 8, 9, 11]), max_size=12))
        reqs.append(dict(id=f"r{i}", prompt=prompt, sp=sp, outputs=outputs, arrival=draw(st.integers(0, 15)),
                         priority=draw(st.integers(0, 3))))
    aborts = draw(st.lists(st.tuples(st.integers(0, 60), st.integers(0, len(reqs) - 1)), max_size=3))
    resets = draw(st.lists(st.integers(0, 60), max_size=2))
    return cfg, cache, reqs, dict(aborts), set(resets)


def expected_finish(r: dict, worker: FakeWorker, mml: int) -> tuple[str, int]:
    "Reason and output length check_stop must give for the worker's deterministic tokens."
    sp, n = r["sp"], len(r["prompt"])
    for k in range(sp["max_tokens"]):
        t, num_out = worker.sample(r["id"], k), k + 1
        if n + num_out >= mml and num_out < sp["min_tokens"]: return "length", num_out
        if num_out < sp["min_tokens"]: continue
        if (not sp["ignore_eos"] and t == EOS) or t in sp["stop_token_ids"]: return "stop", num_out
        if n + num_out >= mml or num_out >= sp["max_tokens"]: return "length", num_out
    raise AssertionError("unreachable: max_tokens always ends a request")


def check_stats(p, so, caching: bool) -> None:
    "A step's prefix-cache stats count its admissions only: new ones, and resumed ones apart (with their hits)."
    admitted = {k: [e for e in scheduled_entries(so) if e.kind == k] for k in ("new", "resumed")}
    hits = {k: sum(e.num_computed_tokens for e in v) for k, v in admitted.items()}
    want = (len(admitted["new"]), hits["new"], len(admitted["resumed"]), hits["resumed"]) if caching else (0, 0, 0, 0)
    assert (p.requests, p.hits, p.preempted_requests, p.preempted_hits) == want


def run(cfg, cache, reqs, aborts, resets):
    "Drive the engine loop; returns the scheduler, worker, tokens and finish reasons per request."
    s = Scheduler(SchedulerConfig(**cfg), CacheConfig(**cache))
    w = FakeWorker(req_index={r["id"]: i for i, r in enumerate(reqs)},
                   output_token_ids={r["id"]: r["outputs"] for r in reqs})
    tokens, reasons = {r["id"]: [] for r in reqs}, {}
    for step in range(3000):
        for i, r in enumerate(reqs):
            if r["arrival"] == step:
                s.add_request(Request(r["id"], r["prompt"], SamplingParams(**r["sp"]), eos_token_id=EOS,
                                      arrival_time=float(step * 100 + i), priority=r["priority"]))
        if step in aborts and reqs[aborts[step]]["id"] in s.requests:
            rid = reqs[aborts[step]]["id"]
            assert s.finish_requests(rid, RequestStatus.FINISHED_ABORTED) == [rid]
            reasons[rid] = "abort"
        if not s.has_requests():
            if all(r["arrival"] < step for r in reqs): break
            continue
        so = s.schedule()
        check_invariants(s, so)
        mro = w.execute_model(so)
        if step in resets: assert s.reset_prefix_cache(reset_running_requests=True)  # mid-step: still gets tokens
        eco = s.update_from_output(so, mro)
        check_stats(eco.scheduler_stats.prefix_cache_stats, so, cache["enable_prefix_caching"])
        for o in eco.outputs:
            tokens[o.request_id] += o.new_token_ids
            if o.finish_reason: reasons[o.request_id] = o.finish_reason
        check_invariants(s, worker=w)
    else:
        raise AssertionError("the scheduler did not finish the workload in 3000 steps")
    return s, w, tokens, reasons


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_random_workloads_finish_cleanly(wl):
    cfg, cache, reqs, aborts, resets = wl
    s, w, tokens, reasons = run(cfg, cache, reqs, aborts, resets)
    for r in reqs:
        reason, length = expected_finish(r, w, cfg["max_model_len"])
        got = tokens[r["id"]]
        assert got == [w.sample(r["id"], k) for k in range(len(got))], "tokens in order, none lost or repeated"
        if reasons[r["id"]] == "abort": assert len(got) <= length
        else: assert (reasons[r["id"]], len(got)) == (reason, length), r["id"]
    pool = s.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1 and not s.kv_cache_manager.req_to_blocks
    assert not s.requests and not s.running and not s.waiting and not s.finished_req_ids
    assert not w.requests  # the worker dropped every request it was told about


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="num_gpu_blocks >= 17"):
        Scheduler(SchedulerConfig(max_model_len=64), CacheConfig(block_size=4, num_gpu_blocks=16))
    with pytest.raises(ValueError, match="num_gpu_blocks must be set"):
        Scheduler(SchedulerConfig(), CacheConfig())
    with pytest.raises(ValueError, match="enable chunked prefill"):
        SchedulerConfig(max_num_batched_tokens=16, max_model_len=64, enable_chunked_prefill=False)
    s = Scheduler(SchedulerConfig(max_model_len=64), CacheConfig(block_size=4, num_gpu_blocks=17))
    s.add_request(Request("a", [1, 2, 3]))
    with pytest.raises(ValueError, match="unique id"): s.add_request(Request("a", [1, 2, 3]))
    with pytest.raises(ValueError, match="max_model_len is 64"): s.add_request(Request("b", list(range(64))))
    s.add_request(Request("c", list(range(63))))  # 63 tokens leave room for one output
