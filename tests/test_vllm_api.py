"""Nothing silently different from vLLM (issue 20), outside the HTTP server: prompts as `LLM.generate` takes
them, the model's generation config, `SamplingParams`' fields and bounds, output kinds, metrics, `LLM`'s
options and the CLI's flags.

Where vLLM's own code runs on a CPU (SamplingParams, prompt parsing, generation-config reading) the expected
answers come from vLLM itself, run in /tmp/oracle/venv (vLLM 0.33) when that venv exists; the tests that need
it are skipped elsewhere. The rest states vLLM 0.33's documented behaviour, with the source file it comes
from."""
import gc
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from minivllm.engine.arg_utils import EngineArgs, batch_limits, default_block_size
from minivllm.engine.core import get_diff_sampling_param, try_get_generation_config
from minivllm.engine.output_processor import OutputProcessor
from minivllm.entrypoints.cli.main import bench_sampling_params, build_parser, serve_options
from minivllm.utils.argparse_utils import human_readable_int
from minivllm.entrypoints.llm import LLM, parse_prompts
from minivllm.core.sched.output import EngineCoreOutput
from minivllm.metrics.reader import Counter, Gauge, Histogram
from minivllm.outputs import RequestOutputKind
from minivllm.request import Request
from minivllm.sample.sampler import Sampler, SamplingMetadata
from minivllm.sampling_params import SamplingParams
from minivllm.usage.usage_lib import UsageContext

ORACLE_PYTHON = Path("/tmp/oracle/venv/bin/python")
ROOT = Path(__file__).resolve().parent.parent
VLLM_VENV = Path(os.environ.get("VLLM_VENV", ROOT / "build" / "vllm-venv"))   # `make vllm-env`
GENERATION_CONFIG = {"eos_token_id": [0, 9, 11], "temperature": 0.6, "top_p": 0.9, "top_k": 20,
                     "repetition_penalty": 1.05, "max_new_tokens": 64, "do_sample": True}

# (kwargs, the field a refusal must name); "inf"/"nan" are sent to vLLM as floats
SAMPLING_CASES = [
    (dict(seed=-1), "seed"), (dict(seed=None), "seed"), (dict(seed=3), "seed"),
    (dict(temperature="inf"), "temperature"), (dict(temperature="nan"), "temperature"),
    (dict(temperature=-1.0), "temperature"), (dict(temperature=2.5), "temperature"),
    (dict(temperature=2.0), "temperature"), (dict(temperature=0.005), "temperature"),
    (dict(temperature=0, top_p=0.5, top_k=3), "top_p"), (dict(top_k=-1), "top_k"),
    (dict(top_k=-2), "top_k"), (dict(top_k=0), "top_k"), (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"), (dict(min_p=1.5), "min_p"), (dict(n=0), "n"), (dict(n=16385), "n"),
    (dict(n=2, temperature=0), "n"), (dict(presence_penalty=2.5), "presence_penalty"),
    (dict(frequency_penalty=-2.5), "frequency_penalty"), (dict(repetition_penalty=0.0), "repetition"),
    (dict(repetition_penalty="inf"), "repetition_penalty"), (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=None), "max_tokens"), (dict(min_tokens=5, max_tokens=2), "min_tokens"),
    (dict(min_tokens=-1), "min_tokens"), (dict(stop=[""]), "stop"), (dict(bad_words=[""]), "bad_words"),
    (dict(prompt_logprobs=-2), "prompt_logprobs"), (dict(logprobs=-2), "logprobs"),
]
# vLLM 0.33 accepts these, minivllm refuses them loudly (documented differences, never silent):
# logprobs=-1 / prompt_logprobs=-1 ("the whole vocabulary") is not supported; integers beyond 64 bits
# (what the engine and the wire hold; vLLM's server bounds `seed` the same way); a logit bias outside
# OpenAI's [-100, 100] (vLLM's server clamps it).
STRICTER = [dict(logprobs=-1), dict(prompt_logprobs=-1), dict(seed=2**64), dict(top_k=2**64),
            dict(max_tokens=2**64), dict(logit_bias={1: 1e308})]

PROMPT_CASES = ["Hi", ["a", "b"], [1, 2, 3], [[1, 2], [3]], {"prompt": "x"}, {"prompt_token_ids": [4, 5]},
                [{"prompt": "a"}, "b", {"prompt_token_ids": [5]}, [6, 7]], 42, {"foo": 1}, {"prompt": 5},
                [1.5], [["a"]]]

ORACLE = textwrap.dedent('''
    import json, sys, types
    from vllm.sampling_params import SamplingParams, RequestOutputKind
    from vllm.renderers.inputs.preprocess import prompt_to_seq, parse_dec_only_prompt
    from vllm.config.model import ModelConfig
    cases = json.loads(sys.argv[1])
    out = {"sp": [], "prompts": [], "kinds": {k.name: k.value for k in RequestOutputKind}}
    for kw in cases["sp"]:
        kw = {k: float(v) if v in ("inf", "nan") else v for k, v in kw.items()}
        try:
            sp = SamplingParams(**kw)
            out["sp"].append({"ok": True, **{f: getattr(sp, f) for f in cases["fields"]},
                              "output_kind": sp.output_kind.name})
        except Exception as e:
            out["sp"].append({"ok": False, "error": type(e).__name__, "message": str(e)})
    for p in cases["prompts"]:
        try:
            parsed = [dict(parse_dec_only_prompt(x)) for x in prompt_to_seq(p)]
            out["prompts"].append({"ok": True, "parsed": parsed})
        except Exception as e:
            out["prompts"].append({"ok": False, "error": type(e).__name__})
    ns = types.SimpleNamespace(generation_config="auto", override_generation_config={},
                               model=cases["folder"], hf_config_path=None, trust_remote_code=False,
                               _hf_config_revision=None, revision=None, code_revision=None,
                               config_format="auto", hf_token=None)
    ns.try_get_generation_config = lambda: ModelConfig.try_get_generation_config(ns)
    gen = ModelConfig.try_get_generation_config(ns)
    out["defaults"] = ModelConfig.get_diff_sampling_param(ns)
    ns.generation_config = "vllm"
    out["defaults_vllm"] = ModelConfig.get_diff_sampling_param(ns)
    sp = SamplingParams(stop_token_ids=[7])
    sp.update_from_generation_config(gen, 0)
    out["stop_token_ids"] = sorted(sp.stop_token_ids)
    print("ORACLE" + json.dumps(out))
''')
SP_FIELDS = ["seed", "temperature", "top_p", "top_k", "min_p", "max_tokens", "n"]


@pytest.fixture(scope="module")
def tiny_gen_path(tiny_llama_with_generation_config):
    "The tiny Llama with a generation_config.json that reads like Qwen's, with two extra EOS ids."
    return tiny_llama_with_generation_config(GENERATION_CONFIG, "tiny_gen")


@pytest.fixture(scope="module")
def tiny_gen_llm_eager(tiny_gen_path):
    "This file's own `LLM` over `tiny_gen_path`: eager, and with stats on (`get_metrics`)."
    return LLM(tiny_gen_path, num_gpu_blocks_override=64, max_model_len=256, enforce_eager=True,
               disable_log_stats=False, block_size=16)


@pytest.fixture(scope="module")
def oracle(tiny_gen_path, tmp_path_factory):
    "vLLM 0.33's own answers, computed once in its venv."
    if not ORACLE_PYTHON.exists(): pytest.skip("no vLLM venv at /tmp/oracle/venv")
    cases = dict(sp=[kw for kw, _ in SAMPLING_CASES] + STRICTER, prompts=PROMPT_CASES,
                 folder=str(tiny_gen_path), fields=SP_FIELDS)
    run = subprocess.run([str(ORACLE_PYTHON), "-c", ORACLE, json.dumps(cases)], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path_factory.mktemp("oracle"))
    line = next((l for l in run.stdout.splitlines() if l.startswith("ORACLE")), None)
    assert line is not None, run.stderr[-3000:]
    return json.loads(line.removeprefix("ORACLE"))


def ours(kwargs):
    kwargs = {k: float(v) if v in ("inf", "nan") else v for k, v in kwargs.items()}
    return SamplingParams(**kwargs)


# ---------------------------------------------------------------- SamplingParams against vLLM itself

def test_sampling_params_accept_and_refuse_what_vllm_does(oracle):
    for (kwargs, field), theirs in zip(SAMPLING_CASES, oracle["sp"]):
        if not theirs["ok"]:
            with pytest.raises(ValueError, match=field): ours(kwargs)
            continue
        sp = ours(kwargs)
        for f in SP_FIELDS:
            want = theirs[f]
            if f == "top_k" and want == -1: want = 0        # both mean "no top-k"; we store 0
            assert getattr(sp, f) == want, (kwargs, f, getattr(sp, f), want)
        assert sp.output_kind.name == theirs["output_kind"] == "CUMULATIVE"


def test_the_stricter_cases_are_loud_and_only_those(oracle):
    for kwargs, theirs in zip(STRICTER, oracle["sp"][len(SAMPLING_CASES):]):
        assert theirs["ok"]                                      # vLLM accepts ...
        with pytest.raises(ValueError, match=next(iter(kwargs))): SamplingParams(**kwargs)   # ... we say so


def test_request_output_kind_is_vllms(oracle):
    assert {k.name: k.value for k in RequestOutputKind} == oracle["kinds"]
    assert SamplingParams().output_kind is RequestOutputKind.CUMULATIVE


def test_every_bad_value_names_its_field_with_a_value_error():
    "What the server relies on: a ValueError naming the field, whatever the wrong type."
    for field, bad in [("temperature", "hot"), ("top_p", None), ("top_k", 1.5), ("n", "2"), ("seed", 1.5),
                       ("logit_bias", {"x": 1.0}), ("logit_bias", {1: float("nan")}),
                       ("allowed_token_ids", [-1]), ("output_kind", "delta"), ("stop_token_ids", [-3]),
                       ("max_tokens", 2.5), ("presence_penalty", "a")]:
        with pytest.raises(ValueError, match=field): SamplingParams(**{field: bad})


def test_from_optional_treats_null_as_the_default():
    sp = SamplingParams.from_optional(temperature=None, top_p=None, n=None, max_tokens=None, seed=None)
    assert (sp.temperature, sp.top_p, sp.n, sp.max_tokens, sp.seed) == (1.0, 1.0, 1, None, None)


# ---------------------------------------------------------------- prompts

def test_prompt_forms_parse_as_vllm_parses_them(oracle):
    for prompt, theirs in zip(PROMPT_CASES, oracle["prompts"]):
        if not theirs["ok"]:
            with pytest.raises(TypeError, match="TokensPrompt|prompt_token_ids|TextPrompt"):
                parse_prompts(prompt)
            continue
        if not theirs["parsed"]: continue
        want = [{"prompt": p.get("prompt"), "prompt_token_ids": p.get("prompt_token_ids")}
                for p in theirs["parsed"]]
        assert parse_prompts(prompt) == want, prompt


def test_an_empty_prompt_list_is_an_error_not_an_empty_result():
    "vLLM returns [] for `generate([])`; minivllm refuses (a documented difference, never silent)."
    with pytest.raises(ValueError, match="at least one prompt"): parse_prompts([])


def test_llm_generate_takes_every_form_and_echoes_the_ids(tiny_gen_llm_eager):
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    outs = tiny_gen_llm_eager.generate([[5, 6, 7], {"prompt_token_ids": [5, 6, 7]},
                          {"prompt_token_ids": [5, 6, 7], "prompt": "five six seven"}], greedy, use_tqdm=False)
    assert [o.prompt_token_ids for o in outs] == [[5, 6, 7]] * 3
    assert [o.prompt for o in outs] == [None, None, "five six seven"]
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1
    single = tiny_gen_llm_eager.generate({"prompt_token_ids": [5, 6, 7]}, greedy, use_tqdm=False)  # one dict: one prompt
    assert len(single) == 1 and single[0].outputs[0].token_ids == outs[0].outputs[0].token_ids
    with pytest.raises(TypeError, match="multi_modal_data"):
        tiny_gen_llm_eager.generate({"prompt_token_ids": [1], "multi_modal_data": {}}, greedy)
    assert not tiny_gen_llm_eager.engine_core.scheduler.has_unfinished_requests()


# ---------------------------------------------------------------- generation_config.json

def test_generation_config_defaults_equal_vllms(oracle, tiny_gen_path):
    found = try_get_generation_config(tiny_gen_path)
    assert get_diff_sampling_param(found) == oracle["defaults"]
    assert get_diff_sampling_param(found, "vllm") == oracle["defaults_vllm"] == {}
    sp = SamplingParams(stop_token_ids=[7])
    sp.update_from_generation_config(found, 0)
    assert sorted(sp.stop_token_ids) == oracle["stop_token_ids"]


def test_llm_uses_the_models_defaults_and_extra_eos(tiny_gen_llm_eager):
    d = tiny_gen_llm_eager.get_default_sampling_params()
    assert (d.temperature, d.top_p, d.top_k, d.repetition_penalty, d.max_tokens) == (0.6, 0.9, 20, 1.05, 64)
    ended = tiny_gen_llm_eager.generate([[1, 2]], SamplingParams(temperature=0, logit_bias={9: 100.0}),
                          use_tqdm=False)[0].outputs[0]
    assert (ended.token_ids, ended.finish_reason, ended.stop_reason) == ([9], "stop", 9)
    ignored = tiny_gen_llm_eager.generate([[1, 2]], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True,
                                                     logit_bias={9: 100.0}), use_tqdm=False)[0].outputs[0]
    assert (ignored.token_ids, ignored.finish_reason) == ([9, 9, 9], "length")
    default = tiny_gen_llm_eager.generate([[1, 2]], use_tqdm=False)[0].outputs[0]       # the model's max_tokens: 64
    assert len(default.token_ids) == 64 or default.finish_reason == "stop"


def test_generation_config_vllm_ignores_the_sampling_defaults(tiny_gen_path):
    llm = LLM(tiny_gen_path, num_gpu_blocks_override=16, max_model_len=64, enforce_eager=True,
              generation_config="vllm")
    assert llm.get_default_sampling_params() == SamplingParams()
    ended = llm.generate([[1, 2]], SamplingParams(temperature=0, logit_bias={11: 100.0}),
                         use_tqdm=False)[0].outputs[0]
    assert ended.stop_reason == 11          # vLLM still stops at the file's EOS ids


# ---------------------------------------------------------------- logits processors, seed, max_tokens=None

def test_logit_bias_and_allowed_token_ids_in_a_mixed_batch(tiny_gen_llm_eager):
    sps = [SamplingParams(temperature=0, max_tokens=5, ignore_eos=True, logit_bias={42: 100.0}),
           SamplingParams(temperature=1.0, max_tokens=5, ignore_eos=True, allowed_token_ids=[7, 8], seed=1),
           SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
           SamplingParams(temperature=0, max_tokens=5, ignore_eos=True, logit_bias={1: -100.0, 42: 3.0})]
    outs = [o.outputs[0].token_ids for o in tiny_gen_llm_eager.generate([[3, 4, 5]] * 4, sps, use_tqdm=False)]
    assert outs[0] == [42] * 5 and set(outs[1]) <= {7, 8}
    plain = tiny_gen_llm_eager.generate([[3, 4, 5]], sps[2], use_tqdm=False)[0].outputs[0].token_ids
    assert outs[2] == plain                            # its neighbours' processors did not leak into it
    assert 1 not in outs[3]


def test_processor_ids_outside_the_vocabulary_are_refused(tiny_gen_llm_eager):
    vocab = tiny_gen_llm_eager.engine_core.info.vocab_size
    for kw in [dict(logit_bias={vocab: 1.0}), dict(allowed_token_ids=[vocab])]:
        with pytest.raises(ValueError, match=next(iter(kw))): tiny_gen_llm_eager.generate([[1]], SamplingParams(**kw))
    with pytest.raises(ValueError, match="bad_words need a tokenizer"):
        tiny_gen_llm_eager.generate([[1]], SamplingParams(bad_words=["x"]))
    with pytest.raises(ValueError, match="max allowed: 20"):
        tiny_gen_llm_eager.generate([[1]], SamplingParams(logprobs=21))


def test_seed_minus_one_is_random_and_a_seed_repeats(tiny_gen_llm_eager):
    def sample(seed):
        sp = SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True, seed=seed)
        return tuple(tiny_gen_llm_eager.generate([[3, 4]], sp, use_tqdm=False)[0].outputs[0].token_ids)
    assert sample(5) == sample(5)
    assert len({sample(-1) for _ in range(3)}) > 1    # vLLM: -1 means unseeded


def test_max_tokens_none_fills_the_model_length(tiny_gen_llm_eager):
    out = tiny_gen_llm_eager.generate([[3, 4]], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True),
                        use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == tiny_gen_llm_eager.max_model_len - 2 and out.finish_reason == "length"


def test_bad_words_through_the_tokenizer():
    "vLLM's rule: each word banned with and without a leading space (`update_from_tokenizer`)."
    llm = LLM(num_gpu_blocks_override=64, max_model_len=256, enforce_eager=True)
    tok = llm.get_tokenizer()
    text = "The capital of France is"
    plain = llm.generate(text, SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)[0].outputs[0]
    assert "Paris" in plain.text
    sp = SamplingParams(temperature=0, max_tokens=8, bad_words=["Paris"])
    banned = llm.generate(text, sp, use_tqdm=False)[0].outputs[0]
    assert "Paris" not in banned.text
    assert sp.bad_words_token_ids is None          # the caller's params are not changed
    copy = SamplingParams(bad_words=["Paris"]); copy.update_from_tokenizer(tok)
    assert copy.bad_words_token_ids == [tok.encode("Paris"), tok.encode(" Paris")]


def test_the_sampler_copies_logits_only_when_it_must():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Clones(TorchDispatchMode):
        count = 0
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.clone.default: Clones.count += 1
            return func(*args, **(kwargs or {}))
    logits = torch.randn(3, 50)
    md = SamplingMetadata.from_params([SamplingParams(temperature=0)] * 3)
    with Clones(): Sampler()(logits, md)
    assert Clones.count == 0
    before = logits.clone()
    md = SamplingMetadata.from_params([SamplingParams(temperature=0, logit_bias={1: 5.0})] * 3)
    with Clones(): Sampler()(logits, md)
    assert Clones.count == 1 and torch.equal(logits, before)   # the caller's logits are untouched


# ---------------------------------------------------------------- output kinds, metrics

def test_output_kind_is_read_from_sampling_params():
    class Bytes:
        eos_token_id = 256
        def decode(self, ids, skip_special_tokens=True): return bytes(i for i in ids if i < 256).decode()
    reports = {}
    for kind in RequestOutputKind:
        op = OutputProcessor(Bytes())
        op.add_request(Request("r", [81], SamplingParams(output_kind=kind)), "Q")
        steps = [EngineCoreOutput("r", [97]), EngineCoreOutput("r", [98], finish_reason="length")]
        reports[kind.name] = [o.outputs[0].text for s in steps for o in op.process_outputs([s]).request_outputs]
    assert reports == {"CUMULATIVE": ["a", "ab"], "DELTA": ["a", "b"], "FINAL_ONLY": ["ab"]}


def test_request_output_metrics_are_ordered_times(tiny_gen_llm_eager):
    out = tiny_gen_llm_eager.generate([[3, 4]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                        use_tqdm=False)[0]
    m = out.metrics
    assert m.num_generation_tokens == 4 and m.arrival_time > 0 and m.first_token_latency > 0
    assert 0 < m.queued_ts <= m.scheduled_ts <= m.first_token_ts <= m.last_token_ts


def test_get_metrics_uses_vllms_names_and_counts(tiny_gen_llm_eager):
    before = {(m.name, m.labels.get("finished_reason")): m for m in tiny_gen_llm_eager.get_metrics()}
    tiny_gen_llm_eager.generate([[3, 4, 5], [6, 7]], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
                  use_tqdm=False)
    after = {(m.name, m.labels.get("finished_reason")): m for m in tiny_gen_llm_eager.get_metrics()}
    delta = lambda name, reason=None: after[name, reason].value - before[name, reason].value
    assert delta("vllm:generation_tokens") == 12 and delta("vllm:prompt_tokens") == 5
    assert delta("vllm:request_success", "length") == 2
    assert delta("vllm:prefix_cache_queries") >= 5
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]:
        assert isinstance(after[name, None], Gauge)
    ttft = after["vllm:time_to_first_token_seconds", None]
    assert isinstance(ttft, Histogram) and ttft.count - before[ttft.name, None].count == 2
    assert list(ttft.buckets)[-1] == "+Inf" and ttft.buckets["+Inf"] == ttft.count
    assert after["vllm:inter_token_latency_seconds", None].count - \
        before["vllm:inter_token_latency_seconds", None].count == 10
    assert isinstance(after["vllm:num_preemptions", None], Counter)
    assert all(m.labels["model_name"] == tiny_gen_llm_eager.model_path.name for m in after.values())


def test_metrics_are_off_by_default_as_in_vllm(tiny_gen_path):
    llm = LLM(tiny_gen_path, num_gpu_blocks_override=16, max_model_len=64, enforce_eager=True)
    with pytest.raises(RuntimeError, match="disable_log_stats=False"): llm.get_metrics()


# ---------------------------------------------------------------- LLM options, engine start-up

def test_llm_options_with_vllms_names(tiny_gen_path):
    with pytest.raises(ValueError, match="vllm serve"): EngineArgs(tensor_parallel_size=2)
    assert EngineArgs(tensor_parallel_size=1).tensor_parallel_size == 1
    assert EngineArgs(num_gpu_blocks=12).num_gpu_blocks_override == 12     # the old name still works
    assert EngineArgs().max_logprobs == 20 and EngineArgs().seed == 0       # vLLM's defaults
    llm = LLM(tiny_gen_path, num_gpu_blocks_override=16, max_model_len=64, enforce_eager=True, seed=None,
              tokenizer=str(tiny_gen_path), trust_remote_code=False, max_logprobs=2)
    assert llm.cache_config.num_gpu_blocks == 16
    # vLLM's block size for the device when none is named (vllm/platforms/cpu.py: 128 on a CPU)
    assert EngineArgs().block_size is None and llm.block_size == llm.cache_config.block_size == 128
    assert default_block_size("cpu") == 128 and default_block_size("cuda") == 16
    with pytest.raises(ValueError, match="max allowed: 2"): llm.generate([[1]], SamplingParams(logprobs=3))


def test_batch_defaults_are_vllms():
    """max_num_batched_tokens and max_num_seqs as vLLM 0.33 resolves them, for six devices, three entry
    points and the user's choices: tests/vllm_env/batch_defaults.py runs vLLM's own EngineArgs (in the venv
    `make vllm-env` builds, as CI does) and every case must come out the same from `batch_limits`."""
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI"): pytest.fail(f"no vLLM venv at {VLLM_VENV}: run `make vllm-env`")
        pytest.skip(f"no vLLM venv at {VLLM_VENV}: `make vllm-env` builds it")
    run = subprocess.run([str(python), str(ROOT / "tests" / "vllm_env" / "batch_defaults.py")],
                         capture_output=True, text=True, timeout=600, cwd=ROOT / "tests" / "vllm_env")
    assert run.returncode == 0, run.stderr[-3000:]
    cases = json.loads(run.stdout)

    def ours(case):
        args = EngineArgs(max_num_seqs=case["seqs"], max_num_batched_tokens=case["budget"],
                          enable_chunked_prefill=case["chunked"])
        try: return list(batch_limits(args, UsageContext(case["usage"]), case["max_model_len"], *case["device"]))
        except ValueError: return "error"
    assert len(cases) == 648 and "error" in [c["vllm"] for c in cases]
    assert len({str(c["vllm"]) for c in cases}) > 10                  # many different answers to match
    assert [ours(c) for c in cases] == [c["vllm"] for c in cases]


def test_each_entry_point_gets_its_batch_defaults(tiny_gen_path):
    "On a CPU: LLM 4096 tokens and 256 sequences a step, an AsyncLLM's engine 2048 and 128 (the server: test_server)."
    from minivllm.engine.async_llm import make_engine_core
    args = dict(num_gpu_blocks_override=16, max_model_len=64, enforce_eager=True)
    sc = LLM(tiny_gen_path, **args).scheduler_config
    assert (sc.max_num_batched_tokens, sc.max_num_seqs) == (4096, 256)
    gc.unfreeze()
    try: core = make_engine_core(EngineArgs(model=str(tiny_gen_path), **args))  # AsyncLLM's default
    finally: gc.unfreeze()
    assert (core.scheduler_config.max_num_batched_tokens, core.scheduler_config.max_num_seqs) == (2048, 128)
    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(64\) must be greater"):
        LLM(tiny_gen_path, max_num_batched_tokens=64, max_num_seqs=128, **args)
    sc = LLM(tiny_gen_path, max_num_batched_tokens=64, **args).scheduler_config
    assert (sc.max_num_batched_tokens, sc.max_num_seqs) == (64, 64)      # a default limit follows the budget


def test_only_the_engine_process_freezes_the_heap(tiny_gen_path):
    """vLLM freezes the start-up heap (freeze_gc_heap) where its engine core has a process of its own: ours in
    make_engine_core (the AsyncLLM / serve engine process), not in LLM's process, where a later engine would
    freeze an earlier one's reference cycles for good (tests/test_compile.py checks that memory)."""
    from minivllm.engine.async_llm import make_engine_core
    gc.unfreeze()                                          # whatever another test in this worker froze
    args = dict(num_gpu_blocks_override=16, max_model_len=64, enforce_eager=True)
    LLM(tiny_gen_path, **args)
    assert gc.get_freeze_count() == 0
    make_engine_core(EngineArgs(model=str(tiny_gen_path), **args))
    try: assert gc.get_freeze_count() > 0
    finally: gc.unfreeze()


def test_reset_prefix_cache(tiny_gen_llm_eager):
    sp = SamplingParams(temperature=0, max_tokens=2)
    prompt = [list(range(1, 40))]
    tiny_gen_llm_eager.generate(prompt, sp, use_tqdm=False)
    assert tiny_gen_llm_eager.generate(prompt, sp, use_tqdm=False)[0].num_cached_tokens == 32
    assert tiny_gen_llm_eager.reset_prefix_cache() is True
    assert tiny_gen_llm_eager.generate(prompt, sp, use_tqdm=False)[0].num_cached_tokens == 0


# ---------------------------------------------------------------- the CLI a vLLM user types

def test_cli_takes_vllms_flags_and_value_forms():
    assert [human_readable_int(v) for v in ["4k", "4K", "25.6k", "1M", "300"]] == [4000, 4096, 25600, 2**20, 300]
    args = build_parser().parse_args(["serve", "/models/qwen", "--max-model-len", "4k",
                                      "--num-gpu-blocks-override", "64", "--served-model-name", "qwen",
                                      "--max-logprobs", "5", "--generation-config", "vllm",
                                      "--tensor-parallel-size", "1", "--api-key", "k"])
    server, engine = serve_options(args)
    assert {k: server[k] for k in ("model", "host", "port", "model_name", "api_key")} == \
        dict(model="/models/qwen", host="127.0.0.1", port=8000, model_name="qwen", api_key="k")
    assert (engine["max_model_len"], engine["num_gpu_blocks_override"], engine["max_logprobs"],
            engine["generation_config"]) == (4000, 64, 5, "vllm")
    old = build_parser().parse_args(["serve", "--model", "/m"])              # --model is kept
    assert serve_options(old)[0]["model"] == "/m"
    with pytest.raises(ValueError, match="vllm serve"):
        EngineArgs.from_cli_args(build_parser().parse_args(["serve", "m", "--tensor-parallel-size", "2"]))


def test_bench_samples_like_vllms_benches():
    "vllm/benchmarks/throughput.py and latency.py: temperature 1.0, top_p 1.0, ignore_eos."
    sp = bench_sampling_params(32)
    assert (sp.temperature, sp.top_p, sp.ignore_eos, sp.max_tokens) == (1.0, 1.0, True, 32)


# ---------------------------------------------------------------- LLMEngine: vLLM's step loop

def test_llm_engine_step_loop_gives_what_llm_generate_gives(tiny_gen_path, tiny_gen_llm_eager):
    from minivllm import LLMEngine
    engine = LLMEngine.from_engine_args(EngineArgs(model=str(tiny_gen_path), num_gpu_blocks_override=32,
                                                   max_model_len=128, enforce_eager=True, block_size=16))
    sp = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    assert engine.add_request("a", [3, 4, 5], sp) == "a"
    assert engine.add_request("b", {"prompt_token_ids": [6, 7]}, sp) == "b"
    assert (engine.get_num_unfinished_requests(), engine.get_supported_tasks()) == (2, ("generate",))
    with pytest.raises(ValueError, match="already in use"): engine.add_request("a", [1], sp)
    with pytest.raises(TypeError, match="request_id must be a string"): engine.add_request(1, [1], sp)
    finished, steps = {}, 0
    while engine.has_unfinished_requests():
        outs = engine.step()
        assert sorted(o.request_id for o in outs) == ["a", "b"]        # cumulative: both, every step
        finished |= {o.request_id: o.outputs[0].token_ids for o in outs if o.finished}
        steps += 1
    assert steps == 6                               # one prefill step samples the first token, 5 decodes
    llm_outs = tiny_gen_llm_eager.generate([[3, 4, 5], [6, 7]], sp, use_tqdm=False)
    assert [finished["a"], finished["b"]] == [o.outputs[0].token_ids for o in llm_outs]
    metrics = {m.name: m for m in engine.get_metrics() if not m.labels.get("finished_reason")}
    assert metrics["vllm:generation_tokens"].value == 12                 # stats on: EngineArgs' default
    assert engine.apply_model(lambda model: model is engine.engine_core.get_model()) == [True]


def test_llm_engine_abort_frees_blocks_at_once(tiny_gen_path):
    from minivllm import LLMEngine
    engine = LLMEngine.from_engine_args(EngineArgs(model=str(tiny_gen_path), num_gpu_blocks_override=32,
                                                   max_model_len=128, enforce_eager=True, block_size=16,
                                                   disable_log_stats=True))
    pool = engine.engine_core.scheduler.kv_cache_manager.block_pool
    free = pool.get_num_free_blocks()
    engine.add_request("n2", [3] * 20, SamplingParams(n=2, temperature=1.0, seed=2**63 - 1, max_tokens=50,
                                                      ignore_eos=True))
    engine.step()
    assert engine.get_num_unfinished_requests() == 2 and pool.get_num_free_blocks() < free
    engine.abort_request("n2")                                       # the parent id: both children
    assert not engine.has_unfinished_requests() and pool.get_num_free_blocks() == free
    with pytest.raises(RuntimeError, match="disable_log_stats=False"): engine.get_metrics()


def test_async_engine_args_and_cli_round_trip():
    from minivllm import AsyncEngineArgs
    from minivllm.utils import FlexibleArgumentParser
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--model", "m", "--max_num_seqs", "4", "--disable-prefix-caching"])
    assert AsyncEngineArgs.from_cli_args(args) == AsyncEngineArgs(model="m", max_num_seqs=4,
                                                                  enable_prefix_caching=False)
    with pytest.raises(TypeError): AsyncEngineArgs(enable_log_requests=True)   # no request log here
