"""Sampling parameters end to end, against transformers on the same tiny random weights.

A real `Scheduler` drives a `ModelRunner` over a tiny random Llama checkpoint (chunked prefill,
several requests per step). Where transformers has the knob we compare with it directly; where it
has not, we apply the formula to transformers' logits:
- greedy with `repetition_penalty` equals `generate(repetition_penalty=...)` token for token;
- `logprobs` and `prompt_logprobs` equal `log_softmax` of transformers' fp32 logits (atol 1e-4), the
  top-k ids are transformers' top-k, and the ranks are right;
- greedy with presence/frequency penalties equals the OpenAI formula on transformers' logits;
- `min_p=1.0` random sampling equals greedy;
- a request with prompt logprobs does not read the prefix cache; one step reads no device scalar.
"""
import copy

import pytest
import torch

from minivllm.model_executor.model_loader import load_model
from minivllm.worker.gpu_model_runner import ModelRunner
from minivllm.request import Request
from minivllm.sampling_params import SamplingParams
from minivllm.config import CacheConfig, SchedulerConfig
from minivllm.core.sched.scheduler import Scheduler
from minivllm.testing.model_runner import HistoryModel
from minivllm.testing.sync import NoScalarReads

torch.set_num_threads(1)
VOCAB = 256
PROMPTS = [torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(n)).tolist()
           for n in (11, 6, 17)]


@pytest.fixture(scope="module")
def hf_without_eos(tiny_llama_hf):
    "A copy of the shared transformers model that never stops at EOS (its own generation config)."
    model = copy.deepcopy(tiny_llama_hf)
    model.generation_config.eos_token_id = None      # we compare fixed-length runs (ignore_eos)
    model.generation_config.pad_token_id = 0
    return model


def hf_logits(hf, ids):
    with torch.no_grad(): return hf(torch.tensor([ids])).logits[0].float()


def run(path, params, prompts=PROMPTS, budget=8, block_size=4, num_blocks=64):
    "Schedule + execute until done; per request: (Request, list of EngineCoreOutputs)."
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=4,
                                      max_model_len=64),
                      CacheConfig(block_size=block_size, num_gpu_blocks=num_blocks))
    runner = ModelRunner(load_model(path, attn_backend="torch"), 4, 64, budget, block_size)
    runner.initialize_kv_cache(num_blocks)
    reqs = [Request(f"r{i}", p, sp) for i, (p, sp) in enumerate(zip(prompts, params))]
    for r in reqs: sched.add_request(r)
    outs = {r.request_id: [] for r in reqs}
    while sched.has_requests():
        so = sched.schedule()
        for o in sched.update_from_output(so, runner.execute_model(so)).outputs:
            outs[o.request_id].append(o)
    return [(r, outs[r.request_id]) for r in reqs]


def test_greedy_repetition_penalty_equals_transformers(tiny_llama_path, hf_without_eos):
    penalties = [1.3, 0.8, 2.0]
    params = [SamplingParams(temperature=0, repetition_penalty=r, max_tokens=12, ignore_eos=True)
              for r in penalties]
    for (req, _), r in zip(run(tiny_llama_path, params), penalties):
        ref = hf_without_eos.generate(torch.tensor([req.prompt_token_ids]), do_sample=False,
                          repetition_penalty=r,
                          max_new_tokens=12)[0, len(req.prompt_token_ids):].tolist()
        assert list(req.output_token_ids) == ref
    # and the penalty matters: without it the first request generates something else
    (plain,
     _), = run(tiny_llama_path, [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)], PROMPTS[:1])
    assert list(plain.output_token_ids) != list(run(tiny_llama_path, params[:1],
                                                    PROMPTS[:1])[0][0].output_token_ids)


def _check_rows(rows, logits, targets, k):
    "Each row: [target, top-1..top-k] ids, logprobs = log_softmax(logits), rank of the target."
    ref = logits.log_softmax(-1)
    assert len(rows) == len(targets) == len(ref)
    for ids, lps, rank, lp, target in zip(rows.logprob_token_ids, rows.logprobs,
                                          rows.sampled_token_ranks,
                                          ref, targets):
        assert len(ids) == k + 1 and ids[0] == target
        assert ids[1:] == lp.topk(k).indices.tolist()
        assert torch.allclose(torch.tensor(lps), lp[ids], atol=1e-4)
        assert rank == int((lp >= lp[target]).sum())


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_logprobs_and_prompt_logprobs_equal_transformers(tiny_llama_path, hf_without_eos, temperature):
    params = [SamplingParams(temperature=temperature, seed=1, max_tokens=6, ignore_eos=True,
                             logprobs=4,
                             prompt_logprobs=3),
                             # asks nothing
                             SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
              SamplingParams(temperature=temperature, seed=2, max_tokens=6, ignore_eos=True,
                             logprobs=0)]
    results = run(tiny_llama_path, params, budget=5)          # prompts of 11 and 17 tokens: chunked prefills
    for (req, outs), sp in zip(results, params):
        full = list(req.prompt_token_ids) + list(req.output_token_ids)
        logits = hf_logits(hf_without_eos, full)
        n = len(req.prompt_token_ids)
        if sp.logprobs is None:
            assert all(o.new_logprobs is None and o.new_prompt_logprobs is None for o in outs)
            continue
        rows = [o.new_logprobs for o in outs]
        assert all(len(r) == 1 for r in rows)       # one row per new token
        from minivllm.core.sched.output import LogprobsLists
        merged = LogprobsLists(*[sum((getattr(r, f) for r in rows), []) for f in
                                 ("logprob_token_ids", "logprobs", "sampled_token_ranks")])
        _check_rows(merged, logits[n - 1:-1], full[n:], sp.logprobs)
        prompt = [o.new_prompt_logprobs for o in outs if o.new_prompt_logprobs is not None]
        if sp.prompt_logprobs is None:
            assert prompt == []
        else:
            # with the first token
            assert len(prompt) == 1 and outs[0].new_prompt_logprobs is not None
            _check_rows(prompt[0], logits[:n - 1], full[1:n], sp.prompt_logprobs)


def _openai_penalties(z, output, presence, frequency):
    z = z.clone()
    for t in set(output): z[t] -= frequency * output.count(t) + presence
    return z


def test_presence_frequency_equal_formula_on_transformers_logits(tiny_llama_path, hf_without_eos):
    cases = [(0.7, 0.4), (-0.5, 1.5), (2.0, 0.0)]
    params = [SamplingParams(temperature=0, presence_penalty=p, frequency_penalty=f, max_tokens=10,
                             ignore_eos=True) for p, f in cases]
    for (req, _), (p, f) in zip(run(tiny_llama_path, params), cases):
        tokens, out = list(req.prompt_token_ids), []
        for _ in range(10):
            nxt = int(_openai_penalties(hf_logits(hf_without_eos, tokens)[-1], out, p, f).argmax())
            tokens.append(nxt); out.append(nxt)
        assert list(req.output_token_ids) == out


def test_min_p_one_equals_greedy(tiny_llama_path):
    greedy = run(tiny_llama_path, [SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)] * 3)
    min_p = run(tiny_llama_path,
                [SamplingParams(temperature=1.5, min_p=1.0, seed=i, max_tokens=8, ignore_eos=True)
                       for i in range(3)])
    for (g, _), (m, _) in zip(greedy, min_p):
        assert list(m.output_token_ids) == list(g.output_token_ids)


def test_prompt_logprobs_request_skips_the_prefix_cache(tiny_llama_path):
    shared = PROMPTS[2]
    params = [SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, prompt_logprobs=1)]
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64),
                      CacheConfig(block_size=4, num_gpu_blocks=64))
    runner = ModelRunner(load_model(tiny_llama_path, attn_backend="torch"), 4, 64, 64, 4)
    runner.initialize_kv_cache(64)
    reqs = [Request(f"r{i}", shared, sp) for i, sp in enumerate(params)]
    sched.add_request(reqs[0])
    while sched.has_requests():             # r0 alone fills the cache
        so = sched.schedule(); sched.update_from_output(so, runner.execute_model(so))
    for r in reqs[1:]: sched.add_request(r)
    so = sched.schedule()
    # r1 hits 4 blocks
    assert so.num_scheduled_tokens == {"r1": len(shared) - 16, "r2": len(shared)}
    out = sched.update_from_output(so, runner.execute_model(so)).outputs
    assert len(next(o for o in out if o.request_id == "r2").new_prompt_logprobs) == len(shared) - 1


def test_one_step_reads_no_device_scalar():
    """The runner's step (inputs, sampler with every feature, logprobs, prompt logprobs, the one
    transfer) never reads a device scalar. The model is `HistoryModel`, which reads none either:
    the check covers the runner and the sampler, not the attention backend."""
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=32, max_num_seqs=4, max_model_len=64),
                      CacheConfig(block_size=4, num_gpu_blocks=64))
    runner = ModelRunner(HistoryModel(64), 4, 64, 32, 4)
    runner.initialize_kv_cache(64)
    params = [SamplingParams(temperature=0, repetition_penalty=1.2, logprobs=2, prompt_logprobs=2),
              SamplingParams(top_k=5, top_p=0.9, seed=3, presence_penalty=0.5),
              SamplingParams(min_p=0.05, frequency_penalty=0.3, min_tokens=2)]
    for i, (p, sp) in enumerate(zip(PROMPTS, params)):
        sched.add_request(Request(f"r{i}", [t % 64 for t in p], sp))
    for _ in range(3):
        so = sched.schedule()
        with NoScalarReads():
            mro = runner.execute_model(so)
        sched.update_from_output(so, mro)
    # prompt rows went out in step 0
    assert mro.logprobs is not None and mro.prompt_logprobs_dict == {}


# ---------------------------------------------------------------- what the server refuses, refused offline too

@pytest.mark.parametrize("kwargs, field", [
    (dict(top_k=2**64), "top_k"), (dict(seed=2**64), "seed"), (dict(seed=-2**63 - 1), "seed"),
    (dict(stop=5), "stop"), (dict(stop=[5]), "stop"), (dict(stop_token_ids=5), "stop_token_ids"),
    (dict(stop_token_ids=[[1]]), "stop_token_ids"), (dict(stop_token_ids=[2**64]), "stop_token_ids"),
    (dict(logit_bias={1: 1e308}), "logit_bias"), (dict(logit_bias={1: float("inf")}), "logit_bias"),
    (dict(logit_bias={1: -101}), "logit_bias"), (dict(logit_bias=[1]), "logit_bias"),
    (dict(bad_words="word"), "bad_words"), (dict(allowed_token_ids=3), "allowed_token_ids"),
    (dict(max_tokens=2**64), "max_tokens"), (dict(logprobs=2**64), "logprobs")])
def test_sampling_params_refuse_what_the_server_refuses(kwargs, field):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field} "): SamplingParams(**kwargs)


def test_one_odd_request_never_sinks_its_batch(tiny_llama_path):
    """Issue 52's reproducer: a top_k of 2**31 and a 64-bit seed used to pass construction and then fail inside
    the worker's input batch, losing the other nine results. Each is now a valid request (a k past the
    vocabulary keeps every token, as in vLLM), and a bad one is refused before anything runs."""
    from minivllm.entrypoints.llm import LLM
    llm = LLM(tiny_llama_path, num_gpu_blocks=64, max_model_len=64, enforce_eager=True)
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    odd = [SamplingParams(temperature=1.0, top_k=2**31, seed=7, max_tokens=4, ignore_eos=True),
           SamplingParams(temperature=1.0, n=2, seed=2**63 - 1, max_tokens=4, ignore_eos=True),
           SamplingParams(temperature=1.0, min_tokens=2**40, max_tokens=None, seed=3)]
    outs = llm.generate(PROMPTS[:1] * 10, [greedy] * 7 + odd, use_tqdm=False)
    assert len(outs) == 10 and len({tuple(o.outputs[0].token_ids) for o in outs[:7]}) == 1
    no_top_k = SamplingParams(temperature=1.0, top_k=0, seed=7, max_tokens=4, ignore_eos=True)
    assert outs[7].outputs[0].token_ids == llm.generate(PROMPTS[:1], no_top_k, use_tqdm=False)[0].outputs[0].token_ids
    assert len(outs[9].outputs[0].token_ids) == 64 - len(PROMPTS[0])          # min_tokens: all the room
    with pytest.raises(ValueError, match="prompt 9: logit_bias must be inside the vocabulary"):
        llm.generate(PROMPTS[:1] * 10, [greedy] * 9 + [SamplingParams(logit_bias={VOCAB: 1.0})],
                     use_tqdm=False)
    assert not llm.llm_engine.has_unfinished_requests()
