"""vLLM 0.33's batch defaults over a grid of devices and arguments, for tests/test_vllm_api.py.

Run by vLLM's venv (tests/vllm_env/setup.sh): for every device (memory and name mocked on vLLM's
current platform), entry point, chunked prefill on or off, `max_model_len`, `max_num_seqs` and
`max_num_batched_tokens` (None: the default), vLLM's `EngineArgs` resolves the two batch sizes
(`_set_default_max_num_seqs_and_batched_tokens_args`) and its `SchedulerConfig` check decides
whether they are valid. Prints one JSON list: each case with vLLM's `[tokens, seqs]` or "error".
"""
import itertools, json
from types import SimpleNamespace
from unittest import mock

import vllm.engine.arg_utils as arg_utils
from vllm.usage.usage_lib import UsageContext

GiB = 1 << 30
DEVICES = [("cpu", 0, ""), ("cuda", 24 * GiB, "NVIDIA L4"),
           ("cuda", 80 * GiB, "NVIDIA A100-SXM4-80GB"), ("cuda", 80 * GiB, "NVIDIA H100 80GB HBM3"),
           ("cuda", 141 * GiB, "NVIDIA H200"), ("cuda", 180 * GiB, "NVIDIA B200")]
USAGES = ["LLM_CLASS", "OPENAI_API_SERVER", "ENGINE_CONTEXT"]


def resolve(device, usage, chunked, max_model_len, seqs, budget):
    "vLLM's `(max_num_batched_tokens, max_num_seqs)` for one case, or 'error'."
    kind, memory, name = device
    platform = arg_utils.current_platform
    with mock.patch.object(platform, "get_device_total_memory", lambda *a, **k: memory), \
         mock.patch.object(platform, "get_device_name", lambda *a, **k: name), \
         mock.patch.object(platform, "is_device_capability", lambda *a, **k: False), \
         mock.patch.object(platform, "is_cpu", lambda: kind == "cpu"), \
         mock.patch.object(platform, "is_tpu", lambda: False):
        args = arg_utils.EngineArgs(max_num_seqs=seqs, max_num_batched_tokens=budget,
                                    enable_chunked_prefill=chunked)
        args._set_default_max_num_seqs_and_batched_tokens_args(
            getattr(UsageContext, usage),
            SimpleNamespace(max_model_len=max_model_len, is_multimodal_model=False),
            SimpleNamespace(use_batched_dp_moe=False))
    tokens, seqs = args.max_num_batched_tokens, args.max_num_seqs
    return [tokens, seqs] if tokens >= seqs else "error"   # vLLM's SchedulerConfig refuses it


cases = [dict(device=d, usage=u, chunked=c, max_model_len=m, seqs=s, budget=b)
         for d, u, c, m, s, b in itertools.product(DEVICES, USAGES, [True, False], [64, 8192],
                                                   [None, 4, 512], [None, 64, 8192])]
print(json.dumps([{**case, "vllm": resolve(**case)} for case in cases]))
