"""Time paged attention backends against torch SDPA on the same shapes (not a test).

On a GPU: the Triton backend vs torch SDPA over contiguous, unpaged K/V (decode rows also time
the 2D and split-KV kernels separately).
On a CPU: the torch backend vs the per-request reference vs dense SDPA (one thread by default).
Usage: python bench/bench_attention.py [--threads N] [--dtype float16] [--heads 9,3] [--head-dim 64]
"""
import argparse
import os
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
import torch.nn.functional as F

from minivllm.attention.selector import get_attn_backend
from minivllm.attention.backends.triton_attn import (paged_attention_ref,
    split_kv_decode_attention, unified_attention)
from minivllm.testing.attention import make_paged_batch


def timeit(f, dev, reps=None):
    "Median wall time of f() in ms."
    f()
    if dev == "cuda": torch.cuda.synchronize()
    reps = reps or (50 if dev == "cuda" else 10)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        if dev == "cuda": torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2] * 1e3


def dense_sdpa(q_lens, ctx_lens, hq, hkv, d, dtype, dev):
    "SDPA over contiguous K/V, padded to [batch, heads, max_len]: what paging is compared to."
    B, mq, ml = len(q_lens), max(q_lens), max(q + c for q, c in zip(q_lens, ctx_lens))
    Q = torch.randn(B, hq, mq, d, dtype=dtype, device=dev)
    K, V = (torch.randn(B, hkv, ml, d, dtype=dtype, device=dev) for _ in range(2))
    causal = mq == ml and mq > 1
    return lambda: F.scaled_dot_product_attention(Q, K, V, is_causal=causal, enable_gqa=hq != hkv)


def cases(gpu):
    s = 8 if gpu else 1
    return [("decode 4 @ ctx 2000", [1] * 4, [2000] * 4),
            ("decode 32 @ ctx 100", [1] * 32, [100] * 32),
            ("decode 32 @ ctx 500", [1] * 32, [500] * 32),
            (f"decode {32 * s} @ ctx {512 * s}", [1] * 32 * s, [512 * s] * 32 * s),
            ("prefill 32 x 20", [20] * 32, [0] * 32),
            (f"prefill {4 * s} x {512 * s // 2}", [512 * s // 2] * 4 * s, [0] * 4 * s),
            ("1 x 300 + 31 decodes", [300] + [1] * 31, [0] + [150] * 31),
            ("chunk 256 after 1024 + 16 decodes", [256] + [1] * 16, [1024] + [300] * 16)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default=None, help="default: float16 on GPU, float32 on CPU")
    ap.add_argument("--heads", default="9,3", help="num_heads,num_kv_heads (default SmolLM2-135M)")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=16)
    a = ap.parse_args()
    gpu = torch.cuda.is_available()
    dev = "cuda" if gpu else "cpu"
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype or ("float16" if gpu else "float32"))
    hq, hkv = map(int, a.heads.split(","))
    be = get_attn_backend("auto", dev)
    print(f"device={dev} backend={be.name} dtype={dtype} heads={hq}/{hkv} head_dim={a.head_dim} "
          f"block_size={a.block_size} threads={a.threads}")
    hdr = f"{'case':36s} {'backend ms':>11s} {'SDPA ms':>9s} {'ratio':>7s}" + ("" if gpu else f" {'ref ms':>8s} {'ref/backend':>11s}")
    print(hdr)
    for name, ql, cl in cases(gpu):
        q, k, v, cache, md = make_paged_batch(ql, cl, block_size=a.block_size, num_kv_heads=hkv, qpk=hq // hkv,
                                              head_dim=a.head_dim, dtype=dtype, device=dev)
        be.write_kv(k, v, cache, md.slot_mapping)
        scale = a.head_dim ** -0.5
        tb = timeit(lambda: be.forward(q, cache, md, scale), dev)
        ts = timeit(dense_sdpa(ql, cl, hq, hkv, a.head_dim, dtype, dev), dev)
        line = f"{name:36s} {tb:11.3f} {ts:9.3f} {tb / ts:7.2f}"
        if not gpu:
            tr = timeit(lambda: paged_attention_ref(q, cache, md, scale), dev, reps=3)
            line += f" {tr:8.2f} {tr / tb:11.2f}"
        elif md.max_query_len == 1:  # both Triton decode paths, whichever the backend picked
            t2 = timeit(lambda: unified_attention(q, cache, md, scale), dev)
            t3 = timeit(lambda: split_kv_decode_attention(q, cache, md, scale), dev)
            line += f"   (2D {t2:.3f} ms, split-KV {t3:.3f} ms)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
