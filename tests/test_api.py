"""The public API is importable from the top-level package, and importing it stays light."""
import pytest

import minivllm

REQUESTS = ["SamplingParams", "RequestStatus", "Request"]
OUTPUTS = ["NewRequestData", "CachedRequestData", "SchedulerOutput", "ModelRunnerOutput", "EngineCoreOutput",
           "EngineCoreOutputs", "SchedulerStats"]
KV_CACHE = ["NONE_HASH", "hash_block_tokens", "get_request_block_hasher", "KVCacheBlock", "FreeKVCacheBlockQueue",
            "BlockPool", "KVCacheBlocks", "KVCacheManager"]
SCHEDULER = ["SchedulerConfig", "CacheConfig", "Scheduler", "FCFSRequestQueue", "PriorityRequestQueue",
             "create_request_queue"]
WORKER = ["CachedRequestState", "BlockTable", "InputBatch", "prepare_inputs", "Sampler", "ModelRunner",
          "AttentionMetadata", "get_attn_backend", "load_model"]
ENGINE = ["LLM", "LLMEngine", "EngineCore", "EngineArgs", "AsyncEngineArgs", "RequestOutput", "CompletionOutput", "RequestOutputKind",
          "Logprob", "TimelineRecorder", "AsyncLLM", "build_app"]


@pytest.mark.parametrize("name", REQUESTS + OUTPUTS + KV_CACHE + SCHEDULER + WORKER + ENGINE)
def test_public_name_importable(name):
    assert getattr(minivllm, name) is not None


def test_sampling_params_errors_name_the_field():
    for kwargs, field in [({"top_p": 1.5}, "top_p"), ({"max_tokens": 0}, "max_tokens"),
                          ({"temperature": -0.1}, "temperature"), ({"logprobs": -1}, "logprobs")]:
        with pytest.raises(ValueError, match=field):
            minivllm.SamplingParams(**kwargs)


def test_request_counters_stay_consistent():
    r = minivllm.Request("r", [1, 2, 3], minivllm.SamplingParams(max_tokens=5))
    r.append_output_token_ids([4, 5]); r.append_output_token_ids(6)
    assert r.all_token_ids == (1, 2, 3, 4, 5, 6) and r.output_token_ids == (4, 5, 6)
    assert (r.num_tokens, r.num_output_tokens, r.num_tokens_with_spec) == (6, 3, 6)
    with pytest.raises(ValueError, match="empty"):
        minivllm.Request("e", [])


def test_imports_stay_light():
    "`import minivllm.entrypoints.llm` loads neither the test harness nor the server stack (a fresh interpreter)."
    import subprocess, sys
    code = ("import sys, minivllm.engine.core, minivllm.entrypoints.llm, minivllm.entrypoints.cli.main; "
            "print(sorted(m for m in ('minivllm.testing', 'fastapi', 'uvicorn', 'zmq', 'matplotlib') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
