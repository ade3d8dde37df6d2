"""What a CPU decode step must read and compute, and what brings SmolLM2-135M near it: faster products, huge pages, C++ attention, one compiled layer."""
__all__ = ['padding_decode_metadata', 'layer_example', 'probe_like', 'direct_call', 'TorchCompileWithNoGuardsWrapper']
from fastcore.basics import patch
import itertools, os, warnings
from pathlib import Path
import torch
from torch import nn
from tqdm import tqdm
from ..attention.backend import AttentionMetadata, PAD_SLOT_ID
from .cuda_graph import ModelWrapper
from ..forward_context import set_forward_context
from .caching import aot_compiled
from minivllm.compilation.compiler_interface import inductor_cache_dir, inductor_call, leaves, trust_known_vec_isa

def padding_decode_metadata(n: int, device='cpu') -> AttentionMetadata:
    """Metadata of a decode step of `n` one-token requests whose K/V go to padding slots only."""
    ...

def layer_example(model: nn.Module, rows: int) -> tuple:
    """A decoder layer's inputs for a step of `rows` tokens (2: any number from 2), on two KV blocks."""
    ...

def probe_like(example: tuple, many_rows: bool=False) -> tuple:
    """Inputs like `example`: random floats (outputs told apart), and the counts a graph takes as
    variables given values no other size has: the KV blocks and, with `many_rows`, the rows (those
    of the example's first tensor and of every input with as many)."""
    ...

def direct_call(compiled, module: nn.Module, probe: tuple, backend):
    """`inductor_call` of `compiled` (else itself), probed in a decode step of the probe's rows."""
    ...

class TorchCompileWithNoGuardsWrapper(ModelWrapper):
    """vLLM's `TorchCompileWithNoGuardsWrapper`, by region: the model's decoder layer and its
    one-row logits compiled ahead of time without guards (one graph for single-token steps and one
    for steps of 2+ tokens, shared by every layer), each called past inductor's wrappers."""

    def __init__(self, model: nn.Module, cache: Path | None=None):
        ...

    def compile(self: TorchCompileWithNoGuardsWrapper) -> bool:
        """Compile (or load) the layer's two graphs and the one-row logits, probed; `False` if it can't."""
        ...

    def forward(self: TorchCompileWithNoGuardsWrapper, input_ids, positions, attn_metadata: AttentionMetadata):
        """The model's step (`LlamaModel.forward`), every decoder layer one call of a compiled graph."""
        ...

    def compute_logits(self: TorchCompileWithNoGuardsWrapper, hidden_states):
        """One row: the compiled logits (a streamed product); more: the model's (oneDNN's product)."""
        ...

    def bind_kv_caches(self: TorchCompileWithNoGuardsWrapper, kv_caches: list) -> None:
        """Bind KV caches to the model: more or fewer blocks, not another layout (the graphs bake it)."""
        ...
