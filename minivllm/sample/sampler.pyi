"""From one row of logits per request to one token per request: `min_tokens`, penalties, temperature, min-p, top-k, top-p, per-request seeds, the exponential race vLLM samples with, and logprobs."""
from __future__ import annotations
from dataclasses import dataclass, field
import numpy as np
import torch
from torch import nn
from fastcore.basics import patch
from typing import TYPE_CHECKING
from ..sampling_params import SamplingParams
from ..utils.torch_utils import to_device
if TYPE_CHECKING:
    from minivllm.worker.gpu_input_batch import InputBatch
from ..core.sched.output import LogprobsLists
__all__ = ['SamplingMetadata', 'make_sampling_metadata', 'apply_min_tokens', 'logits_processor_rows', 'apply_allowed_token_ids', 'apply_bad_words', 'apply_logit_bias', 'apply_penalties', 'apply_min_p', 'apply_top_k_top_p', 'argmax_rows', 'random_sample', 'LogprobsTensors', 'gather_logprobs', 'SamplerOutput', 'Sampler']
_GREEDY_EPS = 1e-05

@dataclass
class SamplingMetadata:
    """The batch's sampling parameters, one entry per row (vLLM `SamplingMetadata`)."""
    temperature: torch.Tensor
    all_greedy: bool
    all_random: bool
    top_p: torch.Tensor | None = None
    top_k: torch.Tensor | None = None
    max_top_k: int = 0
    min_p: torch.Tensor | None = None
    generators: dict[int, torch.Generator] = field(default_factory=dict)
    masked_stop_token_ids: dict[int, set[int]] = field(default_factory=dict)
    max_num_logprobs: int | None = None
    no_penalties: bool = True
    presence_penalties: torch.Tensor | None = None
    frequency_penalties: torch.Tensor | None = None
    repetition_penalties: torch.Tensor | None = None
    output_bin_counts: torch.Tensor | None = None
    prompt_token_mask: torch.Tensor | None = None
    logit_bias: dict[int, dict[int, float]] = field(default_factory=dict)
    allowed_token_ids: dict[int, list[int]] = field(default_factory=dict)
    bad_words_token_ids: dict[int, list[list[int]]] = field(default_factory=dict)
    output_token_ids: dict[int, list[int]] = field(default_factory=dict)

    @property
    def is_greedy(self) -> torch.Tensor:
        """Per-row greedy flags, on the device (used only inside `torch.where`)."""
        ...

@patch(cls_method=True)
def from_arrays(cls: SamplingMetadata, temperature, top_p=None, top_k=None, min_p=None, *, generators=None, masked_stop_token_ids=None, max_num_logprobs=None, presence_penalties=None, frequency_penalties=None, repetition_penalties=None, output_bin_counts=None, prompt_token_mask=None, logit_bias=None, allowed_token_ids=None, bad_words_token_ids=None, output_token_ids=None, device='cpu') -> SamplingMetadata:
    """Metadata from per-row host arrays; every flag is computed here, on the host."""
    ...

@patch(cls_method=True)
def from_params(cls: SamplingMetadata, params: list[SamplingParams], generators=None, prompt_token_ids=None, output_token_ids=None, vocab_size: int | None=None, device='cpu') -> SamplingMetadata:
    """Metadata for rows with `params`; penalties count `output_token_ids` (lists, one per row)."""
    ...

def make_sampling_metadata(input_batch: InputBatch, discard_request_indices=(), device='cpu') -> SamplingMetadata:
    """Sampling metadata for rows `0..num_reqs-1` of `input_batch`; discarded rows keep their RNG."""
    ...

def apply_min_tokens(logits: torch.Tensor, masked_stop_token_ids: dict[int, set[int]]) -> torch.Tensor:
    """Set the logits of each listed row's stop ids to -inf, in place."""
    ...

def logits_processor_rows(input_batch: InputBatch) -> dict:
    """Per-row `logit_bias`, `allowed_token_ids`, `bad_words_token_ids` and outputs of the batch."""
    ...

def _index(pairs, device):
    """Row and column index tensors of (row, token) pairs."""
    ...

def apply_allowed_token_ids(logits: torch.Tensor, allowed: dict[int, list[int]]) -> torch.Tensor:
    """Set every logit outside each listed row's allowed ids to -inf, in place."""
    ...

def apply_bad_words(logits: torch.Tensor, bad_words_token_ids: dict[int, list[list[int]]], past_tokens_ids: dict[int, list[int]]) -> torch.Tensor:
    """Ban the last token of every bad word whose other tokens end the output (vLLM's rule)."""
    ...

def apply_logit_bias(logits: torch.Tensor, logit_bias: dict[int, dict[int, float]]) -> torch.Tensor:
    """Add each listed row's bias to its tokens' logits, in place (vLLM's LogitBiasLogitsProcessor)."""
    ...

def apply_penalties(logits: torch.Tensor, prompt_token_mask: torch.Tensor, output_bin_counts: torch.Tensor, presence_penalties: torch.Tensor, frequency_penalties: torch.Tensor, repetition_penalties: torch.Tensor) -> torch.Tensor:
    """Repetition (prompt + output), then frequency and presence (output) penalties, per row."""
    ...

def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Mask tokens whose probability is below `min_p` times the row's largest probability."""
    ...

def _top_k_only(logits: torch.Tensor, k: torch.Tensor, max_top_k: int) -> torch.Tensor:
    """Mask values below each row's k-th largest, without sorting."""
    ...

def apply_top_k_top_p(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None, max_top_k: int | None=None) -> torch.Tensor:
    """Mask logits outside each row's top-k and top-p sets (vLLM `apply_top_k_top_p`)."""
    ...

def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """`x.argmax(-1)`: each row's first largest entry (NaN counting as largest), through `max`."""
    ...

def random_sample(probs: torch.Tensor, generators: dict[int, torch.Generator]) -> torch.Tensor:
    """One token per row as `argmax(probs / q)`, `q ~ Exp(1)`; seeded rows use their own generator."""
    ...

@dataclass
class LogprobsTensors:
    """Per-row `[chosen, top-1..top-k]` token ids and logprobs, and the chosen token's rank."""
    logprob_token_ids: torch.Tensor
    logprobs: torch.Tensor
    selected_token_ranks: torch.Tensor

    def tolists(self, num_logprobs=None) -> LogprobsLists:
        """Host lists; with `num_logprobs` (one k per row) each row is trimmed to `k + 1` entries."""
        ...

def gather_logprobs(logprobs: torch.Tensor, num_logprobs: int, token_ids: torch.Tensor) -> LogprobsTensors:
    """Top-`num_logprobs` of each row, plus `token_ids`' own logprob and rank (vLLM's name)."""
    ...

@dataclass
class SamplerOutput:
    """One sampled token per row, and the logprobs rows when some request asked for them."""
    sampled_token_ids: torch.Tensor
    logprobs_tensors: LogprobsTensors | None = None

class Sampler(nn.Module):
    """Sample one token per row of logits under per-row sampling parameters (vLLM `Sampler`)."""

    def forward(self, logits: torch.Tensor, metadata: SamplingMetadata) -> SamplerOutput:
        """Process the logits, sample one token per row; logprobs come from the raw logits."""
        ...

    def sample(self, logits: torch.Tensor, metadata: SamplingMetadata) -> torch.Tensor:
        """Greedy tokens for greedy rows, exponential-race tokens for the others."""
        ...
