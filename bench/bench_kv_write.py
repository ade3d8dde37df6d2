"""The CPU backend's KV write per layer, torch path vs the C++ op, as in a decode step (not a test).

One decode token of the default model's shape (3 KV heads of 64) written into each of 30 layers'
caches in turn, with 14 MB read between two writes (what the default model streams per layer), so
each write finds its cache out of the CPU's caches, as in a running model. Prints microseconds per
write, the best and median of `--repeat` rounds.
Usage: python bench/bench_kv_write.py [--repeat 5] [--layers 30] [--between-mb 14]
"""
import argparse
import statistics
import time

import torch

from minivllm.attention.backends.cpu_attn import CPUAttentionBackend
from minivllm.attention.backends.triton_attn import TorchAttentionBackend


def per_write_us(backend, caches, key, value, between, steps=20):
    "Mean microseconds of one `write_kv`, over `steps` steps of one write per cache."
    total = 0
    for step in range(steps):
        slots = torch.tensor([step * 7 + 3])                   # a new step, a new slot
        for cache in caches:
            between.sum()                                      # the weights of a layer, streamed
            t = time.perf_counter_ns()
            backend.write_kv(key, value, cache, slots)
            total += time.perf_counter_ns() - t
    return total / (steps * len(caches)) / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--between-mb", type=float, default=14)
    args = ap.parse_args()
    kv_heads, head_dim = 3, 64
    caches = [torch.zeros(256, 2, 16, kv_heads, head_dim) for _ in range(args.layers)]
    between = torch.randn(int(args.between_mb * 2**20) // 4)
    qkv = torch.randn(1, 15 * head_dim)                        # [q (9 heads); k; v], one token
    key, value = (qkv[:, i * 192:(i + 1) * 192].view(1, kv_heads, head_dim) for i in (3, 4))
    backends = {"torch path": TorchAttentionBackend(), "C++ op (cpu backend)": CPUAttentionBackend()}
    times = {name: [] for name in backends}
    for _ in range(args.repeat):                               # interleaved rounds
        for name, backend in backends.items():
            times[name].append(per_write_us(backend, caches, key, value, between))
    for name, ts in times.items():
        print(f"{name:22s} best {min(ts):5.1f} us, median {statistics.median(ts):5.1f} us per write")


if __name__ == "__main__":
    main()
