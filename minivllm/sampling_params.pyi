from __future__ import annotations
from dataclasses import dataclass
from fastcore.basics import patch
__all__ = ['SamplingParams']
_GREEDY_EPS = 1e-05

@dataclass
class SamplingParams:
    """How one request samples tokens and when it stops (vLLM's `SamplingParams`, text subset)."""
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False

    def __post_init__(self):
        ...

    def _checks(self: SamplingParams):
        """(field, holds, rule) triples validated at construction, with vLLM's bounds."""
        ...

def _is_int(x) -> bool:
    ...

def _num_logprobs_ok(k) -> bool:
    """None, or a count >= 0 (vLLM's -1, 'the whole vocabulary', is refused: say a number)."""
    ...

@patch(as_prop=True)
def is_greedy(self: SamplingParams) -> bool:
    """True when the sampler takes the argmax (`temperature < 1e-5`)."""
    ...
