"""One step = schedule, execute, update; the output processor turns tokens into text, stop strings, logprobs and `n` completions; `LLM.generate` steps until every request is done."""
from __future__ import annotations
import time
from copy import copy
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence
from fastcore.basics import patch
from ..request import Request
from ..sampling_params import SamplingParams
from ..core.sched.output import EngineCoreOutput, Logprob, LogprobsLists
from ..outputs import CompletionOutput, RequestOutput, RequestOutputKind
from ..metrics.stats import FinishedRequestStats, IterationStats, RequestStateStats
__all__ = ['INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET', 'IncrementalDetokenizer', 'check_stop_strings', 'LogprobsProcessor', 'ParentRequest', 'RequestState', 'OutputProcessorOutput', 'OutputProcessor']
INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET = 5

class IncrementalDetokenizer:
    """A request's output text, decoded a few tokens at a time, and its stop strings (vLLM's name)."""

    def __init__(self, tokenizer, prompt_token_ids: list[int], params: SamplingParams):
        ...

    @property
    def output_token_ids(self) -> list[int]:
        ...

    def decode_next(self, token_id: int) -> str:
        """Append one token; the text it completes (empty while a character is still incomplete)."""
        ...

    def update(self: IncrementalDetokenizer, new_token_ids: list[int], stop_terminated: bool) -> str | None:
        """Decode the new tokens and look for stop strings; returns the stop string that matched, if any."""
        ...

    def get_next_output_text(self: IncrementalDetokenizer, finished: bool, delta: bool) -> str:
        """All the text (with `delta`: what is new), minus a possible stop-string start while unfinished."""
        ...

def check_stop_strings(output_text: str, new_char_count: int, stop: list[str], include_in_output: bool) -> tuple[str, int] | None:
    """The first stop string in the new text, and where to cut the text (-1: keep it all); vLLM's."""
    ...

class LogprobsProcessor:
    """A request's sample and prompt logprobs as `{token_id: Logprob}` dicts (vLLM's name)."""

    def __init__(self, decode_token: Callable[[int], str | None], params: SamplingParams):
        ...

    def _make_logprob_dicts(self, lists: LogprobsLists, num: int) -> list[dict[int, Logprob]]:
        """One dict per row: the row's first token at its rank, then the top `num` at ranks 1, 2, ..."""
        ...

    def update_from_output(self, out: EngineCoreOutput) -> None:
        """Add the rows of one step's output."""
        ...

    def pop_prompt_logprobs(self) -> list | None:
        """The prompt logprobs not reported yet (for `DELTA` outputs)."""
        ...

class ParentRequest:
    """Fans a request with `n > 1` out into `n` child requests, and their outputs back in (vLLM's)."""

    def __init__(self, request_id: str, sampling_params: SamplingParams):
        ...

    def get_child_info(self, index: int) -> tuple[str, SamplingParams]:
        """Child `index`'s request id and sampling parameters (`n=1`, seed + index when seeded)."""
        ...

    def get_outputs(self, child_request_id: str, completion: CompletionOutput, final_only: bool) -> tuple[list[CompletionOutput], bool]:
        """The completions to report now, and whether every child has finished."""
        ...

class RequestState:
    """The front end's state of one request: detokenizer, logprobs, parent, report kind (vLLM's)."""

    def __init__(self, request: Request, prompt: str | None, tokenizer, decode_token: Callable, output_kind: RequestOutputKind, parent_req: ParentRequest | None=None, request_index: int=0, queue=None):
        ...

    def update_stats(self, num_new_tokens: int, now: float, iteration_stats: IterationStats | None=None) -> None:
        """Count new tokens and time them (vLLM's `update_stats_from_output`, in-process)."""
        ...

    def finish_stats(self, finish_reason: str, iteration_stats: IterationStats) -> None:
        """Record this request's end in `iteration_stats` (vLLM's `update_from_finished_request`)."""
        ...

    def make_request_output(self, new_token_ids: list[int], finish_reason: str | None, stop_reason: int | str | None) -> RequestOutput | None:
        """The output to report after this update, or None when none is due."""
        ...

@dataclass
class OutputProcessorOutput:
    """What one `process_outputs` call made: outputs to return, requests the engine must abort."""
    request_outputs: list[RequestOutput] = field(default_factory=list)
    reqs_to_abort: list[str] = field(default_factory=list)

class OutputProcessor:
    """Turns `EngineCoreOutput`s into `RequestOutput`s: text, stop strings, logprobs, `n` (vLLM's)."""

    def __init__(self, tokenizer=None):
        ...

    def decode_token(self, token_id: int) -> str | None:
        """One token's text, as logprobs show it (cached: the same ids come back often)."""
        ...

    def has_unfinished_requests(self) -> bool:
        ...

    def add_request(self, request: Request, prompt: str | None, parent_req: ParentRequest | None=None, request_index: int=0, queue=None, output_kind: RequestOutputKind | None=None) -> None:
        """Start tracking one (child) request; `output_kind` defaults to its `SamplingParams`'."""
        ...

    def abort_requests(self, request_ids: Sequence[str]) -> list[str]:
        """Forget requests (a parent id: all its children); returns the ids the engine must abort."""
        ...

    def process_outputs(self: OutputProcessor, engine_core_outputs: list[EngineCoreOutput], iteration_stats: IterationStats | None=None) -> OutputProcessorOutput:
        """Update each request's state with its new tokens; collect outputs due and stop-string aborts."""
        ...
