from __future__ import annotations
import argparse
from dataclasses import dataclass, field, fields
from fastcore.basics import patch
from ..config import CacheConfig, SchedulerConfig
from ..usage.usage_lib import UsageContext
from ..utils.argparse_utils import human_readable_int, human_readable_int_or_auto
__all__ = ['HUMAN_READABLE', 'GiB', 'EngineArgs', 'AsyncEngineArgs', 'get_batch_defaults', 'default_block_size', 'batch_limits']

def _arg(default, help: str):
    """A dataclass field with a default and one line of help (the CLI shows it)."""
    ...

@dataclass
class EngineArgs:
    """Every engine option, declared once: `LLM`, `AsyncLLM` and the CLI take these (vLLM's name)."""
    model: str | None = _arg(None, 'local Hugging Face model folder (default: embedded SmolLM2)')
    tokenizer: str | None = _arg(None, "tokenizer folder (default: the model's)")
    trust_remote_code: bool = _arg(False, 'let the tokenizer run code from its folder')
    dtype: str = _arg('auto', 'weights and KV cache dtype: auto, float32, bfloat16, float16')
    device: str = _arg('auto', 'auto (CUDA when available), cpu, cuda, cuda:1, ...')
    max_model_len: int | None = _arg(None, "longest prompt + output (default: the model's)")
    max_num_seqs: int | None = _arg(None, "most requests in one step (default: vLLM's for the device and entry point)")
    max_num_batched_tokens: int | None = _arg(None, "token budget of a step (default: vLLM's for the device and entry point)")
    block_size: int | None = _arg(None, "tokens per KV-cache block (default: vLLM's for the device: 128 on a CPU, 16 on a GPU)")
    num_gpu_blocks_override: int | None = _arg(None, 'KV-cache blocks (default: sized from memory)')
    num_gpu_blocks: int | None = _arg(None, 'old name of --num-gpu-blocks-override')
    gpu_memory_utilization: float = _arg(0.9, "share of GPU memory for weights, activations, KV (GPU only: a CPU's KV budget is kv_cache_memory_bytes)")
    kv_cache_memory_bytes: int | None = _arg(None, "KV-cache budget in bytes (CPU default 1 GiB; vLLM's: gpu_memory_utilization of the memory)")
    enable_prefix_caching: bool = _arg(True, 'reuse the KV blocks of identical prompt prefixes')
    enable_chunked_prefill: bool = _arg(True, 'split long prompts over several steps')
    long_prefill_token_threshold: int = _arg(0, "cap on one prompt's tokens per step (0: none)")
    scheduling_policy: str = _arg('fcfs', 'fcfs or priority')
    attention_backend: str = _arg('auto', 'auto, cpu, torch or triton')
    enforce_eager: bool = _arg(False, 'no torch.compile (CPU, float32), no CUDA graphs (GPU)')
    seed: int | None = _arg(0, "seed of torch's default generator (None: not seeded)")
    num_threads: int | None = _arg(None, 'torch CPU threads (default: every core)')
    max_logprobs: int = _arg(20, 'most logprobs a request may ask for (-1: the vocabulary)')
    generation_config: str = _arg('auto', "sampling defaults: auto (the model folder's generation_config.json), vllm (ignore it) or a folder")
    disable_log_stats: bool = _arg(False, "do not collect the scheduler's step stats")
    async_scheduling: bool = _arg(False, 'schedule step N+1 while step N runs (chapter 06); vLLM 0.33 turns it on by default, minivllm does not')
    tensor_parallel_size: int = _arg(1, 'GPUs per model: only 1 here (use vLLM for more)')

    def __post_init__(self):
        ...
HUMAN_READABLE = {'max_model_len': human_readable_int_or_auto, 'max_num_batched_tokens': human_readable_int, 'kv_cache_memory_bytes': human_readable_int}

def _flag_type(annotation: str):
    """The argparse type of a field, from its annotation (`int | None` -> int; a bool: None)."""
    ...

@patch(cls_method=True)
def add_cli_args(cls: EngineArgs, parser):
    """One flag per field (vLLM's spelling, default and help), into `parser` or a group; returns it."""
    ...

@patch(cls_method=True)
def from_cli_args(cls: EngineArgs, args: argparse.Namespace) -> EngineArgs:
    """The options of parsed flags (vLLM's); the namespace may hold other flags too."""
    ...

@dataclass
class AsyncEngineArgs(EngineArgs):
    """`AsyncLLM`'s options (vLLM's name): `EngineArgs`' fields; vLLM adds `enable_log_requests`."""
GiB = 1 << 30

def get_batch_defaults(device_type: str, device_memory: int=0, device_name: str='') -> tuple[dict[UsageContext, int], dict[UsageContext, int]]:
    """vLLM 0.33's default token budget and sequence limit for each entry point, on this device."""
    ...

def default_block_size(device_type: str) -> int:
    """vLLM 0.33's KV-cache block size when the user names none: 128 on a CPU, else 16."""
    ...

def batch_limits(args: EngineArgs, usage_context: UsageContext | None, max_model_len: int, device_type: str='cpu', device_memory: int=0, device_name: str='') -> tuple[int, int]:
    """`(max_num_batched_tokens, max_num_seqs)`: the user's, else vLLM's for `usage_context`."""
    ...
