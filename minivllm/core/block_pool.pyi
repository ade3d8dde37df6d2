"""Paged KV memory as a pool of fixed-size blocks: chained block hashes, an intrusive free queue that doubles as the LRU eviction order, and the `BlockPool` that hands blocks out, takes them back and remembers what they hold."""
from __future__ import annotations
import hashlib, pickle
from dataclasses import dataclass
from collections.abc import Callable, Iterable, Iterator
from fastcore.basics import patch
__all__ = ['NONE_HASH', 'hash_block_tokens', 'get_request_block_hasher', 'KVCacheBlock', 'FreeKVCacheBlockQueue', 'BlockHashToBlockMap', 'BlockPool', 'PoolSnapshot', 'snapshot_block_pool']
NONE_HASH: bytes = hashlib.sha256(b'minivllm NONE_HASH').digest()

def _sha256_pickle(obj) -> bytes:
    """SHA-256 of `obj`'s pickle (vLLM's default `sha256` prefix-caching hash)."""
    ...

def hash_block_tokens(parent_block_hash: bytes | None, token_ids: Iterable[int], extra_keys: tuple | None=None) -> bytes:
    """Hash of one full block, chained to the hash of the block before it (first: `NONE_HASH`)."""
    ...

def get_request_block_hasher(block_size: int) -> Callable[[object], list[bytes]]:
    """Closure `hasher(request)`: the hashes of the request's full blocks not yet hashed."""
    ...

class KVCacheBlock:
    """Metadata of one KV-cache block: id, reference count, prefix-cache hash and free-queue links."""

    def __init__(self, block_id: int):
        ...

    @property
    def block_hash(self) -> bytes | None:
        """Hash of the block's content when it is a cached full block, else `None`."""
        ...

    @block_hash.setter
    def block_hash(self, block_hash: bytes):
        ...

    def reset_hash(self):
        """Forget the hash (the block is evicted from the prefix cache)."""
        ...

    def __repr__(self):
        ...

class FreeKVCacheBlockQueue:
    """Doubly linked list threaded through the free blocks; head = next to be reused (and evicted)."""

    def __init__(self, blocks: list[KVCacheBlock]):
        ...

    def _link_after(self, anchor: KVCacheBlock, blocks: list[KVCacheBlock]):
        """Insert `blocks`, in order, right after `anchor`."""
        ...

    def remove(self, block: KVCacheBlock):
        """Unlink `block` from anywhere in the queue in O(1)."""
        ...

    def popleft(self) -> KVCacheBlock:
        """Remove and return the head block; `ValueError` when the queue is empty."""
        ...

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Remove and return the first `n` blocks, head first."""
        ...

    def append(self, block: KVCacheBlock):
        """Put `block` at the tail (the last to be reused)."""
        ...

    def append_n(self, blocks: list[KVCacheBlock]):
        """Put `blocks` at the tail, in the given order."""
        ...

    def prepend_n(self, blocks: list[KVCacheBlock]):
        """Put `blocks` at the head, in the given order (`blocks[0]` becomes the head)."""
        ...

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """The free blocks from head to tail."""
        ...

    def __len__(self):
        ...

class BlockHashToBlockMap:
    """Prefix-cache index: hash -> one block, or `{block_id: block}` when duplicates share a hash."""

    def __init__(self):
        ...

    def get_one_block(self, key: bytes) -> KVCacheBlock | None:
        """Any block cached under `key`, or `None`."""
        ...

    def insert(self, key: bytes, block: KVCacheBlock):
        """Register `block` under `key`, keeping blocks already there."""
        ...

    def pop(self, key: bytes, block_id: int) -> KVCacheBlock | None:
        """Unregister block `block_id` from `key`; other blocks under the key stay."""
        ...

    def iter_blocks(self) -> Iterator[tuple[bytes, KVCacheBlock]]:
        """Every (hash, block) pair in the index."""
        ...

    def __len__(self):
        ...

    def __contains__(self, key):
        ...

class BlockPool:
    """All KV-cache blocks: free queue, prefix-cache index and the null block 0."""

    def __init__(self, num_gpu_blocks: int, enable_caching: bool=True):
        ...

    def get_num_free_blocks(self) -> int:
        """Blocks in the free queue, evictable cached blocks included."""
        ...

    def get_usage(self) -> float:
        """Fraction of usable blocks (the null block excluded) held by requests."""
        ...

    def get_cached_block(self, block_hash: bytes) -> KVCacheBlock | None:
        """A block whose content has hash `block_hash`, or `None` (a miss)."""
        ...

    def __repr__(self):
        ...

    def _maybe_evict_cached_block(self: BlockPool, block: KVCacheBlock) -> bool:
        """Drop `block` from the prefix cache if it is cached; True if it was."""
        ...

    def get_new_blocks(self: BlockPool, num_blocks: int) -> list[KVCacheBlock]:
        """Pop `num_blocks` blocks from the free-queue head (evicting cached ones), with `ref_cnt` 1."""
        ...

    def free_blocks(self: BlockPool, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference from each block; blocks reaching 0 return to the free queue (hashes kept)."""
        ...

    def touch(self: BlockPool, blocks: Iterable[KVCacheBlock]) -> None:
        """Add a reference to each prefix-hit block, taking free ones out of the free queue."""
        ...

    def cache_full_blocks(self: BlockPool, request, blocks: list[KVCacheBlock], num_cached_blocks: int, num_full_blocks: int, block_size: int) -> None:
        """Hash and index `blocks[num_cached_blocks:num_full_blocks]`, full blocks of `request`."""
        ...

    def reset_prefix_cache(self: BlockPool) -> bool:
        """Forget all cached content if no request holds a block; True on success."""
        ...

@dataclass
class PoolSnapshot:
    """A copy of a `BlockPool`'s state for pictures: ref counts, hashed flags, free-queue order."""
    label: str
    ref_cnts: list[int]
    hashed: list[bool]
    free_queue: list[int]

def snapshot_block_pool(pool: BlockPool, label: str='') -> PoolSnapshot:
    """Copy `pool`'s per-block state and free-queue order."""
    ...
