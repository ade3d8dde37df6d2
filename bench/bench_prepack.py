"""Decode steps with and without the packed weight copies, alternated in one process.

`load_model` keeps every float32 product weight also in oneDNN's packed layout (`process_weights_after_loading`,
as vLLM does on a CPU) and, on an AVX-512 CPU, in our kernel's panels (`pack_panels`). This loads the default model
twice, drops both packed copies from one (its products of 2+ rows then read the plain weights, as before either
change), compiles both and alternates decode steps of 32 and of 1
request (K/V to padding slots, as the warm-up's) between them: the median milliseconds per step of each, per round,
and the ratio. Also prints how long packing the weights took, and checks that both models give the same logits.
Run it alone: another process on the cores moves the times by more than the difference.
Usage: python bench/bench_prepack.py [--rounds 3] [--steps 20]
"""
import argparse
import statistics
import time

import torch

from minivllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper, padding_decode_metadata
from minivllm.model_executor.model_loader import (default_model_path, load_model, make_kv_caches,
                                                  process_weights_after_loading)


def compiled_model(path, packed: bool):
    "The default model, compiled, with or without its packed weight copies (oneDNN's and our panels)."
    model = TorchCompileWithNoGuardsWrapper(load_model(path))
    if not packed:
        for module in model.modules():
            for name in ("packed_weight", "panel_weight"): vars(module).pop(name, None)
    model.bind_kv_caches(make_kv_caches(*model.kv_cache_spec(), 16, 16))
    assert model.compile()
    return model


def step_ms(model, n):
    "Milliseconds of one decode step of `n` requests, logits included."
    ids = positions = torch.zeros(n, dtype=torch.int64)
    t = time.perf_counter()
    with torch.no_grad(): model.compute_logits(model(ids, positions, padding_decode_metadata(n)))
    return (time.perf_counter() - t) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="steps per model and round")
    args = ap.parse_args()
    path = default_model_path()
    models = {"plain": compiled_model(path, packed=False), "packed": compiled_model(path, packed=True)}
    t = time.perf_counter(); process_weights_after_loading(models["packed"].unwrap())
    print(f"packing every product weight again: {time.perf_counter() - t:.2f} s; {torch.get_num_threads()} threads")
    ids = positions = torch.zeros(32, dtype=torch.int64)
    with torch.no_grad():
        plain, packed = (m.compute_logits(m(ids, positions, padding_decode_metadata(32))) for m in models.values())
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
    for n in (32, 1):
        for r in range(args.rounds):
            times = {k: [] for k in models}
            for i in range(args.steps):                     # alternated, each first in half the pairs
                for name in (models if i % 2 else reversed(models)): times[name].append(step_ms(models[name], n))
            plain, packed = (statistics.median(times[k]) for k in ("plain", "packed"))
            print(f"{n:>2} request{'s' * (n > 1)}, round {r + 1}: plain weights {plain:.1f} ms, packed {packed:.1f} ms "
                  f"({plain / packed:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
