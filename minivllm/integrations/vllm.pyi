"""A scheduler plugin for `vllm serve --scheduler-cls` that records, step by step, what vLLM's own"""
from __future__ import annotations
import json, logging, os, time
from functools import cached_property
from itertools import compress
from operator import add
from pathlib import Path
import numpy as np
from fastcore.basics import patch
from ..timeline import BlockPoolCounts
__all__ = ['TIMELINE_ENV', 'DEFAULT_TIMELINE_PATH', 'TOKENS_ENV', 'FORMAT', 'INSTALL_HINT', 'CPU_ENV', 'TINY_LLAMA', 'WORKLOAD_CONFIG', 'timeline_path', 'TimelineWriter', 'cpu_scheduler', 'cpu_request', 'replay', 'read_timeline', 'load', 'differences', 'summarize', 'main']
TIMELINE_ENV = 'MINIVLLM_TIMELINE_PATH'
DEFAULT_TIMELINE_PATH = 'minivllm-timeline.jsonl'
TOKENS_ENV = 'MINIVLLM_TIMELINE_TOKENS'
FORMAT = 'minivllm.vllm-timeline/1'

def timeline_path(dp_rank: int=0, dp_size: int=1) -> Path:
    """The file a scheduler writes: `$MINIVLLM_TIMELINE_PATH`, else one in the working folder."""
    ...

class TimelineWriter:
    """Follows one vLLM scheduler and appends one JSON line per engine step to `path`."""

    def __init__(self, scheduler, path: str | Path | None=None):
        ...

    def close(self) -> None:
        """Flush and close the file (vLLM's `Scheduler.shutdown` calls it)."""
        ...

    def _start(self: TimelineWriter, s) -> None:
        """Open the file, write the header line, read the pool once (the first step calls it)."""
        ...

    def record(self: TimelineWriter, s, so, mro, outputs: dict) -> dict:
        """Append the line of the step `so` (a `SchedulerOutput`) that `update_from_output` finished."""
        ...

    def _columns(self: TimelineWriter, rec: dict, c, mro, req_ids: list, grants: list) -> bool:
        """Add the sent counts and the sampled counts to `rec` unless predictable; is the step steady?"""
        ...

    def _follow_tables(self: TimelineWriter, rec: dict, s, so, mro, steady: bool) -> list[int]:
        """Follow the block tables from what was sent; the blocks whose state may have changed."""
        ...

    def _filled(self: TimelineWriter, rec: dict, nct: list, grants: list | None) -> list[int]:
        """Indices (in `cached_req_ids`) of the requests whose grant filled a block this step."""
        ...

    def _ended(self: TimelineWriter, rec: dict, s, so, outputs: dict, touched: list) -> set:
        """Preempted, ended and aborted requests: their tables go; returns the ended ones."""
        ...

def _settings(s) -> dict:
    """A vLLM scheduler's settings, under the names of minivllm's `TimelineRecorder.settings`."""
    ...
try:
    import msgspec
    _encode = msgspec.json.Encoder().encode
except ImportError:
    _json = json.JSONEncoder(separators=(',', ':')).encode

    def _encode(rec: dict) -> bytes:
        ...

def _compact(values: list):
    """A list of counts, or the one number when all are 1 (most decode steps)."""
    ...

def _unscheduled(grants: dict, preempted, running, s) -> list:
    """`[req_id, state, num_computed_tokens, num_tokens, num_prompt_tokens]` of the others."""
    ...

class _TimelineMixin:
    """Records every step of the vLLM scheduler it is mixed into; changes no decision."""

    def __init__(self, *args, **kwargs):
        ...

    def update_from_output(self, scheduler_output, model_runner_output):
        ...

    def shutdown(self):
        ...
INSTALL_HINT = 'minivllm.integrations.vllm.{name} is a vLLM scheduler: it needs vLLM 0.33 (pip install vllm==0.33.0) and is used as `vllm serve MODEL --scheduler-cls minivllm.integrations.vllm.{name}`'

def _scheduler_class(name: str) -> type:
    """`TimelineScheduler` (on vLLM's `Scheduler`) or `AsyncTimelineScheduler` (`AsyncScheduler`)."""
    ...

def __getattr__(name: str):
    """`TimelineScheduler` and `AsyncTimelineScheduler`, built on first use."""
    ...
CPU_ENV = dict(VLLM_TARGET_DEVICE='cpu', VLLM_LOGGING_LEVEL='ERROR', VLLM_NO_USAGE_STATS='1', DO_NOT_TRACK='1', HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', TOKENIZERS_PARALLELISM='false', VLLM_USE_V2_MODEL_RUNNER='0')
TINY_LLAMA = dict(architectures=['LlamaForCausalLM'], model_type='llama', vocab_size=32000, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4, head_dim=16, hidden_act='silu', max_position_embeddings=1 << 20, rms_norm_eps=1e-06, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, torch_dtype='float32')
WORKLOAD_CONFIG = dict(block_size=16, num_blocks=10000, max_num_batched_tokens=8192, max_num_seqs=128, max_model_len=8192, enable_prefix_caching=True, enable_chunked_prefill=True, long_prefill_token_threshold=0, policy='fcfs', eos_token_id=2, scheduler_reserve_full_isl=True)

def cpu_scheduler(config: dict | None=None, scheduler_cls=None, log_stats: bool=True):
    """vLLM's scheduler (default `TimelineScheduler`) for a workload config, on a CPU, no model."""
    ...

def cpu_request(scheduler, i: int, r: dict, eos_token_id: int=2):
    """Request number `i` of a workload as a vLLM `Request` (greedy; EngineCore's block hasher)."""
    ...

def replay(workload: dict, scheduler_cls=None, path: str | Path | None=None) -> list[dict]:
    """Run a workload (the golden traces' format) through vLLM's scheduler; its decisions per step."""
    ...

def _decisions(so, outputs: dict) -> dict:
    """What vLLM sent the worker and the client in one step (to compare two runs)."""
    ...

def read_timeline(path: str | Path) -> tuple[dict, list[dict]]:
    """The header and the step lines of a recorded file."""
    ...

def _expand(st: dict, last: dict) -> dict:
    """Fill in the columns a line leaves out (unchanged ids, predictable counts, all-ones)."""
    ...

def _timeline_classes():
    """minivllm's recorder classes (imported on use: the vLLM side needs none of minivllm)."""
    ...

def _request_steps(RequestStep, st: dict, tables: list, utables: list, prompt: dict, bs: int) -> list:
    """The `RequestStep`s of one recorded step, as minivllm's recorder makes them."""
    ...

def _vllm_step_record():
    """A `StepRecord` whose `requests` come from its recorded line when first asked for."""
    ...

def load(path: str | Path, device: str | None=None):
    """A recorded vLLM run as minivllm's `TimelineRecorder`: its figures draw it as they are."""
    ...
_STEP_FIELDS = ('token_budget', 'total_scheduled', 'num_waiting', 'num_running', 'num_waiting_after', 'num_running_after', 'preempted_req_ids', 'finished_req_ids', 'kv_usage', 'kv_usage_after', 'num_free_blocks', 'num_cached_free_blocks', 'num_cached_blocks', 'num_evicted_blocks')
_REQUEST_FIELDS = ('req_id', 'state', 'kind', 'debt', 'grant', 'num_computed_before', 'num_tokens', 'num_prompt_tokens', 'new_block_ids', 'block_ids', 'prefix_hit_tokens', 'preempted', 'finish_reason')

def differences(a, b) -> str | None:
    """The first step where two recorders saw different decisions (steps counted from 0), or None."""
    ...

def summarize(records) -> dict:
    """Steps, tokens per step, preemptions, prefix-cache hit rate and KV usage of a run."""
    ...

def main(path: str | Path, out_png: str | Path | None=None, steps: range | None=None, quiet: bool=False) -> dict:
    """Summarize a recorded run and draw it (`minivllm timeline FILE`); returns the summary."""
    ...
