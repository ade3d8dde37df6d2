"""Decode steps padded to a few batch sizes and replayed from captured CUDA graphs: one launch per step."""
from __future__ import annotations
import bisect
from collections import Counter
import torch
from torch import nn
from fastcore.basics import patch
from ..attention.backend import AttentionMetadata, PAD_SLOT_ID
__all__ = ['MAX_CUDAGRAPH_CAPTURE_SIZE', 'cudagraph_capture_sizes', 'padded_batch_size', 'is_uniform_decode', 'ModelWrapper', 'CUDAGraphWrapper']
MAX_CUDAGRAPH_CAPTURE_SIZE = 512

def cudagraph_capture_sizes(max_num_seqs: int, max_size: int=MAX_CUDAGRAPH_CAPTURE_SIZE) -> list[int]:
    """Batch sizes that get a graph: 1, 2, 4, then every 8, up to the first covering `max_num_seqs`."""
    ...

def padded_batch_size(num_reqs: int, capture_sizes: list[int]) -> int | None:
    """The smallest capture size holding `num_reqs` requests; `None` when none does (run eagerly)."""
    ...

def is_uniform_decode(num_tokens: int, attn_metadata: AttentionMetadata) -> bool:
    """True when every request of the step has exactly one new token (vLLM's uniform decode batch)."""
    ...

class ModelWrapper(nn.Module):
    """A module that runs `self.model` its own way; anything else (config, kv_caches...) is the model's."""

    def __getattr__(self, name):
        ...

    def unwrap(self) -> nn.Module:
        """The model it runs (vLLM's `unwrap`)."""
        ...

class CUDAGraphWrapper(ModelWrapper):
    """Runs uniform decode steps padded to a capture size, from static buffers (vLLM's name)."""

    def __init__(self, model: nn.Module, *, max_num_seqs: int, max_num_blocks_per_req: int, device, use_graphs: bool | None=None):
        ...

    def compute_logits(self, hidden_states):
        """The wrapped model's logits (outside the graph: they are computed for real rows only)."""
        ...

    def _load_inputs(self: CUDAGraphWrapper, input_ids, positions, metadata: AttentionMetadata, batch_size: int) -> AttentionMetadata:
        """Copy a decode step into the static buffers, padded to `batch_size`; metadata viewing them."""
        ...

    def _static_metadata(self: CUDAGraphWrapper, batch_size: int, max_seq_len: int):
        """Attention metadata for the first `batch_size` rows of the static buffers."""
        ...

    def forward(self: CUDAGraphWrapper, input_ids, positions, attn_metadata: AttentionMetadata):
        """Hidden states for a flat batch; uniform decode steps go through the padded static path."""
        ...

    @torch.no_grad()
    def capture(self: CUDAGraphWrapper, num_warmups: int=1) -> CUDAGraphWrapper:
        """Capture one CUDA graph per capture size, largest first, into one shared memory pool."""
        ...

    def bind_kv_caches(self: CUDAGraphWrapper, kv_caches: list) -> None:
        """Bind KV caches to the wrapped model; graphs captured on the old caches are captured again."""
        ...
