"""`minivllm bench serve` (chapter 27) against a tiny server on loopback: vLLM's result lines."""
import contextlib, io, re
import torch
from minivllm.entrypoints.cli.main import main

torch.set_num_threads(1)
LINES = ["============ Serving Benchmark Result ============", "Successful requests:",
         "Benchmark duration (s):", "Total input tokens:", "Total generated tokens:",
         "Request throughput (req/s):", "Output token throughput (tok/s):"] + [
    f"{stat} {name} (ms):" for name in ("TTFT", "TPOT", "ITL")
    for stat in ("Mean", "Median", "P99")]


def value(out: str, name: str) -> str:
    return re.search(rf"^{re.escape(name)}\s+(\S+)", out, re.M)[1]


def test_bench_serve_prints_vllm_result_block(tiny_server):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        res = main(["bench", "serve", "--base-url", tiny_server.url, "--num-prompts", "4",
                    "--random-input-len", "8", "--random-output-len", "4", "--ignore-eos"])
    out = buf.getvalue()
    for line in LINES: assert line in out, line
    assert value(out, "Successful requests:") == "4" and value(out, "Failed requests:") == "0"
    assert value(out, "Total generated tokens:") == "16"
    assert value(out, "Total input tokens:") == "32"
    assert (res["model"], res["completed"], res["total_output_tokens"]) == ("tiny", 4, 16)
    assert res["ttft_ms"]["mean"] > 0 and res["tpot_ms"]["median"] > 0 and res["itl_ms"]["p99"] > 0


def test_bench_serve_poisson_rate_and_flags(tiny_server):
    "A finite --request-rate, --host/--port instead of --base-url, and an explicit --model."
    host, port = tiny_server.url.removeprefix("http://").split(":")
    with contextlib.redirect_stdout(io.StringIO()):
        res = main(["bench", "serve", "--host", host, "--port", port, "--model", "tiny",
                    "--num-prompts", "3", "--random-input-len", "5", "--random-output-len", "3",
                    "--ignore-eos", "--request-rate", "50", "--temperature", "0"])
    assert (res["completed"], res["total_input_tokens"], res["total_output_tokens"]) == (3, 15, 9)
    assert res["request_rate"] == 50
