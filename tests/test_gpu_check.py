"""The GPU check's dry run: every stage of bench/gpu_check.sh at toy size on the CPU, so the script keeps
working on machines without a GPU (the real run needs one; bench/GPU_CHECK.md says how to run it)."""
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    p = subprocess.run(["bash", "bench/gpu_check.sh", "--dry-run", "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    return p, out, json.loads((out / "results.json").read_text())


def test_script_runs_every_stage(dry_run):
    p, out, data = dry_run
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert [row[0] for row in data["stages"]] == list("abcd")
    assert all(row[1] == "0" for row in data["stages"]), data["stages"]
    files = sorted(f.name for f in out.iterdir())
    assert {"report.md", "results.json", "log.txt"} <= set(files) and len(files) <= 8   # the device tool's limit
    assert "## Goals" in (out / "report.md").read_text()


def test_stage_a_kernels_match_reference(dry_run):
    a = dry_run[2]["a"]
    assert a["pytest"]["rc"] == 0, a["pytest"]
    items = a["items"]
    assert any(k.startswith("sweep/") for k in items) and "int64_cache" in items
    assert all(v.get("pass") for v in items.values()), {k: v["status"] for k, v in items.items()}


def test_stage_b_greedy_equals_transformers(dry_run):
    items = dry_run[2]["b"]["items"]
    for arch in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        r = items[f"{arch}/fp32"]
        assert r["status"] == "ok", r
        assert r["eager"]["equal"] and r["graphs"]["equal"], (arch, r)
        assert r["graphs"]["stats"].get("padded_eager", 0) > 0     # the padded path did run
    assert 0 <= items["Qwen3ForCausalLM/bf16"]["match_rate"] <= 1


def test_stage_c_worked_example_on_engine(dry_run):
    r = dry_run[2]["c"]["items"]["worked_examples"]
    assert r["status"] == "ok" and r["pass"], r
    assert r["examples"]["E1"]["equal"] and r["examples"]["E1"]["steps"] > 0


def test_stage_d_measures_every_engine(dry_run):
    d = dry_run[2]["d"]
    items = d["items"]
    assert items["bandwidth"]["bytes_per_s"] > 0
    want = d["workload"]["output_tokens"]
    for engine in ("minivllm_graphs", "minivllm_eager", "hf_generate_batch", "hf_padded_generate"):
        r = items[f"SmolLM2-135M/{engine}"]
        assert r["status"] == "ok" and r["tok_per_s"] > 0, (engine, r)
        assert r["output_tokens"] == want, (engine, r["output_tokens"], want)
    assert items["SmolLM2-135M/minivllm_graphs"]["wrapper_stats"].get("padded_eager", 0) > 0
    assert items["SmolLM2-135M/minivllm_eager"]["wrapper_stats"] == {}
    steps = items["SmolLM2-135M/step_times"]
    assert steps["status"] == "ok" and steps["batch1"]["roofline_ms"] > 0


def test_goals_verdicts():
    "The report's verdicts follow the issue's thresholds (3x, 5x, within 3x of the roofline)."
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    gc = importlib.util.module_from_spec(spec); spec.loader.exec_module(gc)
    def data(ratio, tps, hf, roof):
        items = {"Qwen3-0.6B/step_times": {"batch1": {"eager_over_graph": ratio},
                                           "batch256": {"graph_over_roofline": roof}},
                 "Qwen3-0.6B/minivllm_graphs": {"tok_per_s": tps}, "Qwen3-0.6B/hf_generate_batch": {"tok_per_s": hf}}
        return {v[0]: v[2] for v in gc.goals({"d": {"items": items}}) if v[0].startswith("Qwen3")}
    good, bad = data(3.5, 5100, 1000, 2.9), data(2.9, 4900, 1000, 3.1)
    assert set(good.values()) == {"PASS"} and set(bad.values()) == {"FAIL"}
    assert set(data(None, None, 1000, None).values()) == {"n/a"}
