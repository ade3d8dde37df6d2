"""`/metrics` in Prometheus' text format with vLLM's names and types, read with prometheus_client's own parser;
`/tokenize`, `/detokenize`, `/version`, `/ping` (issue 20); every metric vLLM's Grafana dashboard queries, with
vLLM's types, buckets and labels read from vLLM 0.33's own source, and aborts counted (issue 50)."""
import re, runpy, time
from pathlib import Path
import httpx, pytest, torch
from prometheus_client.parser import text_string_to_metric_families
from minivllm.engine.async_llm import AsyncLLM
from minivllm.entrypoints.openai.api_server import build_app, serve_in_thread

torch.set_num_threads(1)
# vLLM 0.33's metric names and types (vllm/v1/metrics/loggers.py); the parser drops a counter's `_total`
VLLM_METRICS = {"vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
                "vllm:kv_cache_usage_perc": "gauge", "vllm:prefix_cache_queries": "counter",
                "vllm:prefix_cache_hits": "counter", "vllm:num_preemptions": "counter",
                "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter",
                "vllm:request_success": "counter", "vllm:time_to_first_token_seconds": "histogram",
                "vllm:inter_token_latency_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
                "vllm:request_queue_time_seconds": "histogram"}


@pytest.fixture(scope="module")
def fresh_tiny_server(serve_tiny, tiny_llama_path):
    "A fresh engine of its own (not the shared `tiny_server`): its counters start at zero."
    with serve_tiny(tiny_llama_path, "tiny", num_gpu_blocks=64, max_model_len=256, block_size=16,
                    seed=0) as server:
        yield server


def scrape(url) -> dict:
    r = httpx.get(f"{url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def sample(families, name, suffix="", **labels):
    return next(s.value for s in families[name].samples
                if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_have_vllms_names_and_count_the_engines_tokens(fresh_tiny_server):
    url = fresh_tiny_server.url
    before = scrape(url)
    assert {name: before[name].type for name in VLLM_METRICS} == VLLM_METRICS
    assert sample(before, "vllm:generation_tokens", "_total") == 0
    prompt = list(range(1, 40))            # two full blocks: the second request hits the prefix cache
    produced, prompt_tokens = 0, 0
    for n, max_tokens in [(1, 5), (2, 7), (1, 3)]:
        r = httpx.post(f"{url}/v1/completions", timeout=60, json={
            "prompt": prompt, "n": n, "max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True})
        produced += r.json()["usage"]["completion_tokens"]
        prompt_tokens += r.json()["usage"]["prompt_tokens"] * n
    after = scrape(url)
    assert produced == 5 + 14 + 3
    assert sample(after, "vllm:generation_tokens", "_total", model_name="tiny") == produced
    assert sample(after, "vllm:prompt_tokens", "_total") == prompt_tokens
    assert sample(after, "vllm:request_success", "_total", finished_reason="length") == 4   # n=2 counts 2
    assert sample(after, "vllm:time_to_first_token_seconds", "_count") == 4
    assert sample(after, "vllm:e2e_request_latency_seconds", "_bucket", le="+Inf") == 4
    assert sample(after, "vllm:inter_token_latency_seconds", "_count") == produced - 4
    assert sample(after, "vllm:prefix_cache_hits", "_total") >= 32
    assert sample(after, "vllm:prefix_cache_queries", "_total") >= sample(after, "vllm:prefix_cache_hits", "_total")
    assert sample(after, "vllm:num_requests_running") == 0


VLLM = Path(__file__).resolve().parent.parent / "build/vllm-venv/lib/python3.11/site-packages/vllm"
# What vLLM's Grafana dashboard (examples/online_serving/prometheus_grafana/grafana.json) queries, in vLLM 0.33's
# names (its panels still spell two of them the old way: time_per_output_token_seconds, gpu_cache_usage_perc),
# and the per-request histograms of issue 50 beside them.
DASHBOARD = ["vllm:e2e_request_latency_seconds", "vllm:prompt_tokens", "vllm:generation_tokens",
             "vllm:inter_token_latency_seconds", "vllm:num_requests_running", "vllm:num_requests_waiting",
             "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds", "vllm:request_prompt_tokens",
             "vllm:request_generation_tokens", "vllm:request_success", "vllm:request_queue_time_seconds",
             "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
             "vllm:request_max_num_generation_tokens", "vllm:request_inference_time_seconds",
             "vllm:request_time_per_output_token_seconds", "vllm:request_params_n",
             "vllm:request_params_max_tokens", "vllm:iteration_tokens_total"]


def vllm_metrics(max_model_len: int) -> dict[str, tuple[str, list | None]]:
    "Each metric vLLM 0.33's loggers.py registers: its type and, for a histogram, its buckets (from buckets.py)."
    if not (VLLM / "v1/metrics/loggers.py").exists(): pytest.skip("no vLLM source: make vllm-env")
    src = (VLLM / "v1/metrics/loggers.py").read_text()
    kinds = {name: kind for kind, name in re.findall(r'_(counter|gauge|histogram)_cls\(\s*name="(vllm:\w+)"', src)}
    family_of = dict(re.findall(r'(\w+) = histogram_buckets\(\s*"(\w+)"', src))
    bucket_vars = dict(re.findall(r'name="(vllm:\w+)",(?:(?!name=).)*?buckets=(\w+)', src, re.S))
    histogram_buckets = runpy.run_path(str(VLLM / "v1/metrics/buckets.py"))["histogram_buckets"]
    return {name: (kind, histogram_buckets(family_of[bucket_vars[name]], max_model_len) if kind == "histogram"
                   else None) for name, kind in kinds.items()}


def test_every_metric_the_dashboard_queries_has_vllms_type_buckets_and_labels(fresh_tiny_server):
    url = fresh_tiny_server.url
    r = httpx.post(f"{url}/v1/completions", timeout=60, json={"prompt": [1, 2, 3], "n": 2, "temperature": 1,
                                                             "max_tokens": 4, "ignore_eos": True})
    assert r.status_code == 200
    theirs, ours = vllm_metrics(fresh_tiny_server.engine_args["max_model_len"]), scrape(url)
    assert set(DASHBOARD) <= set(theirs), set(DASHBOARD) - set(theirs)     # the names are vLLM's
    for name in DASHBOARD:
        kind, buckets = theirs[name]
        assert name in ours and ours[name].type == kind, name
        for s in ours[name].samples:
            assert {"model_name", "engine"} <= set(s.labels), (name, s)
        if buckets is not None:
            bounds = sorted({float(s.labels["le"]) for s in ours[name].samples if s.name == name + "_bucket"})
            assert bounds == [float(b) for b in buckets] + [float("inf")], name
    reasons = {s.labels["finished_reason"] for s in ours["vllm:request_success"].samples}
    assert {"stop", "length", "abort"} <= reasons
    assert sample(ours, "vllm:request_params_n", "_count") >= 1 and sample(ours, "vllm:request_params_n", "_sum") >= 2
    assert sample(ours, "vllm:request_max_num_generation_tokens", "_sum") >= 4


def test_a_client_disconnect_counts_as_an_abort(fresh_tiny_server):
    "vllm:request_success_total{finished_reason=\"abort\"} counts the requests clients walked away from."
    url = fresh_tiny_server.url
    before = sample(scrape(url), "vllm:request_success", "_total", finished_reason="abort")
    body = {"prompt": [1, 2, 3], "n": 2, "temperature": 1, "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
        next(line for line in r.iter_lines() if line.startswith("data: {"))   # streaming: then gone
    for _ in range(100):
        aborted = sample(scrape(url), "vllm:request_success", "_total", finished_reason="abort")
        if aborted == before + 2: break   # n=2: two engine requests, as vLLM counts them
        time.sleep(0.05)
    assert aborted == before + 2


def test_tokenize_detokenize_version_ping():
    with AsyncLLM(num_threads=1, num_gpu_blocks=64, max_model_len=512, seed=0) as async_llm, \
         serve_in_thread(build_app(async_llm)) as url:
        tok = async_llm.get_tokenizer()
        r = httpx.post(f"{url}/tokenize", json={"prompt": "Hello world", "return_token_strs": True}).json()
        assert r["tokens"] == tok.encode("Hello world") and r["count"] == len(r["tokens"])
        assert r["max_model_len"] == 512 and r["token_strs"] == tok.convert_ids_to_tokens(r["tokens"])
        messages = [{"role": "user", "content": "Hi"}]
        chat = httpx.post(f"{url}/tokenize", json={"messages": messages}).json()
        assert chat["tokens"] == tok.encode(tok.apply_chat_template(messages, tokenize=False,
                                                                    add_generation_prompt=True), add_special_tokens=False)
        assert httpx.post(f"{url}/detokenize", json={"tokens": r["tokens"]}).json() == {"prompt": "Hello world"}
        bad = httpx.post(f"{url}/detokenize", json={"tokens": [10**9]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
        assert httpx.post(f"{url}/tokenize", json={"model": "gpt-4", "prompt": "x"}).status_code == 404
        import minivllm
        assert httpx.get(f"{url}/version").json() == {"version": minivllm.__version__}
        assert httpx.get(f"{url}/ping").status_code == 200 and httpx.post(f"{url}/ping").status_code == 200
