from __future__ import annotations
import numpy as np
from fastcore.basics import patch
__all__ = ['BlockTable']

class BlockTable:
    """Per-row physical block ids and the slot mapping computed from them (vLLM `BlockTable`)."""

    def __init__(self, max_num_reqs: int, max_num_blocks_per_req: int, max_num_batched_tokens: int, block_size: int):
        ...

    def _check_row(self, row: int):
        ...

    def append_row(self: BlockTable, block_ids: list[int], row: int):
        """Append `block_ids` after the blocks row `row` already holds."""
        ...

    def add_row(self: BlockTable, block_ids: list[int], row: int):
        """Overwrite row `row` with `block_ids` (a new or resumed request)."""
        ...

    def move_row(self: BlockTable, src: int, dst: int):
        """Copy row `src` into row `dst` (used by `InputBatch.condense`)."""
        ...

    def compute_slot_mapping(self: BlockTable, req_indices: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Slot of each token: `block_table[req, pos // block_size] * block_size + pos % block_size`."""
        ...
