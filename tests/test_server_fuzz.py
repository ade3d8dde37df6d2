"""A fuzzer for the OpenAI server (issue 23): hypothesis writes request bodies -- wrong types, huge and
negative numbers, NaN and infinities, unicode (lone surrogates too), nesting, unknown fields, streamed and
not, both endpoints -- and sends them in concurrent batches to a live server on loopback.

The properties: every answer is a 200 (a stream that ends with [DONE] and carries no error) or a 4xx whose
JSON error names a field of the request; never a 500, never a hang. After every batch nothing is left in
flight, every KV block is free, and a normal greedy request gives the same tokens as before.
Derandomized (a fixed sequence of examples, no example database), so CI sees the same requests every run.
The model is a tiny random Llama with SmolLM2's tokenizer and chat template (a 49152-token vocabulary), so
text prompts, chat templates, stop strings and detokenization are all reached."""
import asyncio, json, math, time
import httpx, pytest, torch
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from minivllm.entrypoints.openai.api_server import ChatCompletionRequest, CompletionRequest

torch.set_num_threads(1)
NUM_BATCHES, BATCH_SIZE = 110, 5          # 550 requests
ENGINE = dict(num_gpu_blocks=160, max_model_len=256, max_num_seqs=16, seed=0)
FIELDS = set(CompletionRequest.model_fields) | set(ChatCompletionRequest.model_fields)
GREEDY = {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
          "return_token_ids": True}
sent = {"requests": 0, "status": {}}


@pytest.fixture(scope="module")
def fuzz_server(serve_tiny, tiny_llama_smollm2_tokenizer_path):
    "A tiny Llama with the embedded model's tokenizer, served on loopback with `ENGINE`'s options."
    with serve_tiny(tiny_llama_smollm2_tokenizer_path, "tiny", **ENGINE) as server:
        yield server


# values of every JSON type, the awkward ones often
junk = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([2**31, 2**63, 2**64, -1, 0]) |
    st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
small_int = st.integers(-3, 40)
prob = st.floats(-0.5, 2.5) | st.sampled_from([0, 1, 0.5, 1e-9])
text = st.text(max_size=40) | st.sampled_from(["hello", "\ud800", "é\u0301", "\x00", "🦙" * 5, "a" * 600])
token_ids = st.lists(st.integers(-2, 49160), max_size=12)
FIELD_VALUES = {   # plausible values (valid and just off) mixed with junk
    "model": st.sampled_from(["tiny", "gpt-4", ""]),
    "max_tokens": st.integers(1, 8) | st.integers(-2, 300),
    "n": st.integers(-1, 4) | st.sampled_from([129, 2**64]),
    "temperature": prob | st.sampled_from([math.inf, -math.inf, math.nan]),
    "top_p": prob, "top_k": st.integers(-2, 60000) | st.sampled_from([2**31, 2**64]), "min_p": prob,
    "presence_penalty": st.floats(-3, 3), "frequency_penalty": st.floats(-3, 3),
    "repetition_penalty": st.floats(-1, 3) | st.just(math.inf), "min_tokens": small_int,
    "seed": st.integers(-2**64, 2**65) | small_int, "stop": text | st.lists(text, max_size=3),
    "stop_token_ids": token_ids, "include_stop_str_in_output": st.booleans(),
    "skip_special_tokens": st.booleans(), "ignore_eos": st.booleans(), "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "return_token_ids": st.booleans(), "echo": st.booleans(),
    "logprobs": st.integers(-2, 25) | st.booleans() | st.just(1000),
    "top_logprobs": st.integers(-2, 25), "max_completion_tokens": st.integers(-1, 8),
}
VALID_VALUES = {   # in range: these requests reach the engine and generate
    "temperature": st.floats(0, 2), "top_p": st.floats(0.05, 1), "top_k": st.integers(0, 100) | st.just(2**31),
    "min_p": st.floats(0, 0.5), "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2),
    "repetition_penalty": st.floats(0.5, 2), "min_tokens": st.integers(0, 3), "seed": st.integers(0, 2**63 - 1),
    "stop": st.lists(st.text(min_size=1, max_size=3), max_size=2), "stop_token_ids": st.lists(
        st.integers(0, 49151), max_size=3), "include_stop_str_in_output": st.booleans(),
    "skip_special_tokens": st.booleans(), "ignore_eos": st.booleans(), "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}), "return_token_ids": st.booleans(),
    "logprobs": st.integers(0, 20), "n": st.integers(1, 3),
}
prompt = text | token_ids | st.lists(text, max_size=2) | st.lists(token_ids, max_size=2)
part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": text | junk})
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "developer", "tool", "wizard", ""]) | junk},
    optional={"content": text | st.lists(part, max_size=2) | junk, "name": text})


@st.composite
def bodies(draw):
    "One request: (endpoint, body); each field present or not, plausible or junk, plus unknown fields."
    chat = draw(st.booleans())
    if draw(st.integers(0, 2)) == 0:   # a third of the requests are well-formed, in range
        body = {"messages": [{"role": "user", "content": draw(text)}]} if chat else \
               {"prompt": draw(text | st.lists(st.integers(0, 49151), min_size=1, max_size=12))}
        body["max_tokens"] = draw(st.integers(1, 8))
        for name in draw(st.sets(st.sampled_from(sorted(VALID_VALUES)), max_size=6)):
            body[name] = draw(VALID_VALUES[name])
        if chat and "logprobs" in body: body["top_logprobs"] = body.pop("logprobs"); body["logprobs"] = True
        return ("chat/completions" if chat else "completions"), body
    body = {"messages": draw(st.lists(message, min_size=1, max_size=3) | junk)} if chat else \
           {"prompt": draw(prompt | junk)}
    if draw(st.integers(0, 9)) == 0: body.pop("messages", None); body.pop("prompt", None)
    body["max_tokens"] = draw(FIELD_VALUES["max_tokens"] | junk)   # bounded: keeps the run short
    for name in draw(st.sets(st.sampled_from(sorted(FIELD_VALUES)), max_size=5)):
        body[name] = draw(FIELD_VALUES[name] | junk) if draw(st.integers(0, 4)) else draw(junk)
    body |= draw(st.dictionaries(st.text(min_size=1, max_size=8), junk, max_size=2))   # unknown fields
    return ("chat/completions" if chat else "completions"), body


def check_answer(status: int, text: str, body: dict, streamed: bool):
    "200 (a stream ends with [DONE], no error event) or a 4xx JSON error naming a field; nothing else."
    assert status == 200 or 400 <= status < 500, (status, text[:500], body)
    if status == 200:
        if streamed:
            lines = [line for line in text.splitlines() if line]
            assert lines[-1] == "data: [DONE]", (text[-500:], body)
            assert not any(line.startswith('data: {"error"') for line in lines), (text[-500:], body)
        return
    error = json.loads(text)["error"]
    assert error["code"] == status and error["message"], error
    assert "Traceback" not in error["message"], error
    root = str(error["param"]).split(".")[0]
    assert root in FIELDS or root in body or root == "body", (error, body)


async def send(client, url, endpoint, body):
    "One request, streamed when the body says so; (status, text)."
    content = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    headers = {"content-type": "application/json"}
    async with client.stream("POST", f"{url}/v1/{endpoint}", content=content, headers=headers) as r:
        return r.status_code, (await r.aread()).decode("utf-8", "replace"), \
            r.headers.get("content-type", "").startswith("text/event-stream")


def stats(url) -> dict:
    return httpx.get(f"{url}/stats", timeout=30).json()


def assert_idle(url, timeout=20.0):
    "No request in flight in the front end, none in the engine, every KV block free (but the null one)."
    deadline = time.monotonic() + timeout
    while True:
        s = stats(url)
        idle = (s["num_running_reqs"], s["num_waiting_reqs"], s["num_requests_in_flight"]) == (0, 0, 0)
        if idle and s["num_free_blocks"] == s["num_gpu_blocks"] - 1: return
        assert time.monotonic() < deadline, s
        time.sleep(0.05)


def greedy(url) -> list[int]:
    r = httpx.post(f"{url}/v1/completions", json=GREEDY, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def test_fuzz_requests(fuzz_server):
    url = fuzz_server.url
    reference = greedy(url)
    assert len(reference) == 8

    @settings(max_examples=NUM_BATCHES, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(bodies(), min_size=BATCH_SIZE, max_size=BATCH_SIZE))
    def batch(requests):
        async def run():
            async with httpx.AsyncClient(timeout=60) as client:   # a hang fails as a timeout
                return await asyncio.gather(*(send(client, url, e, b) for e, b in requests))
        answers = asyncio.run(run())
        for (endpoint, body), (status, text, streamed) in zip(requests, answers):
            check_answer(status, text, body, streamed)
            sent["status"][status] = sent["status"].get(status, 0) + 1
        sent["requests"] += len(requests)
        assert_idle(url)
        assert greedy(url) == reference   # the batch changed nothing for the next client

    batch()
    assert greedy(url) == reference
    assert httpx.get(f"{url}/health").status_code == 200
    print("fuzzer answers by status:", sent)
    assert sent["requests"] >= 500, sent
    assert sent["status"].get(200, 0) >= 25, sent     # the fuzzer reaches generation, not only the checks
