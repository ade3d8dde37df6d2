"""Chapter 30's worked examples as workloads: they run with the invariants checked, and an `LLM`
replays each of them with the schedule the model-free worker made."""
import pytest

from minivllm.testing.worked_examples import (e1_workload, e3_workload, e5_workload, e6_workload,
    e6_variant_workload, example_request, example_workload, fit_to_vocab, llms_for,
    replay_on_engine, schedule_difference, worked_example_workloads, worked_examples_on_engine)
from minivllm.testing.timeline import record_workload, workload_arrivals


@pytest.mark.parametrize("full", [True, False])
def test_every_example_runs_with_invariants_and_ends_with_a_cleanup_step(full):
    workloads = worked_example_workloads(full)
    assert len(workloads) == 15 and all(name.startswith("E") for name in workloads)
    for name, wl in workloads.items():
        rec = record_workload(wl, check=True)
        last = rec[-1]
        assert last.total_scheduled == 0 and last.finished_req_ids, name   # E14 in every run
        assert {q for r in rec for q in r.finished} == {str(r["id"]) for r in wl["requests"]}, name


def test_fit_to_vocab_keeps_equal_ids_equal_and_the_schedule():
    wl = e6_workload()                          # D shares A's first 8 ids: a prefix hit
    fitted = fit_to_vocab(wl, 64)
    ids = [r["prompt_token_ids"] for r in fitted["requests"]]
    assert max(max(p) for p in ids) < 64 and ids[3][:8] == ids[0][:8] and ids[2][0] != ids[0][0]
    assert schedule_difference(record_workload(wl), record_workload(fitted)) is None
    assert fit_to_vocab(wl, 100_000) is wl
    with pytest.raises(ValueError): fit_to_vocab(wl, 10)


def test_schedule_difference_names_the_first_difference():
    a, b = record_workload(e3_workload(True)), record_workload(e3_workload(False))
    assert schedule_difference(a, record_workload(e3_workload(True))) is None
    diff = schedule_difference(a, b)
    assert diff.startswith("step 0: ") and "total_scheduled: 8 != 5" in diff


@pytest.fixture(scope="module")
def tiny_llms_by_block_size(tiny_llama_1k_vocab_path):
    """This file's own `LLM`s over the 1024-token Llama (room for E5's 275 distinct prompt ids), one
    per block size, each sized for every CPU-sized example of that block size."""
    return llms_for(worked_example_workloads(full=False).values(), model=tiny_llama_1k_vocab_path)


def test_every_example_through_a_tiny_llm_has_the_model_free_schedule(tiny_llms_by_block_size):
    results = worked_examples_on_engine(llms=tiny_llms_by_block_size)
    assert set(results) == set(worked_example_workloads(full=False))
    for name, r in results.items():
        assert r["equal"], (name, r["difference"])
        assert r["real"].device.startswith("llama on cpu")
        sampled = [t for rec in r["real"] for q in rec.scheduled for t in q.new_token_ids]
        assert sampled and max(sampled) < 1024     # the tiny model's vocabulary: it ran


def test_replay_refuses_what_the_llm_cannot_run(tiny_llms_by_block_size):
    llm = tiny_llms_by_block_size[4]
    with pytest.raises(ValueError, match="block_size"): replay_on_engine(e5_workload(full=True), llm)
    big = example_workload("big", [example_request("A", 3)], num_blocks=100_000)
    with pytest.raises(ValueError, match="num_gpu_blocks"): replay_on_engine(big, llm)
    with pytest.raises(ValueError, match="vocabulary"): replay_on_engine(e6_variant_workload(), llm)
    llm.engine_core.add_request(workload_arrivals(e1_workload())[0][0])
    try:
        with pytest.raises(ValueError, match="busy"): replay_on_engine(e1_workload(), llm)
    finally:
        while llm.engine_core.scheduler.has_requests(): llm.engine_core.step()


def test_e5_is_the_articles_state():
    "E5 as the scheduler-role article states it: A 99 of 100 computed, B 0 of 4096, C 0 of 128, one step."
    st = record_workload(e5_workload(full=True))[1]
    assert [(q.req_id, q.num_computed_before, q.num_tokens, q.grant) for q in st.scheduled] == \
        [("A", 99, 100, 1), ("B", 0, 4096, 256), ("C", 0, 128, 128)]


def test_e6_variant_resumes_next_round_only_when_a_block_comes_free():
    "C preempts itself at step 1; it resumes at step 2 on its cached blocks only if A's blocks come free."
    from minivllm.testing.worked_examples import e6_next_round_workload
    def resumed(wl):
        return next((r.step, r["C"].prefix_hit_tokens) for r in record_workload(wl)
                    if r.grants.get("C") and r["C"].kind == "resumed")
    assert resumed(e6_variant_workload()) == (9, 0)
    assert resumed(e6_next_round_workload()) == (2, 8)
