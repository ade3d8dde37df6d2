"""A Llama-family decoder (Llama, SmolLM2, Qwen2, Qwen3) over the paged KV cache, loading Hugging Face safetensors."""
__all__ = ['onednn_linear', 'ONEDNN', 'PREPACK', 'layer_attention_op', 'ARCHITECTURES', 'get_head_dim', 'rope_parameters', 'RMSNorm', 'rope_inv_freq', 'apply_rope', 'RotaryEmbedding', 'register_op', 'unquantized_gemm', 'dispatch_cpu_unquantized_gemm', 'Linear', 'LlamaMLP', 'layer_attention', 'LlamaAttention', 'make_kv_caches', 'LlamaDecoderLayer', 'LlamaModel', 'LlamaForCausalLM', 'padding_decode_metadata', 'trust_known_vec_isa', 'module_constants', 'traced_sources_unchanged', 'load_or_aot_compile', 'aot_compiled', 'layer_example', 'by_rows', 'compile_and_warm_up', 'rms_norm_triton', 'rope_triton']
import hashlib, inspect, math, os, platform, sys, types, warnings
from pathlib import Path
from typing import Callable
import torch
import torch.nn.functional as F
from torch import nn
from fastcore.basics import patch
from tqdm import tqdm
from ...attention.backends.triton_attn import AttentionMetadata, PAD_SLOT_ID, _on_device
from ...attention.backends.cpu_attn import cpu_flags
from ...forward_context import get_forward_context, set_forward_context
import triton
import triton.language as tl

def get_head_dim(config) -> int:
    """Per-head size: the config's `head_dim`, else `hidden_size // num_attention_heads`."""
    ...

def rope_parameters(config) -> dict:
    """The config's RoPE settings as one 5.x-style dict (from either config form)."""
    ...

class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a learned scale."""
    use_triton = False

    def __init__(self, size: int, eps: float=1e-06):
        ...

    def forward(self, x, residual=None):
        """`norm(x)`; with `residual`, vLLM's fused form: `(norm(x + residual), x + residual)`."""
        ...

    def forward_native(self, x, residual=None):
        """The same in torch operations (vLLM's `forward_native`)."""
        ...

def _llama3_inv_freq(inv_freq, p):
    """Llama 3.1: divide slow frequencies by `factor`, keep fast ones, blend in between."""
    ...

def _yarn_inv_freq(inv_freq, p, dim, max_position_embeddings):
    """YaRN: blend interpolated and original frequencies; returns (inv_freq, attention_factor)."""
    ...

def rope_inv_freq(config) -> tuple[torch.Tensor, float]:
    """Float32 inverse frequencies `[head_dim // 2]` and the cos/sin scale for the config's RoPE."""
    ...

def apply_rope(x, cos, sin):
    """Rotate `x` `[tokens, heads, head_dim]` by per-token `cos`, `sin` `[tokens, 1, head_dim / 2]`."""
    ...

class RotaryEmbedding(nn.Module):
    """vLLM's `get_rope`: a `cos_sin_cache` `[max_position, head_dim]` buffer, indexed by position."""

    def __init__(self, config):
        ...

    def _compute_cos_sin_cache(self):
        """Float32 `[max_position, head_dim]`: cos of each position's angles, then sin."""
        ...

    def forward(self, positions):
        """`(cos, sin)`, each `[num_tokens, 1, head_dim // 2]`, for a flat batch of `positions`."""
        ...
_ops = torch.library.Library('minivllm', 'FRAGMENT')

def register_op(name: str, schema: str, impl, fake):
    """`impl` as the op `torch.ops.minivllm.<name>`: compiled graphs call it without looking inside."""
    ...

def _onednn_linear(x, weight, bias):
    ...
onednn_linear = register_op('onednn_linear', '(Tensor x, Tensor weight, Tensor? bias) -> Tensor', _onednn_linear, lambda x, weight, bias: x.new_empty(*x.shape[:-1], weight.shape[0]))
ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, '_linear_pointwise')
PREPACK = ONEDNN and hasattr(torch.ops.mkldnn, '_reorder_linear_weight')

def unquantized_gemm(x, weight, bias=None, packed_weight=None):
    """vLLM's `dispatch_unquantized_gemm`: float32 on a CPU goes to oneDNN, the rest to `F.linear`."""
    ...

def dispatch_cpu_unquantized_gemm(layer: nn.Module):
    """vLLM's: a float32 CPU weight gets a copy in oneDNN's packed layout, `layer.packed_weight`."""
    ...

class Linear(nn.Linear):
    """`nn.Linear` whose product goes through `unquantized_gemm` (vLLM's `UnquantizedLinearMethod`)."""
    packed_weight = None

    def forward(self, x):
        ...

class LlamaMLP(nn.Module):
    """SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`."""

    def __init__(self, config):
        ...

    def forward(self, x):
        ...

def layer_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, scale: float) -> torch.Tensor:
    """One layer's attention: write its K/V into `kv_cache`, attend (vLLM's `unified_attention`)."""
    ...
layer_attention_op = register_op('layer_attention', '(Tensor query, Tensor key, Tensor value, Tensor(a!) kv_cache, float scale) -> Tensor', layer_attention, lambda query, *args: torch.empty_like(query))
ARCHITECTURES = {'LlamaForCausalLM': {}, 'Qwen2ForCausalLM': {'qkv_bias': True, 'o_bias': False}, 'Qwen3ForCausalLM': {'qk_norm': True}}

class LlamaAttention(nn.Module):
    """Grouped-query self-attention with RoPE; K/V go to and from the paged cache via the backend."""

    def __init__(self, config):
        ...

    def forward(self: LlamaAttention, x, positions, cos_sin, kv_cache):
        """Attend each token of the flat batch `x` `[num_tokens, hidden]` over its request's context."""
        ...

def make_kv_caches(num_layers, num_kv_heads, head_dim, dtype, num_blocks: int, block_size: int, device='cpu'):
    """One zeroed KV cache `[num_blocks, 2, block_size, num_kv_heads, head_dim]` per layer."""
    ...

class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: `x + attn(norm(x))`, then `x + mlp(norm(x))`, with the residual passed along."""

    def __init__(self, config):
        ...

    def forward(self, x, residual, positions, cos_sin, kv_cache):
        """`(mlp output, residual)`: the sum `x + residual` is left to the next norm (vLLM's form)."""
        ...

class LlamaModel(nn.Module):
    """Token embedding, the stack of decoder layers and the final norm."""
    use_triton = False
    regional = False

    def __init__(self, config):
        ...

    def forward(self, input_ids, positions, kv_caches):
        ...

class LlamaForCausalLM(nn.Module):
    """Llama-family causal LM over a flat token batch and a paged KV cache (Llama, Qwen2, Qwen3)."""

    def __init__(self, config, attn_backend):
        ...

    def forward(self, input_ids, positions, attn_metadata: AttentionMetadata):
        """Hidden states `[num_tokens, hidden]` of a flat batch; writes K/V into `self.kv_caches`."""
        ...

    def compute_logits(self, hidden_states):
        """Float32 logits `[n, vocab_size]` for the given rows of hidden states."""
        ...

    def kv_cache_spec(self: LlamaForCausalLM):
        """`(num_layers, num_kv_heads, head_dim, dtype)`: what one layer's KV cache holds per token."""
        ...

    def bind_kv_caches(self: LlamaForCausalLM, kv_caches: list):
        """Use these tensors (one `[blocks, 2, block_size, kv_heads, head_dim]` per layer) as KV cache."""
        ...

def padding_decode_metadata(n: int, device='cpu') -> AttentionMetadata:
    """Metadata of a decode step of `n` one-token requests whose K/V go to padding slots only."""
    ...

def trust_known_vec_isa(cache: Path | None=None) -> Path:
    """Inductor's vector-ISA probe run once per torch, compiler and CPU (verdict kept in `cache`)."""
    ...
_COMPILED: dict[tuple, Callable] = {}

def module_constants(module: nn.Module) -> tuple:
    """What a graph bakes in: the plain values (sizes, eps) in `module`, the layouts of its tensors."""
    ...

def traced_sources_unchanged(compiled) -> bool:
    """Whether the modules TorchDynamo traced still hold the code it compiled (vLLM's check on load)."""
    ...

def load_or_aot_compile(fn: Callable, example: tuple, path: Path | None) -> Callable:
    """`fn` compiled ahead of time for inputs like `example`: loaded from `path`, else saved there."""
    ...

def aot_compiled(fn: Callable, module: nn.Module, example: tuple, inputs, cache: Path) -> Callable:
    """`fn(module, *example)` compiled without guards, once per layout of `module` and `inputs`."""
    ...

def layer_example(model: LlamaForCausalLM, rows: int) -> tuple:
    """A decoder layer's inputs for a step of `rows` tokens (2: any number from 2), on two KV blocks."""
    ...

def by_rows(one_row: Callable, more_rows: Callable) -> Callable:
    """A method calling `one_row` for an input (the first argument) of one row, else `more_rows`."""
    ...

def compile_and_warm_up(model: LlamaForCausalLM, cache: Path | None=None) -> bool:
    """Compile (or load) one decoder layer, shared by all layers, and one-row logits; `False` if not."""
    ...

@triton.jit
def _rms_norm_kernel(x_ptr, residual_ptr, weight_ptr, out_ptr, stride_x, stride_r, stride_o, eps, N: tl.constexpr, BLOCK: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    ...

def rms_norm_triton(x, weight, eps: float, residual=None):
    """`RMSNorm.forward` as one kernel; with `residual`, in place (`x` <- norm, `residual` <- sum)."""
    ...

@triton.jit
def _rope_kernel(qk_ptr, positions_ptr, cache_ptr, q_weight_ptr, k_weight_ptr, stride_t, stride_h, stride_c, eps, NUM_Q_HEADS: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr, QK_NORM: tl.constexpr):
    ...

def rope_triton(qk, positions, cos_sin_cache, num_q_heads: int, q_weight=None, k_weight=None, eps: float=1e-06):
    """Rotate `qk` `[tokens, q + k heads, head_dim]` in place (q/k norms first, given their weights)."""
    ...
