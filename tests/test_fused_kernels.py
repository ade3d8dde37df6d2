"""The fused Triton RMSNorm and RoPE (with Qwen3's q/k norms) against the torch path, under the
interpreter on a CPU (natively on a GPU); the ops a decode step dispatches per decoder layer on the
triton path; every kernel configuration compiled for sm_90 without spills."""

import pytest
import torch

from minivllm.worker.utils import make_attn_metadata
from minivllm.model_executor.custom_op import CustomOp
from minivllm.model_executor.layers.layernorm import RMSNorm, rms_norm_triton
from minivllm.model_executor.layers.rotary_embedding import (ApplyRotaryEmb, RotaryEmbedding,
                                                             apply_rope, rope_triton)
from minivllm.model_executor.model_loader import load_model, make_kv_caches
from minivllm.testing.op_count import ops_per_layer
from minivllm.testing.tiny_models import TINY_CONFIG

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
TOL = {
    torch.float32: 1e-5,
    torch.bfloat16: 2e-2,
}  # bf16: one or two bf16 steps (the interpreter truncates)


def close(got, want, dtype):
    scale = max(1.0, want.float().abs().max().item())
    torch.testing.assert_close(
        got.float().cpu(), want.float().cpu(), atol=TOL[dtype] * scale, rtol=TOL[dtype]
    )


# ---------------------------------------------------------------- RMSNorm
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("size", [96, 128, 576])
def test_rms_norm_kernel_matches_torch(dtype, size):
    g = torch.Generator().manual_seed(size)
    norm = RMSNorm(size, eps=1e-5).requires_grad_(False)
    norm.weight.copy_(torch.randn(size, generator=g))
    norm = norm.to(DEV, dtype)
    wide = (torch.randn(6, size + 32, generator=g) * 4).to(DEV, dtype)
    x, r = wide[:, :size], (torch.randn(6, size, generator=g) * 4).to(
        DEV, dtype
    )  # x: rows with a stride
    with torch.no_grad():
        close(rms_norm_triton(x, norm.weight, norm.eps), norm.forward_native(x), dtype)
        want, want_sum = norm.forward_native(x, r)
        x2, r2 = x.clone(), r.clone()
        got, got_sum = rms_norm_triton(x2, norm.weight, norm.eps, r2)
    assert (
        got.data_ptr() == x2.data_ptr() and got_sum.data_ptr() == r2.data_ptr()
    )  # in place, as vLLM's
    close(got, want, dtype)
    close(got_sum, want_sum, dtype)


def test_rms_norm_picks_its_kernel_at_construction():
    "`platform=\"cuda\"`: the Triton kernel (`forward_cuda`), from the first call; `native`: torch's."
    native, fused = (RMSNorm(64, platform=p).requires_grad_(False).to(DEV) for p in ("native", "cuda"))
    assert native._forward_method == native.forward_native and fused._forward_method == fused.forward_cuda
    x, r = torch.randn(3, 64, device=DEV), torch.randn(3, 64, device=DEV)
    want = native(x.clone(), r.clone())
    got = fused(x.clone(), r.clone())
    for a, b in zip(got, want):
        close(a, b, torch.float32)
    assert fused(torch.zeros(0, 64, device=DEV)).shape == (0, 64)   # an empty step
    with pytest.raises(ValueError, match="unknown platform 'tpu'"): RMSNorm(64, platform="tpu")


# ---------------------------------------------------------------- RoPE (+ q/k norm)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("hq,hkv,d", [(4, 2, 32), (3, 1, 64), (2, 2, 128)])
def test_rope_kernel_matches_torch(dtype, qk_norm, hq, hkv, d):
    g = torch.Generator().manual_seed(hq * d + qk_norm)
    cfg = make_config(d)
    rope = RotaryEmbedding(cfg).to(DEV, dtype)
    n = 11
    qkv = (torch.randn(n, (hq + 2 * hkv) * d, generator=g) * 3).to(DEV, dtype)
    positions = torch.randint(0, cfg.max_position_embeddings, (n,), generator=g).to(DEV)
    norms = [RMSNorm(d, 1e-6).requires_grad_(False) for _ in range(2)]
    for m in norms:
        m.weight.copy_(torch.randn(d, generator=g))
        m.to(DEV, dtype)
    qk = qkv[:, : (hq + hkv) * d].view(n, hq + hkv, d)  # a view into the projection
    with torch.no_grad():
        x = torch.cat((norms[0](qk[:, :hq]), norms[1](qk[:, hq:])), 1) if qk_norm else qk
        want = apply_rope(x, *rope(positions))
        v_before = qkv[:, (hq + hkv) * d :].clone()
        weights = (norms[0].weight, norms[1].weight, 1e-6) if qk_norm else ()
        got = rope_triton(qk, positions, rope.cos_sin_cache, hq, *weights)
    assert got.data_ptr() == qkv.data_ptr()
    close(got, want, dtype)
    assert torch.equal(qkv[:, (hq + hkv) * d :], v_before)  # V untouched


def make_config(head_dim):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=256,
        rope_theta=10000.0,
    )


# ---------------------------------------------------------------- the whole model, and the op count
def decode_step(model, context=(5, 17, 30, 3)):
    model.bind_kv_caches(make_kv_caches(*model.kv_cache_spec(), 12, 16, device=DEV))
    tables = [[3 * i, 3 * i + 1, 3 * i + 2] for i in range(len(context))]
    positions, md = make_attn_metadata(tables, list(context), [1] * len(context), 16, device=DEV)
    return torch.arange(len(context), device=DEV), positions, md


def kernels_of(model) -> set[str]:
    "The forwards the model's custom ops took when it was built (`forward_native`, `forward_cuda`, ...)."
    return {m._forward_method.__name__ for m in model.modules() if isinstance(m, CustomOp)}


def unfused(model):
    "The model with every custom op in torch operations (vLLM's custom ops turned off)."
    for m in model.modules():
        if isinstance(m, CustomOp): m.dispatch_forward("native")
    return model


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen3ForCausalLM"])
def test_decode_step_dispatches_at_most_15_ops_per_layer(tiny_paths_by_arch, arch, dtype):
    "On the triton path a decoder layer of a decode step is at most 15 ops (aten ops + launches)."
    model = load_model(tiny_paths_by_arch[arch], dtype=dtype, attn_backend="triton", device=DEV)
    assert kernels_of(model) == {"forward_cuda", "forward_native"}   # the norms, RoPE; SiLU in torch
    assert model.model.layers[0].input_layernorm._forward_method.__name__ == "forward_cuda"
    counts = ops_per_layer(model, *decode_step(model))
    assert len(counts) == TINY_CONFIG["num_hidden_layers"]
    for c in counts:
        assert sum(c.values()) <= 15, dict(c)
        assert c["triton:_rms_norm_kernel"] == 2 and c["triton:_rope_kernel"] == 1, dict(c)
        assert not {"aten.cat", "aten.pow", "aten.rsqrt", "aten.mean"} & set(c), dict(c)
    unfused(model)  # the torch norms and RoPE: the counter sees them
    assert min(sum(c.values()) for c in ops_per_layer(model, *decode_step(model))) > 25


def test_torch_and_cpu_backends_keep_the_torch_path(tiny_qwen3_path):
    for backend in ("torch", "cpu"):
        model = load_model(tiny_qwen3_path, attn_backend=backend)
        assert kernels_of(model) <= {"forward_native", "forward_cpu"}
        assert not any(m._forward_method.__name__ == "forward_cuda" for m in model.modules()
                       if isinstance(m, (RMSNorm, RotaryEmbedding, ApplyRotaryEmb)))


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen3ForCausalLM"])
def test_fused_triton_model_matches_torch_backend(tiny_paths_by_arch, arch):
    "Prefill and decode logits, fp32, through the fused kernels and Triton attention = torch's."
    outs = []
    for backend in ("torch", "triton"):
        model = load_model(tiny_paths_by_arch[arch], attn_backend=backend, device=DEV)
        model.bind_kv_caches(make_kv_caches(*model.kv_cache_spec(), 12, 16, device=DEV))
        ids = torch.randint(0, 256, (25,), generator=torch.Generator().manual_seed(1))
        logits = []
        with torch.no_grad():
            for done, n in ((0, 9), (9, 15), (24, 1)):
                positions, md = make_attn_metadata([[0, 5]], [done], [n], 16, device=DEV)
                logits.append(
                    model.compute_logits(model(ids[done : done + n].to(DEV), positions, md)).cpu()
                )
        outs.append(torch.cat(logits))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-4, rtol=1e-4)
    assert torch.equal(outs[1].argmax(-1), outs[0].argmax(-1))


COMPILE_SCRIPT = r"""
import os, re, subprocess, tempfile
os.environ["TRITON_INTERPRET"] = "0"
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import compiler as nvidia
import minivllm.model_executor.layers.layernorm as N
import minivllm.model_executor.layers.rotary_embedding as R
PTXAS = os.path.join(os.path.dirname(nvidia.__file__), "bin", "ptxas")
TARGET = GPUTarget("cuda", 90, 32)

def spills(kernel, sig, cx):
    sig = {**sig, **{s: "i32" for s in kernel.arg_names if s.startswith("stride")},
           **{k: "constexpr" for k in cx}}
    k = triton.compile(ASTSource(kernel, sig, constexprs=cx), target=TARGET,
                       options={"num_warps": 4})
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f: f.write(k.asm["ptx"])
    r = subprocess.run([PTXAS, "-arch=sm_90a", "-v", f.name, "-o", os.devnull],
                       capture_output=True, text=True)
    os.unlink(f.name)
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    assert r.returncode == 0 and m, r.stderr[-2000:]
    return int(m[1]) + int(m[2])

bad, n = [], 0
for dt in ["fp32", "bf16", "fp16"]:
    for size in [576, 896, 1024, 2048, 4096, 8192]:   # SmolLM2, Qwen2/3 and Llama hidden sizes
        for res in (False, True):
            sig = dict(x_ptr=f"*{dt}", residual_ptr=f"*{dt}", weight_ptr=f"*{dt}",
                       out_ptr=f"*{dt}", eps="fp32")
            cx = dict(N=size, BLOCK=triton.next_power_of_2(size), HAS_RESIDUAL=res)
            s = spills(N._rms_norm_kernel, sig, cx)
            n += 1
            if s: bad.append(("rms_norm", dt, size, res, s))
    for d in [64, 128, 256]:
        for qk_norm in (False, True):
            sig = dict(qk_ptr=f"*{dt}", positions_ptr="*i64", cache_ptr=f"*{dt}",
                       q_weight_ptr=f"*{dt}",
                       k_weight_ptr=f"*{dt}", eps="fp32")
            cx = dict(NUM_Q_HEADS=16, HALF=d // 2, HALF_PAD=d // 2, QK_NORM=qk_norm)
            s = spills(R._rope_kernel, sig, cx)
            n += 1
            if s: bad.append(("rope", dt, d, qk_norm, s))
print("compiled", n, "spilled:", bad)
"""


@pytest.mark.skipif(CUDA, reason="on a GPU the tests above compile and run the kernels natively")
def test_fused_kernels_compile_for_sm90_without_spills():
    import subprocess, sys

    try:
        from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
    except Exception:
        pytest.skip("triton's CUDA backend is not installed")
    r = subprocess.run(
        [sys.executable, "-c", COMPILE_SCRIPT], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "spilled: []" in r.stdout, r.stdout[-3000:]
    assert "compiled 54" in r.stdout, r.stdout[-3000:]
