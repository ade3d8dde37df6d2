"""One engine step is schedule, execute, update; `EngineArgs` says how the engine is built."""
from __future__ import annotations
import json, time
from collections import deque
import contextlib
from fastcore.basics import patch
from dataclasses import dataclass, replace
from ..utils.math_utils import cdiv
from pathlib import Path
from typing import Callable, Sequence
import torch
from ..request import Request, RequestStatus
from ..core.sched.output import EngineCoreOutputs, SchedulerOutput
from ..config import CacheConfig, SchedulerConfig
from ..core.sched.scheduler import Scheduler
from ..core.sched.async_scheduler import AsyncScheduler
from ..executor.uniproc_executor import UniProcExecutor
from ..worker.gpu_worker import Worker, resolve_model_path
from .arg_utils import EngineArgs, batch_limits, default_block_size
from ..usage.usage_lib import UsageContext
__all__ = ['TOKENIZER_FILES', 'SAMPLING_DEFAULT_FIELDS', 'kv_cache_bytes_per_block', 'num_blocks_for', 'EngineInfo', 'EngineCore', 'load_tokenizer', 'resolve_device', 'check_engine_args', 'num_gpu_blocks_for', 'build_engine_core', 'try_get_generation_config', 'get_diff_sampling_param']

def kv_cache_bytes_per_block(kv_cache_spec, block_size: int) -> int:
    """Bytes of one block over all layers: keys and values of `block_size` tokens."""
    ...

def num_blocks_for(memory_bytes: int, bytes_per_block: int, max_useful: int | None=None) -> int:
    """How many blocks a budget holds, at most `max_useful`."""
    ...

@dataclass(frozen=True)
class EngineInfo:
    """What a front end learns about a built engine: the handshake of chapter 24."""
    model: str
    model_name: str
    device: str
    max_model_len: int
    vocab_size: int
    eos_token_id: int | None
    num_gpu_blocks: int
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int

class EngineCore:
    """The inner loop of vLLM V1: a scheduler plus a model executor, advanced one `step()` at a time."""

    def __init__(self, scheduler, model_executor, step_observers: list[Callable] | None=None, info: EngineInfo | None=None):
        ...

    @property
    def scheduler_config(self):
        ...

    @property
    def cache_config(self):
        ...

    def has_unfinished_requests(self) -> bool:
        """Whether a request is still waiting or running."""
        ...

    def has_work(self) -> bool:
        """Whether a step would do anything: requests to schedule or steps in flight (vLLM's)."""
        ...

    def get_model(self):
        """The executor's model (the `nn.Module`, also when a compile or CUDA-graph wrapper runs it)."""
        ...

    def add_request(self, request: Request) -> None:
        """Register `request` in the scheduler's waiting queue."""
        ...

    def abort_requests(self, request_ids: Sequence[str]) -> None:
        """Finish requests as aborted; their blocks are freed now, the worker forgets them next step."""
        ...

    def reset_prefix_cache(self, reset_running_requests: bool=False) -> bool:
        """Forget every cached block; False while requests still hold blocks (vLLM's)."""
        ...

    def step(self) -> tuple[EngineCoreOutputs, bool]:
        """Schedule, execute, update: the step's outputs and whether the model ran (as in vLLM)."""
        ...

    def _record_scheduled(self, scheduler_output) -> None:
        """vLLM's SCHEDULED event: the time a request is first scheduled."""
        ...

    def drop_steps_in_flight(self) -> None:
        """Wait for the steps still in flight and drop their outputs (recovering from a failed step)."""
        ...

    def shutdown(self) -> None:
        """Stop the executor's worker thread, if it has one (steps in flight finish first)."""
        ...

    def step_with_batch_queue(self: EngineCore) -> tuple[EngineCoreOutputs, bool]:
        """Schedule and submit a step if the queue has room; else wait for the oldest and update (vLLM)."""
        ...
TOKENIZER_FILES = ('tokenizer.json', 'tokenizer_config.json', 'tokenizer.model')

def load_tokenizer(path: Path, trust_remote_code: bool=False):
    """The folder's Hugging Face tokenizer, or `None` when it ships no tokenizer files."""
    ...

def resolve_device(device) -> torch.device:
    """`"auto"`: CUDA when available, else CPU."""
    ...

def check_engine_args(scheduling_policy: str, gpu_memory_utilization: float) -> None:
    """The cheap checks, run before the worker loads the model (it checks the attention backend)."""
    ...

def num_gpu_blocks_for(worker: Worker, args: EngineArgs, max_model_len: int, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """The override, else the worker's memory budget divided by the bytes of one block."""
    ...

def build_engine_core(args: EngineArgs, eos_token_id: int | None=None, usage_context: UsageContext=UsageContext.ENGINE_CONTEXT) -> EngineCore:
    """The worker (the model, its KV cache, compiled), the scheduler sized to fit, `EngineCore`."""
    ...
SAMPLING_DEFAULT_FIELDS = ('repetition_penalty', 'presence_penalty', 'frequency_penalty', 'temperature', 'top_k', 'top_p', 'min_p', 'max_new_tokens', 'skip_special_tokens')

def try_get_generation_config(model: str | Path, generation_config: str='auto') -> dict:
    """The model's generation config, fields that differ from transformers' defaults (vLLM's name)."""
    ...

def get_diff_sampling_param(generation_config: dict, source: str='auto') -> dict:
    """The sampling defaults in `generation_config` (none for `source='vllm'`), with vLLM's names."""
    ...
