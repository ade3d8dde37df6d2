"The timeline recorder watches without changing decisions, its records are consistent, and every figure draws."
import matplotlib
matplotlib.use("Agg")
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from matplotlib.figure import Figure
from matplotlib.text import Text

from minivllm.request import Request
from minivllm.sampling_params import SamplingParams
from minivllm.core.sched.scheduler import Scheduler
from minivllm.config import SchedulerConfig, CacheConfig
from minivllm.engine.core import EngineCore
from minivllm.testing.fake_worker import FakeWorker, step_log, scheduled_entries, e12_workload
from minivllm.testing.timeline import run_with_recorder, record_workload
from minivllm.timeline import TimelineRecorder, attach_timeline, device_label
from minivllm.viz.timeline import (plot_timeline, plot_kv_cache, plot_pool_at, plot_block_table,
    step_batch_inputs, plot_prepare_inputs)
from minivllm.core.block_pool import PoolSnapshot
from minivllm.viz.block_pool import plot_block_pool
from minivllm.viz.scheduler import plot_grants
from minivllm.viz.timeline import step_viewer
from minivllm.viz.style import MIN_TEXT_PX, PAGE_WIDTH_PX, png_width, smallest_text_px


@st.composite
def workloads(draw):
    "A small random workload: config, and request specs (id, prompt, max_tokens, arrival step, priority)."
    bs = draw(st.sampled_from([2, 4]))
    num_blocks = draw(st.integers(6, 24))
    max_model_len = (num_blocks - 1) * bs
    chunked = draw(st.booleans())
    budget = draw(st.integers(max_model_len if not chunked else 2, max_model_len + 16))
    cfg = dict(budget=budget, bs=bs, num_blocks=num_blocks, max_model_len=max_model_len, chunked=chunked,
               threshold=draw(st.sampled_from([0, 0, 3, 7])), policy=draw(st.sampled_from(["fcfs", "priority"])),
               caching=draw(st.booleans()), max_num_seqs=draw(st.integers(1, 6)))
    prefixes = [list(range(1000 * k, 1000 * k + 16)) for k in range(3)]
    reqs = []
    for i in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, max_model_len - 1))
        shared = draw(st.integers(0, min(n, 16)))
        prompt = prefixes[draw(st.integers(0, 2))][:shared] + list(range(10_000 * (i + 1), 10_000 * (i + 1) + n - shared))
        reqs.append(dict(id=f"r{i}", prompt=prompt, max_tokens=draw(st.integers(1, 6)),
                         arrival=draw(st.integers(0, 4)), priority=draw(st.integers(0, 2))))
    return cfg, reqs


def build(cfg, reqs):
    "A fresh scheduler and arrivals (requests are mutable, so every run builds its own)."
    s = Scheduler(SchedulerConfig(cfg["budget"], cfg["max_num_seqs"], cfg["max_model_len"], cfg["chunked"],
                                  cfg["threshold"], cfg["policy"]),
                  CacheConfig(cfg["bs"], cfg["num_blocks"], cfg["caching"]))
    arrivals = {}
    for i, r in enumerate(reqs):
        sp = SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True)
        arrivals.setdefault(r["arrival"], []).append(
            Request(r["id"], r["prompt"], sp, arrival_time=float(r["arrival"] * 100 + i), priority=r["priority"]))
    return s, arrivals


def decisions(so):
    "What a step decided, comparable across runs."
    return (dict(so.num_scheduled_tokens), sorted(so.preempted_req_ids), sorted(so.finished_req_ids),
            [(e.req_id, e.kind, e.num_computed_tokens, e.new_block_ids) for e in scheduled_entries(so)])


def live_run(cfg, reqs, max_steps=500):
    "The same loop as `run_with_recorder`, without a recorder: per step, decisions and what E12 reads live."
    s, arrivals = build(cfg, reqs)
    w, out = FakeWorker(), []
    for step in range(max_steps):
        for r in arrivals.pop(step, []): s.add_request(r)
        if not s.has_requests():
            if not arrivals: return out
            continue
        so = s.schedule()
        live = dict(step=step, log=step_log(s, so, step), usage=s.kv_cache_manager.usage,
                    waiting=len(s.waiting), running=len(s.running), decisions=decisions(so))
        s.update_from_output(so, w.execute_model(so))
        out.append(live)
    raise RuntimeError("did not finish")


class DecisionTap:
    "A step observer that only notes each step's decisions (to compare runs)."
    def __init__(self): self.steps = []
    def __call__(self, scheduler, so, eco): self.steps.append(decisions(so))


@settings(max_examples=200, deadline=None)
@given(workloads())
def test_recorder_does_not_change_decisions_and_matches_live_state(wl):
    cfg, reqs = wl
    live = live_run(cfg, reqs)
    s, arrivals = build(cfg, reqs)
    rec = TimelineRecorder(snapshot_pool=True)
    run_with_recorder(s, FakeWorker(), rec, arrivals, check=True)
    assert len(rec) == len(live)
    for r, l in zip(rec, live):
        assert r.step == l["step"]
        assert r.e12() == l["log"]                      # the E12 view equals chapter 05's live step log
        assert r.kv_usage == l["usage"] and (r.num_waiting, r.num_running) == (l["waiting"], l["running"])
        assert r.grants == l["decisions"][0] and r.preempted_req_ids == l["decisions"][1]


@settings(max_examples=100, deadline=None)
@given(workloads())
def test_engine_core_with_and_without_recorder(wl):
    cfg, reqs = wl
    traces = []
    for with_recorder in (False, True):
        s, arrivals = build(cfg, reqs)
        tap = DecisionTap()
        core = EngineCore(s, FakeWorker(), [tap])
        if with_recorder: rec = attach_timeline(core)
        for step in range(500):
            for r in arrivals.pop(step, []): core.add_request(r)
            if not s.has_requests() and not arrivals: break
            core.step()
        traces.append(tap.steps)
    assert traces[0] == traces[1]
    assert len(rec) == len(traces[1])


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_records_are_consistent(wl):
    cfg, reqs = wl
    s, arrivals = build(cfg, reqs)
    rec = run_with_recorder(s, arrivals=arrivals)
    usable = cfg["num_blocks"] - 1
    sampled = {}
    for r in rec:
        assert sum(r.grants.values()) == r.total_scheduled <= r.token_budget == cfg["budget"]
        assert len(set(q.req_id for q in r.requests)) == len(r.requests)
        assert 0 <= r.num_cached_free_blocks <= r.num_free_blocks <= usable
        assert abs(r.kv_usage_after - (1 - r.num_free_blocks / usable)) < 1e-12
        for q in r.scheduled:
            assert q.num_computed_after == q.num_computed_before + q.grant <= q.num_tokens
            assert q.debt == q.num_tokens - q.num_computed_before and q.grant <= q.debt
            assert len(q.input_token_ids) == q.grant
            assert len(q.block_ids) * cfg["bs"] >= q.num_computed_after
            assert (q.new_token_ids == []) == q.is_prefill_chunk
            if q.kind != "running": assert q.prefix_hit_tokens == q.num_computed_before
            sampled.setdefault(q.req_id, []).extend(q.new_token_ids)
            assert q.phase in ("prefill", "decode", "resumed")
        for q in r.requests:
            if q.grant == 0: assert q.phase in ("waiting", "preempted", "running")
        if r.preempted_req_ids: assert all(q.kind == "running" for q in r.scheduled)
    finished = {rid: reason for r in rec for rid, reason in r.finished.items()}
    assert set(finished) == {q["id"] for q in reqs}
    for q in reqs: assert len(sampled[q["id"]]) == min(q["max_tokens"], cfg["max_model_len"] - len(q["prompt"]))


class FullScan:
    "The reference for the recorder's deltas: read every block of the pool after every step."
    def __init__(self): self.hashes, self.rows = None, []

    def __call__(self, scheduler, so, eco):
        pool = scheduler.kv_cache_manager.block_pool
        hashes = [b.block_hash for b in pool.blocks]
        old = self.hashes or [None] * len(hashes)
        evicted = sum(1 for o, n in zip(old, hashes) if o is not None and n != o)
        self.hashes = hashes
        cached_free = sum(1 for b in pool.blocks[1:] if b.ref_cnt == 0 and b.block_hash is not None)
        self.rows.append((pool.get_num_free_blocks(), cached_free,
                          sum(h is not None for h in hashes[1:]), evicted))


@settings(max_examples=150, deadline=None)
@given(workloads(), st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5)), max_size=3),
       st.lists(st.integers(0, 30), max_size=2))
def test_block_counts_from_deltas_equal_a_full_scan(wl, aborts, resets):
    "Free, cached-but-free, hashed and evicted counts kept from the deltas equal a full count, with"
    " preemptions (both policies), aborts between steps and prefix-cache resets."
    cfg, reqs = wl
    s, arrivals = build(cfg, reqs)
    scan = FullScan()
    core = EngineCore(s, FakeWorker())
    rec = attach_timeline(core)
    core.step_observers.append(scan)
    ids = [r["id"] for r in reqs]
    for step in range(500):
        for r in arrivals.pop(step, []): core.add_request(r)
        core.abort_requests(list(dict.fromkeys(ids[i] for t, i in aborts if t == step
                                               and i < len(ids) and ids[i] in s.requests)))
        if step in resets: s.reset_prefix_cache()
        if not s.has_requests():
            if not arrivals: break
            rec.idle(); continue
        core.step()
    assert [(r.num_free_blocks, r.num_cached_free_blocks, r.num_cached_blocks, r.num_evicted_blocks)
            for r in rec] == scan.rows
    # full passes only at the start, after a preempting step and after a reset: the rest are deltas
    assert rec.num_rescans <= 1 + sum(bool(r.preempted_req_ids) for r in rec) + len(resets)


def test_recorder_work_does_not_grow_with_the_pool_or_the_history():
    "After its first full pass, the recorder looks at the same blocks per step in a pool 100x larger,"
    " and a longer history does not add any."
    def run(num_blocks, prompt_len, num_reqs=32, steps=33):
        s = Scheduler(SchedulerConfig(num_reqs * prompt_len, num_reqs, prompt_len + steps + 8),
                      CacheConfig(16, num_blocks))
        core = EngineCore(s, FakeWorker())
        rec = attach_timeline(core)
        for i in range(num_reqs):
            prompt = [i] + list(range(1000, 1000 + prompt_len - 1))
            core.add_request(Request(f"r{i}", prompt, SamplingParams(max_tokens=steps + 2,
                                                                      ignore_eos=True)))
        core.step()                              # the prefills
        before = rec.blocks_inspected
        for _ in range(steps): core.step()
        assert rec.num_rescans == 1
        return (rec.blocks_inspected - before) / steps
    small, large, long_history = run(1_000, 64), run(100_000, 64), run(100_000, 1024)
    assert small == large == long_history
    assert small <= 32 * 2      # each request's current block, plus a new one every 16 steps


def test_timeline_loads_neither_the_harness_nor_matplotlib():
    import subprocess, sys
    code = ("import sys, minivllm.timeline; "
            "print('minivllm.testing' in sys.modules, 'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_records_pickle_with_their_requests(small_run):
    import pickle
    back = pickle.loads(pickle.dumps(small_run.records))
    assert [r.grants for r in back] == [r.grants for r in small_run]
    assert [r.e12() for r in back] == [r.e12() for r in small_run]
    assert all(r.source is None for r in back)


def test_e12_step_12_line_for_line():
    rec = record_workload(e12_workload())
    assert rec[12].e12() == ("step=12 token_budget=4096 scheduled=1538\n"
                             "req=A state=RUNNING debt=1 grant=1 new_blocks=0\n"
                             "req=B state=RUNNING debt=2048 grant=1537 new_blocks=97\n"
                             "waiting=3 running=2 preempted=0 kv_usage=0.71")


@pytest.fixture(scope="module")
def small_run():
    s = Scheduler(SchedulerConfig(16, 8, 48), CacheConfig(4, 13))
    arrivals = {0: [Request(f"R{i}", list(range(100 * i, 100 * i + 10)), SamplingParams(max_tokens=12, ignore_eos=True))
                    for i in range(4)]}
    return run_with_recorder(s, recorder=TimelineRecorder(snapshot_pool=True), arrivals=arrivals, check=True)


def test_figures_draw(small_run):
    rec = small_run
    assert any(r.preempted_req_ids for r in rec) and sum(r.num_evicted_blocks for r in rec) > 0
    ids, bi = step_batch_inputs(rec, 1)
    figs = [plot_timeline(rec), plot_kv_cache(rec), plot_pool_at(rec, [0, 1]), plot_block_table(rec, "R1", 1),
            plot_prepare_inputs(bi, ids, recorder=rec)]
    for f in figs:
        assert isinstance(f, Figure)
        assert "block_size 4" in " ".join(t.get_text() for t in f.findobj(Text))  # the settings caption
    np.testing.assert_array_equal(bi.positions[:1], [rec[1]["R0"].num_computed_before])


def _all_figures(rec) -> dict:
    "Every figure function of minivllm.viz, drawn from one recorded run."
    ids, bi = step_batch_inputs(rec, 1)
    trace = {"steps": [{"step": r.step, "num_scheduled_tokens": {q.req_id: q.grant for q in r.scheduled},
                        "preempted_req_ids": r.preempted_req_ids} for r in rec]}
    refs = [[0] + [(b + k) % 3 for b in range(1, 48)] for k in range(3)]
    big_pool = [PoolSnapshot(f"snapshot {k}", r, [b % 2 == 0 for b in range(48)],
                             [b for b in range(1, 48) if r[b] == 0]) for k, r in enumerate(refs)]
    return {"timeline": plot_timeline(rec), "kv_cache": plot_kv_cache(rec),
            "pool_at": plot_pool_at(rec, [0, 1, 2]), "block_table": plot_block_table(rec, "R1", 1),
            "prepare_inputs": plot_prepare_inputs(bi, ids, recorder=rec),
            "grants": plot_grants(trace, 16, "grants"), "big_pool": plot_block_pool(big_pool, "48 blocks")}


@pytest.mark.parametrize("steps", [None, 120])
def test_figures_read_on_the_page(small_run, steps):
    "100 dpi or more, RGBA, and no text under MIN_TEXT_PX at the width the site shows a figure."
    rec = small_run
    if steps:                     # a long run: a hundred-odd steps must not shrink the text
        s = Scheduler(SchedulerConfig(64, 8, 200), CacheConfig(4, 64))
        arr = {0: [Request(f"R{i}", list(range(1000 * i, 1000 * i + 20)),
                           SamplingParams(max_tokens=steps // 3, ignore_eos=True)) for i in range(3)]}
        rec = run_with_recorder(s, recorder=TimelineRecorder(snapshot_pool=True), arrivals=arr)
        assert len(rec) >= 40
    for name, fig in _all_figures(rec).items():
        assert fig.dpi >= 100, name
        assert smallest_text_px(fig) >= MIN_TEXT_PX, (name, smallest_text_px(fig), png_width(fig))


def test_smallest_text_px_fails_a_shrunk_figure(small_run):
    "The check can fail: the same timeline, saved at 18 inches wide, shows its text too small."
    fig = plot_timeline(small_run)
    assert smallest_text_px(fig) >= MIN_TEXT_PX
    fig.set_size_inches(18, fig.get_size_inches()[1])
    assert png_width(fig) > 1.5 * PAGE_WIDTH_PX and smallest_text_px(fig) < MIN_TEXT_PX


def test_pool_snapshots_needed():
    rec = run_with_recorder(Scheduler(SchedulerConfig(8, 4, 16), CacheConfig(4, 5)),
                            arrivals={0: [Request("a", [1, 2, 3], SamplingParams(max_tokens=2))]})
    with pytest.raises(ValueError): plot_pool_at(rec, 0)


def test_max_records_and_clear():
    s = Scheduler(SchedulerConfig(8, 4, 40), CacheConfig(4, 11))
    rec = run_with_recorder(s, recorder=TimelineRecorder(max_records=3),
                            arrivals={0: [Request("a", [1, 2, 3], SamplingParams(max_tokens=12, ignore_eos=True))]})
    assert 3 <= len(rec) < 6 and rec[-1].step == rec.next_step - 1 and rec[-2].finished == {"a": "length"}
    num_steps = 1 + 11 + 1      # prefill (samples token 1), 11 decodes (tokens 2-12), the clean-up step
    assert rec.next_step == num_steps and rec[-1].step == num_steps - 1 and rec[-1].total_scheduled == 0
    rec.clear()
    assert len(rec) == 0 and rec.next_step == num_steps     # step numbers go on after clear()


class FakeLLM:
    "What `attach_timeline` needs from an `LLM`: an engine core, a device and a model path."
    def __init__(self, scheduler):
        from pathlib import Path
        self.engine_core, self.device, self.model_path = EngineCore(scheduler, FakeWorker()), "cpu", Path("/m/Tiny")


def test_attach_timeline_to_llm_like():
    llm = FakeLLM(Scheduler(SchedulerConfig(8, 4, 40), CacheConfig(4, 11)))
    rec = attach_timeline(llm)
    assert llm.timeline is rec and attach_timeline(llm) is rec and llm.engine_core.step_observers == [rec]
    llm.engine_core.add_request(Request("a", [1, 2, 3, 4, 5], SamplingParams(max_tokens=2, ignore_eos=True)))
    while llm.engine_core.scheduler.has_requests(): llm.engine_core.step()
    assert [r.grants for r in rec] == [{"a": 5}, {"a": 1}, {}]
    assert rec.settings_label().startswith("Tiny on cpu | budget 8")


def test_device_label():
    assert device_label("cpu", "SmolLM2-135M-Instruct") == "SmolLM2-135M-Instruct on cpu"
    assert device_label("cpu") == "cpu"


def test_step_viewer_contract(small_run, tmp_path):
    "The offline step viewer: one container per viewer, the records inside as JSON, nothing fetched."
    import json, re
    a, b = step_viewer(small_run, "a"), step_viewer(small_run, "b")
    assert a.uid != b.uid and a.uid in a.html and b.uid not in a.html
    page = a.html
    for cls in ("mv-step-viewer", "mv-sv-slider", "mv-sv-prev", "mv-sv-next", "mv-sv-step", "mv-sv-pool"):
        assert f"'{cls}'" in page or f"class='{cls}" in page, cls
    assert not re.search(r"https?:|\bsrc=", page)
    data = json.loads(page.split("class='mv-sv-data'>")[1].split("</script>")[0].replace("<\\/", "</"))
    assert len(data["steps"]) == len(small_run) and f"data-num-steps='{len(small_run)}'" in page
    assert all(len(st["pool"]) == 13 for st in data["steps"])
    assert a.save(tmp_path / "v.html").read_text().startswith("<!doctype html>")


def test_step_viewer_steps_in_chromium(small_run, tmp_path):
    "In headless Chromium the buttons, the arrow keys and the slider move the step, and the pool changes."
    import shutil, subprocess
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None: pytest.skip("no chromium")
    page = step_viewer(small_run, "t").save(tmp_path / "v.html")
    page.write_text(page.read_text() + """<script>
var root = document.querySelector('.mv-step-viewer'), out = [];
var pool = function () { return Array.from(root.querySelectorAll('.mv-sv-block'))
  .map(function (b) { return b.dataset.state[0]; }).join(''); };
out.push(root.dataset.step + ':' + pool());
root.querySelector('.mv-sv-next').click(); out.push(root.dataset.step + ':' + pool());
root.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight'})); out.push(root.dataset.step + ':' + pool());
var sl = root.querySelector('.mv-sv-slider'); sl.value = 3; sl.dispatchEvent(new Event('input'));
out.push(root.dataset.step + ':' + pool());
document.body.setAttribute('data-result', out.join('|'));
</script>""")
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    result = dom.split('data-result="')[1].split('"')[0].split("|")
    steps, pools = [r.split(":")[0] for r in result], [r.split(":")[1] for r in result]
    assert steps == ["0", "1", "2", "3"]
    assert len(set(pools)) > 1 and all(len(p) == 13 and p[0] == "n" for p in pools)
