"""`KVCacheManager`: prefix-cache lookups, and `allocate_slots`, the all-or-nothing check that decides whether a scheduling decision can be honoured."""
from __future__ import annotations
from dataclasses import dataclass
from fastcore.basics import patch
from .block_pool import BlockPool, KVCacheBlock
from .sched.output import PrefixCacheStats
from ..request import Request
from ..utils.math_utils import cdiv
__all__ = ['KVCacheBlocks', 'KVCacheManager']

@dataclass
class KVCacheBlocks:
    """The blocks of one allocation (a flat list: minivllm has a single KV-cache group)."""
    blocks: list[KVCacheBlock]

    def __add__(self, other: KVCacheBlocks) -> KVCacheBlocks:
        """Concatenate two allocations."""
        ...

    def get_block_ids(self, allow_none: bool=False) -> list[int] | None:
        """The block ids; `None` instead of `[]` when `allow_none` and there are no blocks."""
        ...

    def __len__(self):
        ...

class KVCacheManager:
    """Maps requests' tokens to KV blocks: prefix-cache lookups, all-or-nothing allocation, freeing."""

    def __init__(self, num_gpu_blocks: int, block_size: int, max_model_len: int, enable_caching: bool=True, log_stats: bool=False):
        ...

    @property
    def usage(self) -> float:
        """Fraction of the usable blocks held by requests (the pool's `get_usage()`)."""
        ...

    @property
    def prefix_cache_hit_rate(self) -> float:
        """Hit / queried tokens over the manager's lifetime (admissions of never-preempted requests)."""
        ...

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        """The request's block table (empty if it holds none)."""
        ...

    def get_block_ids(self, request_id: str) -> list[int]:
        """The request's block ids, in token order."""
        ...

    def find_longest_cache_hit(self: KVCacheManager, block_hashes: list[bytes], max_length: int) -> list[KVCacheBlock]:
        """Cached blocks for the longest prefix of `block_hashes` covering at most `max_length` tokens."""
        ...

    def get_computed_blocks(self: KVCacheManager, request: Request) -> tuple[KVCacheBlocks, int]:
        """The longest cached block-aligned prefix of `request` (never all its tokens), and its length."""
        ...

    def record_prefix_cache_stats(self: KVCacheManager, request: Request, num_hits: int) -> None:
        """Count an admitted request's lookup (`num_hits` tokens hit); nothing if caching is off."""
        ...

    def get_num_blocks_to_allocate(self: KVCacheManager, request_id: str, num_tokens: int, new_computed_blocks: list[KVCacheBlock]) -> int:
        """Free-queue blocks needed to give `request_id` `num_tokens` slots (evictable hits count)."""
        ...

    def allocate_new_computed_blocks(self: KVCacheManager, request_id: str, new_computed_blocks: list[KVCacheBlock]):
        """Touch the prefix-hit blocks and make them the start of a new request's block table."""
        ...

    def allocate_new_blocks(self: KVCacheManager, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Append pool blocks until `request_id` has slots for `num_tokens` tokens; returns the new ones."""
        ...

    def cache_blocks(self: KVCacheManager, request: Request, num_tokens: int):
        """Register the request's full blocks among its first `num_tokens` tokens in the prefix cache."""
        ...

    def allocate_slots(self: KVCacheManager, request: Request, num_new_tokens: int, num_new_computed_tokens: int=0, new_computed_blocks: KVCacheBlocks | None=None, num_lookahead_tokens: int=0) -> KVCacheBlocks | None:
        """KV slots for `num_new_tokens` more tokens after a prefix hit; `None` (no change) if short."""
        ...

    def take_new_block_ids(self: KVCacheManager) -> list[int]:
        """The ids of the blocks popped from the pool since the last call (they need zeroing)."""
        ...

    def free(self: KVCacheManager, request: Request) -> None:
        """Release all of `request`'s blocks, last block first."""
        ...

    def get_num_common_prefix_blocks(self: KVCacheManager, request_id: str) -> int:
        """Leading blocks of `request_id` held by every request that holds blocks."""
        ...

    def make_prefix_cache_stats(self: KVCacheManager) -> PrefixCacheStats | None:
        """The prefix-cache stats since the last call (then reset); `None` unless `log_stats`."""
        ...

    def reset_prefix_cache(self: KVCacheManager) -> bool:
        """Forget all cached content if no request holds a block; True on success."""
        ...
