"""One `SchedulerOutput` in, one `ModelRunnerOutput` out: update the persistent batch, flatten it, run the model over the paged KV cache, sample, remember the tokens."""
from __future__ import annotations
import ctypes, functools, os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple
import numpy as np
import torch
from fastcore.basics import patch
from ..attention.backend import AttentionMetadata
from ..model_executor.model_loader import make_kv_caches
from .utils import to_attn_metadata
from .gpu_input_batch import CachedRequestState, InputBatch, BatchInputs, update_states, prepare_inputs, bookkeeping_sync
from ..utils.torch_utils import to_device
from ..core.sched.output import LogprobsLists, ModelRunnerOutput, AsyncModelRunnerOutput, EMPTY_MODEL_RUNNER_OUTPUT
from minivllm.sample.sampler import Sampler, SamplingMetadata, gather_logprobs, make_sampling_metadata
__all__ = ['PROMPT_LOGPROBS_CHUNK', 'ModelRunner', 'PromptLogprobsRow', 'HostCopy', 'copy_to_host', 'to_host', 'PreparedStep', 'Placeholders', 'TokenFill', 'AsyncGPUModelRunnerOutput', 'free_openmp_pool']

class ModelRunner:
    """The worker: applies `SchedulerOutput`s, runs the model and samples (vLLM `GPUModelRunner`)."""

    def __init__(self, model, max_num_reqs: int, max_model_len: int, max_num_batched_tokens: int, block_size: int, device='cpu', eos_token_id: int | None=None, vocab_size: int | None=None, async_scheduling: bool=False):
        ...

    def initialize_kv_cache(self: ModelRunner, num_blocks: int, block_size: int | None=None) -> list[torch.Tensor]:
        """Allocate `[num_blocks, 2, block_size, num_kv_heads, head_dim]` per layer, bound to the model."""
        ...

    def _tensor(self: ModelRunner, a: np.ndarray, dtype=None) -> torch.Tensor:
        """A numpy array as a tensor on the runner's device (pinned, non-blocking copy on CUDA)."""
        ...

    def build_attn_metadata(self: ModelRunner, batch_inputs: BatchInputs) -> AttentionMetadata:
        """Attention metadata (tensors on the device) for one step's flat inputs."""
        ...

    def _prompt_logprobs_plan(self: ModelRunner, batch_inputs: BatchInputs, num_scheduled: np.ndarray) -> list[PromptLogprobsRow]:
        """A `PromptLogprobsRow` per row owing prompt logprobs, in row order."""
        ...

    def _compute_prompt_logprobs(self: ModelRunner, hidden: torch.Tensor, plan: list[PromptLogprobsRow]):
        """Device `LogprobsTensors` pieces for every planned prompt position (None if there are none)."""
        ...

    def _deliver_prompt_logprobs(self: ModelRunner, plan: list[PromptLogprobsRow], host) -> dict[str, LogprobsLists]:
        """Append this step's host rows to each request's rows; hand over those whose prompt completed."""
        ...

    def _start_prompt_logprobs(self: ModelRunner, scheduler_output):
        """Track new requests that want prompt logprobs; forget finished ones."""
        ...

    def _prepare_step(self: ModelRunner, scheduler_output) -> PreparedStep | None:
        """The host half: apply the diffs, flatten the batch, copy the inputs (None: no tokens)."""
        ...

    @torch.no_grad()
    def _run_step(self: ModelRunner, step: PreparedStep, fill=None) -> tuple[list, list]:
        """The device half: model, last-token logits, sampling; `([sampled, *logprobs], prompt lp)`."""
        ...

    def _make_output(self: ModelRunner, step: PreparedStep, sampled: list[list[int]], lp_host: list, prompt_lp_host: list) -> ModelRunnerOutput:
        """The step's `ModelRunnerOutput`: tokens, logprobs rows (top k + 1 each), prompt logprobs."""
        ...

    @torch.no_grad()
    def execute_model(self: ModelRunner, scheduler_output):
        """Run one step, return its `ModelRunnerOutput` (vLLM's; async scheduling: a step in flight)."""
        ...

    def _append_placeholders(self: ModelRunner, step: PreparedStep) -> Placeholders:
        """A `-1` at the next position of every row that samples in `step` (vLLM's placeholders)."""
        ...

    def _prev_token_fill(self: ModelRunner, step: PreparedStep, prev) -> TokenFill | None:
        """Where `step` reads a token that the step in flight, `prev`, samples (None: nowhere)."""
        ...

    def _fill_placeholders(self: ModelRunner, ph: Placeholders, sampled: list) -> list[list[int]]:
        """Write each sampled token where its placeholder is now; the step's per-row token lists."""
        ...

    def _run_step_async(self: ModelRunner, out: AsyncGPUModelRunnerOutput):
        """The device half; the next step's inputs, if queued; the copies: `(sampled, HostCopy, n)`."""
        ...

    def _finish_step(self: ModelRunner, out: AsyncGPUModelRunnerOutput) -> ModelRunnerOutput:
        """The host's part after the device: one wait for the copies, the placeholders filled."""
        ...

    def _reads_output_history(self: ModelRunner, step: PreparedStep) -> bool:
        """Whether the step's sampling reads output tokens (penalties, bad words) or prompt logprobs."""
        ...

    def _execute_model_async(self: ModelRunner, scheduler_output):
        """Prepare here and queue the device half behind the step in flight (vLLM's async scheduling)."""
        ...

    def shutdown(self: ModelRunner) -> None:
        """Let the device half of the steps in flight finish and stop its thread."""
        ...
PROMPT_LOGPROBS_CHUNK = 512

class PromptLogprobsRow(NamedTuple):
    """One request's prompt-logprobs work in this step."""
    req_id: str
    num_logprobs: int
    hidden_rows: np.ndarray
    targets: np.ndarray
    completes: bool

class HostCopy(NamedTuple):
    """Device results on their way to the host: the buffers, and on CUDA the event after the copies."""
    buffers: list[torch.Tensor]
    event: torch.cuda.Event | None

    def tolist(self) -> list[list]:
        """The results as Python lists, after a single wait for their copies."""
        ...

def copy_to_host(tensors: list[torch.Tensor]) -> HostCopy:
    """Start copying `tensors` to the host (CUDA: pinned buffers, non-blocking, then an event)."""
    ...

def to_host(tensors: list[torch.Tensor]) -> list[list]:
    """Python lists of `tensors`, with a single wait for the device."""
    ...

class PreparedStep(NamedTuple):
    """One step's inputs, made on the host; the step owns them (the batch's arrays move on)."""
    req_ids: list[str]
    batch_inputs: BatchInputs
    input_ids: torch.Tensor
    positions: torch.Tensor
    attn_metadata: AttentionMetadata
    logits_indices: torch.Tensor
    sampling_metadata: SamplingMetadata
    plan: list[PromptLogprobsRow]
    num_logprobs: np.ndarray

class Placeholders(NamedTuple):
    """Where each token a step in flight samples goes, once it is known."""
    req_ids: list[str]
    step_rows: np.ndarray
    positions: np.ndarray
    output_index: list[int]

class TokenFill:
    """Inputs of a step that the step before samples, copied on the device once (vLLM's)."""

    def __init__(self, input_ids: torch.Tensor, flat: torch.Tensor, prev_rows: torch.Tensor, prev_work: Future):
        ...

    def apply(self, prev_sampled: torch.Tensor | None=None) -> None:
        """Copy the tokens from the step before's sampled ids (its result's, by default), once."""
        ...

class AsyncGPUModelRunnerOutput(AsyncModelRunnerOutput):
    """A step in flight (vLLM's name): its device half queued, its tokens recorded on `get_output`."""

    def __init__(self, runner: ModelRunner, step: PreparedStep, placeholders: Placeholders, fill: TokenFill | None, prev: AsyncGPUModelRunnerOutput | None, needs_sync: bool):
        ...

    @property
    def done(self) -> bool:
        ...

    def get_output(self) -> ModelRunnerOutput:
        """Wait for the device half and record the tokens, the step before's first."""
        ...

@functools.cache
def _libgomp():
    """GNU OpenMP as torch loaded it (None under another runtime or platform)."""
    ...

def free_openmp_pool() -> None:
    """Let this thread's OpenMP worker threads go (it makes a new pool if it needs one)."""
    ...
