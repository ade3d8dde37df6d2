"""Write minivllm's own golden workloads (05-31, and the known difference) into tests/golden.

    .venv/bin/python tests/golden/make_workloads.py tests/golden

Each workload was then run once through vLLM 0.33's real scheduler on a CPU, and vLLM's decisions at every step
were saved next to it as NAME.trace.json (the Sources page, nbs/98_sources.ipynb, tells how); the tests replay
the workloads through minivllm and compare (tests/test_golden_traces.py). The recording tool is not part of this
repository: a workload changed here needs a new recording. Workloads 01-04 are the recording tool's own
examples. Every config sets scheduler_reserve_full_isl=false: vLLM 0.33 otherwise admits a waiting request only
when its whole prompt fits, while minivllm, like the articles, checks room for the scheduled chunk only.
"""
import json, random, os, sys
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

def cfg(**kw):
    c = dict(block_size=4, num_blocks=64, max_num_batched_tokens=32, max_num_seqs=8, max_model_len=32,
             enable_prefix_caching=True, enable_chunked_prefill=True, long_prefill_token_threshold=0,
             policy="fcfs", scheduler_reserve_full_isl=False)
    c.update(kw); return c

def seq(start, n): return list(range(start, start + n))

def req(id, prompt, max_tokens=8, **kw):
    r = dict(id=id, prompt_token_ids=prompt, max_tokens=max_tokens); r.update(kw); return r

W = {}
W["05_fcfs_preempt_chain"] = dict(
    name="FCFS: 8 usable blocks of 4, four requests grow until the tail of running is preempted again and again",
    config=cfg(num_blocks=9, max_model_len=32),
    requests=[req("A", seq(100, 6), 10), req("B", seq(200, 7), 10), req("C", seq(300, 5), 10), req("D", seq(400, 8), 10)])
W["06_fcfs_preempt_mid_prefill"] = dict(
    name="FCFS: a long prompt mid-chunked-prefill is the tail of running and preempts itself; it resumes from scratch",
    config=cfg(num_blocks=11, max_num_batched_tokens=8, max_model_len=40),
    requests=[req("A", seq(100, 5), 12), req("B", seq(200, 30), 4, arrival_step=1)])
W["07_priority_undo_scheduled_victim"] = dict(
    name="priority: the victim (largest priority value) was already scheduled this step, so its grant is undone",
    config=cfg(num_blocks=7, policy="priority", max_model_len=24),
    requests=[req("H", seq(100, 5), 8, priority=0), req("L", seq(200, 6), 8, priority=5),
              req("M", seq(300, 8), 8, priority=1, arrival_step=1)])
W["08_priority_order_admission"] = dict(
    name="priority: admission order by (priority, arrival_time); equal priorities keep arrival order (E11)",
    config=cfg(max_num_batched_tokens=12, max_num_seqs=2, policy="priority"),
    requests=[req("P5", seq(100, 6), 3, priority=5), req("P1", seq(200, 6), 3, priority=1),
              req("P1b", seq(300, 6), 3, priority=1), req("P0", seq(400, 6), 3, priority=0, arrival_step=1),
              req("P3", seq(500, 6), 3, priority=3, arrival_step=2)])
W["09_chunked_off_blocks_queue"] = dict(
    name="chunked prefill off (E3): B does not fit the remaining budget, so B and the shorter C both wait",
    config=cfg(max_num_batched_tokens=32, max_model_len=32, enable_chunked_prefill=False),
    requests=[req("A", seq(100, 20), 4), req("B", seq(200, 20), 4), req("C", seq(300, 5), 4)])
W["10_chunked_off_with_decodes"] = dict(
    name="chunked prefill off: running decodes take budget first; a whole prompt waits for a step with room",
    config=cfg(max_num_batched_tokens=24, max_model_len=24, max_num_seqs=8, enable_chunked_prefill=False),
    requests=[req("A", seq(100, 10), 6), req("B", seq(200, 10), 6), req("C", seq(300, 20), 3, arrival_step=1),
              req("D", seq(400, 3), 3, arrival_step=1)])
W["11_threshold_two_long"] = dict(
    name="long_prefill_token_threshold 8 with two long prompts: each gets at most 8 tokens a step",
    config=cfg(max_num_batched_tokens=32, long_prefill_token_threshold=8, max_model_len=48),
    requests=[req("A", seq(100, 30), 3), req("B", seq(200, 21), 3)])
W["12_threshold_staggered_with_decodes"] = dict(
    name="threshold 6, budget 16: decodes, two chunked prompts and a late short prompt share the budget",
    config=cfg(max_num_batched_tokens=16, long_prefill_token_threshold=6, max_model_len=48),
    requests=[req("A", seq(100, 4), 6), req("B", seq(200, 25), 3, arrival_step=1),
              req("C", seq(300, 18), 3, arrival_step=1), req("D", seq(400, 5), 3, arrival_step=3)])
sys_prompt = seq(1000, 12)
W["13_prefix_shared_system_prompt"] = dict(
    name="prefix caching: requests sharing a 12-token system prompt arrive one step apart and hit 12 (then 8) tokens",
    config=cfg(max_num_batched_tokens=32),
    requests=[req("A", sys_prompt + seq(100, 3), 4), req("B", sys_prompt + seq(200, 5), 4, arrival_step=1),
              req("C", sys_prompt + seq(300, 2), 4, arrival_step=2), req("D", sys_prompt[:9] + seq(400, 4), 4, arrival_step=3)])
W["14_prefix_full_hit_recompute_last"] = dict(
    name="prefix caching: an identical 8-token prompt hits only 4 tokens (the last token must be recomputed)",
    config=cfg(),
    requests=[req("A", seq(100, 8), 3), req("B", seq(100, 8), 3, arrival_step=2), req("C", seq(100, 9), 3, arrival_step=3)])
W["15_prefix_eviction"] = dict(
    name="prefix caching with eviction: freed hashed blocks stay hits until a new allocation pops and evicts them",
    config=cfg(num_blocks=9, max_model_len=32),
    requests=[req("A", seq(100, 12), 2), req("B", seq(500, 20), 6, arrival_step=4),
              req("C", seq(100, 12) + [7, 7], 2, arrival_step=6), req("D", seq(100, 8) + [9], 2, arrival_step=12)])
W["16_eos_stop"] = dict(
    name="EOS (id 2) stops requests that do not ignore it; ignore_eos requests run to max_tokens",
    config=cfg(),
    requests=[req("A", seq(100, 5), 10, ignore_eos=False, output_token_ids=[7, 8, 2, 9]),
              req("B", seq(200, 6), 5, ignore_eos=True, output_token_ids=[2, 2, 2, 2, 2]),
              req("C", seq(300, 3), 10, ignore_eos=False, output_token_ids=[2])])
W["17_stop_token_ids"] = dict(
    name="stop_token_ids: a sampled stop id finishes the request with reason stop",
    config=cfg(),
    requests=[req("A", seq(100, 5), 10, stop_token_ids=[55, 66], output_token_ids=[1, 66, 3]),
              req("B", seq(200, 7), 10, stop_token_ids=[77], output_token_ids=[5, 6, 7, 8, 77]),
              req("C", seq(300, 4), 4, stop_token_ids=[99])])
W["18_min_tokens"] = dict(
    name="min_tokens: stops only once min_tokens outputs exist (forced stop tokens placed at or after min_tokens)",
    config=cfg(),
    requests=[req("A", seq(100, 5), 10, ignore_eos=False, min_tokens=3, output_token_ids=[5, 6, 2, 2]),
              req("B", seq(200, 5), 10, stop_token_ids=[44], min_tokens=4, output_token_ids=[5, 6, 7, 8, 44]),
              req("C", seq(300, 5), 6, ignore_eos=False, min_tokens=6, output_token_ids=[1, 1, 1, 1, 1, 2])])
W["19_staggered_arrivals"] = dict(
    name="staggered arrivals: eight requests arrive over eight steps under a budget of 16",
    config=cfg(max_num_batched_tokens=16, max_model_len=40),
    requests=[req(f"R{i}", seq(100 * i, 3 + 2 * i), 2 + i % 4, arrival_step=i) for i in range(8)])
W["20_max_num_seqs"] = dict(
    name="max_num_seqs 2: at most two requests run; the others wait for a finished one",
    config=cfg(max_num_seqs=2, max_num_batched_tokens=32),
    requests=[req(f"R{i}", seq(100 * i, 4 + i), 3 + i) for i in range(5)])
W["21_max_model_len_cap"] = dict(
    name="max_model_len 24: a request reaching 24 tokens stops with reason length before max_tokens",
    config=cfg(max_model_len=24, max_num_batched_tokens=24),
    requests=[req("A", seq(100, 20), 50), req("B", seq(200, 23), 50), req("C", seq(300, 4), 3)])
W["22_priority_preempt_chain"] = dict(
    name="priority, 7 usable blocks: high-priority requests run first; the lowest-priority running request "
         "(the tail of running, so vLLM 0.33 and the articles agree) is preempted and resumes with prefix hits",
    config=cfg(num_blocks=8, policy="priority", max_model_len=28),
    requests=[req("H1", seq(300, 5), 8, priority=0), req("H2", seq(400, 5), 6, priority=1),
              req("L1", seq(100, 6), 8, priority=3, arrival_step=1), req("L2", seq(200, 6), 8, priority=4, arrival_step=2)])
# Kept apart (tests/golden/known_differences/): a priority-policy request that preempts itself while later
# running requests exist. vLLM 0.33 keeps scanning them; minivllm stops the running loop, as the
# scheduling-rules article describes (section "A special case: the victim is the request itself").
KNOWN = {"priority_self_preemption": dict(
    name="KNOWN DIFFERENCE: L1 (priority 4, the largest) preempts itself at step 3 while H1 follows it in running; "
         "vLLM 0.33 still schedules H1 in that step, minivllm (as the scheduling-rules article says) ends the running loop",
    config=cfg(num_blocks=8, policy="priority", max_model_len=28),
    requests=[req("L1", seq(100, 6), 8, priority=4), req("L2", seq(200, 6), 8, priority=3),
              req("H1", seq(300, 5), 8, priority=0, arrival_step=1), req("H2", seq(400, 5), 6, priority=1, arrival_step=2)])}
W["23_chunked_off_preempt"] = dict(
    name="chunked prefill off with a tight pool: preemption, and resumed prompts re-admitted whole",
    config=cfg(num_blocks=9, max_num_batched_tokens=32, max_model_len=32, enable_chunked_prefill=False),
    requests=[req("A", seq(100, 9), 10), req("B", seq(200, 10), 10), req("C", seq(300, 6), 8, arrival_step=2)])
W["24_caching_off_preempt"] = dict(
    name="prefix caching off: same prompts, no hits; preemption recomputes everything",
    config=cfg(num_blocks=9, enable_prefix_caching=False, max_model_len=32),
    requests=[req("A", seq(100, 8), 10), req("B", seq(100, 8), 10), req("C", seq(100, 8), 6, arrival_step=1)])
W["25_block16_long"] = dict(
    name="block size 16: long prompts chunked by a 64-token budget, shared 32-token prefix, decodes crossing blocks",
    config=cfg(block_size=16, num_blocks=40, max_num_batched_tokens=64, max_model_len=256),
    requests=[req("A", seq(1000, 100), 20), req("B", seq(1000, 32) + seq(5000, 50), 20, arrival_step=1),
              req("C", seq(9000, 17), 30, arrival_step=2)])

def rand_workload(seed, policy, n=10, chunked=True, caching=True, threshold=0):
    rng = random.Random(seed)
    bs = 4; mml = 48; nb = 14
    shared = seq(7000, 8)
    reqs = []
    for i in range(n):
        L = rng.randint(1, 24)
        prompt = (shared[:rng.choice([0, 4, 8])] + seq(100 * (i + 1), L))[:mml - 1]
        reqs.append(req(f"q{i}", prompt, rng.randint(1, 12), arrival_step=rng.randint(0, 10),
                        priority=rng.randint(0, 3)))
    return dict(name=f"random workload seed {seed}: {policy}, chunked={chunked}, caching={caching}, threshold={threshold}, tight pool",
                config=cfg(block_size=bs, num_blocks=nb, max_model_len=mml, max_num_batched_tokens=48 if not chunked else 20,
                           policy=policy, enable_chunked_prefill=chunked, enable_prefix_caching=caching,
                           long_prefill_token_threshold=threshold), requests=reqs)

W["26_random_fcfs"] = rand_workload(1, "fcfs")
W["27_random_priority"] = rand_workload(2, "priority")
W["28_random_fcfs_chunked_off"] = rand_workload(3, "fcfs", chunked=False)
W["29_random_priority_threshold"] = rand_workload(4, "priority", threshold=6)
W["30_random_fcfs_caching_off"] = rand_workload(5, "fcfs", caching=False)

try:  # E12's workload lives in the library (chapter 05); add it when minivllm is importable
    from minivllm.testing.fake_worker import e12_workload
    W["31_e12_step_log"] = e12_workload()
except ImportError: pass

def write(d, ws):
    os.makedirs(d, exist_ok=True)
    for k, w in ws.items():
        with open(os.path.join(d, k + ".json"), "w") as f: json.dump(w, f, indent=1)
write(OUT, W); write(os.path.join(OUT, "known_differences"), KNOWN)
print(len(W), "workloads,", len(KNOWN), "known difference(s)")
