"""The waiting loop never lets a request overtake the head of the queue (chapter 31's lesson).

vLLM's waiting loop looks only at the head of the waiting queue: when the head cannot be admitted
(no budget with chunked prefill off, no KV blocks, no request slot), the loop stops; it never
skips ahead to a request that would fit. Over random workloads (chunked prefill on and off, small
budgets and pools, FCFS and priority) we check after every `schedule()`:
- FCFS: new requests are admitted in the order they were added;
- priority: every request admitted in a step has a smaller (priority, arrival) key than every
  request still waiting after it, and nothing is admitted in a step that preempted.
"""
from hypothesis import given, settings, strategies as st

from minivllm.request import Request
from minivllm.sampling_params import SamplingParams
from minivllm.config import CacheConfig, SchedulerConfig
from minivllm.core.sched.scheduler import Scheduler
from minivllm.testing.fake_worker import FakeWorker

MAX_MODEL_LEN = 32


@st.composite
def workloads(draw):
    "A scheduler config and up to 10 requests with arrival steps and priorities."
    chunked = draw(st.booleans())
    budget = draw(st.sampled_from([4, 8, 16, 64])) if chunked else draw(st.sampled_from([32, 64]))
    cfg = dict(block_size=4, num_blocks=MAX_MODEL_LEN // 4 + 1 + draw(st.sampled_from([0, 2, 8, 40])),
               budget=budget, max_num_seqs=draw(st.integers(1, 6)), chunked=chunked,
               policy=draw(st.sampled_from(["fcfs", "priority"])))
    reqs = []
    for i in range(draw(st.integers(2, 10))):
        n = draw(st.integers(1, 24))
        reqs.append(dict(id=f"r{i}", n=n, max_tokens=draw(st.integers(1, MAX_MODEL_LEN - n - 1)),
                         arrival=draw(st.integers(0, 8)), priority=draw(st.integers(0, 2))))
    return cfg, reqs


def make_request(r: dict, i: int) -> Request:
    sp = SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True)
    return Request(r["id"], [1000 * (i + 1) + k for k in range(r["n"])], sp,
                   arrival_time=float(r["arrival"] * 100 + i), priority=r["priority"])


@settings(max_examples=80, deadline=None)
@given(workloads())
def test_no_request_overtakes_the_head(wl):
    cfg, reqs = wl
    s = Scheduler(SchedulerConfig(cfg["budget"], cfg["max_num_seqs"], MAX_MODEL_LEN, cfg["chunked"],
                                  0, cfg["policy"]),
                  CacheConfig(cfg["block_size"], cfg["num_blocks"], True))
    worker, added, admitted = FakeWorker(), [], []
    key = {}
    for step in range(500):
        for i, r in enumerate(reqs):
            if r["arrival"] == step:
                req = make_request(r, i)
                key[req.request_id] = (req.priority, req.arrival_time)
                s.add_request(req); added.append(req.request_id)
        if not s.has_requests():
            if step > max(r["arrival"] for r in reqs): break
            continue
        so = s.schedule()
        new_ids = [nr.req_id for nr in so.scheduled_new_reqs]
        resumed = sorted(so.scheduled_cached_reqs.resumed_req_ids)
        admitted += new_ids
        if so.preempted_req_ids: assert not new_ids and not resumed, "admitted in a step that preempted"
        if cfg["policy"] == "fcfs":
            assert admitted == added[:len(admitted)], f"FCFS admission order {admitted} vs added {added}"
        elif new_ids or resumed:
            waiting = [key[r.request_id] for r in s.waiting]
            assert not waiting or max(key[r] for r in new_ids + resumed) < min(waiting), \
                "a waiting request with a smaller (priority, arrival) key was passed over"
        s.update_from_output(so, worker.execute_model(so))
    else:
        raise AssertionError("workload did not finish")
    assert sorted(admitted) == sorted(r["id"] for r in reqs)
    assert not s.running and not s.waiting and not s.requests
