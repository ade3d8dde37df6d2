"""Paged attention: Triton kernels (interpreter on CPU, native on CUDA), the C++ CPU kernel and the torch backend
vs the reference."""
import dataclasses
import os
import warnings
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as the package would (a test may run first)

from hypothesis import given, settings, strategies as st

from minivllm._custom_ops import (build_cpu_library, cpu_attention_with_kv_cache, cpu_attn_library,
    cpu_attn_op_library, cpu_attn_reshape_and_cache)
from minivllm.attention.backend import AttentionMetadata
from minivllm.attention.backends.cpu_attn import cpu_attention_supported
from minivllm.attention.backends.triton_attn import (
    paged_attention_ref, reshape_and_cache, reshape_and_cache_ref, split_kv_decode_attention,
    torch_paged_attention, unified_attention)
from minivllm.attention.selector import get_attn_backend
from minivllm.forward_context import set_forward_context
from minivllm.testing.attention import make_paged_batch

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"  # Triton kernels need CUDA tensors natively, CPU tensors under the interpreter
TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}

# query lengths 1..300 mixed in one batch: decodes, a 300-token fresh prefill, chunks after
# contexts that end mid-block and exactly on block boundaries, a long decode
MIXED_Q = [1, 300, 17, 1, 64, 2, 33, 1]
MIXED_CTX = [70, 0, 15, 1, 32, 100, 16, 257]


def run_step(backend, q_lens, ctx_lens, dtype, device="cpu", **kw):
    "Write this step's K/V with the backend, attend, and compare cache and output with the reference."
    query, key, value, cache, md = make_paged_batch(q_lens, ctx_lens, dtype=dtype, device=device, **kw)
    ref_cache = cache.clone()
    reshape_and_cache_ref(key, value, ref_cache, md.slot_mapping)
    backend.write_kv(key, value, cache, md.slot_mapping)
    assert torch.equal(cache, ref_cache)
    scale = query.shape[-1] ** -0.5
    out = backend.forward(query, cache, md, scale)
    ref = paged_attention_ref(query.cpu(), ref_cache.cpu(), _to_cpu(md), scale)
    assert out.shape == query.shape and out.dtype == query.dtype
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=TOL[dtype], rtol=TOL[dtype])
    n = int(md.query_start_loc[-1])
    assert out[n:].abs().sum() == 0  # padding rows untouched
    return out


def _to_cpu(md):
    return AttentionMetadata(md.query_start_loc.cpu(), md.seq_lens.cpu(), md.block_table.cpu(), md.slot_mapping.cpu(),
                             md.max_query_len, md.max_seq_len)


# ---------------------------------------------------------------- reshape_and_cache
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block_size,hkv,d", [(16, 1, 64), (32, 4, 128)])
def test_reshape_and_cache_matches_reference(dtype, block_size, hkv, d):
    _, key, value, cache, md = make_paged_batch([3, 1, 20], [0, 31, 5], block_size=block_size, num_kv_heads=hkv,
                                                head_dim=d, dtype=dtype, pad=3, device=DEV)
    assert (md.slot_mapping == -1).sum() == 3
    ref = cache.clone()
    reshape_and_cache_ref(key, value, ref, md.slot_mapping)
    reshape_and_cache(key, value, cache, md.slot_mapping)
    assert torch.equal(cache, ref)


def test_reshape_and_cache_strided_key_view():
    "K and V as views into a fused QKV projection (token stride larger than heads*dim)."
    n, hkv, d = 7, 2, 64
    qkv = torch.randn(n, 3 * hkv * d, device=DEV)
    key, value = qkv[:, hkv * d:2 * hkv * d].view(n, hkv, d), qkv[:, 2 * hkv * d:].view(n, hkv, d)
    cache, ref = torch.zeros(4, 2, 16, hkv, d, device=DEV), torch.zeros(4, 2, 16, hkv, d, device=DEV)
    slots = torch.tensor([5, -1, 16, 17, 63, -1, 40], device=DEV)
    reshape_and_cache(key, value, cache, slots)
    reshape_and_cache_ref(key, value, ref, slots)
    assert torch.equal(cache, ref) and cache.abs().sum() > 0


# ---------------------------------------------------------------- Triton unified attention (interpreter)
# The full grid (fp32/fp16 x block 16/32 x head_dim 64/128 x GQA 1/3/4) on the mixed batch, plus bf16
# (whose interpreter tl.dot needs the fp32 upcast); about 2 s per case in the interpreter.
TRITON_CASES = [(dt, bs, d, qpk) for dt in (torch.float32, torch.float16) for bs in (16, 32) for d in (64, 128)
                for qpk in (1, 3, 4)] + [(torch.bfloat16, 16, 64, 4), (torch.bfloat16, 32, 128, 3)]


@pytest.mark.parametrize("dtype,block_size,d,qpk", TRITON_CASES)
def test_triton_mixed_batch(dtype, block_size, d, qpk):
    dev = "cuda" if CUDA else "cpu"
    run_step(get_attn_backend("triton", dev), MIXED_Q, MIXED_CTX, dtype, device=dev, block_size=block_size,
             num_kv_heads=2 if qpk == 1 else 1, qpk=qpk, head_dim=d, share_prefix=1, pad=3, seed=block_size + d + qpk)


@pytest.mark.parametrize("qpk", [1, 4])
def test_triton_decode_only(qpk):
    "A small decode-only batch: the backend takes the split-KV kernel (segments + reduce)."
    be = get_attn_backend("triton", "cuda" if CUDA else "cpu")
    run_step(be, [1] * 6, [0, 15, 16, 31, 32, 590], torch.float16, device="cuda" if CUDA else "cpu",
             block_size=16, num_kv_heads=2, qpk=qpk, head_dim=64, pad=2)


@pytest.mark.parametrize("kernel", ["unified", "split_kv"])
@pytest.mark.parametrize("dtype,block_size,d,qpk", [(torch.float32, 32, 128, 3), (torch.bfloat16, 16, 64, 1)])
def test_triton_decode_kernels(kernel, dtype, block_size, d, qpk):
    "Both decode paths against the reference: empty segments (context 0), segment boundaries, shared prefixes."
    dev = "cuda" if CUDA else "cpu"
    query, key, value, cache, md = make_paged_batch([1] * 5, [0, 31, 64, 200, 511], block_size=block_size,
                                                    num_kv_heads=2, qpk=qpk, head_dim=d, dtype=dtype, device=dev,
                                                    share_prefix=2, pad=1, seed=11)
    reshape_and_cache(key, value, cache, md.slot_mapping)
    ref = paged_attention_ref(query.cpu(), cache.cpu(), _to_cpu(md), 0.1)
    f = unified_attention if kernel == "unified" else split_kv_decode_attention
    out = f(query, cache, md, 0.1)
    assert torch.isfinite(out).all() and out[-1].abs().sum() == 0
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("kernel", ["unified", "split_kv", "torch", "cpu"])
def test_request_without_queries_is_skipped(kernel):
    "A request scheduled for 0 tokens must not write anybody's rows."
    dev = "cuda" if CUDA and kernel not in ("torch", "cpu") else "cpu"
    query, key, value, cache, md = make_paged_batch([1, 0, 1], [5, 20, 40], num_kv_heads=2, qpk=2, device=dev, pad=1)
    reshape_and_cache(key, value, cache, md.slot_mapping) if dev == "cuda" else reshape_and_cache_ref(key, value, cache, md.slot_mapping)
    ref = paged_attention_ref(query.cpu(), cache.cpu(), _to_cpu(md), 0.125)
    f = dict(unified=unified_attention, split_kv=split_kv_decode_attention, torch=torch_paged_attention,
             cpu=get_attn_backend("cpu", "cpu").forward)[kernel]
    torch.testing.assert_close(f(query, cache, md, 0.125).cpu(), ref, atol=1e-4, rtol=1e-4)


def test_triton_prefix_hit_chunks():
    "Several requests sharing cached prefix blocks, continuing with chunks of different lengths."
    be = get_attn_backend("triton", "cuda" if CUDA else "cpu")
    run_step(be, [5, 40, 1, 16], [64, 64, 80, 64], torch.float32, device="cuda" if CUDA else "cpu",
             block_size=16, num_kv_heads=2, qpk=3, head_dim=64, share_prefix=4, seed=3)


def test_triton_ignores_unwritten_slots():
    "NaN garbage beyond seq_len (never-written slots, unused blocks) must not leak: loads are masked."
    dev = "cuda" if CUDA else "cpu"
    query, key, value, cache, md = make_paged_batch([3, 1], [14, 30], block_size=16, num_kv_heads=2, qpk=2,
                                                    extra_blocks=2, device=dev)
    ref_cache = cache.clone()
    reshape_and_cache_ref(key, value, ref_cache, md.slot_mapping)
    ref = paged_attention_ref(query.cpu(), ref_cache.cpu(), _to_cpu(md), 0.125)
    # poison every slot at a position >= seq_len of its request, and blocks nobody owns
    nan_cache = torch.full_like(ref_cache, float("nan"))
    for i, s in enumerate(md.seq_lens.tolist()):
        for p in range(s):
            b, o = int(md.block_table[i, p // 16]), p % 16
            nan_cache[b, :, o] = ref_cache[b, :, o]
    out = unified_attention(query, nan_cache, md, 0.125)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.cpu(), ref, atol=1e-4, rtol=1e-4)


def test_triton_many_query_blocks_and_gqa_rows():
    "Odd GQA ratio with BLOCK_M=64 -> BLOCK_Q=21 (one unused row); queries spanning many q-blocks and tiles."
    be = get_attn_backend("triton", "cuda" if CUDA else "cpu")
    run_step(be, [100, 1, 42], [0, 10, 21], torch.float32, device="cuda" if CUDA else "cpu", block_size=16,
             num_kv_heads=1, qpk=3, head_dim=64, seed=7)


# ---------------------------------------------------------------- torch backend (fuller grid)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("qpk", [1, 3, 4])
def test_torch_backend_grid(dtype, block_size, d, qpk):
    run_step(get_attn_backend("torch", "cpu"), MIXED_Q, MIXED_CTX, dtype, block_size=block_size, num_kv_heads=2,
             qpk=qpk, head_dim=d, share_prefix=1, pad=3, seed=qpk)


def test_torch_backend_bf16_and_decode_only():
    be = get_attn_backend("torch", "cpu")
    run_step(be, [1] * 32, list(range(0, 320, 10)), torch.bfloat16, num_kv_heads=3, qpk=3)
    run_step(be, [1] * 32, list(range(0, 320, 10)), torch.float32, num_kv_heads=3, qpk=3, pad=5)


def test_torch_backend_small_budget_splits_buckets():
    "Forcing one request per bucket must give the same result as large buckets."
    query, key, value, cache, md = make_paged_batch(MIXED_Q, MIXED_CTX, num_kv_heads=2, qpk=3)
    reshape_and_cache_ref(key, value, cache, md.slot_mapping)
    a = torch_paged_attention(query, cache, md, 0.125, budget=1)
    b = torch_paged_attention(query, cache, md, 0.125, budget=1 << 30)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_torch_plan_follows_metadata_changes():
    "The per-step plan is cached on the metadata; in-place edits or replaced tensors must rebuild it."
    be = get_attn_backend("torch", "cpu")
    query, key, value, cache, md = make_paged_batch([3, 1], [20, 40], num_kv_heads=2, qpk=2)
    be.write_kv(key, value, cache, md.slot_mapping)
    out1 = be.forward(query, cache, md, 0.125)
    torch.testing.assert_close(be.forward(query, cache, md, 0.125), out1)   # cached plan, same answer
    md.seq_lens[1] -= 1                                                      # in place: the decode sees one key less
    torch.testing.assert_close(be.forward(query, cache, md, 0.125), paged_attention_ref(query, cache, md, 0.125))
    md.block_table = md.block_table.flip(0).contiguous().flip(0)            # replaced by an equal copy
    md.seq_lens = torch.tensor([23, 40], dtype=torch.int32)
    torch.testing.assert_close(be.forward(query, cache, md, 0.125), paged_attention_ref(query, cache, md, 0.125))


@settings(max_examples=25, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 70)), min_size=1, max_size=8),
       block_size=st.sampled_from([16, 32]), qpk=st.sampled_from([1, 2, 3, 4]), share=st.integers(0, 2),
       pad=st.integers(0, 2), seed=st.integers(0, 1000))
def test_torch_backend_random_batches(reqs, block_size, qpk, share, pad, seed):
    q_lens, ctx_lens = zip(*reqs)
    run_step(get_attn_backend("torch", "cpu"), list(q_lens), list(ctx_lens), torch.float32, block_size=block_size,
             num_kv_heads=2, qpk=qpk, head_dim=32, share_prefix=share, pad=pad, seed=seed)


# ---------------------------------------------------------------- cpu backend: the C++ kernel for decode rows
KERNEL = pytest.mark.skipif(cpu_attn_library() is None, reason="the C++ kernel did not build (no compiler)")
RANDOM_BATCHES = dict(   # requests (query length, context length), the cache's layout, a seed
    reqs=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 70)), min_size=1, max_size=8),
    block_size=st.sampled_from([16, 32]), qpk=st.sampled_from([1, 2, 3, 5]), d=st.sampled_from([32, 64, 128]),
    share=st.integers(0, 2), pad=st.integers(0, 2), seed=st.integers(0, 1000))


def random_batch(reqs, block_size, qpk, d, share, pad, seed):
    "`make_paged_batch` for one draw of `RANDOM_BATCHES`, over 2 KV heads."
    q_lens, ctx_lens = zip(*reqs)
    return make_paged_batch(list(q_lens), list(ctx_lens), block_size=block_size, num_kv_heads=2, qpk=qpk,
                            head_dim=d, share_prefix=share, pad=pad, seed=seed)


@KERNEL
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("d", [32, 64, 128])
@pytest.mark.parametrize("qpk", [1, 3, 4, 16])
def test_cpu_backend_grid(block_size, d, qpk):
    "Every row by the C++ kernel (decode rows one by one, the others in tiles), in one mixed batch with shared blocks."
    run_step(get_attn_backend("cpu", "cpu"), MIXED_Q, MIXED_CTX, torch.float32, block_size=block_size,
             num_kv_heads=2, qpk=qpk, head_dim=d, share_prefix=1, pad=3, seed=qpk + d)


@KERNEL
@settings(max_examples=30, deadline=None)
@given(**RANDOM_BATCHES)
def test_cpu_kernel_random_batches(reqs, block_size, qpk, d, share, pad, seed):
    "The kernel computes every row (a row it missed stays NaN): equal to the reference."
    query, key, value, cache, md = random_batch(reqs, block_size, qpk, d, share, pad, seed)
    reshape_and_cache_ref(key, value, cache, md.slot_mapping)
    out = cpu_attention_with_kv_cache(query, cache, md, d ** -0.5, torch.full_like(query, float("nan")))
    torch.testing.assert_close(out, paged_attention_ref(query, cache, md, d ** -0.5), atol=1e-5, rtol=1e-5)


@KERNEL
@pytest.mark.parametrize("qpk,d", [(1, 64), (3, 64), (16, 32), (8, 128)])
def test_cpu_kernel_tiles_of_long_requests_from_qkv_rows(qpk, d):
    """Requests of many queries (tiles of 16 and a shorter last one; a chunk after 250 tokens of context) with the
    query a view into each token's qkv row, as the model passes it: equal to the reference."""
    query, key, value, cache, md = make_paged_batch([300, 37, 16, 2], [0, 250, 16, 5], num_kv_heads=2, qpk=qpk,
                                                    head_dim=d, pad=2, seed=qpk)
    reshape_and_cache_ref(key, value, cache, md.slot_mapping)
    qkv = torch.cat([query.flatten(1), torch.randn(query.shape[0], 2 * 2 * d)], 1)     # [q; k; v] per token
    view = qkv[:, :query[0].numel()].view_as(query)
    out = cpu_attention_with_kv_cache(view, cache, md, d ** -0.5, torch.full_like(query, float("nan")))
    torch.testing.assert_close(out, paged_attention_ref(query, cache, md, d ** -0.5), atol=1e-5, rtol=1e-5)


@KERNEL
def test_cpu_kernel_threads_agree():
    "Decode rows, a 9-query request and padding: one thread and every thread give the same rows."
    query, key, value, cache, md = make_paged_batch([1] * 40 + [9], list(range(0, 400, 10)) + [30], num_kv_heads=3,
                                                    qpk=3, head_dim=64, pad=2)
    reshape_and_cache_ref(key, value, cache, md.slot_mapping)
    ref = paged_attention_ref(query, cache, md, 0.125)
    outs = []
    for threads in (1, torch.get_num_threads()):
        torch.set_num_threads(threads)
        outs.append(cpu_attention_with_kv_cache(query, cache, md, 0.125, torch.full_like(query, 7.0)))
    torch.testing.assert_close(outs[0][:49], ref[:49], atol=1e-5, rtol=1e-5)
    assert (outs[0][49:] == 0).all()                                        # padding
    assert torch.equal(outs[0], outs[1])


@KERNEL
@pytest.mark.parametrize("rows,threads", [(1, 2), (2, 4), (3, 4), (1, 4)])
def test_cpu_kernel_shares_a_rows_kv_heads_when_rows_are_fewer_than_threads(rows, threads):
    "Fewer decode rows than threads: each row's KV heads are shared out; the rows equal one thread's and the reference."
    query, key, value, cache, md = make_paged_batch([1] * rows + [7], [300 + 40 * i for i in range(rows)] + [20],
                                                    num_kv_heads=3, qpk=3, head_dim=64, pad=1, seed=rows)
    reshape_and_cache_ref(key, value, cache, md.slot_mapping)
    ref = paged_attention_ref(query, cache, md, 0.125)
    before, outs = torch.get_num_threads(), []
    try:
        for n in (1, threads):
            torch.set_num_threads(n)
            outs.append(cpu_attention_with_kv_cache(query, cache, md, 0.125, torch.full_like(query, 7.0)))
    finally: torch.set_num_threads(before)
    torch.testing.assert_close(outs[1][:rows + 7], ref[:rows + 7], atol=1e-5, rtol=1e-5)
    assert (outs[1][rows + 7:] == 0).all()                                  # padding
    assert torch.equal(outs[0], outs[1])


@KERNEL
@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 40), pad=st.integers(0, 3), hkv=st.integers(1, 4), d=st.sampled_from([16, 64, 80]),
       block_size=st.sampled_from([1, 16]), seed=st.integers(0, 1000))
def test_cpu_write_of_views_into_a_qkv_row_equals_the_reference(n, pad, hkv, d, block_size, seed):
    "The C++ write of key and value as the model passes them (views into each token's qkv row), padding included."
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(n + pad, 5 * hkv * d, generator=g)          # [q (3 KV widths); k; v] per token
    key, value = (qkv[:, i * hkv * d:(i + 1) * hkv * d].view(-1, hkv, d) for i in (3, 4))
    num_blocks = (n + pad) // block_size + 2
    slots = torch.randperm(num_blocks * block_size, generator=g)[:n + pad]
    slots[n:] = -1
    cache = torch.zeros(num_blocks, 2, block_size, hkv, d)
    ref = cache.clone()
    reshape_and_cache_ref(key, value, ref, slots)
    cpu_attn_reshape_and_cache(key, value, cache, slots)
    assert torch.equal(cache, ref)


@KERNEL
def test_cpu_write_refuses_a_slot_outside_the_cache():
    "A slot past the end, or below -1, is an IndexError before anything is written."
    cache, key = torch.zeros(4, 2, 16, 2, 32), torch.randn(3, 2, 32)
    for bad in (64, -2):
        with pytest.raises(IndexError, match="outside the cache"):
            cpu_attn_reshape_and_cache(key, key, cache, torch.tensor([0, bad, 5]))
    assert not cache.any()


@KERNEL
def test_a_cached_library_that_does_not_load_is_built_again(tmp_path, monkeypatch):
    "A file under the library's key that is not a library (a copy cut short) is replaced, not kept."
    source, argtypes = tmp_path / "probe.cpp", {"answer": []}
    source.write_text('extern "C" int answer(void) { return 42; }\n')
    monkeypatch.setenv("MINIVLLM_CACHE", str(tmp_path / "first"))
    assert build_cpu_library("probe", [source], argtypes, "no probe").answer() == 42
    built, = (tmp_path / "first" / "probe").glob("probe-*.so")
    broken = tmp_path / "second" / "probe" / built.name         # the same key, in another cache
    broken.parent.mkdir(parents=True)
    broken.write_bytes(built.read_bytes()[:100])
    monkeypatch.setenv("MINIVLLM_CACHE", str(tmp_path / "second"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                            # built again without a warning
        assert build_cpu_library("probe", [source], argtypes, "no probe").answer() == 42
    assert broken.stat().st_size > 100                              # the library, built again


@KERNEL
def test_cpu_backend_falls_back_where_the_kernel_does_not_apply():
    "bfloat16, a head size of 80 or a non-contiguous cache: the torch path, same answers; the kernel's check refuses."
    be = get_attn_backend("cpu", "cpu")
    run_step(be, [1, 5, 1], [30, 0, 7], torch.bfloat16, num_kv_heads=2, qpk=2)
    run_step(be, [1, 5, 1], [30, 0, 7], torch.float32, num_kv_heads=2, qpk=2, head_dim=80)
    query, key, value, cache, md = make_paged_batch([1, 3], [20, 5], num_kv_heads=2, qpk=2)
    assert cpu_attention_supported(query, cache, md)
    assert not cpu_attention_supported(query.to(torch.bfloat16), cache, md)
    assert not cpu_attention_supported(query, cache.transpose(0, 1).contiguous().transpose(0, 1), md)



OP = pytest.mark.skipif(cpu_attn_op_library() is None, reason="the C++ op did not build (compiler, torch headers)")


@OP
@settings(max_examples=30, deadline=None)
@given(**RANDOM_BATCHES)
def test_cpu_layer_attention_op_writes_and_attends_like_the_reference(reqs, block_size, qpk, d, share, pad, seed):
    "The C++ op reads the step from the forward context: the reference's write, then the reference on every row."
    query, key, value, cache, md = random_batch(reqs, block_size, qpk, d, share, pad, seed)
    ref_cache = cache.clone()
    reshape_and_cache_ref(key, value, ref_cache, md.slot_mapping)
    with set_forward_context(md, get_attn_backend("cpu", "cpu")):
        out = torch.ops.minivllm.cpu_layer_attention(query, key, value, cache, d ** -0.5)
    assert torch.equal(cache, ref_cache)
    torch.testing.assert_close(out, paged_attention_ref(query, ref_cache, md, d ** -0.5), atol=1e-5, rtol=1e-5)


@OP
def test_cpu_layer_attention_op_refuses_what_it_cannot_read():
    "No step published (no pass, another backend's, another layout, a pass ended), rows of another kind or count, a slot outside."
    query, key, value, cache, md = make_paged_batch([1, 3], [20, 5], num_kv_heads=2, qpk=2, pad=1)
    op, before = torch.ops.minivllm.cpu_layer_attention, cache.clone()
    with pytest.raises(RuntimeError, match="no step published"): op(query, key, value, cache, 0.125)
    with set_forward_context(md, get_attn_backend("torch", "cpu")):
        with pytest.raises(RuntimeError, match="no step published"): op(query, key, value, cache, 0.125)
    wide = dataclasses.replace(md, seq_lens=md.seq_lens.long())     # not the kernels' int32 rows
    with set_forward_context(wide, get_attn_backend("cpu", "cpu")):
        with pytest.raises(RuntimeError, match="no step published.*int32 rows"):
            op(query, key, value, cache, 0.125)
    with set_forward_context(md, get_attn_backend("cpu", "cpu")):
        for q in (query.bfloat16(), query[:-1], query.transpose(1, 2)):
            with pytest.raises(RuntimeError, match="must be float32 rows"): op(q, key, value, cache, 0.125)
        md.slot_mapping[0] = cache.shape[0] * cache.shape[2]                 # num_blocks * block_size
        with pytest.raises(RuntimeError, match="outside the cache"): op(query, key, value, cache, 0.125)
    assert torch.equal(cache, before)
    with pytest.raises(RuntimeError, match="no step published"): op(query, key, value, cache, 0.125)

# ---------------------------------------------------------------- CUDA-graph padding and launch rules
@pytest.mark.parametrize("kernel", ["split_kv", "unified", "torch", "cpu"])
@pytest.mark.parametrize("pad_seq_len", [0, 1])
def test_padded_decode_rows_do_not_disturb_real_rows(kernel, pad_seq_len):
    "A decode batch padded as a CUDA graph pads it (slot -1, seq_len 0 or 1 on a real block) gives the real rows"
    " the unpadded answer, and writes nothing for the padding."
    dev = "cuda" if CUDA and kernel not in ("torch", "cpu") else "cpu"
    q, k, v, cache, md = make_paged_batch([1] * 3, [5, 40, 17], num_kv_heads=2, qpk=3, device=dev, seed=5)
    ref_cache = cache.clone()
    reshape_and_cache_ref(k, v, ref_cache, md.slot_mapping)
    real = paged_attention_ref(q.cpu(), ref_cache.cpu(), _to_cpu(md), 0.125)
    P = 3                                                     # padding rows: the graph's batch is 6
    qp = torch.cat([q, torch.randn(P, *q.shape[1:], device=dev)])
    kp, vp = (torch.cat([x, torch.randn(P, *x.shape[1:], device=dev)]) for x in (k, v))
    i32 = dict(dtype=torch.int32, device=dev)
    mdp = AttentionMetadata(torch.arange(7, **i32), torch.cat([md.seq_lens, torch.full((P,), pad_seq_len, **i32)]),
                            torch.cat([md.block_table, md.block_table[:1].expand(P, -1)]),   # a real block
                            torch.cat([md.slot_mapping, torch.full((P,), -1, dtype=torch.int64, device=dev)]),
                            1, int(md.seq_lens.max()))
    be = get_attn_backend(kernel if kernel in ("torch", "cpu") else "triton", dev)
    be.write_kv(kp, vp, cache, mdp.slot_mapping)
    assert torch.equal(cache, ref_cache)                      # padding wrote nothing
    f = dict(unified=unified_attention, split_kv=split_kv_decode_attention, torch=torch_paged_attention,
             cpu=be.forward)[kernel]
    out = f(qp, cache, mdp, 0.125)
    torch.testing.assert_close(out[:3].cpu(), real, atol=1e-4, rtol=1e-4)
    if pad_seq_len == 0: assert out[3:].abs().sum() == 0 and torch.isfinite(out).all()


def test_split_kv_workspace_is_allocated_once():
    "Decode steps reuse one scratch buffer: nothing is allocated per call (a CUDA graph replays its pointers)."
    import minivllm.attention.backends.triton_attn as A
    dev = "cuda" if CUDA else "cpu"
    q, k, v, cache, md = make_paged_batch([1] * 4, [3, 60, 17, 9], num_kv_heads=2, qpk=2, device=dev)
    split_kv_decode_attention(q, cache, md, 0.125)
    ws = A._split_kv_workspace(q.device, 4, 4, 2, 64)
    assert ws[1].shape[0] == A.SPLIT_KV_MAX_PROGRAMS // 2      # sized for the largest batch dispatched here
    q2, k2, v2, cache2, md2 = make_paged_batch([1] * 7, [5] * 7, num_kv_heads=2, qpk=2, device=dev, seed=1)
    split_kv_decode_attention(q2, cache2, md2, 0.125)
    assert A._split_kv_workspace(q.device, 7, 4, 2, 64)[0].data_ptr() == ws[0].data_ptr()


def test_launch_rules_are_checked():
    from minivllm.attention.backends.triton_attn import (KernelConfig, check_dot_shapes,
        kernel_config)
    assert kernel_config("prefill", torch.float32, 128) == KernelConfig(32, 16, 4)
    assert kernel_config("decode", torch.bfloat16, 64).block_m == 16
    with pytest.raises(ValueError, match="tl.dot needs >= 16"): kernel_config("decode", torch.float16, 8)
    with pytest.raises(ValueError, match="TILE = 8: tl.dot needs"): check_dot_shapes(16, 8, 64)
    with pytest.raises(ValueError, match="power of two"): check_dot_shapes(48, 16, 64)
    q, k, v, cache, md = make_paged_batch([2], [3], num_kv_heads=1, qpk=2, head_dim=64)
    with pytest.raises(ValueError, match="BLOCK_M = 8"): unified_attention(q, cache, md, 0.1, config=KernelConfig(8, 16, 4))


# ---------------------------------------------------------------- interface
def test_get_attn_backend(monkeypatch):
    assert get_attn_backend("auto", "cpu").name == ("cpu" if cpu_attn_library() else "torch")
    assert get_attn_backend("torch").name == "torch"
    assert get_attn_backend("auto").name == ("triton" if CUDA else "cpu" if cpu_attn_library() else "torch")
    monkeypatch.setattr("minivllm.attention.selector.cpu_attn_library", lambda: None)   # no compiler
    assert get_attn_backend("auto", "cpu").name == "torch"
    with pytest.raises(ValueError, match="valid: auto, cpu, torch, triton"):
        get_attn_backend("flashinfer")


# ---------------------------------------------------------------- native GPU only
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("qpk", [1, 3, 4])
def test_triton_native_grid(dtype, block_size, d, qpk):
    run_step(get_attn_backend("triton", "cuda"), MIXED_Q, MIXED_CTX, dtype, device="cuda", block_size=block_size,
             num_kv_heads=2, qpk=qpk, head_dim=d, share_prefix=1, pad=3, seed=qpk)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_triton_native_fp32_is_ieee():
    run_step(get_attn_backend("triton", "cuda"), MIXED_Q, MIXED_CTX, torch.float32, device="cuda", num_kv_heads=2, qpk=3)


GPU_CHECK = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"


@pytest.mark.skipif(CUDA, reason="on a GPU the native tests compile and run the kernels")
def test_every_kernel_config_compiles_for_sm90_without_spills(tmp_path):
    """Every entry of KERNEL_CONFIGS (and the reduce and write kernels) compiles for sm_90 on a CPU with
    the pinned Triton, 0 bytes spilled: the GPU check's stage k (`make gpu-rehearsal` runs it with
    the device's Triton)."""
    import json, os, subprocess, sys
    try:
        from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
    except Exception:
        pytest.skip("triton's CUDA backend is not installed")
    # as gpu_check.sh runs it: Triton imported as a compiler (this process set TRITON_INTERPRET=1,
    # under which a kernel not yet in Triton's cache fails to compile)
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, str(GPU_CHECK), "k", "--work", str(tmp_path), "--budget", "900"],
                       capture_output=True, text=True, timeout=1200, env=env)
    items = json.loads((tmp_path / "k.json").read_text())["items"]
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert len(items) == 39 and all(v["spilled_bytes"] == 0 for v in items.values()), items


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_kernels_launch_on_the_tensors_device():
    "Tensors on cuda:1 while torch's current device is cuda:0: the kernels must run on cuda:1."
    torch.cuda.set_device(0)
    run_step(get_attn_backend("triton", "cuda:1"), MIXED_Q, MIXED_CTX, torch.bfloat16, device="cuda:1",
             num_kv_heads=2, qpk=3, pad=3)
    run_step(get_attn_backend("triton", "cuda:1"), [1] * 4, [5, 40, 17, 3], torch.bfloat16, device="cuda:1",
             num_kv_heads=2, qpk=3)                                   # split-KV decode
