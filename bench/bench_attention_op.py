"""One-token steps with attention through Python or through the C++ op: a single stream's tokens, in one process.

A compiled layer calls attention as an op in the middle of its graph. Through `minivllm::layer_attention` the
dispatcher calls back into Python (the forward context, the checks, two `ctypes` calls); through
`minivllm::cpu_layer_attention` (chapter 12) it stays in C++, the step's metadata published once per forward pass.
This builds the default engine (whose one-token graphs call the C++ op), compiles the same one-token graph again
with the Python op (as the engine did before), and alternates the two in one process: milliseconds per token of a
single stream (128 greedy tokens after a 26-token prompt), the median and best of `--repeat` rounds, and the median
of the paired differences. Steps of 2+ tokens (the prefill) run the same graph in both. Run it alone: another
process on the cores moves the token times by more than the difference.
Usage: python bench/bench_attention_op.py [--repeat 9]
"""
import argparse
import statistics

from bench_layer_call import single_stream_ms
from minivllm.entrypoints.llm import LLM
import torch

from minivllm.compilation.caching import aot_compiled
from minivllm.compilation.compiler_interface import compile_cache_dir
from minivllm.compilation.wrapper import direct_call, layer_example, probe_like
from minivllm.model_executor.layers.attention.attention import layer_attention_op
from minivllm.model_executor.model_loader import default_model_path


def python_op_one_row(llm):
    "The one-token layer call with its graph compiled to call attention through Python (the op before)."
    model, layers = llm.model, llm.model.model.layers
    kv, cpp = model.kv_caches[0], layers[0].self_attn.attn.compiled_op
    for layer in layers: layer.self_attn.attn.compiled_op = layer_attention_op
    try:
        one_row = aot_compiled(type(layers[0]).forward, layers[0], layer_example(model, 1),
                               (1, (kv.shape[1:], kv.dtype, kv.device)), compile_cache_dir())
        with torch.no_grad():
            return direct_call(one_row, layers[0], probe_like(layer_example(model, 1)), model.attn_backend)
    finally:
        for layer in layers: layer.self_attn.attn.compiled_op = cpp


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    llm = LLM(default_model_path(), num_gpu_blocks=256, block_size=16)
    layers = llm.model.model.layers
    assert layers[0].self_attn.attn.compiled_op is torch.ops.minivllm.cpu_layer_attention, \
        "the C++ op did not build here: nothing to compare"
    variants = {"attention op in Python": python_op_one_row(llm),
                "attention op in C++ (the engine)": llm.engine_core.model_executor.model.one_row}
    tokens = single_stream_ms(llm, variants, args.repeat)
    python, cpp = tokens.values()
    for name, times in tokens.items():
        print(f"single stream, {name}: median {statistics.median(times):.2f} ms, best {min(times):.2f} ms a token")
    saved = statistics.median(a - b for a, b in zip(python, cpp))
    print(f"the C++ op saves {saved:.2f} ms a token (paired median), {saved / statistics.median(python):.1%}")


if __name__ == "__main__":
    main()
