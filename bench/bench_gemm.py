"""The linear layers' products on a CPU: `F.linear` (MKL), oneDNN plain or packed, our kernel and the compiled loop.

Weights shaped like SmolLM2-135M's 30 layers (qkv 960x576, o 576x576, gate_up 3072x576, down 576x1536, float32,
about 425 MB, more than any cache), each multiplied by an input of M rows, for M from 1 (a decode of one request) to
256 (a prefill chunk or a large decode batch). Prints milliseconds for all 120 products, the weight bytes read per
second and oneDNN's speed-up over `F.linear`; then oneDNN on the weights packed once in its own layout (as
`dispatch_cpu_unquantized_gemm` packs them, vLLM's), in GFLOP/s, and its speed-up over the plain weights; then,
where it builds (AVX-512), our kernel on the same weights in its panels (`cpu_gemm`, which the engine uses for up to
`CPU_GEMM_MAX_ROWS` rows) and its speed-up over oneDNN's packed product, its panels in one block on huge pages as
the engine keeps them (`panels_on_huge_pages`), and the same panels on ordinary 4 KiB pages (where `pack_panels`
allocates them) with the huge pages' speed-up over them; all measured in the same run. With
`--compile` also the one-row product written as `(weight * x).sum(-1)` under
`torch.compile` (the branch `unquantized_gemm` takes inside a compiled graph), all in one compiled graph.

    python bench/bench_gemm.py [--threads N] [--rows 1 2 4 8 32 64 128 256] [--compile]
"""
import argparse
import time
import types

import torch
import torch.nn.functional as F

from minivllm.model_executor.model_loader import huge_page_views
from minivllm._custom_ops import cpu_gemm, cpu_gemm_library, pack_panels
from minivllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]   # SmolLM2-135M: qkv, o, gate_up, down
LAYERS = 30


def packed_copy(weight):
    "`weight` in oneDNN's packed layout, packed as the engine packs a layer's weight."
    layer = types.SimpleNamespace(weight=weight)
    dispatch_cpu_unquantized_gemm(layer)
    return layer.packed_weight


def best_ms(fn, repeat=5):
    "Smallest wall time of `fn()` in milliseconds, after one warm-up call."
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="default: torch's, every core")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 32, 64, 128, 256], help="must include 1")
    ap.add_argument("--compile", action="store_true", help="also time the compiled one-row loop")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    weights = [torch.randn(shape) for _ in range(LAYERS) for shape in SHAPES]
    gb = sum(w.numel() * w.element_size() for w in weights) / 1e9
    onednn = torch.ops.mkldnn._linear_pointwise
    print(f"{len(weights)} products over {gb * 1e3:.0f} MB of float32 weights, {args.threads} threads")
    packed = [packed_copy(w) for w in weights]
    small_pages = [pack_panels(w) for w in weights] if cpu_gemm_library() else None
    panels = small_pages and [view.copy_(p) for view, p in zip(huge_page_views(small_pages), small_pages)]
    print(f"{'rows':>5} {'F.linear ms':>12} {'GB/s':>6} {'oneDNN ms':>10} {'GB/s':>6} {'speed-up':>9} "
          f"{'packed ms':>10} {'GFLOP/s':>8} {'vs plain':>9}"
          + (f" {'ours ms':>8} {'GFLOP/s':>8} {'vs packed':>10} {'4 KiB ms':>9} {'huge':>6}" if panels else ""))
    for m in args.rows:
        xs = {k: torch.randn(m, k) for k in {w.shape[1] for w in weights}}
        t_mkl = best_ms(lambda: [F.linear(xs[w.shape[1]], w) for w in weights])
        t_dnn = best_ms(lambda: [onednn(xs[w.shape[1]], w, None, "none", [], "") for w in weights])
        t_pack = best_ms(lambda: [onednn(xs[w.shape[1]], p, None, "none", [], "")
                                  for w, p in zip(weights, packed)])
        if m == 1: t_mkl_1 = t_mkl
        gflop = 2 * m * gb / 4          # 2 flops per weight and row; 4 bytes per weight
        ours = ""
        if panels:
            t_ours = best_ms(lambda: [cpu_gemm(xs[w.shape[1]], p) for w, p in zip(weights, panels)])
            t_small = best_ms(lambda: [cpu_gemm(xs[w.shape[1]], p) for w, p in zip(weights, small_pages)])
            ours = (f" {t_ours:>8.1f} {gflop / t_ours * 1e3:>8.1f} {t_pack / t_ours:>9.2f}x"
                    f" {t_small:>9.1f} {t_small / t_ours:>5.2f}x")
        print(f"{m:>5} {t_mkl:>12.1f} {gb / t_mkl * 1e3:>6.1f} {t_dnn:>10.1f} {gb / t_dnn * 1e3:>6.1f} "
              f"{t_mkl / t_dnn:>8.2f}x {t_pack:>10.1f} {gflop / t_pack * 1e3:>8.1f} {t_dnn / t_pack:>8.2f}x"
              + ours, flush=True)
    if args.compile:   # all 120 one-row products in one compiled graph, as in the model's compiled decode
        @torch.compile
        def all_layers(x, y, ws):
            return [(w * (y if w.shape[1] == y.shape[1] else x)).sum(-1) for w in ws]
        x, y = torch.randn(1, 576), torch.randn(1, 1536)
        t_gemv = best_ms(lambda: all_layers(x, y, weights))
        print(f"    1 row, compiled (weight * x).sum(-1), one graph: {t_gemv:.1f} ms, "
              f"{gb / t_gemv * 1e3:.1f} GB/s, {t_mkl_1 / t_gemv:.2f}x F.linear")

if __name__ == "__main__":
    main()
