from __future__ import annotations
import enum, math
from dataclasses import dataclass, field, fields
from fastcore.basics import patch
__all__ = ['MAX_N_SEQUENCES', 'MAX_NUM_BAD_WORDS', 'INT64_MIN', 'INT64_MAX', 'MAX_LOGIT_BIAS', 'RequestOutputKind', 'SamplingParams']
_GREEDY_EPS = 1e-05
_MIN_TEMP = 0.01
MAX_N_SEQUENCES = 16384
MAX_NUM_BAD_WORDS = 128

class RequestOutputKind(enum.Enum):
    """When a request reports: all so far or only what is new at every step, or once at the end."""
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2

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
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    _bad_words_token_ids: list[list[int]] | None = field(default=None, repr=False)

    def __post_init__(self):
        ...

    def _checks(self: SamplingParams):
        """(field, test, rule) triples validated at construction, with vLLM 0.33's bounds."""
        ...

    def _verify_args(self: SamplingParams) -> None:
        """Raise a `ValueError` that names the first field outside its bound (vLLM's `_verify_args`)."""
        ...

    def update_from_generation_config(self: SamplingParams, generation_config: dict, eos_token_id: int | None=None) -> None:
        """Add the model's extra EOS ids (`generation_config['eos_token_id']`) to `stop_token_ids`."""
        ...

    def update_from_tokenizer(self: SamplingParams, tokenizer) -> None:
        """Tokenize `bad_words`, with and without a leading space (vLLM's `update_from_tokenizer`)."""
        ...
INT64_MIN, INT64_MAX = (-2 ** 63, 2 ** 63 - 1)
MAX_LOGIT_BIAS = 100.0

def _is_int(x) -> bool:
    ...

def _is_num(x) -> bool:
    ...

def _is_id(x) -> bool:
    ...

def _as_list(sp: SamplingParams, name: str) -> list:
    """A list field given as `None`, a list or a tuple, as a list; anything else names the field."""
    ...

def _as_token_id(k):
    """A `logit_bias` key as an int (JSON keys are strings: `{"1234": -100}`)."""
    ...

def _num_logprobs_ok(k) -> bool:
    """None, or a count >= 0 (vLLM's -1, 'the whole vocabulary', is refused: say a number)."""
    ...

@patch(as_prop=True)
def is_greedy(self: SamplingParams) -> bool:
    """True when the sampler takes the argmax (`temperature < 1e-5`)."""
    ...

@patch(as_prop=True)
def bad_words_token_ids(self: SamplingParams) -> list[list[int]] | None:
    """`bad_words` as token-id sequences, once `update_from_tokenizer` has run (vLLM's name)."""
    ...

@patch(cls_method=True)
def from_optional(cls: SamplingParams, **kwargs) -> SamplingParams:
    """Like the constructor, but `None` means the default (vLLM's `from_optional`)."""
    ...
