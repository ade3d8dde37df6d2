"""End to end: `LLM.generate` gives transformers' greedy tokens under every scheduling setting, seeded sampling
is reproducible, and bad input fails early with a ValueError."""
import functools
import random

import pytest
import torch

from minivllm.entrypoints.llm import LLM
from minivllm.model_executor.model_loader import default_model_path
from minivllm.sampling_params import SamplingParams


GREEDY = SamplingParams(temperature=0, max_tokens=24)
ARCHS = ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"]


def random_prompts(lengths, seed=0, vocab_size=256, prefix=()):
    "Token-id prompts of the given lengths (ids >= 3 so they avoid bos/eos/pad), after a shared `prefix`."
    rng = random.Random(seed)
    return [list(prefix) + [rng.randrange(3, vocab_size) for _ in range(n)] for n in lengths]


@functools.lru_cache(maxsize=None)
def _hf_model(model_dir):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@functools.lru_cache(maxsize=None)
def _hf_greedy_one(model_dir, prompt, max_new_tokens):
    hf, ids = _hf_model(model_dir), torch.tensor([prompt])
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                          pad_token_id=hf.config.eos_token_id)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module", autouse=True)
def _free_hf_models():
    "Drop the cached transformers models when this file is done (they hold the SmolLM2 weights)."
    yield
    _hf_model.cache_clear(); _hf_greedy_one.cache_clear()


def hf_greedy(model_dir, prompts, max_new_tokens):
    "transformers' `generate(do_sample=False)` one prompt at a time (no padding), new tokens only."
    return [_hf_greedy_one(str(model_dir), tuple(p), max_new_tokens) for p in prompts]


def token_ids(outputs):
    return [o.outputs[0].token_ids for o in outputs]


def preemption_recorder(llm):
    "Install a step observer that collects every preempted request id."
    seen = set()
    llm.engine_core.step_observers.append(lambda sched, so, out: seen.update(so.preempted_req_ids))
    return seen


# ---------------------------------------------------------------- equality with transformers

@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_default_settings_equal_transformers(tiny_paths_by_arch, arch):
    prompts = random_prompts([3, 17, 40, 64, 9], seed=1)
    llm = LLM(tiny_paths_by_arch[arch])  # every default, KV cache sized from the CPU memory budget
    assert token_ids(llm.generate(prompts, GREEDY, use_tqdm=False)) == hf_greedy(tiny_paths_by_arch[arch], prompts, 24)


SETTINGS = {
    # 6 usable blocks of 16 for ~18 blocks of demand: requests must be preempted and recomputed
    "preemption": dict(num_gpu_blocks=7, max_model_len=96),
    # 8 tokens per step: every prompt is chunked over several steps, decodes mixed in
    "chunked": dict(max_num_batched_tokens=8, max_num_seqs=4),
    "long_prefill_threshold": dict(long_prefill_token_threshold=5),
    "no_prefix_caching": dict(enable_prefix_caching=False),
    "priority_small_pool": dict(scheduling_policy="priority", num_gpu_blocks=7, max_model_len=96),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("setting", SETTINGS)
def test_tiny_scheduler_settings_equal_transformers(tiny_paths_by_arch, setting, arch):
    d = tiny_paths_by_arch[arch]
    prompts = random_prompts([3, 17, 40, 64, 9], seed=2)
    llm = LLM(d, **{"num_gpu_blocks": 64, "block_size": 16, **SETTINGS[setting]})   # pools of 16-token blocks
    preempted, steps = preemption_recorder(llm), []
    llm.engine_core.step_observers.append(lambda sched, so, out: steps.append(dict(so.num_scheduled_tokens)))
    priority = [2, 0, 1, 0, 3] if "priority" in setting else None
    outs = llm.generate(prompts, GREEDY, use_tqdm=False, priority=priority)
    assert token_ids(outs) == hf_greedy(d, prompts, 24)
    if "small_pool" in setting or setting == "preemption": assert preempted
    if setting == "chunked": assert max(sum(s.values()) for s in steps) == 8
    if setting == "long_prefill_threshold": assert max(max(s.values(), default=0) for s in steps) == 5
    if priority:  # the two priority-0 requests start at once; the priority-3 one does not fit in the first step
        assert {"1", "3"} <= set(steps[0]) and "4" not in steps[0]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("caching", [True, False])
def test_shared_prefixes_and_cached_tokens(tiny_paths_by_arch, caching, arch):
    d = tiny_paths_by_arch[arch]
    prefix = random_prompts([40], seed=3)[0]
    prompts = random_prompts([5, 12, 1], seed=4, prefix=prefix)
    llm = LLM(d, num_gpu_blocks=64, block_size=16, enable_prefix_caching=caching)
    first = llm.generate(prompts, GREEDY, use_tqdm=False)
    again = llm.generate(prompts[:1], GREEDY, use_tqdm=False)[0]
    assert token_ids(first) + [again.outputs[0].token_ids] == hf_greedy(d, prompts + prompts[:1], 24)
    full_blocks = len(prompts[0]) // llm.block_size * llm.block_size   # 45 tokens: 2 full blocks of 16
    assert full_blocks == 32 and again.num_cached_tokens == (full_blocks if caching else 0)


def test_triton_backend_equals_torch_backend(tiny_llama_path):
    d = tiny_llama_path
    prompts, sp = random_prompts([5, 20], seed=5), SamplingParams(temperature=0, max_tokens=6)
    triton_out = LLM(d, num_gpu_blocks=16, attention_backend="triton").generate(prompts, sp, use_tqdm=False)
    assert token_ids(triton_out) == hf_greedy(d, prompts, 6)


def test_smollm2_batch_equals_transformers():
    path = default_model_path()
    llm = LLM(num_gpu_blocks=64)
    tok = llm.get_tokenizer()
    texts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village by the sea,",
             "List three colours:"]
    outs = llm.generate(texts, GREEDY, use_tqdm=False)
    expected = hf_greedy(path, [tok.encode(t) for t in texts], 24)
    assert token_ids(outs) == expected
    assert [o.prompt for o in outs] == texts
    assert all(o.outputs[0].text == tok.decode(e, skip_special_tokens=True) for o, e in zip(outs, expected))


def test_smollm2_chat_answers():
    out = LLM(num_gpu_blocks=64).chat([{"role": "user", "content": "What is the capital of France?"}],
                                      SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)[0]
    assert "Paris" in out.outputs[0].text and out.prompt.startswith("<|im_start|>")


def test_llm_timeline_records_the_generation(tiny_llama_path):
    "Every `LLM` has a `TimelineRecorder` from the start; its records add up to what `generate` returned."
    from minivllm.timeline import TimelineRecorder, attach_timeline
    llm = LLM(tiny_llama_path, num_gpu_blocks=32, max_num_batched_tokens=8, max_num_seqs=4)
    assert isinstance(llm.timeline, TimelineRecorder) and attach_timeline(llm) is llm.timeline
    assert llm.engine_core.step_observers == [llm.timeline] and len(llm.timeline) == 0
    prompts = random_prompts([5, 12, 3], seed=9)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=5), use_tqdm=False)
    rec = llm.timeline
    assert [r.step for r in rec] == list(range(len(rec)))
    assert all(0 < r.total_scheduled <= 8 for r in rec) and rec[-1].finished  # generate stops when the last finishes
    assert any(q.is_prefill_chunk for r in rec for q in r.scheduled)            # the 12-token prompt was chunked
    sampled = {}
    for r in rec:
        for q in r.scheduled: sampled.setdefault(q.req_id, []).extend(q.new_token_ids)
    assert [sampled[o.request_id] for o in outs] == token_ids(outs)
    computed = {q.req_id: q.num_computed_after for r in rec for q in r.scheduled}   # the last value per request
    assert [computed[o.request_id] for o in outs] == [len(p) + 5 - 1 for p in prompts]  # the last token is not fed
    assert rec.settings["max_num_batched_tokens"] == 8 and str(llm.device) in rec.settings_label()


# ---------------------------------------------------------------- seeded sampling

def test_seeded_sampling_same_across_runs_and_batches(tiny_qwen2_path):
    d = tiny_qwen2_path
    target, others = random_prompts([11], seed=6)[0], random_prompts([30, 4, 50], seed=7)
    seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=1234, max_tokens=20)
    unseeded = SamplingParams(temperature=1.0, max_tokens=20)
    alone = LLM(d, num_gpu_blocks=64).generate([target], seeded, use_tqdm=False)[0].outputs[0].token_ids
    llm = LLM(d, num_gpu_blocks=64, max_num_batched_tokens=16, max_num_seqs=4)
    batch = llm.generate([others[0], target, *others[1:]], [unseeded, seeded, unseeded, unseeded], use_tqdm=False)
    assert batch[1].outputs[0].token_ids == alone
    again = llm.generate([target, others[2]], [seeded, unseeded], use_tqdm=False)[0]
    assert again.outputs[0].token_ids == alone


def test_smollm2_seeded_sampling_same_text_in_any_batch():
    llm = LLM(num_gpu_blocks=64)
    seeded = SamplingParams(temperature=0.8, top_k=50, seed=7, max_tokens=16)
    alone = llm.generate("Tell me a story about a cat.", seeded, use_tqdm=False)[0].outputs[0].text
    batch = llm.generate(["Why is the sky blue?", "Tell me a story about a cat."],
                         [SamplingParams(temperature=1.0, max_tokens=20), seeded], use_tqdm=False)
    assert batch[1].outputs[0].text == alone


# ---------------------------------------------------------------- bad input

def test_bad_input_raises_before_any_work(tiny_llama_path, tmp_path):
    d = tiny_llama_path
    llm = LLM(d, num_gpu_blocks=16, max_model_len=64)
    with pytest.raises(ValueError, match="at least one prompt"): llm.generate([], use_tqdm=False)
    with pytest.raises(ValueError, match="prompt 1: the prompt has 64 tokens"):
        llm.generate(random_prompts([5, 64]), use_tqdm=False)
    with pytest.raises(ValueError, match="has no tokenizer"): llm.generate("text", use_tqdm=False)
    with pytest.raises(ValueError, match="2 values for 3 prompts"):
        llm.generate(random_prompts([2, 2, 2]), [GREEDY, GREEDY], use_tqdm=False)
    with pytest.raises(ValueError, match="scheduling_policy"): llm.generate(random_prompts([2]), priority=1)
    assert not llm.engine_core.scheduler.has_unfinished_requests()  # nothing was added by the failed calls
    with pytest.raises(ValueError, match="no config.json"): LLM(tmp_path)
    (tmp_path / "config.json").write_text((d / "config.json").read_text())
    with pytest.raises(ValueError, match="safetensors"): LLM(tmp_path)
    with pytest.raises(ValueError, match="attention backend"): LLM(d, attention_backend="flash")


def test_max_tokens_beyond_room_is_capped(tiny_llama_path):
    llm = LLM(tiny_llama_path, num_gpu_blocks=16, max_model_len=64)
    out = llm.generate(random_prompts([60]), SamplingParams(temperature=0, max_tokens=50, ignore_eos=True),
                       use_tqdm=False)[0]
    room = llm.max_model_len - len(out.prompt_token_ids)            # 64 - 60: fewer than max_tokens
    assert room == 4 and len(out.outputs[0].token_ids) == room and out.outputs[0].finish_reason == "length"


def test_progress_bar_and_interrupted_loop(tiny_llama_path, capsys):
    llm = LLM(tiny_llama_path, num_gpu_blocks=32)
    prompts = random_prompts([4, 9, 30], seed=8)
    llm.generate(prompts, GREEDY)
    err = capsys.readouterr().err
    assert "Processed prompts" in err and "est. speed input" in err

    def interrupt(sched, so, out):
        if len(sched.running) == 3: raise KeyboardInterrupt
    llm.engine_core.step_observers.append(interrupt)
    with pytest.raises(KeyboardInterrupt): llm.generate(prompts, GREEDY, use_tqdm=False)
    llm.engine_core.step_observers.remove(interrupt)
    assert llm.engine_core.step_observers == [llm.timeline]        # the LLM's own recorder stays
    assert not llm.engine_core.scheduler.has_unfinished_requests() and not llm.llm_engine.output_processor.request_states
    assert token_ids(llm.generate(prompts, GREEDY, use_tqdm=False)) == hf_greedy(tiny_llama_path, prompts, 24)


# ---------------------------------------------------------------- console command

def test_cli_generate_and_bench(tiny_llama_path, capsys, tmp_path):
    import json, subprocess, sys
    from minivllm.entrypoints.cli.main import main
    assert main(["generate", "What is the capital of France?", "--max-tokens", "12",
                 "--num-gpu-blocks", "64"]) == 0
    assert "Paris" in capsys.readouterr().out
    # only `serve` imports the server stack: checked in a fresh interpreter (this one may have it)
    probe = ("import sys; from minivllm.entrypoints.cli.main import main; "
             "main(['generate', 'Hi', '--max-tokens', '2', '--num-gpu-blocks', '64']); "
             "print(sorted(m for m in ('fastapi', 'uvicorn', 'zmq') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip().endswith("[]"), run.stdout
    tiny = ["--model", str(tiny_llama_path), "--input-len", "8", "--output-len", "4"]
    main(["bench", "throughput", "--num-prompts", "3", "--output-json", str(tmp_path / "t.json"), *tiny])
    out = capsys.readouterr().out
    assert out.startswith("Throughput: ") and "requests/s" in out and "Total num output tokens:  12" in out
    assert json.loads((tmp_path / "t.json").read_text())["total_num_tokens"] == 3 * (8 + 4)
    main(["bench", "latency", "--batch-size", "2", "--num-iters-warmup", "1", "--num-iters", "4",
          "--output-json", str(tmp_path / "l.json"), *tiny])
    out = capsys.readouterr().out
    assert out.startswith("Avg latency: ") and "99% percentile latency: " in out
    assert len(json.loads((tmp_path / "l.json").read_text())["latencies"]) == 4


def test_cli_generate_n_stop_logprobs_timeline(capsys, tmp_path):
    from minivllm.entrypoints.cli.main import main
    png = tmp_path / "run.png"
    main(["generate", "Name a fruit.", "--n", "2", "--temperature", "0.8", "--stop", ".", "--logprobs", "1",
          "--max-tokens", "12", "--num-gpu-blocks", "64", "--seed", "3", "--timeline", str(png)])
    out = capsys.readouterr().out
    assert "[0] " in out and "[1] " in out and out.count("cumulative logprob") == 2 and png.stat().st_size > 0


# ---------------------------------------------------------------- chat: every conversation checked first

def test_chat_checks_every_conversation_before_generating(tiny_llama_smollm2_tokenizer_path):
    llm = LLM(tiny_llama_smollm2_tokenizer_path, num_gpu_blocks=16, max_model_len=256, enforce_eager=True)
    good, sp = [{"role": "user", "content": "Hi"}], SamplingParams(temperature=0, max_tokens=2)
    image = [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    for bad, match in [([{"role": "user", "content": 5}], r"messages\[1\]\[0\]\['content'\] must be a string"),
                       ([{"content": "no role"}], r"messages\[1\]\[0\] must be a dict with a string 'role'"),
                       ([{"role": "user", "content": image}], "minivllm reads text only"),
                       ([], r"messages\[1\] must be a non-empty list")]:
        with pytest.raises(ValueError, match=match): llm.chat([good, bad], sp, use_tqdm=False)
    with pytest.raises(ValueError, match="may not set"):
        llm.chat(good, sp, chat_template_kwargs={"tokenize": True})
    with pytest.raises(ValueError, match="continue_final_message"):
        llm.chat(good, sp, continue_final_message=True)
    assert not llm.llm_engine.has_unfinished_requests()            # nothing was added by the failures
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    out = llm.chat([{"role": "critic", "content": parts}], sp, use_tqdm=False)[0]   # any role it renders
    assert "<|im_start|>critic\nfirst\nsecond<|im_end|>" in out.prompt
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if shout %}!{% endif %}"
    shouted = llm.chat(good, sp, use_tqdm=False, chat_template=template, chat_template_kwargs={"shout": True})
    assert shouted[0].prompt == "Hi!"
