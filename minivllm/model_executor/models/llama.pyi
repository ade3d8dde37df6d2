"""A Llama-family decoder (Llama, SmolLM2, Qwen2, Qwen3) over the paged KV cache, loading Hugging Face safetensors."""
__all__ = ['CPU_GEMM_SOURCE', 'CPU_GEMM_PANEL', 'CPU_GEMM_MAX_ROWS', 'CPU_GEMM_ARGTYPES', 'cpu_linear', 'ONEDNN', 'PREPACK', 'CPU_MLP_CHUNK_BYTES', 'cpu_mlp', 'layer_attention_op', 'ARCHITECTURES', 'DYNAMO_CONFIG', 'get_head_dim', 'rope_parameters', 'RMSNorm', 'rope_inv_freq', 'apply_rope', 'RotaryEmbedding', 'cpu_gemm_library', 'pack_panels', 'cpu_gemm', 'silu_and_mul', 'register_op', 'unquantized_gemm', 'dispatch_cpu_unquantized_gemm', 'Linear', 'LlamaMLP', 'uses_cpu_mlp', 'layer_attention', 'LlamaAttention', 'make_kv_caches', 'LlamaDecoderLayer', 'LlamaModel', 'LlamaForCausalLM', 'held_tensors', 'inductor_call', 'probe_like', 'padding_decode_metadata', 'trust_known_vec_isa', 'module_constants', 'traced_sources_unchanged', 'load_or_aot_compile', 'aot_compiled', 'layer_example', 'by_rows', 'direct_call', 'compile_and_warm_up', 'rms_norm_triton', 'rope_triton']
import ctypes, functools, hashlib, inspect, itertools, math, os, platform, sys, types
import unittest.mock, warnings, weakref
from pathlib import Path
from typing import Callable
import torch
import torch.nn.functional as F
from torch import nn
from fastcore.basics import patch
from tqdm import tqdm
from ...attention.backends.triton_attn import AttentionMetadata, PAD_SLOT_ID, _on_device
from ...core.kv_cache_manager import cdiv
from ...attention.backends.cpu_attn import CPU_ATTN_HEAD_SIZES, CPU_VEC_SOURCE, build_cpu_library, cpu_attn_op_library, cpu_flags
from ...forward_context import get_forward_context, set_forward_context
from ...platforms.cpu import CPU_INDUCTOR_CONFIG
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
CPU_GEMM_SOURCE = '\n// out = x @ W.T (+ bias) for a few rows of x, float32, W packed in panels of 32 outputs:\n// panels[p][k][j] = W[32 p + j][k], each panel one contiguous run of memory; N a multiple of 32.\n// (After chapter 12\'s CPU_VEC_SOURCE: vectors of W = 16 floats, load, store, exp16.)\n#include <algorithm>\n\nconstexpr int NV = 2, PANEL = NV * W;           // a panel\'s row: two vectors of 16 floats\nconstexpr int MR = 12;                          // rows at a time: 24 accumulators in registers\n\n// R rows of x times one panel. Along the way it asks for `n` k-rows of the next panel\n// (`ahead`), one every `every` steps, into the first-level cache, so that the next panel\'s\n// lines arrive while this one computes: reading each weight once from memory costs no waiting.\ntemplate <int R>\nstatic void tile(const float* x, int64_t xs, const float* panel, const float* bias, int64_t K,\n                 const float* ahead, int64_t n, int64_t every, float* out, int64_t os) {\n    vec acc[R][NV];\n    for (int r = 0; r < R; ++r)\n        for (int v = 0; v < NV; ++v) acc[r][v] = bias ? load(bias + v * W) : vec{};\n    for (int64_t k = 0, wait = 0; k < K; ++k) {\n        if (wait-- == 0 && n-- > 0) {          // a k-row of the next panel, every `every` steps\n            for (int v = 0; v < NV; ++v) __builtin_prefetch(ahead + v * W, 0, 3);\n            ahead += PANEL;\n            wait = every - 1;\n        }\n        vec b[NV];\n        for (int v = 0; v < NV; ++v) b[v] = load(panel + k * PANEL + v * W);\n        for (int r = 0; r < R; ++r) {\n            const float a = x[r * xs + k];\n            for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];\n        }\n    }\n    for (int r = 0; r < R; ++r)\n        for (int v = 0; v < NV; ++v) store(out + r * os + v * W, acc[r][v]);\n}\n\ntypedef void (*tile_fn)(const float*, int64_t, const float*, const float*, int64_t, const float*,\n                        int64_t, int64_t, float*, int64_t);\nstatic constexpr tile_fn TILES[] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>,\n                                    tile<7>, tile<8>, tile<9>, tile<10>, tile<11>, tile<12>};\n\nextern "C" int cpu_gemm(const float* x, int64_t x_row_stride, const float* panels,\n                        const float* bias, float* out, int64_t M, int64_t N, int64_t K,\n                        int64_t threads) {\n    if (M <= 0) return 0;\n    const int64_t num_panels = N / PANEL;\n    const int64_t blocks = (M + MR - 1) / MR, rows = (M + blocks - 1) / blocks;   // even blocks\n    #pragma omp parallel for schedule(static) num_threads(threads)\n    for (int64_t p = 0; p < num_panels; ++p) {     // each thread: a contiguous run of panels\n        const float* panel = panels + p * K * PANEL;\n        // the next panel asked for where this one is read by several blocks of rows; one block\n        // reads it once, in order, and the CPU\'s own prefetcher keeps up (faster without ours)\n        const float* next = blocks > 1 && p + 1 < num_panels ? panel + K * PANEL : nullptr;\n        for (int64_t r0 = 0, b = 0; r0 < M; r0 += rows, ++b) {\n            // block b asks for its share of the next panel\'s k-rows: [k0, k1), spread over K\n            const int64_t k0 = next ? b * K / blocks : 0, k1 = next ? (b + 1) * K / blocks : 0;\n            const int64_t n = k1 - k0, every = n > 0 ? (K + n - 1) / n : K + 1;\n            TILES[std::min(rows, M - r0)](x + r0 * x_row_stride, x_row_stride, panel,\n                                           bias ? bias + p * PANEL : nullptr, K,\n                                           next + k0 * PANEL, n, every,\n                                           out + r0 * N + p * PANEL, N);\n        }\n    }\n    return 0;\n}\n\n// vLLM\'s silu_and_mul: out[r][j] = silu(x[r][j]) * x[r][D + j], silu(g) = g / (1 + e^-g), taken\n// as g e^g / (1 + e^g) for g < 0 so that exp16 always sees -|g|.\nextern "C" int silu_and_mul(const float* x, int64_t x_row_stride, float* out, int64_t M,\n                            int64_t D, int64_t threads) {\n    #pragma omp parallel for schedule(static) num_threads(threads) if (M * D >= 16384)\n    for (int64_t r = 0; r < M; ++r) {\n        const float *gate = x + r * x_row_stride, *up = gate + D;\n        float* o = out + r * D;\n        int64_t j = 0;\n        for (; j + W <= D; j += W) {\n            const vec g = load(gate + j), e = exp16(g < 0 ? g : -g), one = e * 0.0f + 1.0f;\n            store(o + j, g * ((g < 0 ? e : one) / (one + e)) * load(up + j));\n        }\n        for (; j < D; ++j) o[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];\n    }\n    return 0;\n}\n'
CPU_GEMM_PANEL = 32
CPU_GEMM_MAX_ROWS = 128
CPU_GEMM_ARGTYPES = {'cpu_gemm': [ctypes.c_void_p, ctypes.c_int64, *[ctypes.c_void_p] * 3, *[ctypes.c_int64] * 4], 'silu_and_mul': [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, *[ctypes.c_int64] * 3]}

@functools.cache
def cpu_gemm_library():
    """Our kernels for a few rows, built once per compiler and CPU; None without AVX-512 or compiler."""
    ...

def pack_panels(weight: torch.Tensor) -> torch.Tensor:
    """A `[N, K]` weight as `[N / 32, K, 32]`: panel p holds outputs 32p..32p+31, k after k."""
    ...

def cpu_gemm(x: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None=None):
    """`x @ W.T (+ bias)` by our kernel, from W's `pack_panels`: float32 on a CPU, any rows."""
    ...

def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """vLLM's `SiluAndMul` by our kernel: `silu(gate) * up` for `x` `[rows, 2 d]` = `[gate, up]`."""
    ...
_ops = torch.library.Library('minivllm', 'FRAGMENT')

def register_op(name: str, schema: str, impl, fake):
    """`impl` as the op `torch.ops.minivllm.<name>`: compiled graphs call it without looking inside."""
    ...

def _cpu_linear(x, weight, panels, bias):
    """`x @ weight.T + bias`: our kernel (above) on `panels` for a few rows, else oneDNN."""
    ...
cpu_linear = register_op('cpu_linear', '(Tensor x, Tensor weight, Tensor? panels, Tensor? bias) -> Tensor', _cpu_linear, lambda x, weight, panels, bias: x.new_empty(*x.shape[:-1], weight.shape[0]))
ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, '_linear_pointwise')
PREPACK = ONEDNN and hasattr(torch.ops.mkldnn, '_reorder_linear_weight')

def unquantized_gemm(x, weight, bias=None, packed_weight=None, panel_weight=None):
    """vLLM's `dispatch_unquantized_gemm`: float32 on a CPU to oneDNN or ours, else `F.linear`."""
    ...

def dispatch_cpu_unquantized_gemm(layer: nn.Module):
    """vLLM's: a float32 CPU weight gets a copy in oneDNN's packed layout (and one in our panels)."""
    ...

class Linear(nn.Linear):
    """`nn.Linear` whose product goes through `unquantized_gemm` (vLLM's `UnquantizedLinearMethod`)."""
    packed_weight = panel_weight = None

    def forward(self, x):
        ...

class LlamaMLP(nn.Module):
    """SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`."""

    def __init__(self, config):
        ...

    def forward(self, x):
        ...
CPU_MLP_CHUNK_BYTES = 16 << 20

def uses_cpu_mlp(x: torch.Tensor, gate_up: Linear) -> bool:
    """Whether the MLP is our op: float32 CPU rows, panels of our kernel, not a compiled single row."""
    ...

def _cpu_mlp(x, gate_up, gate_up_panels, gate_up_bias, down, down_panels, down_bias, chunk_bytes=CPU_MLP_CHUNK_BYTES):
    """`down(silu_and_mul(gate_up(x)))`, in chunks of rows whose `gate_up` output fits `chunk_bytes`."""
    ...
cpu_mlp = register_op('cpu_mlp', '(Tensor x, Tensor gate_up, Tensor? gate_up_panels, Tensor? gate_up_bias, Tensor down, Tensor? down_panels, Tensor? down_bias) -> Tensor', _cpu_mlp, lambda x, gate_up, panels, bias, down, *args: x.new_empty(x.shape[0], down.shape[0]))

def layer_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, scale: float) -> torch.Tensor:
    """One layer's attention: write its K/V into `kv_cache`, attend (vLLM's `unified_attention`)."""
    ...
layer_attention_op = register_op('layer_attention', '(Tensor query, Tensor key, Tensor value, Tensor(a!) kv_cache, float scale) -> Tensor', layer_attention, lambda query, *args: torch.empty_like(query))
ARCHITECTURES = {'LlamaForCausalLM': {}, 'Qwen2ForCausalLM': {'qkv_bias': True, 'o_bias': False}, 'Qwen3ForCausalLM': {'qk_norm': True}}

class LlamaAttention(nn.Module):
    """Grouped-query self-attention with RoPE; K/V go to and from the paged cache via the backend."""
    cpu_attention_op = False

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

def _leaves(value, path=()) -> list:
    """`(path, leaf)` for each leaf of nested tuples and lists (`path`: the indices down to it)."""
    ...

def held_tensors(module: nn.Module) -> dict:
    """`id -> name` of the tensors `module` holds: parameters, buffers, plain tensor attributes."""
    ...

def _source(arg, held: dict, leaves: list) -> tuple:
    """Where a graph's argument comes from: a tensor the module holds, an input or an input's size."""
    ...

def _at(inputs, path):
    ...

def inductor_call(compiled: Callable, module: nn.Module, probe: tuple) -> Callable | None:
    """`compiled(module, *inputs)` calling inductor's code alone; None if the `probe` can't show how."""
    ...

def probe_like(example: tuple, many_rows: bool=False) -> tuple:
    """Inputs like `example`: random floats (outputs told apart), and the counts a graph takes as
    variables given values no other size has: the KV blocks and, with `many_rows`, the rows (those
    of the example's first tensor and of every input with as many)."""
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
DYNAMO_CONFIG = {'specialize_float': True, 'automatic_dynamic_shapes': False}

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

def direct_call(compiled: Callable, module: nn.Module, probe: tuple, backend) -> Callable:
    """`inductor_call` of `compiled` (else itself), probed in a decode step of the probe's rows."""
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
