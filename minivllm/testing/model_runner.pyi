from __future__ import annotations
import torch
from fastcore.basics import patch
from ..attention.backend import AttentionMetadata
__all__ = ['HistoryModel']
import math
import torch
from torch import nn
from fastcore.basics import patch
from ..attention.backend import AttentionMetadata

class HistoryModel(nn.Module):
    """A deterministic stand-in model: its next token hashes the request's whole paged history."""

    def __init__(self, vocab_size: int=64):
        ...

    def kv_cache_spec(self):
        ...

    def bind_kv_caches(self, kv_caches: list[torch.Tensor]):
        ...

    @staticmethod
    def history_hash(token_ids: torch.Tensor) -> torch.Tensor:
        """Running hash of a token sequence: entry i covers tokens 0..i."""
        ...

    def forward(self: HistoryModel, input_ids: torch.Tensor, positions: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        """Write the ids at their slots; return each token's history hash (mod vocab), `[num_tokens, 1]`."""
        ...

    def compute_logits(self: HistoryModel, hidden: torch.Tensor) -> torch.Tensor:
        """Logits peaked at `hash mod vocab_size`, smooth around it so sampling has something to choose."""
        ...

    def greedy_reference(self: HistoryModel, prompt: list[int], num_tokens: int) -> list[int]:
        """The tokens greedy decoding must produce for `prompt`, computed without any cache."""
        ...
