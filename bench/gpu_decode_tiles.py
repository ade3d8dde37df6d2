"""Decode attention at batch 256 against the copy bandwidth, per kernel configuration (one GPU).

The GPU check's batch-256 decode step is the one speed goal that reads mostly KV cache (1,000-token
contexts): this times chapter 12's two decode kernels alone on that batch, for SmolLM2-135M's and
Qwen3-0.6B's attention shapes (bf16, 16-token blocks), for each TILE and warp count, and prints the
bandwidth each reaches as a share of the device-to-device copy bandwidth measured in the same run.
Every configuration's output is checked against the table's configuration.

    python bench/gpu_decode_tiles.py [--out results.json]

Without a GPU it runs at toy size under the Triton interpreter (a rehearsal of the code path only).
"""
import argparse, json, os, sys, types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check  # noqa: E402  -- its timing and copy bandwidth, measured the same way here

GPU = None
SHAPES = {"SmolLM2-135M": (9, 3, 64), "Qwen3-0.6B": (16, 8, 128)}   # query heads, KV heads, head size
TILES, WARPS = (16, 32, 64, 128), (2, 4, 8)


def decode_batch(hq, hkv, d, batch, ctx, block_size=16):
    "A decode step's query, one layer's KV cache (random, bf16) and metadata: `batch` rows of `ctx` keys."
    import torch
    from minivllm.worker.utils import make_attn_metadata
    dev, dtype = ("cuda", torch.bfloat16) if GPU else ("cpu", torch.float32)
    per_req = -(-(ctx + 1) // block_size)
    cache = torch.randn(per_req * batch + 1, 2, block_size, hkv, d, dtype=dtype, device=dev)
    tables = [list(range(i * per_req, (i + 1) * per_req)) for i in range(batch)]
    _, md = make_attn_metadata(tables, [ctx] * batch, [1] * batch, block_size, dev)
    query = torch.randn(batch, hq, d, dtype=dtype, device=dev)
    return query, cache, md


def sweep(name, batch, ctx, bandwidth) -> list:
    from minivllm.attention.backends.triton_attn import (KernelConfig, kernel_config,
                                                          split_kv_decode_attention, unified_attention)
    hq, hkv, d = SHAPES[name]
    query, cache, md = decode_batch(hq, hkv, d, batch, ctx)
    scale = d ** -0.5
    kv_bytes = batch * (ctx + 1) * 2 * hkv * d * cache.element_size()
    rows = []
    for kernel, fn in (("unified", unified_attention), ("split_kv", split_kv_decode_attention)):
        table = kernel_config("decode" if kernel == "unified" else "split_kv", query.dtype, d)
        want = fn(query, cache, md, scale, config=table)
        for tile in TILES:
            for warps in WARPS:
                cfg = KernelConfig(table.block_m, tile, warps)
                row = {"model": name, "kernel": kernel, "tile": tile, "num_warps": warps,
                       "table": cfg == table}
                try:
                    err = (fn(query, cache, md, scale, config=cfg).float() - want.float()).norm() \
                        / want.float().norm()
                    s = gpu_check.time_fn(lambda: fn(query, cache, md, scale, config=cfg))
                    row.update(us=round(s * 1e6, 1), rel_err=float(err),
                               share_of_copy_bw=round(kv_bytes / s / bandwidth, 3))
                except Exception as e:   # noqa: BLE001  -- a configuration that does not compile or run
                    row["error"] = f"{type(e).__name__}: {e}"[:200]
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def main():
    global GPU
    import torch
    GPU = torch.cuda.is_available()
    if not GPU: os.environ.setdefault("TRITON_INTERPRET", "1")
    gpu_check.ARGS = types.SimpleNamespace(dry_run=not GPU)    # gpu_check's device and sizes
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write every row as JSON here")
    args = ap.parse_args()
    batch, ctx = (256, 1000) if GPU else (2, 40)
    bandwidth = gpu_check.copy_bandwidth()["bytes_per_s"]
    print(f"copy bandwidth {bandwidth / 1e12:.3f} TB/s; batch {batch}, context {ctx}", flush=True)
    rows = [r for name in SHAPES for r in sweep(name, batch, ctx, bandwidth)]
    for name in SHAPES:
        ok = [r for r in rows if r["model"] == name and "us" in r and r["rel_err"] < 2e-2]
        best = max(ok, key=lambda r: r["share_of_copy_bw"])
        table = [r for r in ok if r["table"] and r["kernel"] == "unified"]
        print(f"{name}: best {best}; the table's unified: {table}")
    if args.out:
        with open(args.out, "w") as f: json.dump({"copy_bytes_per_s": bandwidth, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
