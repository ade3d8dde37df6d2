"""One `SchedulerOutput` in, one `ModelRunnerOutput` out: update the persistent batch, flatten it, run the model over the paged KV cache, sample, remember the tokens."""
from __future__ import annotations
from typing import NamedTuple
import numpy as np
import torch
from fastcore.basics import patch
from ..attention.backends.triton_attn import AttentionMetadata
from .utils import to_attn_metadata
from .gpu_input_batch import CachedRequestState, InputBatch, BatchInputs, update_states, prepare_inputs, bookkeeping_sync
from ..utils.torch_utils import to_device
from ..core.sched.output import LogprobsLists, ModelRunnerOutput, EMPTY_MODEL_RUNNER_OUTPUT
from ..sample.sampler import Sampler, gather_logprobs, make_sampling_metadata
__all__ = ['PROMPT_LOGPROBS_CHUNK', 'ModelRunner', 'PromptLogprobsRow', 'to_host']

class ModelRunner:
    """The worker: applies `SchedulerOutput`s, runs the model and samples (vLLM `GPUModelRunner`)."""

    def __init__(self, model, max_num_reqs: int, max_model_len: int, max_num_batched_tokens: int, block_size: int, device='cpu', eos_token_id: int | None=None, vocab_size: int | None=None):
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

    @torch.no_grad()
    def execute_model(self: ModelRunner, scheduler_output) -> ModelRunnerOutput:
        """Run one scheduled step and return the sampled tokens (vLLM `execute_model`)."""
        ...
PROMPT_LOGPROBS_CHUNK = 512

class PromptLogprobsRow(NamedTuple):
    """One request's prompt-logprobs work in this step."""
    req_id: str
    num_logprobs: int
    hidden_rows: np.ndarray
    targets: np.ndarray
    completes: bool

def to_host(tensors: list[torch.Tensor]) -> list[list]:
    """Python lists of `tensors`, with a single wait for the device."""
    ...
