"""EngineCoreProc + AsyncLLM streaming and the OpenAI-compatible server, on loopback only (chapters 24 and 25)."""
import asyncio, json, os, time
import httpx, openai, pytest, torch
from minivllm.entrypoints.llm import LLM
from minivllm.engine.async_llm import AsyncLLM, EngineDeadError
from minivllm.sampling_params import SamplingParams
from minivllm.inputs.llm import TextPrompt, TokensPrompt
from minivllm.sampling_params import RequestOutputKind

from minivllm.entrypoints.openai.api_server import build_app, serve_in_thread

torch.set_num_threads(1)
GREEDY = SamplingParams(temperature=0, max_tokens=16)


async def collect(async_llm, prompt, sp, **kw):
    "Stream one request; (token ids, text, number of deltas, last delta)."
    kw.setdefault("output_kind", RequestOutputKind.DELTA)
    deltas = [out async for out in async_llm.generate(prompt, sp, **kw)]
    return ([t for d in deltas for t in d.outputs[0].token_ids], "".join(d.outputs[0].text for d in deltas),
            len(deltas), deltas[-1])


def test_stream_matches_llm_generate(smollm2_server):
    async_llm = smollm2_server.async_llm
    prompts = ["The capital of France is", "def fibonacci(n):"]
    async def run(): return await asyncio.gather(*(collect(async_llm, p, GREEDY) for p in prompts))
    streamed = asyncio.run(run())
    expected = LLM(**smollm2_server.engine_args).generate(prompts, GREEDY, use_tqdm=False)
    for (tokens, text, num_deltas, last), ref in zip(streamed, expected):
        assert tokens == ref.outputs[0].token_ids and text == ref.outputs[0].text
        assert num_deltas == len(tokens) and last.finished and last.outputs[0].finish_reason == ref.outputs[0].finish_reason


def test_stream_matches_llm_tiny_seeded(tiny_server):
    "Token-id prompts, greedy and seeded sampling, several requests streamed at once."
    async_llm = tiny_server.async_llm
    prompts = [[1 + i, 7, 9 + 2 * i, 11] * (i + 1) for i in range(6)]
    params = [SamplingParams(temperature=0, max_tokens=10, ignore_eos=True),
              SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=10, ignore_eos=True)] * 3
    async def run(): return await asyncio.gather(*(collect(async_llm, p, sp) for p, sp in zip(prompts, params)))
    streamed = [s[0] for s in asyncio.run(run())]
    llm = LLM(tiny_server.path, **tiny_server.engine_args)
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    assert streamed == expected


def test_stop_strings_and_validation(smollm2_server):
    async_llm = smollm2_server.async_llm
    sp = SamplingParams(temperature=0, max_tokens=20)
    _, full, _, _ = asyncio.run(collect(async_llm, "Count: 1, 2, 3,", sp))
    stop = full[full.index(",") + 1:][:3]     # a string the model does produce
    stopped = SamplingParams(temperature=0, max_tokens=20, stop=[stop])
    _, text, _, last = asyncio.run(collect(async_llm, "Count: 1, 2, 3,", stopped))
    assert text == full[:full.index(stop)] and (last.outputs[0].finish_reason, last.outputs[0].stop_reason) == ("stop", stop)
    for prompt, message in [([1] * 1024, "max_model_len"), ([10**7], "vocabulary"), ([], "non-empty")]:
        with pytest.raises(ValueError, match=message): asyncio.run(collect(async_llm, prompt, sp))


def test_async_llm_takes_vllms_prompt_dicts(smollm2_server):
    "TextPrompt and TokensPrompt (vLLM's dict forms) give the tokens of a string and of its ids."
    async_llm, text = smollm2_server.async_llm, "The capital of France is"
    ids = async_llm.get_tokenizer().encode(text)
    async def final(prompt):
        return [out async for out in async_llm.generate(prompt, GREEDY)][-1]
    outs = [asyncio.run(final(p)) for p in (text, TextPrompt(prompt=text), ids,
                                            TokensPrompt(prompt_token_ids=ids, prompt=text))]
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1
    assert [o.prompt for o in outs] == [text, text, None, text]
    with pytest.raises(TypeError, match="cache_salt"):
        asyncio.run(final({"prompt": text, "cache_salt": "s"}))

def test_openai_client(smollm2_server):
    url = smollm2_server.url
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0)
    model = client.models.list().data[0].id
    kw = dict(model=model, max_tokens=8, temperature=0)
    c = client.completions.create(prompt="The capital of France is", **kw)
    assert c.usage.completion_tokens == 8 and c.choices[0].finish_reason == "length" and c.choices[0].text
    chunks = list(client.completions.create(prompt="The capital of France is", stream=True,
                                            stream_options={"include_usage": True}, **kw))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == c.choices[0].text
    assert chunks[-1].usage.completion_tokens == 8 and chunks[-1].usage.prompt_tokens == c.usage.prompt_tokens
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    chat = client.chat.completions.create(messages=messages, **kw)
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 8
    chat_chunks = list(client.chat.completions.create(messages=messages, stream=True, **kw))
    assert chat_chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chat_chunks) == chat.choices[0].message.content
    assert chat_chunks[-1].choices[0].finish_reason == chat.choices[0].finish_reason


def test_64_concurrent_streams(tiny_server):
    url = tiny_server.url
    prompts = [[(5 * i + j) % 250 + 3 for j in range(4 + i % 9)] for i in range(64)]
    max_tokens = [3 + i % 11 for i in range(64)]
    async def one(client, prompt, n):
        body = dict(prompt=prompt, max_tokens=n, temperature=0, ignore_eos=True, stream=True, return_token_ids=True,
                    stream_options={"include_usage": True})
        tokens, usage = [], None
        async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]": continue
                chunk = json.loads(line[6:])
                if chunk["choices"]: tokens += chunk["choices"][0]["token_ids"]
                usage = chunk.get("usage") or usage
        return tokens, usage
    async def run():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=100)) as client:
            return await asyncio.gather(*(one(client, p, n) for p, n in zip(prompts, max_tokens)))
    start = time.perf_counter()
    results = asyncio.run(run())
    assert time.perf_counter() - start < 60
    assert [len(t) for t, _ in results] == max_tokens
    assert [u["completion_tokens"] for _, u in results] == max_tokens
    assert [u["prompt_tokens"] for _, u in results] == [len(p) for p in prompts]
    expected = LLM(tiny_server.path, **tiny_server.engine_args).generate(
        prompts, [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in max_tokens],
        use_tqdm=False)
    assert [t for t, _ in results] == [o.outputs[0].token_ids for o in expected]


def wait_until_idle(url, timeout=10.0) -> dict:
    "Poll /stats until nothing runs or waits."
    deadline = time.monotonic() + timeout
    while True:
        stats = httpx.get(f"{url}/stats").json()
        if stats["num_running_reqs"] + stats["num_waiting_reqs"] == 0 or time.monotonic() > deadline: return stats
        time.sleep(0.05)


def test_disconnect_frees_kv_blocks(smollm2_server):
    """A client that goes away (a closed stream, a timed-out plain request) aborts its request: the KV blocks
    come back long before its 900 tokens. (The embedded model, at many milliseconds a token: the tiny one made 900
    tokens in under a second, less than a loaded 2-core machine may take to notice the disconnect.)"""
    url = smollm2_server.url
    before = wait_until_idle(url)
    body = dict(prompt=list(range(3, 60)), max_tokens=900, ignore_eos=True, temperature=0)
    with httpx.stream("POST", f"{url}/v1/completions", json=body | {"stream": True}) as r:
        chunks = r.iter_lines()      # (dropping this iterator would close the connection)
        lines = [next(chunks) for _ in range(8)]
        busy = httpx.get(f"{url}/stats").json()
    assert any(line.startswith("data: {") for line in lines)
    assert busy["num_running_reqs"] == 1 and busy["num_free_blocks"] < before["num_free_blocks"]
    after = wait_until_idle(url)
    assert after["num_free_blocks"] == after["num_gpu_blocks"] - 1 and after["num_requests_in_flight"] == 0
    assert after["step_counter"] - before["step_counter"] < 600     # aborted long before its 900 tokens
    with pytest.raises(httpx.ReadTimeout):                           # non-streaming: the client gives up
        httpx.post(f"{url}/v1/completions", json=body, timeout=0.5)
    after = wait_until_idle(url)
    assert after["num_free_blocks"] == after["num_gpu_blocks"] - 1 and after["num_requests_in_flight"] == 0


def check_400(r, contains):
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400 and contains in error["message"], error


def test_bad_requests_get_openai_400(tiny_server):
    url = tiny_server.url
    post = lambda path, **kw: httpx.post(f"{url}/v1/{path}", **kw)
    check_400(post("completions", content=b'{"prompt": [1, 2', headers={"content-type": "application/json"}),
              "malformed JSON")
    check_400(post("chat/completions", content=b"not json", headers={"content-type": "application/json"}),
              "malformed JSON")
    # vLLM 0.33: an unknown model is a 404 NotFoundError (vllm/entrypoints/serve/engine/serving.py)
    r = post("completions", json={"model": "gpt-4", "prompt": [1, 2]})
    assert (r.status_code, r.json()["error"]["type"], r.json()["error"]["param"]) == (404, "NotFoundError", "model")
    check_400(post("completions", json={"prompt": [5] * 1100}), "max_model_len")
    # vLLM 0.33 (renderers/params.py): max_tokens above max_model_len is a 400; prompt + max_tokens above it
    # is cut to the room left (serve/utils/api_utils.py get_max_tokens)
    check_400(post("completions", json={"prompt": [5], "max_tokens": 1025}), "cannot be greater than max_model_len")
    cut = post("completions", json={"prompt": [5] * 1000, "max_tokens": 100, "temperature": 0, "ignore_eos": True})
    assert cut.status_code == 200 and cut.json()["usage"]["completion_tokens"] == 24, cut.text
    check_400(post("completions", json={"prompt": "text needs a tokenizer"}), "no tokenizer")
    check_400(post("chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}), "chat template")
    for bad, field in [({"temperature": -1}, "temperature"), ({"top_p": 1.5}, "top_p"), ({"max_tokens": 0}, "max_tokens"),
                       ({"max_tokens": "many"}, "max_tokens"), ({"n": 2, "temperature": 0}, "greedy"),
                       ({"prompt": [10**6]}, "vocabulary"), ({"stream": True, "top_p": 0}, "top_p"),
                       ({"echo": True}, "echo"), ({"logprobs": -1}, "logprobs")]:   # echo: ids, no tokenizer
        check_400(post("completions", json={"prompt": [1, 2, 3]} | bad), field)
    check_400(post("completions", json={"max_tokens": 3}), "prompt")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt=[1, 2, 3])
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "tiny"


def test_engine_keeps_a_timeline_only_when_asked(tiny_server, tiny_llama_path):
    "`LLM` always records; the engine process drops that recorder unless `record_timeline=True`."
    from minivllm.engine.arg_utils import EngineArgs
    from minivllm.engine.async_llm import make_engine_core
    from minivllm.timeline import TimelineRecorder
    args = EngineArgs(model=str(tiny_llama_path), num_gpu_blocks=8, max_model_len=64)
    core = make_engine_core(args)
    assert not any(isinstance(o, TimelineRecorder) for o in core.step_observers)
    assert (core.info.num_gpu_blocks, core.info.max_model_len) == (8, 64)
    core = make_engine_core(args, record_timeline=True)
    assert [type(o) for o in core.step_observers] == [TimelineRecorder]
    with pytest.raises(ValueError, match="record_timeline=True"):   # started without it
        tiny_server.async_llm.get_timeline()


def test_cpu_engine_process_runs_on_tcmalloc(tiny_server, monkeypatch):
    "vLLM's CPU platform: the engine process starts with the machine's TCMalloc preloaded, the front end unchanged."
    from minivllm.platforms.cpu import engine_process_env, find_tcmalloc
    if "libtcmalloc" not in open("/proc/self/maps").read():         # the front end runs on glibc's malloc
        assert "libtcmalloc" not in os.environ.get("LD_PRELOAD", "")  # and its environment is as it was
    assert engine_process_env("cuda") == {}
    monkeypatch.setenv("LD_PRELOAD", "/opt/libtcmalloc.so")            # the user's own: kept as it is
    assert engine_process_env("cpu") == {}
    monkeypatch.setenv("LD_PRELOAD", "libother.so")
    tcmalloc = find_tcmalloc()
    assert engine_process_env("cpu") == ({"LD_PRELOAD": f"{tcmalloc}:libother.so"} if tcmalloc else {})
    if tcmalloc is None: pytest.skip("no TCMalloc on this machine (Debian: libtcmalloc-minimal4)")
    pid = tiny_server.async_llm.proc.pid
    assert "libtcmalloc" in open(f"/proc/{pid}/maps").read()


def test_the_served_engine_has_a_servers_batch_defaults(tiny_server):
    "vLLM's for a server on a CPU (tests/test_vllm_api.py compares them with vLLM's code), not LLM's 4096 and 256."
    info = tiny_server.async_llm.engine_info          # conftest starts it as `serve` does
    assert (info.max_num_batched_tokens, info.max_num_seqs) == (2048, 128)


def test_engine_failures_reach_the_client(tiny_llama_path):
    with pytest.raises(EngineDeadError, match="num_gpu_blocks"):      # fails while starting
        AsyncLLM(tiny_llama_path, num_threads=1, num_gpu_blocks=2, max_model_len=256)
    with AsyncLLM(tiny_llama_path, transport="tcp", num_threads=1, num_gpu_blocks=32, max_model_len=256) as async_llm:
        async def killed_mid_stream():
            agen = async_llm.generate([1, 2, 3], SamplingParams(max_tokens=200, ignore_eos=True))
            await anext(agen)
            async_llm.proc.kill()
            async for _ in agen: pass
        with pytest.raises(EngineDeadError, match="exited"): asyncio.run(killed_mid_stream())
        with serve_in_thread(build_app(async_llm, keep_alive_on_engine_death=True)) as url:
            assert httpx.get(f"{url}/health").status_code == 503


def test_n_and_logprobs_tiny(tiny_server):
    "n completions and logprobs in both OpenAI formats; streamed chunks add up to the whole response."
    url = tiny_server.url
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0)
    kw = dict(model="tiny", prompt=[5, 9, 14, 2], max_tokens=6, temperature=1.0, seed=4, n=3, logprobs=2,
              extra_body={"ignore_eos": True, "return_token_ids": True})
    whole = client.completions.create(**kw)
    assert [c.index for c in whole.choices] == [0, 1, 2] and whole.usage.completion_tokens == 18
    expected = LLM(tiny_server.path, **tiny_server.engine_args).generate([[5, 9, 14, 2]], SamplingParams(
        n=3, temperature=1.0, seed=4, max_tokens=6, ignore_eos=True, logprobs=2), use_tqdm=False)[0]
    for c, ref in zip(whole.choices, expected.outputs):
        assert c.model_extra["token_ids"] == ref.token_ids
        assert c.logprobs.tokens == [f"token_id:{t}" for t in ref.token_ids]      # no tokenizer: ids
        assert c.logprobs.token_logprobs == pytest.approx([s[t].logprob for t, s in zip(ref.token_ids, ref.logprobs)],
                                                          abs=1e-4)   # other thread count, other sums
        # vLLM 0.33 (openai/completion/serving.py, completion_top_logprobs_limit): the engine's entries in its
        # order, the sampled token first, at most logprobs + 1 of them
        for top, t, step in zip(c.logprobs.top_logprobs, ref.token_ids, ref.logprobs):
            assert list(top) == [f"token_id:{x}" for x in list(step)[:3]] and list(top)[0] == f"token_id:{t}"
        assert any(len(top) == 3 for top in c.logprobs.top_logprobs)   # temperature 1: some sampled outside the top 2
    chunks = list(client.completions.create(stream=True, **kw))
    streamed = {}
    for ch in chunks:
        for c in ch.choices: streamed.setdefault(c.index, []).extend(c.logprobs.tokens)
    assert streamed == {c.index: c.logprobs.tokens for c in whole.choices}


def test_chat_logprobs_and_n_embedded(smollm2_server):
    url = smollm2_server.url
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0)
    messages = [{"role": "user", "content": "Name a colour."}]
    kw = dict(model=client.models.list().data[0].id, messages=messages, max_tokens=6, temperature=0,
              logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    chat = client.chat.completions.create(**kw)
    content = chat.choices[0].logprobs.content
    specials = set(smollm2_server.async_llm.get_tokenizer().all_special_tokens)   # in the tokens, not in the text
    text = "".join(e.token for e in content if e.token not in specials)
    assert text == chat.choices[0].message.content and len(content) == 6
    assert all(e.top_logprobs[0].token == e.token and len(e.top_logprobs) == 2 for e in content)   # greedy
    assert all(bytes(e.bytes).decode() == e.token for e in content)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]
    # the second run reads the prompt from the prefix cache: the same values up to float rounding
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content], abs=1e-3)
    with pytest.raises(openai.BadRequestError, match="`logprobs` must be set to true"):   # vLLM 0.33 chat protocol.py
        client.chat.completions.create(**(kw | dict(logprobs=False)))
    many = client.chat.completions.create(model=kw["model"], messages=messages, max_tokens=8, temperature=1.0,
                                          n=2, seed=1, stop=["\n"])
    assert [c.index for c in many.choices] == [0, 1] and all("\n" not in c.message.content for c in many.choices)


# ---------------------------------------------------------------- issue 20: AsyncLLM as vLLM's
GENERATION_CONFIG = {"eos_token_id": [0, 9, 11], "temperature": 0.6, "top_p": 0.9, "top_k": 20,
                     "max_new_tokens": 7}


@pytest.fixture(scope="module")
def tiny_gen_server(serve_tiny, tiny_llama_with_generation_config):
    "The tiny Llama with a generation_config.json of sampling defaults and two extra EOS ids, served."
    path = tiny_llama_with_generation_config(GENERATION_CONFIG, "tiny_gen")
    with serve_tiny(path, "tiny_gen", max_logprobs=2, num_gpu_blocks=320, max_model_len=1024,
                    seed=0) as server:
        yield server


async def _all(async_llm, prompt, sp, **kw):
    return [out async for out in async_llm.generate(prompt, sp, **kw)]


def test_async_llm_output_kind_is_cumulative_by_default(tiny_server):
    "vLLM's SamplingParams.output_kind defaults to CUMULATIVE; generate(output_kind=) overrides it."
    async_llm = tiny_server.async_llm
    sp = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    cumulative = asyncio.run(_all(async_llm, [1, 2, 3], sp))
    assert [len(o.outputs[0].token_ids) for o in cumulative] == [1, 2, 3, 4, 5]
    delta = asyncio.run(_all(async_llm, [1, 2, 3], sp, output_kind=RequestOutputKind.DELTA))
    assert [t for o in delta for t in o.outputs[0].token_ids] == cumulative[-1].outputs[0].token_ids
    final_sp = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True,
                              output_kind=RequestOutputKind.FINAL_ONLY)
    final = asyncio.run(_all(async_llm, [1, 2, 3], final_sp))
    assert len(final) == 1 and final[0].outputs[0].token_ids == cumulative[-1].outputs[0].token_ids


def test_async_llm_max_tokens_none_takes_the_room_left(tiny_server):
    "vLLM's InputProcessor: max_tokens=None -> max_model_len - prompt length (it used to crash)."
    async_llm = tiny_server.async_llm
    sp = SamplingParams(temperature=0, max_tokens=None, ignore_eos=True,
                        output_kind=RequestOutputKind.FINAL_ONLY)
    out = asyncio.run(_all(async_llm, [1 + i % 50 for i in range(1000)], sp))[-1]
    assert len(out.outputs[0].token_ids) == tiny_server.engine_args["max_model_len"] - 1000


def test_async_llm_stops_at_the_generation_configs_extra_eos(tiny_gen_server):
    "generation_config.json's eos_token_id list stops generation (vLLM: update_from_generation_config)."
    async_llm = tiny_gen_server.async_llm
    assert async_llm.generation_config["eos_token_id"] == [0, 9, 11]
    sp = SamplingParams(temperature=0, max_tokens=6, logit_bias={9: 100.0})
    out = asyncio.run(_all(async_llm, [1, 2, 3], sp))[-1].outputs[0]
    assert (out.token_ids, out.finish_reason, out.stop_reason) == ([9], "stop", 9)
    ignored = SamplingParams(temperature=0, max_tokens=6, logit_bias={9: 100.0}, ignore_eos=True)
    assert asyncio.run(_all(async_llm, [1, 2, 3], ignored))[-1].outputs[0].token_ids == [9] * 6


def test_async_llm_caps_logprobs_at_its_max_logprobs(tiny_gen_server):
    "check_sampling_params gets AsyncLLM's max_logprobs (here 2), with vLLM's message."
    async_llm = tiny_gen_server.async_llm
    with pytest.raises(ValueError, match="greater than max allowed: 2"):
        asyncio.run(async_llm.add_request("x", [1, 2], SamplingParams(logprobs=3)))


def test_async_llm_honours_bad_words(smollm2_server):
    "bad_words are tokenized by prepare_sampling_params and never produced (they used to be ignored)."
    async_llm = smollm2_server.async_llm
    sp = SamplingParams(temperature=0, max_tokens=8, output_kind=RequestOutputKind.FINAL_ONLY)
    free = asyncio.run(_all(async_llm, "The capital of France is", sp))[-1].outputs[0]
    word = free.text.split()[0]
    banned = SamplingParams(temperature=0, max_tokens=8, bad_words=[word],
                            output_kind=RequestOutputKind.FINAL_ONLY)
    out = asyncio.run(_all(async_llm, "The capital of France is", banned))[-1].outputs[0]
    assert not out.text.lstrip().startswith(word), (free.text, out.text)


# ---------------------------------------------------------------- issue 20: the server's fields as vLLM's
def _post(url, body, path="completions"):
    return httpx.post(f"{url}/v1/{path}", json=body, timeout=60)


def test_server_defaults_come_from_the_generation_config(tiny_gen_server, tmp_path):
    "vLLM's to_sampling_params: request value, else get_diff_sampling_param's, else vLLM's (null = left out)."
    async_llm, url = tiny_gen_server.async_llm, tiny_gen_server.url
    assert url and async_llm.engine_args.generation_config == "auto"
    body = {"model": "tiny_gen", "prompt": [5, 9, 14, 2], "max_tokens": 8, "seed": 3, "ignore_eos": True}
    left_out = _post(url, body).json()["choices"][0]
    nulls = _post(url, body | {"temperature": None, "top_p": None, "top_k": None, "n": None}).json()["choices"][0]
    path = async_llm.model_path
    llm = LLM(path, num_gpu_blocks=64, max_model_len=256)
    model = llm.generate([[5, 9, 14, 2]], SamplingParams(temperature=0.6, top_p=0.9, top_k=20, seed=3, max_tokens=8,
                                                         ignore_eos=True), use_tqdm=False)[0].outputs[0]
    vllm_defaults = llm.generate([[5, 9, 14, 2]], SamplingParams(temperature=1.0, seed=3, max_tokens=8, ignore_eos=True),
                                 use_tqdm=False)[0].outputs[0]
    assert model.token_ids != vllm_defaults.token_ids          # the test can tell them apart
    left_out_ids = [int(t.split(":")[1]) for t in _post(url, body | {"logprobs": 0}).json()["choices"][0]["logprobs"]["tokens"]]
    assert left_out_ids == model.token_ids and left_out["text"] == nulls["text"]


def test_logit_bias_allowed_token_ids_and_seed_minus_one(tiny_server):
    url = tiny_server.url
    base = {"prompt": [1, 2, 3], "max_tokens": 6, "ignore_eos": True, "return_token_ids": True}
    biased = _post(url, base | {"temperature": 0, "logit_bias": {"9": 100}}).json()
    assert biased["choices"][0]["token_ids"] == [9] * 6           # string token-id keys, as OpenAI sends them
    allowed = _post(url, base | {"temperature": 1.0, "allowed_token_ids": [7, 8]}).json()
    assert set(allowed["choices"][0]["token_ids"]) <= {7, 8}
    runs = [_post(url, base | {"temperature": 1.0, "seed": -1, "max_tokens": 12}).json()["choices"][0]["token_ids"]
            for _ in range(2)]
    assert runs[0] != runs[1]                                     # vLLM: seed -1 is random
    fixed = [_post(url, base | {"temperature": 1.0, "seed": 5}).json()["choices"][0]["token_ids"] for _ in range(2)]
    assert fixed[0] == fixed[1]


def test_prompt_arrays_prompt_logprobs_and_echo(tiny_server):
    "vLLM: each prompt its own request, choices i * n + j; prompt_logprobs per choice, the first None."
    url = tiny_server.url
    prompts = [[1, 2, 3], [4, 5]]
    body = {"prompt": prompts, "n": 2, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    r = _post(url, body | {"n": 1}).json()
    singles = [_post(url, body | {"prompt": p, "n": 1}).json()["choices"][0]["token_ids"] for p in prompts]
    assert [c["token_ids"] for c in r["choices"]] == singles and r["usage"]["prompt_tokens"] == 5
    r = _post(url, body | {"temperature": 1.0, "seed": 1}).json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3] and r["usage"]["completion_tokens"] == 16
    chunks = httpx.post(f"{url}/v1/completions", json=body | {"stream": True, "temperature": 1.0}, timeout=60).text
    indices = {json.loads(line[6:])["choices"][0]["index"] for line in chunks.splitlines()
               if line.startswith("data: {")}
    assert indices == {0, 1, 2, 3}
    lp = _post(url, {"prompt": [1, 2, 3], "max_tokens": 2, "prompt_logprobs": 1}).json()["choices"][0]
    assert lp["prompt_logprobs"][0] is None and len(lp["prompt_logprobs"]) == 3
    assert {"logprob", "rank", "decoded_token"} == set(next(iter(lp["prompt_logprobs"][1].values())))
    check_400(_post(url, {"prompt": [1, 2, 3], "stream": True, "prompt_logprobs": 1}), "not available")
    check_400(_post(url, {"prompt": [1, 2, 3], "echo": True}), "tokenizer")   # ids, no tokenizer to show them


def test_echo_and_bad_words_embedded(smollm2_server):
    url = smollm2_server.url
    prompt = "The capital of France is"
    body = {"prompt": prompt, "max_tokens": 3, "temperature": 0}
    plain = _post(url, body).json()["choices"][0]["text"]
    echo = _post(url, body | {"echo": True, "logprobs": 1}).json()["choices"][0]
    assert echo["text"] == prompt + plain                   # vLLM: prompt text, then the completion
    lp = echo["logprobs"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None and len(lp["tokens"]) > 3
    streamed = httpx.post(f"{url}/v1/completions", json=body | {"echo": True, "stream": True}, timeout=60).text
    text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in streamed.splitlines()
                   if line.startswith("data: {"))
    assert text == prompt + plain
    word = plain.split()[0]
    banned = _post(url, body | {"bad_words": [word]}).json()["choices"][0]["text"]
    assert not banned.lstrip().startswith(word), (plain, banned)


def test_echo_without_generation_scores_the_prompt(smollm2_server):
    "vLLM's echo with max_tokens 0 (how evaluation harnesses score a text): the prompt and its logprobs alone."
    url, prompt = smollm2_server.url, "The capital of France is Paris"
    body = {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0}
    r = _post(url, body).json()
    choice, ids = r["choices"][0], smollm2_server.async_llm.get_tokenizer().encode(prompt)
    assert choice["text"] == prompt and choice["finish_reason"] == "length"
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(ids) and lp["token_logprobs"][0] is None
    assert all(x is not None and x <= 0 for x in lp["token_logprobs"][1:])
    usage = {k: r["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    assert usage == {"prompt_tokens": len(ids), "completion_tokens": 1,    # vLLM counts the token it
                     "total_tokens": len(ids) + 1}                         # generated
    # the same logprobs as the prompt part of an echo that also generates
    longer = _post(url, body | {"max_tokens": 2}).json()["choices"][0]["logprobs"]
    assert longer["token_logprobs"][:len(ids)] == lp["token_logprobs"]
    streamed = httpx.post(f"{url}/v1/completions", json=body | {"stream": True}, timeout=60).text
    chunks = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == prompt
    check_400(_post(url, {"prompt": prompt, "max_tokens": 0}), "max_tokens")   # without echo: a 400


def test_chat_template_options(smollm2_server):
    "add_generation_prompt, continue_final_message, echo and chat_template as vLLM's chat endpoint."
    async_llm, url = smollm2_server.async_llm, smollm2_server.url
    tok = async_llm.get_tokenizer()
    messages = [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello! My name"}]
    body = {"messages": messages, "max_tokens": 4, "temperature": 0}
    check_400(_post(url, body | {"continue_final_message": True}, "chat/completions"), "Cannot set both")
    go_on = body | {"continue_final_message": True, "add_generation_prompt": False, "echo": True}
    r = _post(url, go_on, "chat/completions").json()
    expected = tok.apply_chat_template(messages, tokenize=False, continue_final_message=True)
    assert r["usage"]["prompt_tokens"] == len(tok.encode(expected, add_special_tokens=False))
    assert r["choices"][0]["message"]["content"].startswith("Hello! My name")   # echo continues the message
    plain = _post(url, body, "chat/completions").json()
    assert plain["usage"]["prompt_tokens"] == len(tok.encode(tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False))
    kwargs = _post(url, body | {"chat_template_kwargs": {"add_generation_prompt": False}}, "chat/completions").json()
    assert kwargs["usage"] == plain["usage"]     # the request's own field wins over a kwarg of the same name
    check_400(_post(url, body | {"chat_template": "{{ messages }}"}, "chat/completions"), "untrusted chat template")


def test_unknown_fields_are_ignored_and_stream_options_need_stream(tiny_server):
    "vLLM's OpenAIBaseModel: extra='allow' (ignored); validate_stream_options: a 400 without stream=True."
    url = tiny_server.url
    assert _post(url, {"prompt": [1, 2], "max_tokens": 2, "not_a_vllm_field": {"x": 1}}).status_code == 200
    check_400(_post(url, {"prompt": [1, 2], "stream_options": {"include_usage": True}}), "stream=True")
    check_400(_post(url, {"prompt": [1, 2], "logprobs": 21}), "logprobs")               # max_logprobs = 20
    check_400(_post(url, {"prompt": [1, 2], "suffix": "!"}), "suffix")


def test_api_key(tiny_server):
    "vLLM's AuthenticationMiddleware: /v1 needs `Authorization: Bearer KEY` (else 401); /health does not."
    async_llm = tiny_server.async_llm
    with serve_in_thread(build_app(async_llm, "tiny", api_key="sesame")) as url:
        body = {"prompt": [1, 2], "max_tokens": 2}
        r = httpx.post(f"{url}/v1/completions", json=body)
        assert (r.status_code, r.json()["error"]["message"], r.json()["error"]["code"]) == (401, "Unauthorized", 401)
        assert httpx.post(f"{url}/v1/completions", json=body,
                          headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.post(f"{url}/v1/completions", json=body,
                          headers={"Authorization": "Bearer sesame"}).status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sesame", max_retries=0)
        assert client.completions.create(model="tiny", prompt=[1, 2], max_tokens=2).choices


def test_sampling_fields_reach_the_engine(tiny_server):
    "Every sampling knob of a request is the engine's: the server's tokens equal LLM.generate's with those params."
    url = tiny_server.url
    knobs = dict(temperature=0.9, top_p=0.95, top_k=30, min_p=0.01, presence_penalty=0.5, frequency_penalty=0.4,
                 repetition_penalty=1.3, seed=11, min_tokens=3, max_tokens=10, stop_token_ids=[17])
    got = _post(url, {"prompt": [4, 8, 15, 16], "return_token_ids": True} | knobs).json()["choices"][0]["token_ids"]
    expected = LLM(tiny_server.path, **tiny_server.engine_args).generate(
        [[4, 8, 15, 16]], SamplingParams(**knobs), use_tqdm=False)[0]
    assert got == expected.outputs[0].token_ids
    plain = LLM(tiny_server.path, **tiny_server.engine_args).generate(
        [[4, 8, 15, 16]], SamplingParams(temperature=0.9, seed=11, max_tokens=10), use_tqdm=False)[0]
    assert plain.outputs[0].token_ids != got        # the knobs changed something


def test_skip_special_tokens_reaches_the_engine(smollm2_server):
    async_llm, url = smollm2_server.async_llm, smollm2_server.url
    eos = async_llm.get_tokenizer().eos_token
    eos_id = async_llm.get_tokenizer().eos_token_id
    body = {"prompt": "Hi", "max_tokens": 2, "temperature": 0, "ignore_eos": True, "logit_bias": {str(eos_id): 100}}
    assert eos not in _post(url, body).json()["choices"][0]["text"]
    assert eos in _post(url, body | {"skip_special_tokens": False}).json()["choices"][0]["text"]


# ---------------------------------------------------------------- issue 20: the CLI's server and timeline commands
def test_cli_serve_passes_every_server_option():
    "`minivllm serve`'s server flags are FrontendArgs' fields; serve() takes them (and hands the rest to the engine)."
    from dataclasses import fields
    from minivllm.entrypoints.cli.main import build_parser, serve_options
    from minivllm.entrypoints.common.cli_args import FrontendArgs
    args = build_parser().parse_args(["serve", "/m", "--api-key", "k", "--keep-alive-on-engine-death",
                                      "--trust-request-chat-template", "--engine-stall-timeout", "600",
                                      "--max-stop-strings", "8", "--max-model-len", "512"])
    server, engine = serve_options(args)
    assert (server["api_key"], server["keep_alive_on_engine_death"], server["trust_request_chat_template"],
            server["engine_stall_timeout"], server["max_stop_strings"], engine["max_model_len"]) == \
        ("k", True, True, 600.0, 8, 512)
    assert set(server) - {"model", "model_name"} == {f.name for f in fields(FrontendArgs)}
    defaults = serve_options(build_parser().parse_args(["serve", "/m"]))[0]
    assert {k: v for k, v in defaults.items() if k not in ("model", "model_name")} == vars(FrontendArgs())


def test_cli_timeline_draws_a_recorded_vllm_run(tmp_path, capsys):
    from pathlib import Path
    from minivllm.entrypoints.cli.main import main
    run = Path(__file__).parent.parent / "nbs" / "vllm_runs" / "E6.jsonl"
    assert main(["timeline", str(run), "--out", str(tmp_path / "e6.png"), "--steps", "1:3"]) == 0   # exit status
    assert (tmp_path / "e6.png").stat().st_size > 0 and (tmp_path / "e6.steps1-2.png").exists()
    out = capsys.readouterr().out
    assert "E6.jsonl" in out and f"steps_figure: {tmp_path / 'e6.steps1-2.png'}" in out
    with pytest.raises(SystemExit): main(["timeline", str(run), "--steps", "3:1"])


def test_continuous_usage_stats(tiny_server):
    "vLLM's stream_options.continuous_usage_stats: usage in every chunk (with include_usage)."
    url = tiny_server.url
    body = {"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    lines = [json.loads(line[6:]) for line in httpx.post(f"{url}/v1/completions", json=body, timeout=60).text.splitlines()
             if line.startswith("data: {")]
    assert [chunk["usage"]["completion_tokens"] for chunk in lines] == [1, 2, 3, 3]


# ---------------------------------------------------------------- issue 50: roles, ignored fields, vLLM's routes
def test_any_role_the_template_renders(smollm2_server):
    "vLLM accepts any role string; the chat template decides (SmolLM2's renders `<|im_start|>ROLE`)."
    url = smollm2_server.url
    messages = [{"role": "narrator", "content": "Once upon a time."}, {"role": "user", "content": "Go on."}]
    r = _post(url, {"messages": messages, "max_tokens": 3}, "chat/completions")
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant", r.text
    ids = httpx.post(f"{url}/tokenize", json={"messages": messages}).json()["tokens"]
    assert "<|im_start|>narrator" in smollm2_server.async_llm.get_tokenizer().decode(ids)


def test_fields_nobody_reads_are_named_in_the_log(tiny_server, caplog):
    "vLLM's log lines: its removed guided_* fields (output NOT constrained) and any other unknown field."
    url = tiny_server.url
    with caplog.at_level("WARNING", logger="minivllm.api_server"):
        assert _post(url, {"prompt": [1, 2], "max_tokens": 2, "guided_json": {"type": "object"},
                           "my_field": 1}).status_code == 200
    assert "guided_json" in caplog.text and "will NOT be constrained" in caplog.text
    assert "present in the request but ignored: ['my_field']" in caplog.text


# vLLM 0.33's api_server for a text model (vllm/entrypoints/launchers/api_server/routers.py: the serve, models,
# decisions, SageMaker, generate, elastic-EP and scale-out routers; dev-mode and pooling routers not included)
VLLM_ROUTES = [("GET", "/health"), ("GET", "/load"), ("GET", "/version"), ("GET", "/kv_event_sources"),
               ("GET", "/metrics"), ("POST", "/tokenize"), ("POST", "/detokenize"), ("GET", "/v1/models"),
               ("POST", "/v1/systemone"), ("POST", "/v1/decisions"), ("GET", "/ping"), ("POST", "/ping"),
               ("POST", "/invocations"), ("POST", "/v1/chat/completions"), ("POST", "/v1/chat/completions/batch"),
               ("POST", "/v1/responses"), ("GET", "/v1/responses/r1"), ("POST", "/v1/responses/r1/cancel"),
               ("POST", "/v1/completions"), ("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens"),
               ("POST", "/generative_scoring"), ("POST", "/scale_elastic_ep"), ("POST", "/is_scaling_elastic_ep"),
               ("POST", "/v1/chat/completions/render"), ("POST", "/v1/completions/render"),
               ("POST", "/v1/messages/render"), ("POST", "/v1/responses/render"),
               ("POST", "/v1/chat/completions/derender"), ("POST", "/v1/completions/derender"),
               ("POST", "/inference/v1/generate"), ("POST", "/inference/v1/abort_requests"), ("POST", "/abort_requests")]


def test_every_vllm_route_is_served_or_says_why_not(tiny_server):
    url = tiny_server.url
    bodies = {"/tokenize": {"prompt": "x"}, "/detokenize": {"tokens": [1]}, "/invocations": {"prompt": [1, 2], "max_tokens": 2},
              "/v1/completions": {"prompt": [1, 2], "max_tokens": 2}}
    for method, route in VLLM_ROUTES:
        r = httpx.request(method, f"{url}{route}", json=bodies.get(route, {}), timeout=60)
        assert r.status_code != 404, (method, route)
        if r.status_code >= 400:
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["code"] == r.status_code, error
        if r.status_code == 501: assert route in r.json()["error"]["message"], r.text
    assert httpx.post(f"{url}/invocations", json={"prompt": [1, 2], "max_tokens": 2}).json()["object"] == "text_completion"
    assert httpx.get(f"{url}/load").json() == {"server_load": 0}
