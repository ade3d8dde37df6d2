"""Async scheduling (issue 21, chapter 06): the engine plans step N+1 while step N runs.

- on a tiny model, greedy tokens equal the synchronous engine's, with preemptions, prefix hits,
  stop tokens and aborts (chapter 21's `EngineCore.step_with_batch_queue` over chapter 06's
  `AsyncScheduler` and `UniProcExecutor`);
- the placeholders' accounting, step by step;
- the block-reuse invariants, each shown to fail when what protects it is taken away.
"""
import time
from collections import deque

import numpy as np
import pytest

from minivllm.config import CacheConfig, SchedulerConfig
from minivllm.core.sched.async_scheduler import AsyncScheduler
from minivllm.core.sched.output import ModelRunnerOutput
from minivllm.core.sched.scheduler import Scheduler
from minivllm.executor.uniproc_executor import UniProcExecutor
from minivllm.request import Request, RequestStatus
from minivllm.sampling_params import SamplingParams
from minivllm.testing.async_scheduling import (BlockReuseChecker, EagerWriter, SlowWorker,
                                               StepOnResult, crowded_run, run_batch_queue,
                                               run_sync, tokens_by_request)


# ---------------------------------------------------------------- the engine on a tiny model
def build(path, async_scheduling: bool, **kwargs):
    "An `EngineCore` over the tiny model: eager, one thread, CPU."
    from minivllm.engine.arg_utils import EngineArgs
    from minivllm.engine.core import build_engine_core
    args = dict(model=str(path), device="cpu", enforce_eager=True, num_threads=1, seed=0,
                max_model_len=128, async_scheduling=async_scheduling, block_size=16)
    return build_engine_core(EngineArgs(**{**args, **kwargs}))


PREFIX = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]   # > one block of 16


def prompts(n: int = 10) -> list[list[int]]:
    "`n` prompts of 3 to 40 tokens; every third starts with a shared 17-token prefix."
    out = []
    for i in range(n):
        body = [(31 * i + 7 * j) % 250 + 3 for j in range(3 + (i * 7) % 38)]
        out.append(PREFIX + body if i % 3 == 0 else body)
    return out


def run_engine(core, reqs: list[tuple[str, list[int], SamplingParams]], abort_at: dict | None = None,
               check=None) -> dict:
    "Add `reqs`, step until done (aborting `abort_at[call] = req_id`); tokens and finish per id."
    for rid, prompt, sp in reqs:
        core.add_request(Request(rid, prompt, sp, eos_token_id=None))
    outputs, calls = [], 0
    step = getattr(core, "step_fn", core.step)
    while core.scheduler.has_requests() or getattr(core, "batch_queue", None):
        out, _ = step()
        outputs.extend(out.outputs)
        calls += 1
        if check is not None: check(core)
        if abort_at and calls in abort_at: core.abort_requests([abort_at[calls]])
    return tokens_by_request(outputs)


def greedy(max_tokens: int, **kwargs) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kwargs)


@pytest.fixture(scope="module")
def reference(tiny_llama_path):
    "The synchronous engine with room for everyone: each request's greedy tokens."
    core = build(tiny_llama_path, False, num_gpu_blocks_override=200)
    reqs = [(f"r{i}", p, greedy(6 + i % 5)) for i, p in enumerate(prompts())]
    return reqs, run_engine(core, reqs)


def test_async_engine_is_built_by_the_flag(tiny_llama_path):
    from minivllm.engine.arg_utils import EngineArgs
    assert EngineArgs().async_scheduling is False          # minivllm's default (vLLM 0.33: on)
    sync_core, async_core = (build(tiny_llama_path, a, num_gpu_blocks_override=40)
                             for a in (False, True))
    assert type(sync_core.scheduler) is Scheduler and sync_core.batch_queue is None
    assert isinstance(async_core.scheduler, AsyncScheduler)
    assert isinstance(async_core.model_executor, UniProcExecutor)
    assert async_core.batch_queue_size == 2
    assert async_core.step_fn == async_core.step_with_batch_queue
    assert sync_core.step_fn == sync_core.step
    async_core.shutdown()


def test_cli_has_the_flag():
    from minivllm.engine.arg_utils import EngineArgs
    from minivllm.utils.argparse_utils import FlexibleArgumentParser
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    assert EngineArgs.from_cli_args(parser.parse_args(["--async-scheduling"])).async_scheduling is True
    assert EngineArgs.from_cli_args(parser.parse_args([])).async_scheduling is False


@pytest.mark.parametrize("blocks", [200, 12])     # room for all; preemptions
def test_greedy_tokens_equal_the_synchronous_engines(tiny_llama_path, reference, blocks):
    reqs, expected = reference
    sync = run_engine(build(tiny_llama_path, False, num_gpu_blocks_override=blocks), reqs)
    core = build(tiny_llama_path, True, num_gpu_blocks_override=blocks)
    preemptions = []
    def check(core):
        s = core.scheduler
        preemptions.extend(r.request_id for r in s.waiting if r.status == RequestStatus.PREEMPTED)
        for r in s.running:     # one step in flight at most between calls: one placeholder
            assert 0 <= r.num_output_placeholders <= len(core.batch_queue) <= 1
            assert r.num_computed_tokens <= r.num_tokens + r.num_output_placeholders
    got = run_engine(core, reqs, check=check)
    core.shutdown()
    assert got == sync == expected
    if blocks == 12: assert preemptions, "the small pool should preempt"
    assert core.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == blocks - 1


def test_stop_tokens_and_aborts(tiny_llama_path, reference):
    "Requests stop on a token they generate (the step planned after it is thrown away); aborts."
    reqs, expected = reference
    stops = [(rid, p, greedy(sp.max_tokens, stop_token_ids=[expected[rid][0][2]]))
             for rid, p, sp in reqs[:4]] + reqs[4:]
    abort_at = {6: "r5", 9: "r8"}
    sync = run_engine(build(tiny_llama_path, False, num_gpu_blocks_override=12), stops, abort_at)
    core = build(tiny_llama_path, True, num_gpu_blocks_override=12)
    got = run_engine(core, stops, abort_at)
    core.shutdown()
    for rid, _, _ in stops[:4]:
        toks = expected[rid][0]
        assert got[rid] == sync[rid] == (toks[:toks.index(toks[2]) + 1], "stop"), rid
    for rid in ("r5", "r8"):                        # aborted: a prefix of the full answer
        assert got.get(rid, ([], None))[1] is None
        assert expected[rid][0][:len(got.get(rid, ([], None))[0])] == got.get(rid, ([], None))[0]
    for rid, _, _ in stops[4:]:
        if rid not in ("r5", "r8"): assert got[rid] == expected[rid], rid
    assert not core.scheduler.requests and not core.batch_queue


def test_a_failed_step_raises_from_the_queue(tiny_llama_path):
    core = build(tiny_llama_path, True, num_gpu_blocks_override=40)
    def broken(scheduler_output): raise RuntimeError("the worker failed")
    core.model_executor.driver_worker.execute_model = broken
    core.add_request(Request("x", [3, 4, 5], greedy(4)))
    with pytest.raises(RuntimeError, match="the worker failed"):
        for _ in range(3): core.step_fn()
    core.shutdown()


# ---------------------------------------------------------------- the scheduler on the fake worker
def small_scheduler(cls=AsyncScheduler, num_blocks=64, **kwargs):
    config = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8,
                             max_model_len=min(64, 4 * (num_blocks - 1)))
    return cls(config, CacheConfig(4, num_blocks, enable_prefix_caching=False), **kwargs)


def test_placeholders_count_the_tokens_in_flight():
    s = small_scheduler()
    s.add_request(Request("a", [1, 2, 3, 4, 5], greedy(3)))
    a, seen = s.requests["a"], []
    steps = deque()
    for token in (100, 101, 102):
        steps.append(s.schedule())
        if len(steps) < 2: steps.append(s.schedule())
        seen.append((a.num_computed_tokens, a.num_output_placeholders))
        s.update_from_output(steps.popleft(), ModelRunnerOutput.from_samples({"a": [token]}))
        seen.append((a.num_output_tokens, a.num_output_placeholders))
    # prefill + decode in flight; then one more decode; then max_tokens is in sight: nothing new
    assert seen == [(6, 2), (1, 1), (7, 2), (2, 1), (7, 1), (3, 0)]
    assert a.is_finished() and a.output_token_ids == [100, 101, 102]
    assert steps[0].num_scheduled_tokens == {}    # the last planned step is empty


def test_the_synchronous_scheduler_never_has_placeholders():
    s = small_scheduler(Scheduler)
    s.add_request(Request("a", [1, 2, 3], greedy(3)))
    while s.has_requests():
        so = s.schedule()
        assert all(r.num_output_placeholders == 0 for r in s.running)
        s.update_from_output(so, ModelRunnerOutput.from_samples(
            {rid: [9] for rid in so.num_scheduled_tokens}))


def test_fake_worker_runs_agree():
    "Sync and async loops give every request the same tokens (EOS listed for some)."
    def run(cls, loop):
        s = small_scheduler(cls, num_blocks=40)
        for i in range(8):
            r = Request(f"r{i}", list(range(1, 4 + 3 * i)), greedy(6 + i % 3))
            if i < 3: r.sampling_params.ignore_eos, r.eos_token_id = False, 2
            s.add_request(r)
        worker = SlowWorker(output_token_ids={"r0": [5, 2], "r1": [5, 6, 7, 2]}, block_size=4)
        ex = UniProcExecutor(worker)
        out = tokens_by_request(loop(s, ex)[0])
        ex.shutdown()
        return out
    assert run(AsyncScheduler, run_batch_queue) == run(Scheduler, run_sync)


# ---------------------------------------------------------------- blocks and steps in flight
def crowded(defer_block_free: bool) -> AsyncScheduler:
    s = small_scheduler(num_blocks=15, defer_block_free=defer_block_free)
    for i in range(12): s.add_request(Request(f"q{i}", list(range(1, 6 + i)), greedy(10)))
    return s


@pytest.mark.parametrize("defer_block_free", [False, True])
def test_steps_read_intact_kv_when_they_run_in_order(defer_block_free):
    "The worker's simulated KV cache: every step finds its earlier positions intact."
    worker = SlowWorker(block_size=4)
    got = crowded_run(crowded(defer_block_free), UniProcExecutor(worker))
    assert sum(reason is not None for _, reason in got.values()) >= 4


def test_an_out_of_order_writer_needs_delayed_frees():
    def run(defer_block_free):
        worker = SlowWorker(block_size=4)
        return crowded_run(crowded(defer_block_free), StepOnResult(worker), [EagerWriter(worker)])
    with pytest.raises(AssertionError, match="overwritten before this step ran"):
        run(defer_block_free=False)
    run(defer_block_free=True)


def test_no_block_handed_on_while_a_step_in_flight_reads_it():
    worker, checker = SlowWorker(block_size=4), BlockReuseChecker()
    crowded_run(crowded(True), UniProcExecutor(worker), [checker])
    assert checker.tables == worker.blocks_read          # the checker saw what the worker read
    with pytest.raises(AssertionError, match="blocks handed on"):
        crowded_run(crowded(False), UniProcExecutor(SlowWorker()), [BlockReuseChecker()])


def test_delayed_frees_return_every_block():
    s = crowded(True)
    crowded_run(s, UniProcExecutor(SlowWorker(block_size=4)))
    assert not s.deferred_frees and s.processed_step_seq == s.sched_step_seq
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 14


# ---------------------------------------------------------------- the front ends use the batch queue
def test_llm_with_async_scheduling_overlaps_and_matches(tiny_llama_path, reference):
    from minivllm.entrypoints.llm import LLM
    reqs, expected = reference
    llm = LLM(tiny_llama_path, device="cpu", enforce_eager=True, num_threads=1, max_model_len=128,
              num_gpu_blocks=200, async_scheduling=True)
    core, queued = llm.engine_core, []
    step_with_batch_queue = core.step_with_batch_queue
    def watched():
        out = step_with_batch_queue()
        queued.append(len(core.batch_queue))
        return out
    core.step_fn = watched
    outs = llm.generate([p for _, p, _ in reqs], [sp for _, _, sp in reqs], use_tqdm=False)
    assert [list(o.outputs[0].token_ids) for o in outs] == [expected[rid][0] for rid, _, _ in reqs]
    assert max(queued) == 1          # a step stayed in flight while the next one was scheduled
    again = llm.generate([reqs[0][1]], reqs[0][2], use_tqdm=False)[0]   # a second call: clean
    assert list(again.outputs[0].token_ids) == expected[reqs[0][0]][0]
    core.shutdown()


def test_async_llm_server_engine_with_async_scheduling(tiny_llama_path, reference):
    import asyncio
    from minivllm.engine.async_llm import AsyncLLM
    reqs, expected = reference
    engine = AsyncLLM(tiny_llama_path, device="cpu", enforce_eager=True, num_threads=1,
                      max_model_len=128, num_gpu_blocks=200, async_scheduling=True)
    async def one(i, prompt, sp):
        return [o async for o in engine.generate(prompt, sp, request_id=f"q{i}")][-1]
    async def all_of_them():
        return await asyncio.gather(*(one(i, p, sp) for i, (_, p, sp) in enumerate(reqs)))
    try:
        finals = asyncio.run(all_of_them())
        assert ([list(f.outputs[0].token_ids) for f in finals]
                == [expected[rid][0] for rid, _, _ in reqs])
    finally: engine.shutdown()


def test_a_failing_request_fails_alone_with_async_scheduling(tiny_llama_path):
    """A request that fails inside a step (top_k 2^31 overflows the input batch's int32) joins a running
    batch under async scheduling, where the failing step was scheduled a call earlier and another may be
    in flight: it alone gets an error, the others finish with the tokens they get alone."""
    import asyncio
    from minivllm.engine.async_llm import (AsyncLLM, EngineCoreRequestType, EngineRequestError,
                                           RequestOutputCollector, encode_request, request_to_wire)
    from minivllm.sampling_params import RequestOutputKind
    engine = AsyncLLM(tiny_llama_path, device="cpu", enforce_eager=True, num_threads=1,
                      max_model_len=128, num_gpu_blocks=200, async_scheduling=True)
    sp = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = [[7 + i, 3, 9, 11 + i] * 3 for i in range(4)]
    async def tokens(prompt, request_id):
        return [t async for out in engine.generate(prompt, sp, request_id,
                                                   output_kind=RequestOutputKind.DELTA)
                for t in out.outputs[0].token_ids]
    async def alone(): return [await tokens(p, f"alone-{i}") for i, p in enumerate(prompts)]
    async def with_poison():
        tasks = [asyncio.create_task(tokens(p, f"batch-{i}")) for i, p in enumerate(prompts)]
        while (await engine.get_stats())["num_running_reqs"] < 4: await asyncio.sleep(0.01)
        # a token id past the vocabulary: the input processor refuses it, so it is sent around
        # AsyncLLM.add_request (below) and fails in the engine's step
        poisoned = SamplingParams(temperature=1, max_tokens=8, logit_bias={10**6: 1.0})
        poison = Request("poison", [1, 2, 3], poisoned, None)
        collector = RequestOutputCollector(asyncio.get_running_loop())
        with engine.processor_lock:                  # around AsyncLLM.add_request's checks
            engine.output_processor.add_request(poison, None, None, 0, collector)
        engine._send_frames(encode_request(EngineCoreRequestType.ADD, request_to_wire(poison)))
        with pytest.raises(EngineRequestError): await collector.get()
        return await asyncio.gather(*tasks)
    try:
        expected = asyncio.run(alone())
        assert asyncio.run(asyncio.wait_for(with_poison(), 120)) == expected
    finally: engine.shutdown()


# ---------------------------------------------------------------- the runner runs a step ahead
def test_the_runner_prepares_a_step_while_the_model_runs_the_one_before(tiny_llama_path, reference):
    """Step 2 is prepared on the engine's thread while step 1 is held inside the model; its decode input
    is step 1's token, copied on the device (vLLM's prev_sampled_token_ids); the tokens are the
    reference's."""
    import threading
    reqs, expected = reference
    core = build(tiny_llama_path, True, num_gpu_blocks_override=40)
    runner = core.model_executor.driver_worker
    inside, gate, forward = threading.Event(), threading.Event(), runner.model.forward
    def held(*args, **kwargs):
        inside.set()
        assert gate.wait(30), "the test never opened the gate"
        return forward(*args, **kwargs)
    runner.model.forward = held
    rid, prompt, sp = reqs[0]
    core.add_request(Request(rid, prompt, sp, eos_token_id=None))
    outputs = []
    core.step_fn()                                   # step 1 (the prefill) queued, not waited for
    assert inside.wait(30)
    second = threading.Thread(target=lambda: outputs.extend(core.step_fn()[0].outputs))
    second.start()                                   # schedules and prepares step 2, then waits
    while runner.in_flight.step.batch_inputs.positions[0] != len(prompt): time.sleep(0.01)
    step2 = runner.in_flight
    assert not step2.prev.done and step2.fill is not None     # prepared behind step 1
    assert step2.step.input_ids[0].item() == -1                # its input: a placeholder, until
    gate.set(); second.join(30)
    runner.model.forward = forward
    while core.has_work(): outputs.extend(core.step_fn()[0].outputs)
    core.shutdown()
    assert tokens_by_request(outputs)[rid] == expected[rid]
    assert step2.fill.done                                      # the device filled it


def test_sampling_that_reads_outputs_matches_the_synchronous_engine(tiny_llama_path, reference):
    """Penalties and bad words read the output tokens, prompt logprobs are delivered in order: those
    steps finish before the next is prepared. With seeds, min_tokens and logprobs beside them, every
    token, finish and logprob equals the synchronous engine's."""
    reqs, expected = reference
    r0, r3 = expected["r0"][0], expected["r3"][0]
    bad = greedy(8)
    bad._bad_words_token_ids = [[r0[2], r0[3]]]     # as the processor writes it from bad_words
    special = [
        ("pen", reqs[0][1], greedy(8, repetition_penalty=1.3, frequency_penalty=0.5)),
        ("bad", reqs[0][1], bad),
        ("seed", reqs[1][1], SamplingParams(temperature=0.8, seed=7, max_tokens=8, ignore_eos=True)),
        ("lp", reqs[2][1], greedy(6, logprobs=3, prompt_logprobs=2)),
        ("min", reqs[3][1], SamplingParams(temperature=0, max_tokens=8, min_tokens=3,
                                           stop_token_ids=[r3[1]])),
    ] + reqs[4:]
    def run(async_scheduling):
        core = build(tiny_llama_path, async_scheduling, num_gpu_blocks_override=60)
        for rid, prompt, sp in special: core.add_request(Request(rid, prompt, sp, eos_token_id=None))
        outputs = []
        while core.has_work(): outputs.extend(core.step_fn()[0].outputs)
        core.shutdown()
        logprobs = [(o.request_id, o.new_logprobs, o.new_prompt_logprobs) for o in outputs
                    if o.new_logprobs is not None or o.new_prompt_logprobs is not None]
        return tokens_by_request(outputs), logprobs
    sync_tokens, sync_logprobs = run(False)
    async_tokens, async_logprobs = run(True)
    assert async_tokens == sync_tokens
    assert sync_tokens["bad"][0][:4] != r0[:4] and sync_tokens["bad"][0][:3] == r0[:3]
    assert len(sync_tokens["min"][0]) >= 3 > r3.index(r3[1]) + 1     # it stops only after 3
    assert [(r, a is None, b is None) for r, a, b in async_logprobs] == [
        (r, a is None, b is None) for r, a, b in sync_logprobs]
    for (_, a, b), (_, c, d) in zip(async_logprobs, sync_logprobs):
        for x, y in ((a, c), (b, d)):
            if x is None: continue
            assert x.logprob_token_ids == y.logprob_token_ids
            np.testing.assert_allclose(np.array(x.logprobs), np.array(y.logprobs), atol=1e-5)
