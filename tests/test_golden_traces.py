"""minivllm's scheduler makes the same decisions as vLLM 0.33's, step by step, on recorded workloads.

Each `tests/golden/NAME.json` is a workload, and `NAME.trace.json` is what vLLM 0.33's real
scheduler decided for it, run on CPU (recorded once; CI needs no vLLM; see the Sources page).
`run_workload` replays the workload through minivllm with the same fake sampler; every step must
match: tokens per request in scheduling order, new/resumed/running, the `num_computed_tokens` sent,
new block ids, block tables, preempted ids, finished ids and reasons, sampled tokens, the step's
prefix-cache stats (recorded at admission, as vLLM 0.33 does), free blocks and queue order. Invariants
are checked after every step on the way.
"""
import json
from pathlib import Path

import pytest

from minivllm.testing.fake_worker import decisions, diff_traces, run_workload

GOLDEN = Path(__file__).parent / "golden"
WORKLOADS = sorted(p for p in GOLDEN.glob("*.json") if not p.name.endswith(".trace.json"))


def load(path: Path) -> tuple[dict, dict]:
    "A workload and vLLM's trace of it."
    return json.loads(path.read_text()), json.loads(path.with_name(path.stem + ".trace.json").read_text())


def test_enough_golden_workloads():
    assert len(WORKLOADS) >= 24
    for path in WORKLOADS:
        w, ref = load(path)
        assert w["config"]["scheduler_reserve_full_isl"] is False, path.name
        assert ref["vllm_version"] == "0.33.0" and ref["workload"] == path.name


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.stem)
def test_same_decisions_as_vllm(path):
    workload, ref = load(path)
    ours = run_workload(workload, check=True)
    assert diff_traces(ours, ref) is None, diff_traces(ours, ref)
    assert ours["requests"] == ref["requests"]  # finish step and reason, first admission and its prefix hit
    for a, b in zip(ours["steps"], ref["steps"], strict=True):  # also inside diff_traces; explicit here
        assert a.get("prefix_cache_stats") == b.get("prefix_cache_stats"), \
            f"step {a['step']}: prefix_cache_stats minivllm {a.get('prefix_cache_stats')} != vLLM {b.get('prefix_cache_stats')}"


def test_prefix_cache_stats_are_compared():
    "The golden traces exercise the stats: some steps have prefix hits, some count preempted requests."
    totals = {"hits": 0, "preempted_requests": 0}
    for path in WORKLOADS:
        _, ref = load(path)
        for st in ref["steps"]:
            for k in totals: totals[k] += (st.get("prefix_cache_stats") or {}).get(k, 0)
    assert totals["hits"] > 0 and totals["preempted_requests"] > 0, totals


def test_known_difference_priority_self_preemption():
    "vLLM 0.33 keeps scanning after a priority-policy request preempts itself; minivllm stops (the scheduling-rules article)."
    workload, ref = load(GOLDEN / "known_differences" / "priority_self_preemption.json")
    ours = run_workload(workload)
    assert decisions(ours)[:3] == decisions(ref)[:3]
    assert diff_traces(ours, ref).startswith("step 3:")
    a, b = ours["steps"][3], ref["steps"][3]
    assert a["preempted_req_ids"] == b["preempted_req_ids"] == ["L1"]  # L1 preempted itself in both
    assert list(a["num_scheduled_tokens"]) == ["L2"]                   # minivllm: the running loop ended
    assert list(b["num_scheduled_tokens"]) == ["L2", "H1"]             # vLLM 0.33: H1 still scheduled


def _grants(trace: dict) -> list[dict]:
    return [dict(st["num_scheduled_tokens"]) for st in trace["steps"]]


def test_known_difference_reserve_full_isl():
    "vLLM 0.33's default admits a waiting request only when its whole prompt fits; minivllm admits the chunk."
    workload, ref = load(GOLDEN / "known_differences" / "reserve_full_isl_default.json")
    assert workload["config"]["scheduler_reserve_full_isl"] is True       # recorded with vLLM's default
    with pytest.raises(ValueError, match="scheduler_reserve_full_isl"): run_workload(workload)
    ours = run_workload({**workload, "config": {**workload["config"], "scheduler_reserve_full_isl": False}})
    assert _grants(ref)[0] == {"A": 24}                                    # vLLM 0.33: B waits
    assert _grants(ours)[0] == {"A": 24, "B": 8}                           # minivllm: B's chunk fits
    assert ours["steps"][1]["preempted_req_ids"] == ["B"]                  # ... and is preempted next step
    assert not any(st["preempted_req_ids"] for st in ref["steps"])


def test_known_difference_threshold_single_request():
    "vLLM 0.33 applies long_prefill_token_threshold only with more than one request; minivllm always."
    workload, ref = load(GOLDEN / "known_differences" / "threshold_single_request.json")
    ours = run_workload(workload)
    assert _grants(ref)[:2] == [{"A": 40}, {"A": 1}]
    assert _grants(ours)[:4] == [{"A": 16}, {"A": 16}, {"A": 8}, {"A": 1}]


def test_known_difference_e10_self_victim():
    "Chapter 30's E10 (X its own victim): vLLM 0.33 schedules Y in that step; minivllm's running loop ends."
    workload, ref = load(GOLDEN / "known_differences" / "e10_self_victim.json")
    ours = run_workload(workload)
    k = next(st["step"] for st in ours["steps"] if st["preempted_req_ids"])
    assert decisions(ours)[:k] == decisions(ref)[:k]
    assert ours["steps"][k]["preempted_req_ids"] == ref["steps"][k]["preempted_req_ids"] == ["X"]
    assert list(ours["steps"][k]["num_scheduled_tokens"]) == ["H"]
    assert list(ref["steps"][k]["num_scheduled_tokens"]) == ["H", "Y"]


def test_known_difference_stop_token_before_min_tokens():
    "A stop token returned before min_tokens: vLLM 0.33's check_stop stops; minivllm waits for min_tokens."
    workload, ref = load(GOLDEN / "known_differences" / "stop_before_min_tokens.json")
    ours = run_workload(workload)
    assert ref["requests"]["A"]["finish"] == {"step": 1, "reason": "stop"}
    assert ours["requests"]["A"]["finish"] == {"step": 4, "reason": "stop"}
    assert decisions(ours)[:1] == decisions(ref)[:1]
