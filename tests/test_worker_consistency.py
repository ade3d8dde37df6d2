"""The worker's view equals the scheduler's, every step, over random workloads.

A real `Scheduler` drives a `ModelRunner` over `HistoryModel` (whose next token hashes the whole
history read back through the paged KV cache) with a small KV pool, so preemption, resumption,
chunked prefill, prefix hits and aborts all happen. After every step we check:
- every scheduled request has a row; rows 0..num_reqs-1 are dense and hold exactly the scheduled
  requests; the worker's token history, `num_computed_tokens` and block table equal the
  scheduler's `Request` and `KVCacheManager`;
- finished (and aborted) requests leave no row and no cached state once reported;
- greedy outputs equal `HistoryModel.greedy_reference` (so every KV read and write was right);
- `min_tokens` requests never emit EOS too early.
"""
import torch
from hypothesis import given, settings, strategies as st

from minivllm.worker.gpu_model_runner import ModelRunner
from minivllm.testing.model_runner import HistoryModel
from minivllm.request import Request, RequestStatus
from minivllm.sampling_params import SamplingParams
from minivllm.config import CacheConfig, SchedulerConfig
from minivllm.core.sched.scheduler import Scheduler

torch.set_num_threads(1)
VOCAB, EOS, MAX_MODEL_LEN = 64, 0, 32


@st.composite
def workloads(draw, extra_blocks=(0, 1, 2, 4, 12), min_seqs=1, min_reqs=1, min_shared=0):
    "A scheduler config and up to 8 requests (shared prompt prefixes, arrivals, aborts, seeds, `min_tokens`)."
    block_size = draw(st.sampled_from([2, 4]))
    cfg = dict(block_size=block_size,
               num_gpu_blocks=MAX_MODEL_LEN // block_size + 1 + draw(st.sampled_from(extra_blocks)),
               budget=draw(st.sampled_from([3, 5, 8, 16, 64])),
               max_num_seqs=draw(st.integers(min_seqs, 6)),
               prefix_caching=draw(st.booleans()))
    shared = draw(st.lists(st.integers(1, VOCAB - 1), min_size=12, max_size=12))
    reqs = []
    for i in range(draw(st.integers(min_reqs, 8))):
        prompt = shared[:draw(st.integers(min_shared, 12))] + draw(st.lists(st.integers(1, VOCAB - 1), max_size=10))
        prompt = prompt or [1]
        max_tokens = draw(st.integers(1, min(10, MAX_MODEL_LEN - len(prompt) - 1)))
        sp = SamplingParams(temperature=draw(st.sampled_from([0.0, 0.0, 0.8])), top_k=draw(st.sampled_from([0, 5])),
                            max_tokens=max_tokens, min_tokens=draw(st.sampled_from([0, 0, max_tokens])),
                            seed=draw(st.none() | st.integers(0, 100)))
        reqs.append(dict(id=f"r{i}", prompt=prompt, sp=sp, arrival=draw(st.integers(0, 6)),
                         abort=draw(st.none() | st.integers(0, 20))))
    return cfg, reqs


def make(cfg):
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=cfg["budget"], max_num_seqs=cfg["max_num_seqs"],
                                      max_model_len=MAX_MODEL_LEN),
                      CacheConfig(block_size=cfg["block_size"], num_gpu_blocks=cfg["num_gpu_blocks"],
                                  enable_prefix_caching=cfg["prefix_caching"]))
    runner = ModelRunner(HistoryModel(VOCAB), max_num_reqs=cfg["max_num_seqs"], max_model_len=MAX_MODEL_LEN,
                         max_num_batched_tokens=cfg["budget"], block_size=cfg["block_size"], eos_token_id=EOS)
    runner.initialize_kv_cache(cfg["num_gpu_blocks"])
    return sched, runner


def check_after_execute(sched, runner, so, ever_scheduled):
    "Worker state right after `execute_model(so)`, before the scheduler sees the output."
    ib = runner.input_batch
    assert None not in ib._req_ids and len(ib._req_ids) == ib.num_reqs            # dense
    assert {r: i for i, r in enumerate(ib.req_ids)} == ib.req_id_to_index
    assert set(ib.req_ids) == set(so.num_scheduled_tokens)                          # exactly the scheduled
    for req_id in so.finished_req_ids:                                              # finished leave nothing
        assert req_id not in runner.requests and req_id not in ib.req_id_to_index
    assert set(runner.requests) == ever_scheduled & set(sched.requests)
    for req_id, n in so.num_scheduled_tokens.items():
        row, req = ib.req_id_to_index[req_id], sched.requests[req_id]
        assert ib.num_computed_tokens_cpu[row] + n == req.num_computed_tokens
        blocks = sched.kv_cache_manager.get_block_ids(req_id)
        assert ib.block_table.block_table[row, :ib.block_table.num_blocks_per_row[row]].tolist() == blocks
        assert runner.requests[req_id].block_ids == blocks


def check_after_update(sched, runner, so):
    "Token histories agree once the scheduler has appended the sampled tokens."
    ib = runner.input_batch
    for req_id in so.num_scheduled_tokens:
        req, state = sched.requests.get(req_id), runner.requests[req_id]
        if req is None: continue                                                    # finished this step
        row = ib.req_id_to_index[req_id]
        assert ib.token_ids_cpu[row, :ib.num_tokens_no_spec[row]].tolist() == list(req.all_token_ids)
        assert state.output_token_ids == list(req.output_token_ids)


def run(cfg, reqs, check=True, max_steps=600):
    sched, runner = make(cfg)
    objs, ever_scheduled = {}, set()
    for step in range(max_steps):
        for r in reqs:
            if r["arrival"] == step:
                objs[r["id"]] = Request(r["id"], r["prompt"], r["sp"], eos_token_id=EOS)
                sched.add_request(objs[r["id"]])
            if r["abort"] == step and r["id"] in sched.requests:
                sched.finish_requests([r["id"]], RequestStatus.FINISHED_ABORTED)
        if step > max(r["arrival"] for r in reqs) and not sched.has_requests():
            break
        so = sched.schedule()
        ever_scheduled |= set(so.num_scheduled_tokens)
        mro = runner.execute_model(so)
        if check: check_after_execute(sched, runner, so, ever_scheduled)
        sched.update_from_output(so, mro)
        if check: check_after_update(sched, runner, so)
    else:
        raise AssertionError("workload did not finish")
    assert runner.requests == {} and runner.input_batch.num_reqs == 0
    return objs


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_worker_matches_scheduler(workload):
    cfg, reqs = workload
    objs = run(cfg, reqs)
    model = HistoryModel(VOCAB)
    for r in reqs:
        out = list(objs[r["id"]].output_token_ids)
        if r["sp"].min_tokens:
            assert EOS not in out[:r["sp"].min_tokens]   # masked while below min_tokens
        elif r["sp"].temperature == 0:
            assert out == model.greedy_reference(r["prompt"], len(out))


@settings(max_examples=40, deadline=None)
@given(workloads(extra_blocks=(0, 1, 2), min_seqs=3, min_reqs=4, min_shared=8))
def test_worker_matches_scheduler_under_memory_pressure(workload):
    """Same checks with a tight pool, several requests at once and long shared prefixes: most examples preempt
    and hit the prefix cache (the general workloads above do so only now and then)."""
    cfg, reqs = workload
    objs = run(cfg, reqs)
    model = HistoryModel(VOCAB)
    for r in reqs:
        if r["sp"].temperature == 0 and not r["sp"].min_tokens:
            out = list(objs[r["id"]].output_token_ids)
            assert out == model.greedy_reference(r["prompt"], len(out))


@settings(max_examples=15, deadline=None)
@given(workloads(), st.sampled_from([3, 64]))
def test_seeded_outputs_independent_of_batching(workload, budget):
    "A seeded request samples the same tokens whatever the budget, chunking and neighbours."
    cfg, reqs = workload
    reqs = [dict(r, abort=None) for r in reqs]
    seeded = [r["id"] for r in reqs if r["sp"].seed is not None and r["sp"].temperature > 0]
    a = run(cfg, reqs, check=False)
    b = run(dict(cfg, budget=budget, max_num_seqs=1 if budget == 3 else 6), reqs, check=False)
    for req_id in seeded:
        assert list(a[req_id].output_token_ids) == list(b[req_id].output_token_ids)


def test_preemption_happens_in_these_workloads():
    "Sanity check: a workload of the kind `workloads()` draws (tight pool, shared prompt) does reach preemption."
    cfg = dict(block_size=2, num_gpu_blocks=17, budget=8, max_num_seqs=4, prefix_caching=True)
    reqs = [dict(id=f"r{i}", prompt=list(range(1, 13)), sp=SamplingParams(temperature=0, max_tokens=10),
                 arrival=0, abort=None) for i in range(4)]
    objs = run(cfg, reqs)
    assert sum(o.num_preemptions for o in objs.values()) > 0


def test_min_tokens_masks_eos_through_the_runner():
    "A prompt whose greedy next token is EOS: with `min_tokens` the first tokens avoid EOS, without it it stops at once."
    model = HistoryModel(VOCAB)
    prompt = next([a, b] for a in range(1, VOCAB) for b in range(1, VOCAB) if model.greedy_reference([a, b], 1) == [EOS])
    cfg = dict(block_size=4, num_gpu_blocks=16, budget=16, max_num_seqs=2, prefix_caching=False)
    reqs = [dict(id="plain", prompt=prompt, sp=SamplingParams(temperature=0, max_tokens=5), arrival=0, abort=None),
            dict(id="min3", prompt=prompt, sp=SamplingParams(temperature=0, max_tokens=5, min_tokens=3),
                 arrival=0, abort=None)]
    objs = run(cfg, reqs)
    assert list(objs["plain"].output_token_ids) == [EOS]
    out = list(objs["min3"].output_token_ids)
    assert len(out) >= 3 and EOS not in out[:3]
