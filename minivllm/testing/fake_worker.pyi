"""Run the scheduler for many steps without a model, watch every decision, check it against real vLLM."""
from __future__ import annotations
from dataclasses import dataclass
from fastcore.basics import patch
from ..request import Request, RequestStatus
from ..sampling_params import SamplingParams
from ..core.sched.output import SchedulerOutput, ModelRunnerOutput
from ..core.sched.scheduler import Scheduler
from ..config import SchedulerConfig, CacheConfig
__all__ = ['WORKLOAD_DEFAULTS', 'ScheduledEntry', 'scheduled_entries', 'WorkerRequestState', 'FakeWorker', 'step_log', 'check_invariants', 'scheduler_from_workload', 'request_from_workload', 'worker_from_workload', 'run_workload', 'decisions', 'diff_traces', 'e12_workload']

@dataclass
class ScheduledEntry:
    """One scheduled request of a `SchedulerOutput`, whatever list it came in."""
    req_id: str
    kind: str
    num_computed_tokens: int
    num_scheduled_tokens: int
    new_block_ids: list[int] | None
    num_output_tokens: int | None = None

    @property
    def prefix_hit_tokens(self) -> int | None:
        """Prefix-cache hit at (re)admission; None for running requests."""
        ...

def scheduled_entries(scheduler_output: SchedulerOutput) -> list[ScheduledEntry]:
    """The scheduled requests of `scheduler_output`, in scheduling order."""
    ...

@dataclass
class WorkerRequestState:
    """The worker's copy of one request (a tiny `CachedRequestState`)."""
    token_ids: list[int]
    num_prompt_tokens: int
    block_ids: list[int]
    num_computed_tokens: int

class FakeWorker:
    """Stand-in for the model runner: follows `SchedulerOutput`s, samples deterministic tokens."""

    def __init__(self, base: int=10000, req_stride: int=1000, req_index: dict[str, int] | None=None, output_token_ids: dict[str, list[int]] | None=None):
        ...

    def sample(self, req_id: str, k: int) -> int:
        """Output number `k` of `req_id`: the listed token if any, else `base + req_stride*i + k`."""
        ...

    def _update_states(self: FakeWorker, scheduler_output: SchedulerOutput) -> None:
        """Apply one `SchedulerOutput` to the worker's request states (vLLM's `_update_states`)."""
        ...

    def execute_model(self: FakeWorker, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """Update states, 'run' the step, and sample one token per request whose prompt is done."""
        ...
_STATE = {'new': 'WAITING', 'resumed': 'PREEMPTED', 'running': 'RUNNING'}

def _new_blocks(e: ScheduledEntry, block_size: int) -> int:
    """Blocks popped from the pool for `e` this step (prefix-hit blocks excluded)."""
    ...

def step_log(scheduler: Scheduler, scheduler_output: SchedulerOutput, step: int) -> str:
    """The token-budget article's per-step debug record, computed right after `schedule()`."""
    ...

def _check_step(s: Scheduler, scheduler_output: SchedulerOutput) -> None:
    """Invariants of one step's decisions (call right after `schedule()`)."""
    ...

def _check_queues(s: Scheduler) -> None:
    """Statuses match queues; every unfinished request is in exactly one queue."""
    ...

def _check_blocks(s: Scheduler) -> None:
    """Ref counts, free queue, hash map and usage agree with the requests' block tables."""
    ...

def _check_requests(s: Scheduler) -> None:
    """Block hashes follow tokens; computed positions are backed by blocks holding exactly them."""
    ...

def _check_worker(s: Scheduler, worker: FakeWorker) -> None:
    """The worker's block tables, built from outputs only, equal the scheduler's (running requests)."""
    ...

def check_invariants(scheduler: Scheduler, scheduler_output: SchedulerOutput | None=None, worker: FakeWorker | None=None) -> None:
    """Assert the five invariants and the bookkeeping rules (when to pass what: see below)."""
    ...
WORKLOAD_DEFAULTS = dict(block_size=16, num_blocks=10000, max_num_batched_tokens=8192, max_num_seqs=128, max_model_len=8192, enable_prefix_caching=True, enable_chunked_prefill=True, long_prefill_token_threshold=0, policy='fcfs', eos_token_id=2, scheduler_reserve_full_isl=True, watermark=0.0, use_v2_model_runner=False)

def scheduler_from_workload(workload: dict) -> Scheduler:
    """A `Scheduler` configured like vLLM's was when `workload` was recorded."""
    ...

def request_from_workload(i: int, r: dict, eos_token_id: int) -> Request:
    """Request number `i` of a workload, with the recordings' defaults (greedy, ignore_eos, 16)."""
    ...

def worker_from_workload(workload: dict) -> FakeWorker:
    """A `FakeWorker` sampling with the recordings' rule for `workload`."""
    ...

def _kv_state(s: Scheduler) -> dict:
    """Free blocks, usage and cached hashes, as the golden traces record them."""
    ...

def _queues(s: Scheduler) -> dict:
    """The waiting and running queues' ids, in order."""
    ...

def _entry_record(s: Scheduler, e: ScheduledEntry) -> dict:
    """One scheduled request, in the golden traces' format."""
    ...

def _schedule_record(s: Scheduler, scheduler_output: SchedulerOutput, step: int, arrivals: list[str]) -> dict:
    """The golden traces' record of one `schedule()`."""
    ...
_STATS_KEYS = ('requests', 'queries', 'hits', 'preempted_requests', 'preempted_queries', 'preempted_hits')

def _update_record(s: Scheduler, rec: dict, mro: ModelRunnerOutput, eco, step: int, finish: dict) -> None:
    """Add what `update_from_output` did to the step record."""
    ...

def _add_arrivals(s: Scheduler, workload: dict, pending: list[int], step: int, eos: int) -> list[str]:
    """Add the requests arriving by `step` (list order); returns their ids."""
    ...

def run_workload(workload: dict, check: bool=True, log: list[str] | None=None) -> dict:
    """Replay a workload through minivllm; its trace in the golden traces' format."""
    ...
_ENTRY_KEYS = ('req_id', 'kind', 'num_scheduled_tokens', 'num_computed_tokens', 'new_block_ids', 'num_output_tokens', 'num_tokens', 'num_computed_tokens_after', 'block_ids')
_STEP_KEYS = ('step', 'idle', 'arrivals', 'preempted_req_ids', 'resumed_req_ids', 'finished_req_ids', 'sampled', 'finished_in_step', 'prefix_cache_stats', 'queues_after_schedule', 'queues_after_update')

def decisions(trace: dict) -> list[dict]:
    """Per step, the decisions that must match vLLM's."""
    ...

def diff_traces(ours: dict, theirs: dict) -> str | None:
    """None if both traces make the same decisions, else a description of the first difference."""
    ...

def e12_workload() -> dict:
    """The workload that reproduces the token-budget article's step-12 log line for line."""
    ...
