"""The GPU check's own logic (bench/gpu_check.py): verdicts, exit codes, the report's order, the time plan and
the helpers it imports. The whole dry run, in the device image's versions, is `make gpu-rehearsal`
(bench/gpu_rehearsal.sh), which `make test` runs; bench/GPU_CHECK.md says how the real run is made."""
import importlib.util
import json
import re
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
    "3x graphs over eager, 5x transformers, within 1.5x of the roofline."
    good, bad = speed(gc, 3.5, 5100, 1000, 1.49), speed(gc, 2.9, 4900, 1000, 1.6)
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
    assert gc.failures({"items": {"x": ok}, "pytest": {"rc": 1, "pass": False, "summary": "1 failed"}})
    assert gc.failures({"items": {}, "error": "ImportError: no minivllm"})
    # a throughput run cut off by its limit is a bound (the report says so), not a failure
    assert gc.failures({"items": {"Qwen3-0.6B/hf_generate_batch": {"status": "timeout: stopped after 50 s"}}}) == []


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
                                                                 "pass": True, "kernel": "decode"}},
         "pytest": {"rc": 0, "pass": True, "summary": "9 passed"}}
    c = {"items": {"worked_examples": {"status": "ok", "pass": False, "examples": {"E1": {"equal": False}}}}}
    (work / "a.json").write_text(json.dumps(a)); (work / "c.json").write_text(json.dumps(c))
    (work / "stages.tsv").write_text("a\t0\t12\nc\t1\t30\n")
    gc.ARGS = gc.argparse.Namespace(work=str(work), out=str(out), dry_run=False, stage="report")
    gc.report()
    text = (out / "report.md").read_text()
    tables = [m.start() for m in re.finditer(r"^\| ", text, re.M)]
    assert text.index("## Correctness") < tables[0] < text.index("## Speed goals") < text.index("## Stages")
    first = text[text.index("## Correctness"):text.index("## Speed goals")]
    assert "| a: Qwen3 decode" in first and "PASS" in first
    assert re.search(r"worked examples.*\| 0/1 equal \| FAIL \|", first)
    assert re.search(r"float16 tolerance.*\| not run \|", first)


def test_time_plan_fits_eight_minutes(gc):
    "The limits in gpu_check.sh are gpu_check.py's STAGE_LIMITS, and with start-up and report they fit 480 s."
    sh = (ROOT / "bench" / "gpu_check.sh").read_text()
    limits = dict(re.findall(r"\[([abcd])\]=(\d+)", re.search(r"declare -A LIMIT=\((.*)\)", sh)[1]))
    assert {s: int(v) for s, v in limits.items()} == gc.STAGE_LIMITS
    assert sum(gc.STAGE_LIMITS.values()) + gc.OVERHEAD_S <= gc.PLAN_S == 480


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
    for what in ("stage k", "stage b exited", "bf16 64-sequence", "Triton backend", "KV-cache profiling",
                 "worked examples", "pytest"):
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


def test_transformers_runs_long_enough_to_decide_the_5x_goal(gc, monkeypatch):
    "Its limit: 10 s to load, then 5x minivllm's seconds (a cut-off run then bounds the ratio at >= 5), <= 90 s."
    monkeypatch.setattr(gc, "ARGS", type("A", (), {"dry_run": False}))
    fast = {"items": {"M/minivllm_graphs": {"status": "ok", "tok_per_s": 15_000}}, "workload": {"output_tokens": 150_000}}
    monkeypatch.setattr(gc, "RESULTS", fast)
    assert gc.run_limit("M", "hf_generate_batch") == 10 + 5 * 10     # minivllm took 10 s
    assert gc.run_limit("M", "minivllm_eager") == gc.run_limit("Other", "hf_generate_batch") == 50
    fast["items"]["M/minivllm_graphs"]["tok_per_s"] = 1_000           # 150 s: capped
    assert gc.run_limit("M", "hf_generate_batch") == 90


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
