"""vLLM's `AsyncScheduler`: output placeholders, delayed frees, stale outputs, and an engine loop with a batch queue."""
from __future__ import annotations
from collections import deque
from fastcore.basics import patch
from ...request import Request
from minivllm.core.sched.output import CachedRequestData, SchedulerOutput, ModelRunnerOutput, EngineCoreOutputs
from .scheduler import Scheduler, _StepPlan
from ...config import CacheConfig, SchedulerConfig
__all__ = ['AsyncScheduler', 'pop_blocks_for_free']

class AsyncScheduler(Scheduler):
    """Plans step N+1 while step N runs (vLLM's `AsyncScheduler`): placeholders and delayed frees."""

    def __init__(self, scheduler_config: SchedulerConfig, cache_config: CacheConfig, log_stats: bool=True, defer_block_free: bool=False):
        ...

    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        """Chapter 04's update, then one placeholder per request whose step samples."""
        ...

    def _make_cached_request_data(self: AsyncScheduler, plan: _StepPlan) -> CachedRequestData:
        """Chapter 04's diffs, with `num_output_tokens` counting the tokens in flight (vLLM)."""
        ...

    def _free_request_blocks(self: AsyncScheduler, request: Request) -> None:
        """Free now if no step in flight reads the blocks (or frees are not deferred), else later."""
        ...

    def _drain_deferred_frees(self: AsyncScheduler) -> None:
        """Return the blocks whose fence step has been processed, tail blocks first (vLLM)."""
        ...

    def update_from_output(self: AsyncScheduler, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput) -> EngineCoreOutputs:
        """The step is done: release the blocks it fenced, then chapter 04's update."""
        ...

def pop_blocks_for_free(kv_cache_manager, request: Request) -> list:
    """Forget `request`'s blocks without returning them to the pool (vLLM's `pop_blocks_for_free`)."""
    ...
