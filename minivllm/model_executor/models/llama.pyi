"""A Llama-family decoder (Llama, SmolLM2, Qwen2, Qwen3) over the paged KV cache, loading Hugging Face safetensors."""
__all__ = ['ARCHITECTURES', 'STACKED_PARAMS', 'LlamaMLP', 'LlamaAttention', 'LlamaDecoderLayer', 'LlamaModel', 'LlamaForCausalLM']
from fastcore.basics import patch
from collections.abc import Iterable
import torch
from torch import nn
from ...attention.backend import AttentionBackend, AttentionMetadata
from ...forward_context import set_forward_context
from ...transformers_utils.config import get_head_dim
from ..layers.activation import SiluAndMul
from ..layers.attention.attention import Attention
from ..layers.layernorm import RMSNorm
from minivllm.model_executor.layers.linear import Linear, MergedColumnParallelLinear, QKVParallelLinear
from ..layers.logits_processor import LogitsProcessor
from ..layers.rotary_embedding import ApplyRotaryEmb, RotaryEmbedding
from ..layers.utils import cpu_mlp, uses_cpu_mlp

class LlamaMLP(nn.Module):
    """SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`."""

    def __init__(self, config):
        ...

    def forward(self, x):
        ...
ARCHITECTURES = {'LlamaForCausalLM': {}, 'Qwen2ForCausalLM': {'qkv_bias': True, 'o_bias': False}, 'Qwen3ForCausalLM': {'qk_norm': True}}

class LlamaAttention(nn.Module):
    """Grouped-query self-attention with RoPE; K/V go to and from the paged cache via the backend."""

    def __init__(self, config, attn_backend: AttentionBackend):
        ...

    def forward(self: LlamaAttention, x, positions, cos_sin, kv_cache):
        """Attend each token of the flat batch `x` `[num_tokens, hidden]` over its request's context."""
        ...

class LlamaDecoderLayer(nn.Module):
    """Pre-norm block: `x + attn(norm(x))`, then `x + mlp(norm(x))`, with the residual passed along."""

    def __init__(self, config, attn_backend: AttentionBackend):
        ...

    def forward(self, x, residual, positions, cos_sin, kv_cache):
        """`(mlp output, residual)`: the sum `x + residual` is left to the next norm (vLLM's form)."""
        ...

class LlamaModel(nn.Module):
    """Token embedding, the stack of decoder layers and the final norm."""

    def __init__(self, config, attn_backend: AttentionBackend):
        ...

    def forward(self, input_ids, positions, kv_caches):
        ...

class LlamaForCausalLM(nn.Module):
    """Llama-family causal LM over a flat token batch and a paged KV cache (Llama, Qwen2, Qwen3)."""

    def __init__(self, config, attn_backend: AttentionBackend):
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

    def checkpoint_names(self: LlamaForCausalLM) -> list[str]:
        """The checkpoint tensors the model needs: its parameter names, stacked ones split into shards."""
        ...

    def _destination(self: LlamaForCausalLM, params: dict, name: str):
        """The parameter (or the slice of a stacked one) that checkpoint tensor `name` fills, or None."""
        ...

    def load_weights(self: LlamaForCausalLM, weights: Iterable[tuple[str, torch.Tensor]]):
        """Copy each `(name, tensor)` into its parameter or stacked shard; `ValueError` on a mismatch."""
        ...
STACKED_PARAMS = [('qkv_proj', 'q_proj', 'q'), ('qkv_proj', 'k_proj', 'k'), ('qkv_proj', 'v_proj', 'v'), ('gate_up_proj', 'gate_proj', 0), ('gate_up_proj', 'up_proj', 1)]
