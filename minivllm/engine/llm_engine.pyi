"""vLLM's `LLMEngine` (`vllm/v1/engine/llm_engine.py`): requests in, one engine step at a time."""
from __future__ import annotations
import weakref
from pathlib import Path
from typing import Callable
from fastcore.basics import patch
from ..request import Request
from ..sampling_params import SamplingParams
from ..outputs import RequestOutput
from .arg_utils import EngineArgs
from .core import build_engine_core, load_tokenizer, resolve_model_path, try_get_generation_config
from .input_processor import check_prompt, check_sampling_params, fan_out, prepare_sampling_params
from .output_processor import OutputProcessor
from ..inputs.llm import parse_prompt
from ..metrics.loggers import StatLogger
from ..metrics.reader import Metric
from ..metrics.stats import IterationStats
from ..usage.usage_lib import UsageContext
__all__ = ['LLMEngine']

class LLMEngine:
    """vLLM's offline engine: `add_request`, then `step()` while `has_unfinished_requests()`."""

    def __init__(self, engine_args: EngineArgs, usage_context: UsageContext=UsageContext.ENGINE_CONTEXT, log_stats: bool=True):
        ...

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs, usage_context: UsageContext=UsageContext.ENGINE_CONTEXT) -> LLMEngine:
        """The engine `engine_args` describe (vLLM's way in); stats unless `disable_log_stats`."""
        ...

    def process_inputs(self, request_id: str, prompt, params: SamplingParams, arrival_time: float | None=None, priority: int=0) -> tuple[Request, str | None]:
        """One prompt's engine `Request`, validated and completed, and its text; nothing is added."""
        ...

    def add_processed_request(self, request: Request, prompt: str | None=None) -> None:
        """Register a request `process_inputs` made (`n` children for `n` completions)."""
        ...

    def add_request(self, request_id: str, prompt, params: SamplingParams, arrival_time: float | None=None, priority: int=0) -> str:
        """Validate one request and queue it; its id (vLLM's)."""
        ...

    def step(self) -> list[RequestOutput]:
        """Run one engine step; the outputs of the requests it advanced (per their `output_kind`)."""
        ...

    def has_unfinished_requests(self) -> bool:
        """Whether a request still waits for tokens, or the engine still has work (vLLM's)."""
        ...

    def get_num_unfinished_requests(self) -> int:
        """The engine requests still tracked (a request with `n` completions counts `n`)."""
        ...

    def abort_request(self, request_ids: str | list[str]) -> None:
        """Forget requests (a parent id: all its children) and free their blocks now."""
        ...

    def get_tokenizer(self: LLMEngine):
        """The Hugging Face tokenizer (`None` for a folder without one)."""
        ...

    def get_supported_tasks(self: LLMEngine) -> tuple[str, ...]:
        """What the model can do: generate text (vLLM's pooling tasks are not here)."""
        ...

    def reset_prefix_cache(self: LLMEngine, reset_running_requests: bool=False) -> bool:
        """Forget every cached prefix block; False while requests still hold blocks (vLLM's)."""
        ...

    def get_metrics(self: LLMEngine) -> list[Metric]:
        """vLLM's metrics so far: `Counter`, `Gauge`, `Histogram` (and `Vector`) objects."""
        ...

    def apply_model(self: LLMEngine, func: Callable) -> list:
        """`[func(model)]`: one result per worker, as in vLLM (minivllm has one)."""
        ...
