"""vLLM's offline entry point: prompts in, `RequestOutput`s out, one engine step at a time."""
from __future__ import annotations
import itertools
from dataclasses import replace
from pathlib import Path
import torch
from fastcore.basics import patch
from tqdm import tqdm
from ..request import Request
from ..sampling_params import RequestOutputKind, SamplingParams
from ..timeline import TimelineRecorder
from ..engine.arg_utils import EngineArgs
from ..engine.output_processor import OutputProcessor, ParentRequest
from ..outputs import RequestOutput
from ..metrics.stats import IterationStats
from ..engine.core import build_engine_core, get_diff_sampling_param, load_tokenizer, resolve_model_path, try_get_generation_config
from ..metrics.loggers import StatLogger
from ..usage.usage_lib import UsageContext
from ..metrics.reader import Metric
from ..inputs.llm import parse_prompts
from ..engine.input_processor import check_prompt, check_sampling_params, fan_out, prepare_sampling_params
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

    def _tokenize(self: LLM, i: int, prompt: dict) -> list[int]:
        """Token ids of prompt `i` (text goes through the tokenizer), checked against the model."""
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
        """Completions of each prompt (vLLM's forms), in input order; default params: the model's."""
        ...

    def get_metrics(self: LLM) -> list[Metric]:
        """vLLM's metrics so far: `Counter`, `Gauge` and `Histogram` objects with vLLM's names."""
        ...

    def chat(self: LLM, messages: list[dict] | list[list[dict]], sampling_params=None, *, use_tqdm: bool=True, add_generation_prompt: bool=True) -> list[RequestOutput]:
        """Generate the assistant's reply to one conversation or to each of a list of conversations."""
        ...

def _speed_postfix(pbar, prompt_tokens: int, output_tokens: int) -> str:
    """vLLM's progress-bar postfix: prompt and output tokens per second so far."""
    ...
