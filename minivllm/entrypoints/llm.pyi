"""vLLM's offline entry point: prompts in, `RequestOutput`s out, one engine step at a time."""
from __future__ import annotations
import itertools
from pathlib import Path
import torch
from fastcore.basics import patch
from tqdm import tqdm
from ..request import Request
from ..sampling_params import RequestOutputKind, SamplingParams
from ..timeline import TimelineRecorder
from ..engine.arg_utils import EngineArgs
from ..engine.llm_engine import LLMEngine
from ..outputs import RequestOutput
from ..engine.core import get_diff_sampling_param
from ..usage.usage_lib import UsageContext
from ..metrics.reader import Metric
from ..inputs.llm import parse_prompts
from ..renderers.chat_utils import parse_chat_messages, safe_apply_chat_template
__all__ = ['TIMELINE_MAX_RECORDS', 'per_prompt', 'LLM']

def per_prompt(value, n: int, name: str) -> list:
    """One value per prompt: repeat a single value, or check that a list has `n` entries."""
    ...
TIMELINE_MAX_RECORDS = 10000

class LLM:
    """Offline generation with a Llama-family model: prompts in, `RequestOutput`s out (vLLM's `LLM`)."""

    def __init__(self, model: str | Path | None=None, **kwargs):
        ...

    def get_tokenizer(self):
        """The Hugging Face tokenizer (`None` for a folder without one)."""
        ...

    def get_default_sampling_params(self) -> SamplingParams:
        """`SamplingParams` with the model's generation-config defaults (vLLM's method)."""
        ...

    def reset_prefix_cache(self, reset_running_requests: bool=False) -> bool:
        """Forget every cached prefix block; False while requests still hold blocks (vLLM's)."""
        ...

    def _add_requests(self: LLM, prompts, sampling_params, priority) -> list[str]:
        """Check and complete every request first (none is added if one is wrong), then add them all."""
        ...

    def _process(self: LLM, i: int, prompt: dict, params, priority) -> tuple[Request, str | None]:
        """Prompt `i`'s engine request, reported once, when finished (vLLM's `LLM` does the same)."""
        ...

    def _run_engine(self: LLM, request_ids: list[str], use_tqdm: bool=True) -> list[RequestOutput]:
        """Step the engine until every request is finished; outputs in the order of `request_ids`."""
        ...

    def generate(self: LLM, prompts, sampling_params: SamplingParams | list[SamplingParams] | None=None, *, use_tqdm: bool=True, priority: int | list[int] | None=None) -> list[RequestOutput]:
        """Completions of each prompt (vLLM's forms), in input order; default params: the model's."""
        ...

    def get_metrics(self: LLM) -> list[Metric]:
        """vLLM's metrics so far: the engine's `Counter`, `Gauge` and `Histogram` objects."""
        ...

    def chat(self: LLM, messages: list[dict] | list[list[dict]], sampling_params=None, *, use_tqdm: bool=True, priority: int | list[int] | None=None, chat_template: str | None=None, add_generation_prompt: bool=True, continue_final_message: bool=False, chat_template_kwargs: dict | None=None) -> list[RequestOutput]:
        """Generate the assistant's reply to one conversation or to each of a list of conversations."""
        ...

def _speed_postfix(pbar, prompt_tokens: int, output_tokens: int) -> str:
    """vLLM's progress-bar postfix: prompt and output tokens per second so far."""
    ...
