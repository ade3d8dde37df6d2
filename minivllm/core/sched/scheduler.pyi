"""Each step, vLLM's `Scheduler.schedule()` decides who runs, how many tokens each gets and whether the KV cache has room, and `update_from_output()` takes the results back."""
from __future__ import annotations
from collections.abc import Iterable
from dataclasses import dataclass, field
from fastcore.basics import patch
from ...request import Request, RequestStatus
from minivllm.core.sched.output import NewRequestData, CachedRequestData, SchedulerOutput, ModelRunnerOutput
from .output import EngineCoreOutput, EngineCoreOutputs, SchedulerStats
from ..block_pool import get_request_block_hasher
from ..kv_cache_manager import KVCacheBlocks, KVCacheManager, cdiv
from ...config import CacheConfig, SchedulerConfig
from .request_queue import create_request_queue
__all__ = ['Scheduler', 'check_stop']

class Scheduler:
    """vLLM V1's scheduler: token budget, running first, chunked prefill, prefix hits, preemption."""

    def __init__(self, scheduler_config: SchedulerConfig, cache_config: CacheConfig, log_stats: bool=True):
        ...

    def _check_kv_capacity(self) -> None:
        """`ValueError` unless the pool (minus the null block) holds one `max_model_len` sequence."""
        ...

    def add_request(self, request: Request) -> None:
        """Validate `request`, give it a block hasher if needed, and queue it as WAITING."""
        ...

    def _num_new_tokens(self: Scheduler, request: Request, num_new_tokens: int, token_budget: int) -> int:
        """Clamp a debt by the long-prefill threshold, the remaining budget and `max_model_len`."""
        ...

    def _pick_victim(self: Scheduler) -> Request:
        """Pop a victim: FCFS the tail of `running`, priority the max (priority, arrival)."""
        ...

    def _free_request_blocks(self: Scheduler, request: Request) -> None:
        """Return `request`'s blocks to the pool (chapter 06's `AsyncScheduler` may delay it)."""
        ...

    def _preempt_request(self: Scheduler, request: Request) -> None:
        """Free `request`'s blocks, reset its progress and put it back at the front of `waiting`."""
        ...

    def _allocate_or_preempt(self: Scheduler, request: Request, num_new_tokens: int, plan: _StepPlan, req_index: int) -> tuple[KVCacheBlocks | None, int]:
        """`allocate_slots`, preempting until it succeeds; `(None, req_index)` if it preempted itself."""
        ...

    def _schedule_running(self: Scheduler, plan: _StepPlan) -> None:
        """Give every running request its clamped debt, in `running` order, while budget and KV allow."""
        ...

    def _admit(self: Scheduler, request: Request, num_new_tokens: int, num_computed_tokens: int, plan: _StepPlan) -> None:
        """Move the head of `waiting` to `running` with its grant; classify it as new or resumed."""
        ...

    def _schedule_waiting(self: Scheduler, plan: _StepPlan) -> None:
        """Admit waiting requests in queue order while budget, request slots and KV blocks allow."""
        ...

    def _make_cached_request_data(self: Scheduler, plan: _StepPlan) -> CachedRequestData:
        """Per-request diffs for running (append new blocks) then resumed (replace all blocks) requests."""
        ...

    def _get_new_block_ids_to_zero(self: Scheduler) -> list[int] | None:
        """This step's fresh blocks, if the cache needs them zeroed (drained every step either way)."""
        ...

    def _make_output(self: Scheduler, plan: _StepPlan) -> SchedulerOutput:
        """Package a finished plan as a `SchedulerOutput` (counters are still the pre-step snapshots)."""
        ...

    def _update_after_schedule(self: Scheduler, scheduler_output: SchedulerOutput) -> None:
        """Optimistically advance `num_computed_tokens`; hand `finished_req_ids` over, start a fresh set."""
        ...

    def schedule(self: Scheduler) -> SchedulerOutput:
        """One scheduling decision: running requests first, then (if nothing was preempted) waiting ones."""
        ...

    def _free_request(self: Scheduler, request: Request) -> None:
        """Forget a finished request: its id goes to the worker next step, its blocks back to the pool."""
        ...

    def _update_request_with_output(self: Scheduler, request: Request, new_token_ids: list[int]) -> tuple[list[int], bool]:
        """Append tokens one at a time, stopping (and trimming) at the first stop condition."""
        ...

    def _request_output(self: Scheduler, request: Request, token_ids: list[int], mro: ModelRunnerOutput, stopped: set[Request], stopped_preempted: set[Request]) -> EngineCoreOutput | None:
        """Apply one request's sampled tokens; its `EngineCoreOutput`, or None for a partial prefill."""
        ...

    def update_from_output(self: Scheduler, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput) -> EngineCoreOutputs:
        """Append sampled tokens, check stops, free finished requests; an `EngineCoreOutput` per request."""
        ...

    def finish_requests(self: Scheduler, request_ids: str | Iterable[str] | None, finished_status: RequestStatus) -> list[str]:
        """Finish (e.g. abort) requests from `waiting` or `running`; returns the ids actually finished."""
        ...

    def get_num_unfinished_requests(self: Scheduler) -> int:
        """Requests still waiting or running."""
        ...

    def has_unfinished_requests(self: Scheduler) -> bool:
        """True while any request waits or runs."""
        ...

    def has_requests(self: Scheduler) -> bool:
        """True while there is work: unfinished requests, or finished ids the worker does not know yet."""
        ...

    def make_stats(self: Scheduler) -> SchedulerStats | None:
        """Queue lengths, KV usage, prefix-cache stats since the last call (None if `log_stats` is off)."""
        ...

    def reset_prefix_cache(self: Scheduler, reset_running_requests: bool=False) -> bool:
        """Forget all cached blocks; optionally preempt every running request first (none holds a block)."""
        ...

@dataclass
class _StepPlan:
    """The decisions of one `schedule()` call while it is being built."""
    token_budget: int
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    req_to_new_blocks: dict[str, KVCacheBlocks] = field(default_factory=dict)
    scheduled_running_reqs: list[Request] = field(default_factory=list)
    scheduled_new_reqs: list[Request] = field(default_factory=list)
    scheduled_resumed_reqs: list[Request] = field(default_factory=list)
    preempted_reqs: list[Request] = field(default_factory=list)

    def grant(self, request: Request, blocks: KVCacheBlocks, num_new_tokens: int) -> None:
        """Record that `request` runs `num_new_tokens` tokens with `blocks`."""
        ...

    def undo(self, request: Request) -> None:
        """Take back a grant made earlier in this step (its tokens return to the budget)."""
        ...

def check_stop(request: Request, max_model_len: int) -> bool:
    """Set a FINISHED status and return True if `request`'s last token ends it (vLLM's order)."""
    ...
