"""`Request` is the scheduler's ledger for one prompt: which tokens exist, and how many of them already went through the model."""
from __future__ import annotations
import enum, time
from collections.abc import Sequence
from typing import Callable
from fastcore.basics import patch
from .sampling_params import SamplingParams
__all__ = ['RequestStatus', 'ConstantList', 'Request']

class RequestStatus(enum.IntEnum):
    """Life cycle of a request; `status > PREEMPTED` means finished."""
    WAITING = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()

    def __str__(self):
        ...

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        """True for every FINISHED_* status."""
        ...

    @staticmethod
    def get_finished_reason(status: RequestStatus) -> str | None:
        """The user-facing finish reason: 'stop', 'length', 'abort', or None while unfinished."""
        ...
_FINISHED_REASONS = {RequestStatus.FINISHED_STOPPED: 'stop', RequestStatus.FINISHED_LENGTH_CAPPED: 'length', RequestStatus.FINISHED_ABORTED: 'abort', RequestStatus.FINISHED_IGNORED: 'length'}

class ConstantList(Sequence):
    """A read-only view of a list (vLLM's `ConstantList`): no copy, no mutation."""

    def __init__(self, x: list):
        ...

    def __getitem__(self, i):
        ...

    def __len__(self) -> int:
        ...

    def __iter__(self):
        ...

    def __eq__(self, other):
        ...

    def __repr__(self):
        ...

class Request:
    """The scheduler's record of one request: tokens, progress (`num_computed_tokens`) and status."""

    def __init__(self, request_id: str, prompt_token_ids: list[int], sampling_params: SamplingParams | None=None, eos_token_id: int | None=None, arrival_time: float | None=None, priority: int=0, block_hasher: Callable[[Request], list[bytes]] | None=None):
        ...
    max_tokens = property(lambda self: self.sampling_params.max_tokens, doc="The request's `max_tokens`.")
    num_tokens = property(lambda self: len(self._all_token_ids), doc='Prompt plus output tokens.')
    num_output_tokens = property(lambda self: len(self._output_token_ids), doc='Tokens sampled so far.')
    num_tokens_with_spec = property(lambda self: self.num_tokens + len(self.spec_token_ids), doc='`num_tokens` plus draft tokens (none here).')
    output_token_ids = property(lambda self: ConstantList(self._output_token_ids), doc='Read-only view of the outputs.')
    all_token_ids = property(lambda self: ConstantList(self._all_token_ids), doc='Read-only view of prompt + outputs.')

    def is_finished(self) -> bool:
        """True once the request has a FINISHED_* status."""
        ...

    def get_finished_reason(self) -> str | None:
        """'stop', 'length', 'abort' or None."""
        ...

    def __repr__(self):
        ...

    def append_output_token_ids(self: Request, token_ids: int | list[int]) -> None:
        """Append sampled token(s) to both the output and the all-token list, then refresh block hashes."""
        ...

    def update_block_hashes(self: Request) -> None:
        """Extend `block_hashes` with the hashes of blocks that became full (no-op without a hasher)."""
        ...
