"""`CachedRequestState`, `BlockTable`, `InputBatch`, `update_states` and `prepare_inputs`: how the worker turns a `SchedulerOutput` into flat model inputs."""
from __future__ import annotations
from ..core.kv_cache_manager import cdiv
import heapq
from dataclasses import dataclass, field
import numpy as np
import torch
from fastcore.basics import patch
from ..sampling_params import SamplingParams
from ..utils.torch_utils import to_device
from .block_table import BlockTable
__all__ = ['CachedRequestState', 'make_generator', 'InputBatch', 'update_states', 'cumsum_and_arange', 'compute_positions', 'BatchInputs', 'prepare_inputs', 'bookkeeping_sync']

@dataclass
class CachedRequestState:
    """The worker's long-lived record of one request (vLLM `CachedRequestState`)."""
    req_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams | None
    generator: torch.Generator | None
    block_ids: list[int]
    num_computed_tokens: int
    output_token_ids: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens the worker knows of."""
        ...

def make_generator(sampling_params: SamplingParams | None, device='cpu') -> torch.Generator | None:
    """A generator seeded with `sampling_params.seed` for seeded random sampling, else None."""
    ...

class InputBatch:
    """Row-indexed CPU state of the requests in the running batch (vLLM `InputBatch`)."""

    def __init__(self, max_num_reqs: int, max_model_len: int, max_num_batched_tokens: int, block_size: int, eos_token_id: int | None=None, vocab_size: int | None=None, device='cpu'):
        ...

    @property
    def num_reqs(self) -> int:
        ...

    @property
    def req_ids(self) -> list[str]:
        """Request ids in row order (dense after `condense`)."""
        ...

    def add_request(self: InputBatch, state: CachedRequestState) -> int:
        """Put `state` into the smallest free row and return that row."""
        ...

    def _set_sampling_row(self: InputBatch, row: int, sp: SamplingParams, generator: torch.Generator | None):
        """Copy one request's sampling parameters into row `row`."""
        ...

    def has_penalties(self: InputBatch, row):
        """True if row `row` uses a presence, frequency or repetition penalty (per row for an array)."""
        ...

    def _init_penalty_counts(self: InputBatch, row: int):
        """Build row `row`'s prompt mask and output counts on the device, once."""
        ...

    def remove_request(self: InputBatch, req_id: str) -> int | None:
        """Free the row of `req_id` (leaving a hole) and return it; None if the request has no row."""
        ...

    def _move_row(self: InputBatch, src: int, dst: int):
        """Move every per-row field of row `src` to row `dst`."""
        ...

    def condense(self: InputBatch):
        """Move the highest live rows into the holes so rows `0..num_reqs-1` are dense."""
        ...

    def append_token_ids(self: InputBatch, row: int, token_ids: list[int], count: bool=True):
        """Append sampled `token_ids` to row `row`'s history (and, with `count`, its penalty counts)."""
        ...

    def count_output_tokens(self: InputBatch, rows: list[int], token_ids: list[int]):
        """Add one to `output_bin_counts[row, token]` for each pair, in one device operation."""
        ...

    def append_next_tokens(self: InputBatch, tokens: np.ndarray, discard_request_indices) -> tuple[np.ndarray, np.ndarray]:
        """Write `tokens[row]` at the next position of every row not discarded; `(rows, positions)`."""
        ...

def update_states(requests: dict[str, CachedRequestState], input_batch: InputBatch, scheduler_output, device='cpu'):
    """Apply `scheduler_output` to the worker's requests and batch (vLLM `_update_states`)."""
    ...

def _add_new_request(requests, new, device) -> CachedRequestState:
    """Create the `CachedRequestState` of a request the worker sees for the first time."""
    ...

def _update_cached_requests(requests, input_batch, cached) -> list[CachedRequestState]:
    """Refresh known requests; return those that need a row again."""
    ...

def cumsum_and_arange(num_scheduled_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative counts and each token's offset within its request (vLLM `_get_cumsum_and_arange`)."""
    ...

def compute_positions(num_computed_tokens: np.ndarray, num_scheduled_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row and position of every scheduled token; row `i` continues from `num_computed_tokens[i]`."""
    ...

@dataclass
class BatchInputs:
    """One step's flat model inputs (numpy, unpadded)."""
    input_ids: np.ndarray
    positions: np.ndarray
    req_indices: np.ndarray
    query_start_loc: np.ndarray
    seq_lens: np.ndarray
    slot_mapping: np.ndarray
    logits_indices: np.ndarray
    discard_request_indices: np.ndarray

    @property
    def num_tokens(self) -> int:
        ...

def prepare_inputs(input_batch: InputBatch, num_scheduled_tokens: np.ndarray) -> BatchInputs:
    """Flatten the scheduled tokens of the batch's rows into model inputs (vLLM `_prepare_inputs`)."""
    ...

def bookkeeping_sync(requests: dict[str, CachedRequestState], input_batch: InputBatch, sampled_token_ids, discard_request_indices) -> list[list[int]]:
    """Record each row's sampled token (none for partial prefills); return the per-row lists."""
    ...
