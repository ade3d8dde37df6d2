"""Online serving benchmark on loopback: Poisson arrivals against `minivllm serve`'s API (not a test).

Starts an `AsyncLLM` and the OpenAI-compatible server in this process (uvicorn in a thread, 127.0.0.1, a free
port), then for each request rate, with the client of `minivllm bench serve`
(minivllm.benchmarks.serve, chapter 27), sends `--num-prompts` streaming `/v1/completions` requests whose arrival
gaps are exponential (a Poisson process), random token-id prompts of `--input-len` tokens, exactly
`--output-len` output tokens each (`ignore_eos`). Metrics follow `vllm bench serve`:

- TTFT: time from sending a request to its first streamed token;
- TPOT: per request, (latency - TTFT) / (output tokens - 1) -- the first token excluded;
- ITL: the gaps between consecutive streamed chunks, pooled over all requests;
- output throughput: all output tokens / benchmark duration (first send to last finish).

Prints mean / median / p90 / p99 per rate, writes bench/results/bench_serve.json and a figure of latency
against load, bench/results/bench_serve.png.

    nice python bench/bench_serve.py                       # embedded SmolLM2, rates 1 2 4 req/s
    nice python bench/bench_serve.py --tiny --rates 8 32 128 --num-prompts 200
"""
import argparse, asyncio, json, tempfile
from pathlib import Path

from minivllm.benchmarks.serve import metrics, random_requests, run_requests
from minivllm.engine.async_llm import AsyncLLM
from minivllm.testing.tiny_models import make_tiny_model
from minivllm.entrypoints.openai.api_server import build_app, serve_in_thread

RESULTS = Path(__file__).parent / "results"


def plot(rows, title):
    "Median and p99 of TTFT, TPOT and ITL against the request rate, and throughput."
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rates = [r["rate"] for r in rows]
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    for ax, key, name in zip(axes, ["ttft", "tpot", "itl"], ["TTFT", "TPOT", "ITL"]):
        for stat, style in [("median", "o-"), ("p99", "s--")]:
            ax.plot(rates, [r[f"{stat}_{key}_ms"] for r in rows], style, label=stat)
        ax.set_ylabel("ms"); ax.set_title(name); ax.legend(fontsize=8)
    axes[3].plot(rates, [r["output_throughput"] for r in rows], "o-")
    axes[3].set_title("output tokens/s")
    for ax in axes:
        ax.set_xscale("log"); ax.minorticks_off(); ax.set_xlabel("request rate (req/s)")
        ax.set_xticks(rates); ax.set_xticklabels([f"{r:g}" for r in rates])
    fig.suptitle(title, fontsize=10); fig.tight_layout()
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model folder (default: the embedded SmolLM2)")
    parser.add_argument("--tiny", action="store_true", help="a tiny random Llama instead (fast, no tokenizer)")
    parser.add_argument("--rates", type=float, nargs="+", default=[1, 2, 4])
    parser.add_argument("--num-prompts", type=int, default=24)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--num-gpu-blocks", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the engine process")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model = make_tiny_model(Path(tempfile.mkdtemp()) / "tiny") if args.tiny else args.model
    rows = []
    with AsyncLLM(model, num_gpu_blocks=args.num_gpu_blocks, block_size=16, max_model_len=args.input_len + args.output_len + 16,
                  num_threads=args.threads, seed=args.seed) as async_llm, \
         serve_in_thread(build_app(async_llm)) as url:
        vocab_size = async_llm.engine_info.vocab_size
        def bodies(n, output_len, seed):
            return [dict(prompt=p, max_tokens=output_len, temperature=0, ignore_eos=True, stream=True,
                         stream_options={"include_usage": True})
                    for p in (r["prompt"] for r in random_requests(n, args.input_len, output_len, vocab_size, seed))]
        asyncio.run(run_requests(f"{url}/v1/completions", bodies(2, 4, args.seed), 100.0, args.seed))  # warm-up
        print(f"{async_llm.model_path.name}: {args.num_prompts} requests x {args.input_len} prompt tokens -> "
              f"{args.output_len} output tokens, per request rate")
        for i, rate in enumerate(args.rates):
            results, duration = asyncio.run(run_requests(
                f"{url}/v1/completions", bodies(args.num_prompts, args.output_len, args.seed + 1 + i), rate,
                args.seed))
            row = dict(rate=rate, **{k: v for k, v in metrics(results, duration).items() if not isinstance(v, list)})
            rows.append(row)
            print(f"rate {rate:6.1f} req/s | out {row['output_throughput']:7.1f} tok/s | " + " | ".join(
                f"{k.upper()} mean {row[f'mean_{k}_ms']:7.1f} med {row[f'median_{k}_ms']:7.1f} "
                f"p99 {row[f'p99_{k}_ms']:7.1f} ms" for k in ("ttft", "tpot", "itl")))
        name = async_llm.model_path.name
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_serve.json").write_text(json.dumps(dict(args=vars(args), model=name, rows=rows), indent=1))
    plot(rows, f"minivllm serve, {name}: {args.num_prompts} requests, {args.input_len} in / {args.output_len} out, "
               "Poisson arrivals").savefig(RESULTS / "bench_serve.png", dpi=110)
    print(f"wrote {RESULTS / 'bench_serve.json'} and bench_serve.png")


if __name__ == "__main__":
    main()
