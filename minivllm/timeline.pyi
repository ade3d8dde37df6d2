"""A recorder that watches the scheduler without changing it, one record per step, and the figures and the step viewer drawn from those records."""
from __future__ import annotations
from dataclasses import dataclass, field
from functools import cached_property
from fastcore.basics import patch
from .request import Request, RequestStatus
from .core.sched.output import SchedulerOutput, EngineCoreOutputs
from .core.block_pool import PoolSnapshot, snapshot_block_pool
from .core.sched.scheduler import Scheduler
__all__ = ['RequestStep', 'StepRecord', 'TimelineRecorder', 'device_label', 'BlockPoolCounts', 'attach_timeline']

@dataclass
class RequestStep:
    """What one request did in one step (`grant == 0`: it was not scheduled)."""
    req_id: str
    state: str
    kind: str | None
    debt: int
    grant: int
    num_computed_before: int
    num_computed_after: int
    num_tokens: int
    num_prompt_tokens: int
    new_block_ids: list[int] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)
    prefix_hit_tokens: int | None = None
    input_token_ids: list[int] = field(default_factory=list)
    new_token_ids: list[int] = field(default_factory=list)
    preempted: bool = False
    finish_reason: str | None = None

    @property
    def is_prefill_chunk(self) -> bool:
        """Scheduled, but tokens remain after this step (nothing is sampled)."""
        ...

    @property
    def phase(self) -> str:
        """prefill / decode / resumed when scheduled; else waiting / preempted / running (skipped)."""
        ...

    def __repr__(self):
        ...

@dataclass(eq=False)
class StepRecord:
    """One engine step: budget, per-request decisions, queues and KV cache."""
    step: int
    token_budget: int
    total_scheduled: int
    num_waiting: int
    num_running: int
    num_waiting_after: int
    num_running_after: int
    preempted_req_ids: list[str]
    finished_req_ids: list[str]
    kv_usage: float
    kv_usage_after: float
    num_free_blocks: int
    num_cached_free_blocks: int
    num_cached_blocks: int
    num_evicted_blocks: int
    pool: PoolSnapshot | None = None
    source: tuple | None = field(default=None, repr=False)

    @cached_property
    def requests(self) -> list[RequestStep]:
        """Every request the scheduler knew this step: scheduled ones first, in scheduling order."""
        ...

    def __getstate__(self):
        ...

    @property
    def scheduled(self) -> list[RequestStep]:
        """The requests scheduled this step, in scheduling order."""
        ...

    @property
    def grants(self) -> dict[str, int]:
        """`{req_id: tokens}` of this step (the output's `num_scheduled_tokens`)."""
        ...

    @property
    def finished(self) -> dict[str, str]:
        """`{req_id: finish_reason}` of the requests that finished in this step."""
        ...

    def __getitem__(self, req_id: str) -> RequestStep:
        """The `RequestStep` of `req_id` in this step."""
        ...

    def e12(self: StepRecord) -> str:
        """The token-budget article's per-step debug record (the E12 format)."""
        ...

def _request_steps(scheduler_output: SchedulerOutput, live: list, unscheduled: list, ended: dict, block_size: int) -> list[RequestStep]:
    """The `RequestStep`s of one step, from its output and what the recorder kept of it."""
    ...

class TimelineRecorder:
    """Step observer keeping one `StepRecord` per engine step (append it to `step_observers`)."""

    def __init__(self, device: str='model-free worker', snapshot_pool: bool=False, max_records: int | None=None):
        ...

    def __len__(self):
        ...

    def __iter__(self):
        ...

    def __getitem__(self, i):
        ...

    def __repr__(self):
        ...

    def clear(self) -> None:
        """Forget the records so far (step numbers go on)."""
        ...

    def idle(self) -> None:
        """Count a step in which nothing ran (no request yet), so step numbers match the caller's."""
        ...

    @property
    def blocks_inspected(self) -> int:
        """Pool blocks looked at so far (what the recorder costs)."""
        ...

    @property
    def num_rescans(self) -> int:
        """Full passes over the pool (the start, and the steps that need one)."""
        ...

    def start(self: TimelineRecorder, scheduler: Scheduler) -> None:
        """Note the settings, the pool and the running requests' tables (the first step calls it)."""
        ...

    def settings_label(self: TimelineRecorder) -> str:
        """Device and scheduler settings in one line (for figure captions)."""
        ...

    def _follow_tables(self: TimelineRecorder, scheduler: Scheduler, scheduler_output: SchedulerOutput) -> list[int]:
        """Apply the step's block-table diffs; returns the blocks whose state may have changed."""
        ...

    def __call__(self: TimelineRecorder, scheduler: Scheduler, scheduler_output: SchedulerOutput, engine_core_outputs: EngineCoreOutputs) -> StepRecord:
        """Record one step (the `EngineCore.step_observers` signature); returns the new record."""
        ...

    def e12_log(self: TimelineRecorder) -> str:
        """The E12 log of every recorded step."""
        ...

def device_label(device, model: str | None=None) -> str:
    """'SmolLM2-135M-Instruct on cpu', 'Qwen3-0.6B on cuda:0 (NVIDIA H200)': what ran the steps."""
    ...

class BlockPoolCounts:
    """Free, hashed and cached-free blocks of a pool, kept up to date from the blocks a step touched."""

    def __init__(self, pool):
        ...

    def rescan(self) -> int:
        """Read every block; returns how many hashes changed since the last look (evictions)."""
        ...

    def apply(self, touched: list[int]) -> int:
        """Update the counts from the touched blocks; returns how many lost their hash (evicted)."""
        ...

    def update(self, touched: list[int], rescan: bool=False) -> int:
        """After a step: read the touched blocks (all if asked or if they disagree); evictions."""
        ...
_UNKNOWN = (None, [])

def attach_timeline(engine, recorder: TimelineRecorder | None=None, device: str | None=None) -> TimelineRecorder:
    """Attach a `TimelineRecorder` to an `LLM` (as `llm.timeline`) or an `EngineCore`; returns it."""
    ...
