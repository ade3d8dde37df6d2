"""`minivllm bench serve` (chapter 27) against tiny servers on loopback: `vllm bench serve`'s flags,
bodies for the completions and the chat backends, failures reported, vLLM's result block and field names."""
import contextlib, io, json, re
import pytest
import torch
from minivllm.benchmarks.serve import request_body, resolve_backend
from minivllm.entrypoints.cli.main import bench_serve, build_parser, main

torch.set_num_threads(1)
LINES = ["============ Serving Benchmark Result ============", "Successful requests:", "Failed requests:",
         "Benchmark duration (s):", "Total input tokens:", "Total generated tokens:",
         "Request throughput (req/s):", "Output token throughput (tok/s):",
         "Peak output token throughput (tok/s):", "Peak concurrent requests:",
         "Total token throughput (tok/s):"] + [
    f"{stat} {name} (ms):" for name in ("TTFT", "TPOT", "ITL") for stat in ("Mean", "Median", "P99")]


def value(out: str, name: str) -> str:
    return re.search(rf"^{re.escape(name)}\s+(\S+)", out, re.M)[1]


def run(*argv) -> tuple[dict, str]:
    "`bench serve` with these flags: its result and what it printed."
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        res = bench_serve(build_parser().parse_args(["bench", "serve", "--disable-tqdm", *argv]))
    return res, buf.getvalue()


def test_bench_serve_prints_vllm_result_block(tiny_server):
    res, out = run("--base-url", tiny_server.url, "--num-prompts", "4", "--random-input-len", "8",
                   "--random-output-len", "4", "--ignore-eos")
    for line in LINES: assert line in out, line
    assert value(out, "Successful requests:") == "4" and value(out, "Failed requests:") == "0"
    assert value(out, "Total generated tokens:") == "16" and value(out, "Total input tokens:") == "32"
    assert (res["model_id"], res["backend"], res["completed"], res["total_output_tokens"]) == \
        ("tiny", "openai", 4, 16)
    assert res["mean_ttft_ms"] > 0 and res["median_tpot_ms"] > 0 and res["p99_itl_ms"] > 0
    assert res["output_lens"] == [4] * 4 and res["errors"] == [""] * 4
    assert "WARNING: vllm bench serve no longer sets temperature==0" in out   # vLLM 0.33's notice


def test_bench_serve_rate_concurrency_and_saved_result(tiny_server, tmp_path):
    "A finite --request-rate, --max-concurrency, --host/--port, an explicit --model, a saved result."
    host, port = tiny_server.url.removeprefix("http://").split(":")
    res, out = run("--host", host, "--port", port, "--model", "tiny", "--num-prompts", "3",
                   "--random-input-len", "5", "--random-output-len", "3", "--ignore-eos", "--request-rate",
                   "50", "--max-concurrency", "1", "--temperature", "0", "--save-result", "--result-dir",
                   str(tmp_path), "--metric-percentiles", "50,90", "--percentile-metrics", "ttft,e2el")
    assert (res["completed"], res["total_input_tokens"], res["total_output_tokens"]) == (3, 15, 9)
    assert (value(out, "Maximum request concurrency:"),
            value(out, "Request rate configured (RPS):")) == ("1", "50.00")
    assert "P90 E2EL (ms):" in out and "Mean TPOT (ms):" not in out
    saved = json.loads(next(tmp_path.glob("openai-50.0qps-concurrency1-tiny-*.json")).read_text())
    assert saved["completed"] == 3 and "p50_ttft_ms" in saved and "ttfts" not in saved   # no --save-detailed


def test_chat_backend_sends_chat_bodies(serve_tiny, tiny_llama_smollm2_tokenizer_path):
    "--backend openai-chat: text prompts (the served folder's tokenizer) in the chat template."
    with serve_tiny(tiny_llama_smollm2_tokenizer_path, "tiny-chat", num_gpu_blocks=64, max_model_len=512,
                    seed=0) as server:
        chat, out = run("--base-url", server.url, "--backend", "openai-chat", "--num-prompts", "3",
                        "--random-input-len", "12", "--random-output-len", "4", "--ignore-eos")
        plain, _ = run("--base-url", server.url, "--endpoint", "/v1/completions", "--num-prompts", "3",
                       "--random-input-len", "12", "--random-output-len", "4", "--ignore-eos")
    assert (chat["backend"], chat["completed"], chat["total_output_tokens"]) == ("openai-chat", 3, 12)
    assert chat["total_input_tokens"] > plain["total_input_tokens"] + 3 * 10   # the template's tokens
    assert plain["completed"] == 3 and value(out, "Successful requests:") == "3"


def test_failures_are_counted_and_the_first_error_printed(tiny_server):
    "Prompts of 500 to 1500 tokens for a max_model_len of 1024: the long ones get the server's 400."
    res, out = run("--base-url", tiny_server.url, "--num-prompts", "6", "--random-input-len", "1000",
                   "--random-range-ratio", "0.5", "--random-output-len", "2", "--ignore-eos", "--seed", "1")
    assert res["completed"] > 0 and res["failed"] > 0 and res["completed"] + res["failed"] == 6
    first = next(e for e in res["errors"] if e)
    assert first.startswith("HTTP 400: ") and "max_model_len" in first
    assert f"{res['failed']} of 6 requests failed; the first one's error: {first}" in out
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(["bench", "serve", "--base-url", tiny_server.url, "--num-prompts", "2",
                       "--random-input-len", "2000", "--disable-tqdm"])
    assert status == 1 and err.getvalue().startswith("minivllm bench serve: error: all 2 requests failed")


def test_backend_and_endpoint_follow_each_other():
    assert resolve_backend(None, None) == ("openai", "/v1/completions")
    assert resolve_backend("openai-chat", None) == ("openai-chat", "/v1/chat/completions")
    assert resolve_backend(None, "/v1/chat/completions") == ("openai-chat", "/v1/chat/completions")
    assert resolve_backend("vllm", "/v1/completions") == ("vllm", "/v1/completions")
    with pytest.raises(ValueError, match="pair openai with /v1/completions"):
        resolve_backend("openai", "/v1/chat/completions")
    request = dict(prompt="Hi", prompt_len=1, output_len=5)
    chat = request_body("openai-chat", "m", request, True, {"temperature": 0.5})
    assert chat == dict(model="m", stream=True, stream_options={"include_usage": True}, ignore_eos=True,
                        messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                        max_completion_tokens=5, temperature=0.5)
    assert request_body("openai", "m", request)["max_tokens"] == 5
