"""The GPU check's own logic (bench/gpu_check.py): the plans per GPU kind, verdicts, exit codes, the report
(written after every item, merged over a carried one on a rerun, kept when the check is killed), the
timelines kept and drawn, nano-vllm's workload, the bf16 criterion and the helpers it imports. The whole
dry run, in the device image's versions, is `make gpu-rehearsal` (bench/gpu_rehearsal.sh), which `make
test` runs; bench/GPU_CHECK.md says how the real run is made."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_every_helper_resolves(gc):
    "Each non-public name the check uses still exists where HELPERS says (it breaks here, not on the device)."
    for name in gc.HELPERS: assert gc.helper(name) is not None, name
    import minivllm
    for name in ("LLM", "SamplingParams", "load_model", "get_attn_backend"): assert getattr(minivllm, name)


def speed(gc, ratio, tps, hf, roof, hf_status="ok", measured=None):
    items = {"Qwen3-0.6B/step_times": {"batch1": {"eager_over_graph": ratio}, "batch256": {"graph_over_roofline": roof}},
             "Qwen3-0.6B/minivllm_graphs": {"status": "ok", "tok_per_s": tps},
             "Qwen3-0.6B/hf_generate_batch": {"status": hf_status, "tok_per_s": hf, "measured_s": measured}}
    d = {"items": items, "workload": {"output_tokens": 10_000}}
    return {v[0].split(": ", 1)[1][:8]: (v[1], v[2]) for v in gc.goals({"d": d}) if v[0].startswith("Qwen3")}


def test_speed_verdicts(gc):
    "3x graphs over eager, 5x transformers, within 1.3x of the roofline."
    good, bad = speed(gc, 3.5, 5100, 1000, 1.29), speed(gc, 2.9, 4900, 1000, 1.31)
    assert {v for _, v in good.values()} == {"PASS"} and {v for _, v in bad.values()} == {"FAIL"}
    assert {v for _, v in speed(gc, None, None, 1000, None).values()} == {"n/a"}


def test_cut_off_transformers_gives_a_lower_bound(gc):
    "transformers stopped after 20 s of a 10,000-token workload: its rate < 500 tok/s, so 5,000 tok/s is >= 10x."
    measured, verdict = speed(gc, 3.5, 5000, None, 1.0, hf_status="timeout: stopped after 50 s", measured=20)[">= 5x tr"]
    assert verdict == "PASS" and measured.startswith(">= 10")
    _, verdict = speed(gc, 3.5, 1000, None, 1.0, hf_status="timeout: stopped after 50 s", measured=20)[">= 5x tr"]
    assert verdict.startswith("n/a")


def test_failures_make_a_stage_fail(gc):
    ok = {"status": "ok", "pass": True}
    assert gc.failures({"items": {"x": ok}}) == []
    assert gc.failures({"items": {"x": {"status": "ok", "pass": False}}})
    assert gc.failures({"items": {"x": {"status": "error: RuntimeError: boom"}}})
    assert gc.failures({"items": {"x": {"status": "timeout: stopped after 30 s"}}})
    assert gc.failures({"items": {"x": {"status": "not run: stage out of time"}}})
    assert gc.failures({"items": {"x": ok, "pytest": {"status": "ok", "rc": 1, "pass": False, "summary": "1 failed"}}})
    assert gc.failures({"items": {}, "error": "ImportError: no minivllm"})
    # a reference run cut off, not run or broken is a bound or 'not run' (the report says which), never a failure
    for status in ("timeout: stopped after 50 s", "not run: the plan left no time for it", "error: OOM"):
        for engine in ("hf_generate_batch", "hf_padded_generate", "minivllm_eager"):
            assert gc.failures({"items": {f"Qwen3-0.6B/{engine}": {"status": status}}}) == []
    assert gc.failures({"items": {"Qwen3-0.6B/minivllm_graphs": {"status": "timeout: stopped after 50 s"}}})


def test_stage_exits_nonzero_when_an_item_fails(gc, tmp_path, monkeypatch):
    def stage(): gc.attempt("always_wrong", lambda: {"pass": False}, 10)
    monkeypatch.setattr(gc, "stage_b", stage)
    assert gc.main(["b", "--work", str(tmp_path), "--budget", "60", "--dry-run"]) == 1
    assert json.loads((tmp_path / "b.json").read_text())["failures"] == ["always_wrong: did not pass"]
    monkeypatch.setattr(gc, "stage_b", lambda: gc.attempt("fine", lambda: {"pass": True}, 10))
    gc.RESULTS.clear()
    assert gc.main(["b", "--work", str(tmp_path), "--budget", "60", "--dry-run"]) == 0


def test_report_puts_correctness_first(gc, tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    a = {"items": {"sweep/bfloat16/d128/qpk2/qwen3_decode64": {"status": "ok", "rel_err": 1e-3, "tol": 2e-2,
                                                                 "pass": True, "kernel": "decode"},
                   "pytest": {"status": "ok", "rc": 0, "pass": True, "summary": "9 passed"}}}
    c = {"items": {"worked_examples": {"status": "ok", "pass": False, "examples": {"E1": {"equal": False}}}}}
    (work / "a.json").write_text(json.dumps(a)); (work / "c.json").write_text(json.dumps(c))
    (work / "stages.tsv").write_text("a\t0\t12\nc\t1\t30\n")
    gc.ARGS = gc.argparse.Namespace(work=str(work), out=str(out), dry_run=False, stage="report")
    gc.write_report(work, out)
    text = (out / "report.md").read_text()
    tables = [m.start() for m in re.finditer(r"^\| ", text, re.M)]
    assert text.index("## Correctness") < tables[0] < text.index("## Speed goals") < text.index("## Plan and stages")
    first = text[text.index("## Correctness"):text.index("## Speed goals")]
    assert "| a: Qwen3 decode" in first and "PASS" in first
    assert re.search(r"worked examples.*\| 0/1 equal, 0 timelines kept \| FAIL \|", first)
    assert re.search(r"float16 tolerance.*\| not run \|", first)


@pytest.mark.parametrize("kind", ["H100", "H200"])
def test_plans_fit_the_budget(gc, kind):
    "First call <= 8 min, a rerun of any stage <= 3 min, start-up and transfers included; every required item planned."
    plan = gc.make_plan(kind)
    assert plan["total_s"] <= gc.CALL_S["first"] == 480 and not plan["dropped"]
    assert plan["start_s"] >= 60 and set(plan["stages"]) == set("bcmsda")
    for item in gc.ITEMS:
        assert item.key in plan["items"], item.key
        if not item.want: assert plan["items"][item.key] >= item.seconds > 0, item.key
    assert plan["items"]["a/pytest"] >= 50 and plan["items"]["a/sweep"] >= 20    # elastic, at their minimum
    for stage in "bcmsda":
        rerun = gc.make_plan(kind, only=[stage])
        assert rerun["total_s"] <= gc.CALL_S["rerun"] == 180 and not rerun["dropped"], (stage, rerun)
    slow = gc.make_plan(kind, bandwidth=0.6 * gc.KIND_BANDWIDTH[kind])   # a slower card of the kind: still fits,
    assert slow["total_s"] <= 480 and not slow["dropped"]                 # the elastic items shrink
    assert slow["items"]["a/pytest"] <= plan["items"]["a/pytest"]


def test_plan_scales_the_memory_bound_items_by_bandwidth(gc):
    "An H100 (3.0 TB/s) gets more seconds than an H200 (4.2) for a throughput run, the same for a compile-bound one."
    h100, h200 = gc.make_plan("H100"), gc.make_plan("H200")
    run = "d/Qwen3-0.6B/minivllm_graphs"
    assert h100["items"][run] > h200["items"][run] == 24
    compile_bound = "a/sweep/bfloat16/d128/qpk2/qwen3_decode64"
    assert h100["items"][compile_bound] == h200["items"][compile_bound]


def test_a_rerun_plans_only_what_it_names_and_drops_what_does_not_fit(gc):
    plan = gc.make_plan("H200", only=["b/Qwen3ForCausalLM/bf16", "a/pytest"])
    assert set(plan["items"]) == {"b/Qwen3ForCausalLM/bf16", "a/pytest"} and set(plan["stages"]) == {"b", "a"}
    assert plan["call"] == "rerun" and plan["total_s"] <= 180
    everything = gc.make_plan("H100", only=[s for s in "bcmsda"])      # more than 3 minutes of required items
    assert everything["dropped"] and everything["total_s"] <= 180


def test_gpu_check_sh_takes_its_limits_from_the_plan():
    "No second copy of the limits: the shell evaluates the plan's LIMIT_<stage> for each stage it runs."
    sh = (ROOT / "bench" / "gpu_check.sh").read_text()
    assert "declare -A LIMIT" not in sh and 'eval "$PLAN"' in sh and "LIMIT_$s" in sh


def test_roofline_counts_what_a_forward_reads(gc):
    "Not the embedding table (a forward gathers a few rows) nor the LM head (compute_logits is not timed)."
    import torch
    from torch import nn
    m = nn.Module()
    m.embed, m.layer, m.head = nn.Embedding(1000, 16), nn.Linear(16, 16, bias=False), nn.Linear(16, 1000, bias=False)
    assert gc.forward_weight_bytes(m, 1000) == 16 * 16 * 4
    m.head.weight = m.embed.weight                                    # tied: still not read by the forward
    assert gc.forward_weight_bytes(m, 1000) == 16 * 16 * 4 and torch.is_tensor(m.head.weight)


def test_verify_names_every_missing_path(gc):
    "The rehearsal fails unless the dry run took the device run's paths."
    problems = gc.verify_paths({"stages": [["a", "0", "1"]]})
    text = "\n".join(problems)
    for what in ("stage k", "stage b exited", "stage m exited", "stage s exited", "bf16 64-sequence",
                 "Triton backend", "KV-cache profiling", "worked examples", "pytest", "memory-pressure", "serving",
                 "profiler breakdown", "whole-run roofline", "H100 plan", "H200 plan", "bf16 criterion"):
        assert what in text, (what, text)


SPILL = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("gpu_check", sys.argv[1])
gc = importlib.util.module_from_spec(spec); spec.loader.exec_module(gc)
sig = dict(out_ptr="*fp32", cu_q_ptr="*i32", acc_ptr="*fp32", m_ptr="*fp32", l_ptr="*fp32", num_heads="i32")
r = gc.compile_sm90(gc.helper("_reduce_segments_kernel"), sig, dict(HEAD_DIM=128, HEAD_PAD=128, NUM_SEGMENTS=64), 1)
print(json.dumps({"r": r, "failures": gc.failures({"items": {"compile/fp32/d128/reduce": {"status": "ok", **r}}})}))
"""


def test_a_spilling_kernel_fails_stage_k():
    "The sm_90 check can fail: the reduce kernel with 64 segments of 128 on one warp spills (stage k then exits 1)."
    import os, subprocess, sys
    pytest.importorskip("triton.backends.nvidia.compiler")
    env = {**os.environ, "TRITON_INTERPRET": "0"}             # compiled, not interpreted (as stage k runs)
    p = subprocess.run([sys.executable, "-c", SPILL, str(ROOT / "bench" / "gpu_check.py")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["r"]["spilled_bytes"] > 0 and out["r"]["pass"] is False and out["failures"]


def test_decode_tile_sweep_runs_and_checks_every_configuration(monkeypatch):
    "bench/gpu_decode_tiles.py at toy size under the interpreter: a row per kernel and configuration, all exact."
    spec = importlib.util.spec_from_file_location("gpu_decode_tiles", ROOT / "bench" / "gpu_decode_tiles.py")
    tiles = importlib.util.module_from_spec(spec); spec.loader.exec_module(tiles)
    monkeypatch.setattr(tiles, "TILES", (16, 32)); monkeypatch.setattr(tiles, "WARPS", (4,))
    monkeypatch.setattr(tiles.gpu_check, "ARGS", type("A", (), {"dry_run": True}))   # as main() sets
    rows = tiles.sweep("SmolLM2-135M", batch=2, ctx=20, bandwidth=1e9)
    assert [(r["kernel"], r["tile"]) for r in rows] == [(k, t) for k in ("unified", "split_kv") for t in (16, 32)]
    assert all(r["rel_err"] < 1e-5 and r["us"] > 0 for r in rows)     # fp32 on a CPU: the same sums, reordered
    assert [r["table"] for r in rows] == [False, True] * 2   # fp32 at head 64: the table's tile is 32, 4 warps


def test_nano_vllm_workload_is_nano_vllms_bench(gc):
    """Its prompts and lengths are bench.py's, call for call (seed(0), then every prompt, then every max_tokens);
    the output tokens add up to the 133,966 nano-vllm's README reports for both vLLM and nano-vllm."""
    import random
    prompts, outs = gc.nano_vllm_workload()
    random.seed(0)                                   # bench.py, as written there (module-level randint)
    ref_prompts = [[random.randint(0, 10000) for _ in range(random.randint(100, 1024))] for _ in range(256)]
    ref_outs = [random.randint(100, 1024) for _ in range(256)]
    assert (prompts, outs) == (ref_prompts, ref_outs)
    assert sum(outs) == gc.NANO_VLLM_OUTPUT_TOKENS == 133_966
    assert len(prompts) == 256 and all(100 <= len(p) <= 1024 and max(p) <= 10000 for p in prompts)


def test_logprobs_close_is_vllms_rule(gc):
    "Tokens equal; or at the first difference each token in the other's top-k; nothing compared after it."
    lp = lambda *ids: {i: -float(n) for n, i in enumerate(ids)}
    same = gc.logprobs_close([1, 2, 3], [lp(1), lp(2), lp(3)], [1, 2, 3], [lp(1), lp(2), lp(3)])
    assert same == {"first_difference": None, "close": True}
    swapped = gc.logprobs_close([1, 5, 9], [lp(1), lp(5, 7), lp(9)], [1, 7, 0], [lp(1), lp(7, 5), lp(0)])
    assert swapped == {"first_difference": 1, "close": True}            # 9 vs 0 after it: not compared
    assert not gc.logprobs_close([1, 5], [lp(1), lp(5, 7)], [1, 7], [lp(1), lp(7, 8)])["close"]   # 5 not in theirs
    assert not gc.logprobs_close([1, 5], [lp(1), lp(5)], [1, 7], [lp(1), lp(7, 5)])["close"]      # 7 not in ours


def test_timelines_survive_json_and_are_drawn_from_it(gc, tmp_path):
    "Every schedule record of a worked example goes into results.json; minivllm's plot_timeline draws it back."
    import matplotlib.pyplot as plt
    from minivllm.testing.timeline import record_workload
    from minivllm.testing.worked_examples import e5_workload, e10_workload, schedule_of
    recs = {"E5": record_workload(e5_workload(False)), "E10 FCFS": record_workload(e10_workload())}
    examples = json.loads(json.dumps({n: {"timeline": gc.timeline_json(r)} for n, r in recs.items()}))
    for name, rec in recs.items():
        back = gc.timeline_from_json(examples[name]["timeline"])
        assert schedule_of(back) == schedule_of(rec) and back.settings == rec.settings and len(back) == len(rec)
        assert [q.phase for r in back for q in r.requests] == [q.phase for r in rec for q in r.requests]
    assert gc.draw_examples(examples, tmp_path / "fig.png", tmp_path / "each") == 2
    image = plt.imread(tmp_path / "fig.png")
    assert image.shape[1] <= 1440
    assert sorted(p.name for p in (tmp_path / "each").iterdir()) == ["E10_FCFS.png", "E5.png"]


def write_call(dir_: Path, stage: str, items: dict, plan: dict, rc="0"):
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / f"{stage}.json").write_text(json.dumps({"items": items}))
    (dir_ / "stages.tsv").write_text(f"{stage}\t{rc}\t12\n")
    (dir_ / "plan.json").write_text(json.dumps(plan))


def test_a_rerun_merges_into_the_carried_results(gc, tmp_path):
    "`--only b/Qwen3ForCausalLM/bf16 --merge results.json`: that item replaced, the others kept, failures recomputed."
    gc.ARGS = gc.argparse.Namespace(dry_run=False)
    first = tmp_path / "first"
    write_call(first, "b", {"Qwen3ForCausalLM/bf16": {"status": "timeout: stopped after 20 s"},
                            "Qwen3ForCausalLM/fp32": {"status": "ok", "pass": True}}, {"call": "first"}, rc="1")
    assert gc.write_report(first, tmp_path / "out1") == ["b/Qwen3ForCausalLM/bf16: timeout: stopped after 20 s"]
    rerun = tmp_path / "rerun"
    plan = gc.make_plan("H200", only=["b/Qwen3ForCausalLM/bf16"])
    write_call(rerun, "b", {"Qwen3ForCausalLM/bf16": {"status": "ok", "pass": True, "per_prompt": []}},
               {**plan, "merge": str(tmp_path / "out1" / "results.json")})
    assert gc.write_report(rerun, tmp_path / "out2") == []
    data = json.loads((tmp_path / "out2" / "results.json").read_text())
    assert set(data["b"]["items"]) == {"Qwen3ForCausalLM/bf16", "Qwen3ForCausalLM/fp32"}
    assert data["b"]["items"]["Qwen3ForCausalLM/bf16"]["status"] == "ok"
    assert [r[-1] for r in data["stages"]] == ["first", "rerun"] and data["plans_before"][0]["call"] == "first"


def test_a_required_item_that_never_reported_fails_the_call(gc, tmp_path):
    "A stage killed before an item leaves no record of it: the item is 'not run', and the call fails."
    gc.ARGS = gc.argparse.Namespace(dry_run=False)
    plan = gc.make_plan("H200", only=["m"])
    write_call(tmp_path / "w", "m", {"weights": {"status": "ok"}}, plan, rc="137")
    assert gc.write_report(tmp_path / "w", tmp_path / "out") == ["m/pressure: not run (its stage stopped before it)"]


def test_a_killed_dry_run_keeps_a_valid_report(tmp_path):
    "Kill the whole check (SIGKILL) once a stage has finished an item: report.md and results.json are whole."
    env = {**os.environ, "TMPDIR": str(tmp_path), "GPU_CHECK_SCALE": "3"}
    out = tmp_path / "out"
    check = subprocess.Popen(["bash", "bench/gpu_check.sh", "--dry-run", "--stages", "d", "--out", str(out)],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    done, t0 = {}, time.time()
    try:
        while not done and time.time() - t0 < 600 and check.poll() is None:
            time.sleep(0.5)
            try: items = json.loads((out / "results.json").read_text()).get("d", {}).get("items", {})
            except (OSError, json.JSONDecodeError): continue       # not written yet (never half-written)
            done = {k: v for k, v in items.items() if v.get("status") == "ok"}
    finally:
        os.killpg(check.pid, signal.SIGKILL); check.wait()
    results = json.loads((out / "results.json").read_text())
    assert "Qwen3-0.6B/weights" in done and results["stages"] == [], (done, results["stages"])   # mid-stage
    report = (out / "report.md").read_text()
    assert report.index("## Correctness") < report.index("## Speed goals") < report.index("## Plan and stages")
    assert re.search(r"\| Qwen3-0.6B: graphs >= 3x eager, batch-1 decode step \| n/a \|", report)
    assert "| H200 s | H100 s |" in report and report.rstrip().endswith("## Figures")
    assert results["d"]["items"].keys() >= done.keys()
