"""The C++ decode attention kernel of chapter 12 against another checkout's, on the same decode rows.

Builds the kernel library from this checkout's source (`minivllm/csrc/cpu/attention.cpp`) and from the one in
`--compare-tree` (e.g. `git worktree add /tmp/before HEAD~1`), then alternates the two on one decode row of SmolLM2's shape
(9 query heads over 3 KV heads, head size 64, 16-token blocks in random order) at several lengths of
history: microseconds a call (the best of `--repeat` rounds of 2000 calls), the ratio, and the largest
difference between the two outputs, on one thread. Then the same on caches as a model leaves them: 30
layers' caches of 1024 blocks each, 48 MB written between two calls (the weights a model reads between two
layers evict the cache's lines), at the machine's thread count, for 1, 4 and 32 decode rows. Run it alone.
Usage: python bench/bench_cpu_attn_kernel.py --compare-tree OTHER_CHECKOUT [--repeat 5]
"""
import argparse
import ast
import ctypes
import tempfile
import time
from pathlib import Path

import torch

from minivllm import _custom_ops as ops


def source_of(tree: Path) -> Path:
    """That checkout's kernel source, read (not imported): its `csrc/cpu/attention.cpp`, or (older checkouts)
    `CPU_VEC_SOURCE` and `CPU_ATTN_SOURCE` in its cpu_attn.py, written out as one file."""
    cpp = tree / "minivllm/csrc/cpu/attention.cpp"
    if cpp.exists(): return cpp
    module = ast.parse((tree / "minivllm/attention/backends/cpu_attn.py").read_text())
    strings = {node.targets[0].id: ast.literal_eval(node.value) for node in module.body
               if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None)
               in ("CPU_VEC_SOURCE", "CPU_ATTN_SOURCE")}
    path = Path(tempfile.mkdtemp()) / "attention.cpp"
    path.write_text(strings.get("CPU_VEC_SOURCE", "") + strings["CPU_ATTN_SOURCE"])
    return path


def kernel_of(source: Path):
    """That source's kernel as the engine builds it, called alike: older kernels took `max_query_len` (the rows of
    requests with at most that many queries were theirs) before the thread count; all rows here."""
    fn = ops.cpu_attn_library((source,)).cpu_attention_with_kv_cache
    if "int64_t max_query_len" not in source.read_text(): return fn
    fn.argtypes = [*fn.argtypes[:-1], ctypes.c_int64, ctypes.c_int64]
    return lambda *args: fn(*args[:-1], 1 << 30, args[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare-tree", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    blocks, block_size, heads, kv_heads, dim = 64, 16, 9, 3, 64
    torch.manual_seed(0)
    kv = torch.randn(blocks, 2, block_size, kv_heads, dim)
    query = torch.randn(1, heads, dim)
    table = torch.randperm(blocks, dtype=torch.int32)[None].contiguous()
    starts = torch.tensor([0, 1], dtype=torch.int32)
    kernels = {name: kernel_of(source)
               for name, source in (("this checkout", ops.CSRC / "attention.cpp"),
                                    (str(args.compare_tree), source_of(args.compare_tree)))}
    print(f"one decode row, {heads} query heads over {kv_heads} KV heads, head size {dim}, 1 thread")
    for n in (16, 150, 500, 1000):
        seq_lens = torch.tensor([n], dtype=torch.int32)
        calls, outs, times = {}, {}, {}
        for name, fn in kernels.items():
            out = torch.empty_like(query)
            calls[name] = (query.data_ptr(), query.stride(0), kv.data_ptr(), out.data_ptr(),
                           starts.data_ptr(), seq_lens.data_ptr(), table.data_ptr(), blocks, 1, 1,
                           heads, kv_heads, dim, block_size, dim ** -0.5, 1)
            fn(*calls[name])
            outs[name], times[name] = out, []
        for _ in range(args.repeat):                    # the two alternated, round by round
            for name, fn in kernels.items():
                t = time.perf_counter()
                for _ in range(2000): fn(*calls[name])
                times[name].append((time.perf_counter() - t) / 2000 * 1e6)
        new, old = (min(t) for t in times.values())
        diff = (outs["this checkout"] - outs[str(args.compare_tree)]).abs().max().item()
        print(f"{n:5d} keys: {new:7.2f} us against {old:7.2f} us ({old / new:.2f}x), "
              f"outputs differ by at most {diff:.1e}")
    cold(kernels, args.repeat)


def cold(kernels, repeat, layers=30, blocks=1024, block_size=16, heads=9, kv_heads=3, dim=64):
    "Both kernels on decode rows whose KV lines are not in the CPU's caches: us a call, the best round."
    threads = torch.get_num_threads()
    print(f"decode rows on evicted caches ({layers} layers' caches, 48 MB written between calls), "
          f"{threads} threads")
    caches = [torch.randn(blocks, 2, block_size, kv_heads, dim) for _ in range(layers)]
    evict = torch.zeros(48 * 2 ** 20 // 4)
    for rows, n in ((1, 90), (1, 400), (4, 200), (32, 170)):
        per_row = (n + block_size - 1) // block_size
        table = torch.randperm(blocks, dtype=torch.int32)[:rows * per_row].view(rows, per_row).contiguous()
        starts = torch.arange(rows + 1, dtype=torch.int32)
        seq_lens = torch.full((rows,), n, dtype=torch.int32)
        query = torch.randn(rows, heads, dim)
        outs = {name: torch.empty_like(query) for name in kernels}
        times = {name: float("inf") for name in kernels}
        for _ in range(repeat):                            # the two alternated, round by round
            for name, fn in kernels.items():
                spent = 0.0
                for cache in caches:
                    evict.add_(1.0)
                    t = time.perf_counter()
                    fn(query.data_ptr(), query.stride(0), cache.data_ptr(), outs[name].data_ptr(),
                       starts.data_ptr(), seq_lens.data_ptr(), table.data_ptr(), per_row, rows, rows,
                       heads, kv_heads, dim, block_size, dim ** -0.5, threads)
                    spent += time.perf_counter() - t
                times[name] = min(times[name], spent / layers * 1e6)
        (new, old), (a, b) = times.values(), outs.values()
        diff = (a - b).abs().max().item()
        print(f"{rows:3d} rows of {n:3d} keys: {new:7.1f} us against {old:7.1f} us ({old / new:.2f}x), "
              f"outputs differ by at most {diff:.1e}")


if __name__ == "__main__":
    main()
