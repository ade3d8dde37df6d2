from __future__ import annotations
from pathlib import Path
import numpy as np
import torch
from ..attention.selector import get_attn_backend
from ..compilation.compiler_interface import compile_cache_dir
from ..compilation.cuda_graph import CUDAGraphWrapper
from ..compilation.wrapper import TorchCompileWithNoGuardsWrapper
from ..model_executor.model_loader import default_model_path, load_model, make_kv_caches
from ..utils.math_utils import cdiv
from .gpu_model_runner import ModelRunner
from .utils import make_attn_metadata

def resolve_model_path(model: str | Path | None) -> Path:
    """The model folder (`None`: the embedded SmolLM2), checked for config.json and safetensors."""
    ...
__all__ = ['DEFAULT_CPU_KV_CACHE_BYTES', 'resolve_model_path', 'profile_seq_lens', 'profile_run', 'profile_kv_cache_memory', 'Worker']
DEFAULT_CPU_KV_CACHE_BYTES = 1 << 30

def profile_seq_lens(num_tokens: int, max_model_len: int | None) -> list[int]:
    """The largest step's tokens as prefills of at most `max_model_len` tokens each."""
    ...

def profile_run(model, num_tokens: int, max_num_seqs: int, block_size: int, max_model_len: int | None=None) -> None:
    """vLLM's `profile_run`: the largest step as prefills, on scratch KV caches, and its logits."""
    ...

def profile_kv_cache_memory(model, num_tokens: int, max_num_seqs: int, block_size: int, gpu_memory_utilization: float, max_model_len: int | None=None) -> int:
    """GPU bytes left for the KV cache after the largest step (vLLM's `determine_available_memory`)."""
    ...

class Worker:
    """vLLM's `Worker`: the model on its device. It loads it, measures what memory it leaves,
    allocates its KV cache, compiles it or captures its graphs, and builds the `ModelRunner` that
    then runs the steps."""

    def __init__(self, args, device: torch.device, model_path: Path):
        ...

    def load_model(self):
        """The model, loaded on the worker's device (vLLM's `load_model`)."""
        ...

    def get_kv_cache_spec(self) -> tuple:
        """`(num_layers, num_kv_heads, head_dim, dtype)` of the model's KV cache."""
        ...

    def determine_available_memory(self, max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int) -> int:
        """Bytes for the KV cache: the user's, 1 GiB on a CPU, else what a profiled step leaves."""
        ...

    def initialize_kv_cache(self: Worker, num_blocks: int, max_num_seqs: int, max_model_len: int, max_num_batched_tokens: int, eos_token_id: int | None) -> ModelRunner:
        """The `ModelRunner` for these limits, with `num_blocks` KV blocks allocated and bound."""
        ...

    def compile_or_warm_up_model(self: Worker) -> None:
        """A float32 model on a CPU: its layers compiled (chapter 16); on CUDA: decode graphs captured."""
        ...
from fastcore.basics import patch
