"""The output side of `LLM` and `AsyncLLM` (chapters 20, 23 and 24): every `SamplingParams` field is honoured or
refused with a ValueError, `n` fans out and back in, stop strings are found across token boundaries (the same
text through `LLM` and `AsyncLLM`), and logprobs come back in vLLM's shape."""
import asyncio
import dataclasses
import math

import pytest
import torch

from minivllm.entrypoints.llm import LLM
from minivllm.engine.arg_utils import EngineArgs
from minivllm.outputs import RequestOutputKind
from minivllm.sampling_params import SamplingParams


PROMPT = "Write a list of five fruits, one per line:"


def greedy(max_tokens=24, **kw):
    return SamplingParams(temperature=0, max_tokens=max_tokens, **kw)


def one(llm, prompt, sp):
    "The single completion of one prompt."
    return llm.generate(prompt, sp, use_tqdm=False)[0].outputs[0]


# ---------------------------------------------------------------- n: fan out, fan in

def test_n_seeded_reproducible_distinct_and_prefilled_once(tiny_llama_path):
    llm = LLM(tiny_llama_path, num_gpu_blocks=64, max_model_len=256, block_size=16)
    prompt = list(range(3, 43))                                  # 40 tokens: 2 full blocks of 16, 8 more
    sp = SamplingParams(n=4, seed=11, temperature=1.0, max_tokens=12, ignore_eos=True)
    out = llm.generate([prompt], sp, use_tqdm=False)[0]
    assert out.request_id == "0" and out.finished and [c.index for c in out.outputs] == [0, 1, 2, 3]
    completions = [tuple(c.token_ids) for c in out.outputs]
    assert len(set(completions)) == 4 and all(len(c) == 12 for c in completions)
    # prefilled once: child 0 computes the prompt, children 1-3 find its 2 full blocks in the prefix cache
    # in the same step (they were cached when child 0 allocated them) and compute only the last 8 tokens
    first = llm.timeline[0].grants
    assert first == {"0_0": 40, "1_0": 8, "2_0": 8, "3_0": 8}
    # child i is seeded with seed + i: the same as a single request with that seed
    alone = one(llm, [prompt], SamplingParams(seed=13, temperature=1.0, max_tokens=12, ignore_eos=True))
    assert tuple(alone.token_ids) == completions[2]
    again = LLM(tiny_llama_path, num_gpu_blocks=64, max_model_len=256, block_size=16).generate([prompt], sp, use_tqdm=False)[0]
    assert [tuple(c.token_ids) for c in again.outputs] == completions


def test_n_with_several_prompts_keeps_order(tiny_llm):
    sps = [SamplingParams(n=2, temperature=1.0, seed=1, max_tokens=3), greedy(3),
           SamplingParams(n=3, temperature=1.0, max_tokens=3)]
    outs = tiny_llm.generate([[5, 6, 7], [8, 9], [10, 11, 12, 13]], sps, use_tqdm=False)
    assert [len(o.outputs) for o in outs] == [2, 1, 3]
    assert [o.prompt_token_ids for o in outs] == [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    processor = tiny_llm.llm_engine.output_processor
    assert not processor.request_states and not processor.parent_requests


# ---------------------------------------------------------------- stop strings

def straddling_stop(tokenizer, token_ids):
    "A 2-character string made of the last character of one token and the first of the next."
    pieces = [tokenizer.decode([t]) for t in token_ids]
    for i in range(3, len(pieces) - 1):
        a, b = pieces[i], pieces[i + 1]
        if a.strip() and b.strip() and a.isascii() and b.isascii():
            stop = a[-1] + b[0]
            text = tokenizer.decode(token_ids, skip_special_tokens=True)
            if text.index(stop) == len(tokenizer.decode(token_ids[:i + 1])) - 1: return stop
    raise AssertionError("no straddling pair found")


def test_stop_string_across_token_boundary_llm_and_async_llm(smollm2_llm, smollm2_server):
    full = one(smollm2_llm, PROMPT, greedy(40))
    stop = straddling_stop(smollm2_llm.get_tokenizer(), full.token_ids)
    cut = full.text.index(stop)
    out = one(smollm2_llm, PROMPT, greedy(40, stop=[stop]))
    assert (out.text, out.finish_reason, out.stop_reason) == (full.text[:cut], "stop", stop)
    assert len(out.token_ids) < len(full.token_ids)              # it stopped early ...
    assert not smollm2_llm.engine_core.scheduler.has_unfinished_requests()   # ... and the engine freed it
    pool = smollm2_llm.engine_core.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == smollm2_llm.cache_config.num_gpu_blocks - 1
    kept = one(smollm2_llm, PROMPT, greedy(40, stop=[stop], include_stop_str_in_output=True))
    assert kept.text == full.text[:cut + len(stop)]

    async def streamed(sp, kind):
        return [o async for o in smollm2_server.async_llm.generate(PROMPT, sp, output_kind=kind)]
    deltas = asyncio.run(streamed(greedy(40, stop=[stop]), RequestOutputKind.DELTA))
    assert "".join(d.outputs[0].text for d in deltas) == out.text
    assert [t for d in deltas for t in d.outputs[0].token_ids] == out.token_ids
    assert deltas[-1].finished and deltas[-1].outputs[0].stop_reason == stop


def test_stop_strings_need_a_tokenizer(tiny_llm):
    with pytest.raises(ValueError, match="need a tokenizer"): tiny_llm.generate([[1, 2]], greedy(stop=["x"]))


def test_stop_token_ids_end_with_the_id_as_stop_reason(smollm2_llm):
    full = one(smollm2_llm, PROMPT, greedy(30))
    i = next(i for i in range(3, 30) if full.token_ids[i] not in full.token_ids[:i])   # a first occurrence
    stop_id = full.token_ids[i]
    out = one(smollm2_llm, PROMPT, greedy(30, stop_token_ids=[stop_id]))
    assert out.token_ids == full.token_ids[:i + 1] and (out.finish_reason, out.stop_reason) == ("stop", stop_id)
    tok = smollm2_llm.get_tokenizer()
    assert out.text == tok.decode(full.token_ids[:i], skip_special_tokens=True)   # its text is left out
    with_stop = one(smollm2_llm, PROMPT, greedy(30, stop_token_ids=[stop_id], include_stop_str_in_output=True))
    assert with_stop.text == tok.decode(full.token_ids[:i + 1], skip_special_tokens=True)


# ---------------------------------------------------------------- logprobs

def test_logprobs_shape(smollm2_llm):
    tok, k = smollm2_llm.get_tokenizer(), 3
    out = smollm2_llm.generate(PROMPT, greedy(8, logprobs=k, prompt_logprobs=2), use_tqdm=False)[0]
    c = out.outputs[0]
    assert len(c.logprobs) == len(c.token_ids) == 8
    for token_id, step in zip(c.token_ids, c.logprobs):
        assert token_id in step and len(step) in (k, k + 1)          # the top k, plus the sampled if outside it
        assert step[token_id].rank == 1                              # greedy samples the most likely token
        assert sorted(lp.rank for t, lp in step.items()) == list(range(1, k + 1))
        assert all(lp.decoded_token == tok.decode([t]) for t, lp in step.items())
        assert max(step.values(), key=lambda lp: lp.logprob) is step[token_id]
    assert math.isclose(c.cumulative_logprob, sum(s[t].logprob for t, s in zip(c.token_ids, c.logprobs)),
                        rel_tol=1e-6)
    # prompt logprobs: one entry per prompt token, None for the first, each holding that prompt token
    assert len(out.prompt_logprobs) == len(out.prompt_token_ids) and out.prompt_logprobs[0] is None
    assert all(t in d and len(d) in (2, 3) for t, d in zip(out.prompt_token_ids[1:], out.prompt_logprobs[1:]))


def test_logprobs_equal_log_softmax_of_the_logits(tiny_llm, tiny_llama_hf):
    "The sampled token's logprob is log_softmax of the raw logits (transformers on the same weights)."
    prompt = [4, 8, 15, 16, 23, 42]
    c = one(tiny_llm, [prompt], SamplingParams(temperature=0.7, seed=5, max_tokens=4, logprobs=0))
    hf = tiny_llama_hf
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + c.token_ids])).logits[0].float()
    expected = logits.log_softmax(-1)[len(prompt) - 1:-1].gather(1, torch.tensor(c.token_ids)[:, None])[:, 0]
    got = torch.tensor([s[t].logprob for t, s in zip(c.token_ids, c.logprobs)])
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    assert all(len(s) == 1 for s in c.logprobs)                    # logprobs=0: the sampled token only


# ---------------------------------------------------------------- every field honoured or refused

def check_n(llm, base):
    assert len(llm.generate(PROMPT, SamplingParams(n=3, temperature=1.0, max_tokens=4), use_tqdm=False)[0]
               .outputs) == 3


def batch(llm, prompt, sps):
    "Token ids of one prompt under several SamplingParams, in one batched call."
    return [o.outputs[0].token_ids for o in llm.generate([prompt] * len(sps), sps, use_tqdm=False)]


def changes_greedy(**kw):
    "A check that `kw` changes the greedy answer of a prompt that invites repetition."
    def check(llm, base):
        with_kw, without = batch(llm, "Repeat after me: the cat, the cat, the cat,", [greedy(12, **kw), greedy(12)])
        assert with_kw != without
    return check


def check_sampling_knob(**kw):
    "A sampling knob: seeded sampling with it differs from seeded sampling without it, on some seed."
    def check(llm, base):
        sp = lambda seed, **extra: SamplingParams(temperature=1.5, seed=seed, max_tokens=8, **extra)
        runs = batch(llm, PROMPT, [sp(s, **kw) for s in range(3)] + [sp(s) for s in range(3)])
        assert runs[:3] != runs[3:]
    return check


def check_temperature(llm, base):
    sampled = batch(llm, PROMPT, [SamplingParams(temperature=1.0, seed=s, max_tokens=8) for s in range(3)])
    assert any(t != base.token_ids[:8] for t in sampled)


def check_min_p(llm, base):
    assert one(llm, PROMPT, SamplingParams(temperature=1.0, min_p=1.0, seed=3, max_tokens=16)).token_ids == \
        base.token_ids
    check_sampling_knob(min_p=0.2)(llm, base)


def check_seed(llm, base):
    a, b, c = batch(llm, PROMPT, [SamplingParams(temperature=1.0, seed=s, max_tokens=8) for s in (42, 42, 43)])
    assert a == b != c


def check_stop(llm, base):
    word = base.text.split()[2]
    out = one(llm, PROMPT, greedy(16, stop=word))
    assert out.stop_reason == word and word not in out.text


YES = [{"role": "user", "content": "What is the capital of France?"}]


def chat_one(llm, sp):
    return llm.chat(YES, sp, use_tqdm=False)[0].outputs[0]


def check_ignore_eos(llm, base):
    short = chat_one(llm, greedy(40))
    assert short.finish_reason == "stop" and len(short.token_ids) < 40     # the answer ends with EOS ...
    assert len(chat_one(llm, greedy(40, ignore_eos=True)).token_ids) == 40  # ... unless told not to


def check_max_tokens(llm, base):
    assert len(base.token_ids) == 16 and len(one(llm, PROMPT, greedy(5)).token_ids) == 5


def check_min_tokens(llm, base):
    eos_at = len(chat_one(llm, greedy(40)).token_ids)
    assert len(chat_one(llm, greedy(eos_at + 10, min_tokens=eos_at + 5)).token_ids) >= eos_at + 5


def check_logprobs(llm, base):
    assert len(one(llm, PROMPT, greedy(4, logprobs=2)).logprobs) == 4


def check_prompt_logprobs(llm, base):
    out = llm.generate(PROMPT, greedy(2, prompt_logprobs=1), use_tqdm=False)[0]
    assert len(out.prompt_logprobs) == len(out.prompt_token_ids)


def check_skip_special_tokens(llm, base):
    answer = chat_one(llm, greedy(40))
    assert answer.finish_reason == "stop" and "<|im_end|>" not in answer.text
    raw = chat_one(llm, greedy(40, skip_special_tokens=False, include_stop_str_in_output=True))
    assert raw.text == answer.text + "<|im_end|>"


def check_include_stop_str_in_output(llm, base):
    word = base.text.split()[2]
    assert one(llm, PROMPT, greedy(16, stop=word, include_stop_str_in_output=True)).text.endswith(word)


def check_logit_bias(llm, base):
    out = one(llm, PROMPT, greedy(16, logit_bias={base.token_ids[0]: -100}))
    assert out.token_ids[0] != base.token_ids[0]


def check_allowed_token_ids(llm, base):
    allowed = sorted(set(base.token_ids[:3]))
    out = one(llm, PROMPT, greedy(6, allowed_token_ids=allowed))
    assert set(out.token_ids) <= set(allowed) and out.token_ids[:1] == base.token_ids[:1]


def check_bad_words(llm, base):
    word = llm.get_tokenizer().decode(base.token_ids[:1]).strip()
    out = one(llm, PROMPT, greedy(16, bad_words=[word]))
    assert out.token_ids[0] != base.token_ids[0]


def check_output_kind(llm, base):
    "LLM reports once per request whatever the kind (vLLM's LLM sets FINAL_ONLY)."
    for kind in RequestOutputKind:
        assert one(llm, PROMPT, greedy(16, output_kind=kind)).text == base.text


FIELD_CHECKS = {
    "n": check_n, "presence_penalty": changes_greedy(presence_penalty=2.0),
    "frequency_penalty": changes_greedy(frequency_penalty=2.0),
    "repetition_penalty": changes_greedy(repetition_penalty=2.0), "temperature": check_temperature,
    "top_p": check_sampling_knob(top_p=0.3), "top_k": check_sampling_knob(top_k=2), "min_p": check_min_p,
    "seed": check_seed, "stop": check_stop, "stop_token_ids": lambda llm, base: None,  # its own test above
    "ignore_eos": check_ignore_eos, "max_tokens": check_max_tokens, "min_tokens": check_min_tokens,
    "logprobs": check_logprobs, "prompt_logprobs": check_prompt_logprobs,
    "skip_special_tokens": check_skip_special_tokens,
    "include_stop_str_in_output": check_include_stop_str_in_output,
    "logit_bias": check_logit_bias, "allowed_token_ids": check_allowed_token_ids, "bad_words": check_bad_words,
    "output_kind": check_output_kind,
}


def test_every_sampling_param_has_a_check():
    "A new SamplingParams field fails here until LLM is shown to honour it."
    assert set(FIELD_CHECKS) == {f.name for f in dataclasses.fields(SamplingParams) if not f.name.startswith("_")}


@pytest.fixture(scope="module")
def base(smollm2_llm):
    "The greedy answer to PROMPT, 16 tokens."
    return one(smollm2_llm, PROMPT, greedy(16))


@pytest.mark.parametrize("field", sorted(FIELD_CHECKS))
def test_llm_honours_sampling_param(smollm2_llm, base, field):
    FIELD_CHECKS[field](smollm2_llm, base)


@pytest.mark.parametrize("kwargs, message", [
    (dict(n=0), "n"), (dict(n=2, temperature=0), "greedy"), (dict(presence_penalty=3), "presence_penalty"),
    (dict(frequency_penalty=-3), "frequency_penalty"), (dict(repetition_penalty=0), "repetition_penalty"),
    (dict(min_p=1.5), "min_p"), (dict(logprobs=-1), "logprobs"), (dict(prompt_logprobs=-1), "prompt_logprobs"),
    (dict(stop=[""]), "stop"), (dict(top_k=-2), "top_k"), (dict(temperature=2.5), "temperature")])
def test_bad_sampling_params_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message): SamplingParams(**kwargs)


def test_values_the_engine_cannot_serve_raise_value_error(tiny_llm):
    vocab = tiny_llm.engine_core.info.vocab_size
    with pytest.raises(ValueError, match="vocabulary"): tiny_llm.generate([[1, 2]], greedy(stop_token_ids=[vocab]))
    with pytest.raises(ValueError, match="logprobs"): tiny_llm.generate([[1, 2]], greedy(logprobs=vocab + 1))
    with pytest.raises(TypeError): SamplingParams(best_of=2)      # unsupported vLLM parameters are not swallowed
    with pytest.raises(TypeError): SamplingParams(structured_outputs={})
    with pytest.raises(TypeError): LLM(max_num_sequences=4)      # nor are unknown engine options
    assert not tiny_llm.engine_core.scheduler.has_unfinished_requests()


def test_engine_args_are_llm_options():
    "`LLM`'s options are `EngineArgs`' fields: every one is accepted with its default."
    names = {f.name for f in dataclasses.fields(EngineArgs)}
    assert {"enforce_eager", "num_threads", "seed", "max_num_seqs", "enable_prefix_caching"} <= names
    with pytest.raises(ValueError, match="num_threads"): LLM(num_threads=0)
