"""`TimelineScheduler` (chapter 26) on vLLM 0.33's real scheduler.

vLLM runs in a venv of its own (`make vllm-env`, tests/vllm_env/setup.sh: its pins clash with the
project's); these tests drive it through `tests/vllm_env/run_plugin.py` in a subprocess and read
what it recorded here. On every worked example, every golden workload and 20 random workloads:

* the plugin changes no decision: vLLM's outputs to the worker and to the client, step by step, are
  the same with vLLM's `Scheduler` and with `TimelineScheduler`;
* the recorded steps equal what minivllm's own scheduler and recorder give for the same workload
  (`differences`, every field the figures read), except where the two schedulers are documented to
  differ (tests/golden/README.md), and there the first difference is the documented one;
* a recorded run of more than 10,000 steps is summarized and drawn in under 5 seconds.

Without vLLM's venv they skip, except in CI (`$CI` set), where they fail: CI builds the venv
(`make test` depends on `vllm-env`).
"""
import json, os, subprocess, sys
from pathlib import Path

import pytest

from minivllm.integrations.vllm import differences, load, main, summarize
from minivllm.testing.timeline import record_workload
from minivllm.testing.worked_examples import worked_example_workloads

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "vllm_env"))
from workloads import random_workload, stream_workload, vllm_valid  # noqa: E402

VENV = Path(os.environ.get("VLLM_VENV", ROOT / "build" / "vllm-venv"))
DRIVER = ROOT / "tests" / "vllm_env" / "run_plugin.py"
GOLDEN = ROOT / "tests" / "golden"


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def workloads() -> dict[str, dict]:
    "name -> workload: worked examples (both sizes), golden workloads, 20 random ones, a stream."
    ws = {}
    for full in (False, True):
        for name, w in worked_example_workloads(full=full).items(): ws[f"ex_{slug(name)}"] = w
    for p in sorted(GOLDEN.glob("*.json")) + sorted(GOLDEN.glob("known_differences/*.json")):
        if not p.name.endswith(".trace.json"): ws[f"golden_{p.stem}"] = json.loads(p.read_text())
    for seed in range(20): ws[f"random_{seed:02d}"] = random_workload(seed)
    ws["stream_80"] = stream_workload(80, seed=2, every=2, num_blocks=120)   # long decode runs
    return {k: vllm_valid(w) for k, w in ws.items()}


WORKLOADS = workloads()
TOKENS = ["ex_E6", "golden_16_eos_stop", "golden_17_stop_token_ids",
          "golden_03_kv_exhaustion_preemption"]
# Where minivllm and vLLM 0.33 are documented to differ (tests/golden/README.md): each of these
# workloads must differ, first in this way; any other workload may differ only in one of these ways.
MUST_DIFFER = {"ex_E5": "lone long prefill", "ex_E5__small": "lone long prefill",
               "ex_E12__1_32": "lone long prefill",
               "golden_threshold_single_request": "lone long prefill",
               "ex_E10_priority__victim_itself": "priority self-preemption",
               "golden_e10_self_victim": "priority self-preemption",
               "golden_priority_self_preemption": "priority self-preemption",
               "golden_reserve_full_isl_default": "whole prompt reserved",
               "golden_stop_before_min_tokens": "stop before min_tokens"}

def _run(outdir: Path, names: list[str], *flags: str) -> subprocess.Popen:
    paths = []
    for name in names:
        p = outdir / f"{name}.json"
        p.write_text(json.dumps(WORKLOADS.get(name) or BIG[name]))
        paths.append(str(p))
    command = [str(VENV / "bin" / "python"), str(DRIVER), str(outdir), *paths, *flags]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)


BIG = {"stream_10k": stream_workload(2500, seed=1, every=4, num_blocks=200)}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    "Run everything through vLLM once (three driver processes side by side): name -> result."
    if not (VENV / "bin" / "python").exists():
        if os.environ.get("CI"): pytest.fail(f"no vLLM venv at {VENV}: run `make vllm-env`")
        pytest.skip(f"no vLLM venv at {VENV}: `make vllm-env` builds it")
    d = tmp_path_factory.mktemp("vllm")
    (d / "tokens").mkdir()
    procs = [_run(d, list(WORKLOADS)), _run(d / "tokens", TOKENS, "--tokens"),
             _run(d, list(BIG), "--no-plain")]
    results = {}
    for p, folder in zip(procs, (d, d / "tokens", d)):
        out, err = p.communicate(timeout=1200)
        assert p.returncode == 0, err[-3000:]
        for line in out.splitlines():
            r = json.loads(line)
            r["path"] = folder / f"{r['name']}.jsonl"
            results[(folder.name == "tokens", r["name"])] = r
    return results


def result(recorded, name, tokens=False) -> dict:
    r = recorded[(tokens, name)]
    assert "error" not in r, r["error"]
    return r


def test_module_imports_without_vllm():
    "The module loads in the project's venv; only the scheduler classes need vLLM."
    code = ("import importlib.util, minivllm.integrations.vllm as m\n"
            "if importlib.util.find_spec('vllm') is None:\n"
            "    try: m.TimelineScheduler\n"
            "    except ImportError as e: print('hint:', e)\n"
            "else: print('hint: pip install vllm==0.33.0 (vLLM is installed here)')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert "pip install vllm==0.33.0" in out.stdout, out


def test_enough_workloads():
    names = list(WORKLOADS)
    assert sum(n.startswith("ex_") for n in names) >= 17   # E1-E12, E5 and E12 at both sizes
    assert sum(n.startswith("golden_") for n in names) >= 31
    assert sum(n.startswith("random_") for n in names) == 20


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_plugin_changes_no_decision(recorded, name):
    r = result(recorded, name)
    assert r["same_decisions"] is True, name
    assert r["num_steps"] > 0


def _kind(a, b, step: int, workload: dict) -> str | None:
    "Which documented difference explains the first differing step of minivllm (a) and vLLM (b)."
    x, y = a[step], b[step]
    same = lambda small, big: set(small.grants) < set(big.grants) and \
        all(big.grants[r] == g for r, g in small.grants.items())
    if x.preempted_req_ids and x.preempted_req_ids == y.preempted_req_ids and same(x, y):
        return "priority self-preemption"   # vLLM went on scanning after the self-preemption
    threshold = a.settings["long_prefill_token_threshold"]
    if len(x.requests) == len(y.requests) == 1 and 0 < threshold == x.total_scheduled < \
            y.total_scheduled:
        return "lone long prefill"          # vLLM 0.33: the threshold needs 2+ requests
    if workload["config"].get("scheduler_reserve_full_isl", True) and same(y, x):
        return "whole prompt reserved"      # vLLM held back an admission minivllm made
    stopped = lambda rec: {q.req_id for q in rec.requests if q.finish_reason == "stop"}
    if stopped(y) - stopped(x):
        return "stop before min_tokens"     # vLLM 0.33's check_stop ends on a stop token anyway
    return None


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_records_equal_minivllm_where_they_agree(recorded, name):
    workload = WORKLOADS[name]
    classic = {**workload, "config": {**workload["config"], "scheduler_reserve_full_isl": False}}
    ours, theirs = record_workload(classic), load(result(recorded, name)["path"])
    diff = differences(ours, theirs)
    if diff is None:
        assert name not in MUST_DIFFER, f"{name} should differ ({MUST_DIFFER[name]})"
        assert summarize(ours) == summarize(theirs)
        return
    step = int(diff.split(":")[0].split()[1])
    assert _kind(ours, theirs, step, workload) == MUST_DIFFER.get(name, _kind(
        ours, theirs, step, workload)) is not None, f"{name}: not a documented difference: {diff}"
    assert differences(ours[:step], theirs[:step]) is None   # the same up to there


def test_most_workloads_agree(recorded):
    "The differences are the exception: the two schedulers agree on most workloads."
    agree = sum(differences(record_workload(w), load(result(recorded, n)["path"])) is None
                for n, w in WORKLOADS.items() if n not in MUST_DIFFER)
    assert agree >= len(WORKLOADS) - len(MUST_DIFFER) - 3, agree


@pytest.mark.parametrize("name", TOKENS)
def test_sampled_tokens_when_asked(recorded, name):
    "With MINIVLLM_TIMELINE_TOKENS=1 the sampled ids are recorded: the fake worker's, as minivllm's"
    ours, theirs = record_workload(WORKLOADS[name]), load(result(recorded, name, True)["path"])
    assert differences(ours, theirs) is None
    for a, b in zip(ours, theirs):
        assert [r.new_token_ids for r in a.requests] == [r.new_token_ids for r in b.requests]


def test_ten_thousand_steps_drawn_one_artist_per_series(recorded, tmp_path):
    "A long run draws one artist per series, whatever its step count: never an artist a step."
    from minivllm.viz.vllm import plot_overview
    path = result(recorded, "stream_10k")["path"]
    summary = main(path, tmp_path / "run.png", quiet=True)
    window = main(path, tmp_path / "run.png", steps=range(5000, 5030), quiet=True)
    assert Path(window["steps_figure"]).stat().st_size > 10_000
    assert summary["steps"] >= 10_000, summary
    assert (tmp_path / "run.png").stat().st_size > 10_000
    assert summary["prefix_hit_rate"] > 0 and summary["finished"] == 2500, summary
    fig = plot_overview(load(path))
    # three token areas and the budget line, running and waiting, KV usage and the preemption marks
    assert sum(len(a.lines) + len(a.collections) for a in fig.axes) <= 8


def test_a_cut_last_line_is_dropped(recorded, tmp_path):
    "A server killed mid-write leaves half a line: the run reads back without it."
    text = result(recorded, "ex_E6")["path"].read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[:-10])
    assert len(load(cut)) == text.count("\n") - 2


def test_vllm_resolves_the_plugin_by_name():
    """What `vllm serve --scheduler-cls minivllm.integrations.vllm.TimelineScheduler` does with it:
    vLLM's `SchedulerConfig.get_scheduler_cls` resolves the name (in the engine core process), the
    class pickles by reference, `AsyncTimelineScheduler` decides as vLLM's scheduler does, and a
    failing recorder stops recording, not vLLM."""
    if not (VENV / "bin" / "python").exists():
        if os.environ.get("CI"): pytest.fail(f"no vLLM venv at {VENV}: run `make vllm-env`")
        pytest.skip("no vLLM venv: `make vllm-env` builds it")
    code = (
        "import json, os, pickle, sys\n"
        "import minivllm.integrations.vllm as m\n"
        "for k, v in m.CPU_ENV.items(): os.environ.setdefault(k, v)\n"
        "from vllm.config import SchedulerConfig\n"
        "from vllm.v1.core.sched.scheduler import Scheduler\n"
        "sc = SchedulerConfig(max_model_len=64, is_encoder_decoder=False,\n"
        "                     scheduler_cls='minivllm.integrations.vllm.TimelineScheduler')\n"
        "cls = sc.get_scheduler_cls()\n"
        "assert cls is m.TimelineScheduler and issubclass(cls, Scheduler)\n"
        "assert pickle.loads(pickle.dumps(cls)) is cls\n"
        "w = json.loads(sys.stdin.read())\n"
        "plain = m.replay(w, Scheduler)\n"
        "assert plain == m.replay(w, m.AsyncTimelineScheduler, sys.argv[1])\n"
        "def broken(*args): raise RuntimeError('a bug in the recorder')\n"
        "m.TimelineWriter.record = broken      # stops the recording, not vLLM\n"
        "assert plain == m.replay(w, m.TimelineScheduler, sys.argv[1] + '.broken')\n"
        "print('ok')\n")
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([str(VENV / "bin" / "python"), "-c", code, f"{d}/a.jsonl"],
                             input=json.dumps(WORKLOADS["ex_E6"]), capture_output=True, text=True,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
        assert load(f"{d}/a.jsonl").header["scheduler"] == "AsyncTimelineScheduler"
