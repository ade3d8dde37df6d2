"""vLLM's offline entry point: prompts in, `RequestOutput`s out, one engine step at a time."""
from __future__ import annotations
import itertools
from pathlib import Path
import torch
from fastcore.basics import patch
from tqdm import tqdm
from ..request import Request
from ..sampling_params import SamplingParams
from ..timeline import TimelineRecorder
from ..engine.arg_utils import EngineArgs
from ..engine.output_processor import OutputProcessor, ParentRequest
from ..outputs import RequestOutput
from ..engine.core import build_engine_core, load_tokenizer, resolve_model_path
__all__ = ['TIMELINE_MAX_RECORDS', 'parse_prompts', 'per_prompt', 'check_prompt', 'LLM', 'check_sampling_params', 'fan_out']

def _is_token_ids(x) -> bool:
    ...

def parse_prompts(prompts) -> list[str | list[int]]:
    """Normalise `prompts` to a non-empty list of strings and token-id lists."""
    ...

def per_prompt(value, n: int, name: str) -> list:
    """One value per prompt: repeat a single value, or check that a list has `n` entries."""
    ...

def check_prompt(tokenizer, prompt: str | list[int], vocab_size: int, max_model_len: int, name: str='the prompt') -> list[int]:
    """Token ids of a text or id prompt, checked: non-empty, in the vocabulary, room for an output."""
    ...
TIMELINE_MAX_RECORDS = 10000

class LLM:
    """Offline generation with a Llama-family model: prompts in, `RequestOutput`s out (vLLM's `LLM`)."""

    def __init__(self, model: str | Path | None=None, **kwargs):
        ...

    def get_tokenizer(self):
        """The Hugging Face tokenizer (`None` for a folder without one)."""
        ...

    def _tokenize(self: LLM, i: int, prompt: str | list[int]) -> list[int]:
        """Token ids of prompt `i` (strings go through the tokenizer), checked against the model."""
        ...

    def _add_requests(self: LLM, prompts, sampling_params, priority) -> list[str]:
        """Validate every prompt and parameter, then add each prompt's engine requests; their ids."""
        ...

    def _run_engine(self: LLM, request_ids: list[str], use_tqdm: bool=True) -> list[RequestOutput]:
        """Step the engine until every request is finished; outputs in the order of `request_ids`."""
        ...

    def _abort(self: LLM, request_ids: list[str]) -> None:
        """Forget requests (and their children) in the output processor and abort them in the engine."""
        ...

    def generate(self: LLM, prompts, sampling_params: SamplingParams | list[SamplingParams] | None=None, *, use_tqdm: bool=True, priority: int | list[int] | None=None) -> list[RequestOutput]:
        """Generate completions for each prompt (a string, strings or token-id lists), in input order."""
        ...

    def chat(self: LLM, messages: list[dict] | list[list[dict]], sampling_params=None, *, use_tqdm: bool=True, add_generation_prompt: bool=True) -> list[RequestOutput]:
        """Generate the assistant's reply to one conversation or to each of a list of conversations."""
        ...

def check_sampling_params(params, tokenizer, vocab_size: int) -> None:
    """What `SamplingParams` cannot check alone: a tokenizer for stop strings, ids within the vocab."""
    ...

def fan_out(request_id: str, params: SamplingParams) -> list[tuple]:
    """`(engine request id, params, parent, index)` of each engine request behind one user request."""
    ...

def _speed_postfix(pbar, prompt_tokens: int, output_tokens: int) -> str:
    """vLLM's progress-bar postfix: prompt and output tokens per second so far."""
    ...
