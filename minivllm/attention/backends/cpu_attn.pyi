__all__ = ['CPU_ATTN_HEAD_SIZES', 'cpu_metadata_supported', 'cpu_attention_supported', 'cpu_write_supported', 'CPUAttentionBackend']
import torch
from ... import _custom_ops as ops
from .triton_attn import TorchAttentionBackend, torch_paged_attention
CPU_ATTN_HEAD_SIZES = (32, 64, 128)

def cpu_metadata_supported(metadata) -> bool:
    """Whether the kernels read this metadata as it is: int32 rows, int64 slots, on a CPU."""
    ...

def cpu_attention_supported(query, kv_cache, metadata) -> bool:
    """Whether `cpu_attention_with_kv_cache` takes these tensors (and its library is built)."""
    ...

def cpu_write_supported(key, value, kv_cache, slot_mapping) -> bool:
    """Whether `cpu_attn_reshape_and_cache` takes these tensors (and its library is built)."""
    ...

class CPUAttentionBackend(TorchAttentionBackend):
    """vLLM's `CPU_ATTN`: the C++ write and the C++ kernel for every row (torch where it can't)."""
    name, platform = ('cpu', 'cpu')

    def write_kv(self, key, value, kv_cache, slot_mapping):
        ...

    def forward(self, query, kv_cache, attn_metadata, scale):
        ...

    def publish(self: CPUAttentionBackend, attn_metadata):
        """Pointers to the step's metadata for `cpu_layer_attention` (C++); None, another layout: none."""
        ...

    def layer_op(self: CPUAttentionBackend, head_size: int):
        """`cpu_layer_attention` where the op is built and takes this head size (a graph's C++ call)."""
        ...
from fastcore.basics import patch
