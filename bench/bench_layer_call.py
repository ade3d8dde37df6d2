"""Two ways to call a compiled decoder layer: the stock way (TorchDynamo, guards) and the engine's.

The engine compiles its layers ahead of time without guards (`aot_compiled`: `torch.compile(...).aot_compile`,
as vLLM's AOT compile) and calls the result directly, its guard check off, so TorchDynamo's frame evaluation
and guards are skipped at every call. This builds the default engine, compiles another copy of the layer's
forward the stock way (guards checked at every call), makes it the compiled model's one-row layer call
(`TorchCompileWithNoGuardsWrapper.one_row`) in turn with the engine's, and alternates the two in one process: microseconds
per one-row layer call (caches warm: the same layer again and again), then milliseconds per token of a single
stream (128 greedy tokens), each the median and best of `--repeat` rounds, and the median of the paired
differences against the stock way. Run it alone: another process on the cores moves the token times by more
than the differences.
Usage: python bench/bench_layer_call.py [--repeat 9]
"""
import argparse
import random
import statistics
import time
import types

import torch

from minivllm.entrypoints.llm import LLM
from minivllm.forward_context import set_forward_context
from minivllm.model_executor.model_loader import default_model_path
from minivllm.compilation.wrapper import padding_decode_metadata
from minivllm.sampling_params import SamplingParams


def decode_inputs(llm, n):
    "A layer's inputs for `n` decode tokens (padding slots, as the warm-up's) and their attention metadata."
    model = llm.model
    x, residual = torch.randn(2, n, model.config.hidden_size)
    positions = torch.zeros(n, dtype=torch.int64)
    inputs = (x, residual, positions, model.model.rotary_emb(positions), model.kv_caches[0])
    return inputs, padding_decode_metadata(n)


def compile_as_before(fn, layer, llm):
    "Compile `fn`'s graphs as the engine did with guards: 2+ rows (token count dynamic), then one row."
    for n in (2, 1):
        inputs, metadata = decode_inputs(llm, n)
        if n > 1:
            for t in (*inputs[:3], *inputs[3]): torch._dynamo.mark_dynamic(t, 0)
        with torch.no_grad(), set_forward_context(metadata, llm.model.attn_backend): fn(layer, *inputs)


def single_stream_ms(llm, variants: dict, repeat: int) -> dict:
    """Ms a token of a single stream (128 greedy tokens after a 26-token prompt) with each of `variants` as every
    one-token layer call, alternated round by round, in either order; a first round checks they give the same
    tokens (the prompt's step runs the engine's graph of 2+ tokens in all)."""
    compiled = llm.engine_core.model_executor.model          # the TorchCompileWithNoGuardsWrapper
    engines = compiled.one_row
    rng = random.Random(32)
    prompt = [[rng.randrange(100, 49152) for _ in range(26)]]
    params = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
    tokens = {name: [] for name in variants}
    for round in range(repeat + 1):
        outs = []
        for name, fn in (reversed(variants.items()) if round % 2 else variants.items()):
            compiled.one_row = fn
            llm.reset_prefix_cache()
            t = time.perf_counter()
            outs.append(llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids)
            if round: tokens[name].append((time.perf_counter() - t) / 128 * 1e3)
        assert all(out == outs[0] for out in outs), "the variants gave different tokens"
    compiled.one_row = engines
    return tokens


def summary(times, unit):
    return f"median {statistics.median(times):.2f} {unit}, best {min(times):.2f} {unit}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    llm = LLM(default_model_path(), num_gpu_blocks=256, block_size=16)
    layers = llm.model.model.layers
    step = type(layers[0]).forward
    guarded = torch.compile(types.FunctionType(step.__code__.replace(), step.__globals__, step.__name__))
    variants = {"TorchDynamo, guards": guarded,
                "compiled ahead of time, no guards (the engine)": llm.engine_core.model_executor.model.one_row}
    compile_as_before(guarded, layers[0], llm)
    inputs, metadata = decode_inputs(llm, 1)
    calls = {name: [] for name in variants}
    with torch.no_grad(), set_forward_context(metadata, llm.model.attn_backend):
        for _ in range(args.repeat):
            for name, fn in variants.items():
                t = time.perf_counter()
                for _ in range(200): fn(layers[0], *inputs)
                calls[name].append((time.perf_counter() - t) / 200 * 1e6)
    for name, times in calls.items(): print(f"one-row layer call {name}: {summary(times, 'us')}")

    tokens = single_stream_ms(llm, variants, args.repeat)
    stock = tokens.pop("TorchDynamo, guards")
    print(f"single stream, TorchDynamo, guards: {summary(stock, 'ms')} a token")
    for name, times in tokens.items():
        saved = statistics.median(a - b for a, b in zip(stock, times))
        print(f"single stream, {name}: {summary(times, 'ms')} a token, {saved:.2f} ms less (paired median)")


if __name__ == "__main__":
    main()
