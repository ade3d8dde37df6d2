"""One bad request must never hurt anyone else (issue 23): the regression cases, on loopback.

Each case checks the answer (a 400 naming the field, or a 200) and then that nothing leaked: no request in
flight in the front end, none running or waiting in the engine, every KV block free again."""
import asyncio, json, os, signal, threading, time
import httpx, pytest, torch
from minivllm.engine.async_llm import (AsyncLLM, EngineCoreRequestType, EngineDeadError, EngineRequestError,
                                       RequestOutputCollector, encode_request, request_to_wire)
from minivllm.entrypoints.openai.api_server import build_app, serve_in_thread
from minivllm.request import Request
from minivllm.sampling_params import SamplingParams
from minivllm.sampling_params import RequestOutputKind

torch.set_num_threads(1)
TINY = dict(num_gpu_blocks=96, max_model_len=256, seed=0)   # the engines this file starts (and kills)
GREEDY = dict(prompt=[5, 9, 14, 2, 7], max_tokens=8, temperature=0, ignore_eos=True)


def idle_stats(url, timeout=10.0) -> dict:
    "/stats once nothing runs or waits (or after `timeout`)."
    deadline = time.monotonic() + timeout
    while True:
        s = httpx.get(f"{url}/stats").json()
        if s["num_running_reqs"] + s["num_waiting_reqs"] + s["num_requests_in_flight"] == 0 \
                or time.monotonic() > deadline: return s
        time.sleep(0.05)


def assert_idle(url):
    s = idle_stats(url)
    assert (s["num_running_reqs"], s["num_waiting_reqs"], s["num_requests_in_flight"]) == (0, 0, 0), s
    assert s["num_free_blocks"] == s["num_gpu_blocks"] - 1, s     # all but the null block


def greedy_text(url) -> list[int]:
    r = httpx.post(f"{url}/v1/completions", json=GREEDY | {"return_token_ids": True}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def check_400(r, param):
    assert r.status_code == 400, (r.status_code, r.text)
    error = r.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400, error
    assert error["param"] == param, error


BAD = [   # (endpoint, body, param): each one of the cases
    ("completions", {"seed": 2**64}, "seed"),
    ("completions", {"seed": 2**64 - 1, "n": 2, "temperature": 1}, "seed"),
    ("completions", {"seed": -2**63 - 1}, "seed"),
    ("completions", {"n": 2**64, "temperature": 1}, "n"),
    ("completions", {"n": 1025, "temperature": 1}, "n"),          # --max-sequences-per-request
    ("completions", {"max_tokens": 2**64}, "max_tokens"),
    ("completions", {"min_tokens": 2**70}, "min_tokens"),
    ("completions", {"stop_token_ids": [2**64]}, "stop_token_ids"),
    ("completions", {"stop_token_ids": [10**9], "stream": True}, "stop_token_ids"),
    ("completions", {"logprobs": 100000, "stream": True}, "logprobs"),
    ("completions", {"logprobs": 21}, "logprobs"),
    ("completions", {"logprobs": 2**64}, "logprobs"),
    ("completions", {"temperature": float("inf")}, "temperature"),
    ("completions", {"temperature": float("nan")}, "temperature"),
    ("completions", {"repetition_penalty": float("inf"), "stream": True}, "repetition_penalty"),
    ("completions", {"top_p": 0, "stream": True}, "top_p"),
    ("completions", {"prompt": [2**64]}, "prompt"),
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "messages.0.content"),
    ("chat/completions", {"messages": [{"role": "user"}]}, "messages.0.content"),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}, "messages"),
]


@pytest.mark.parametrize("endpoint,body,param", BAD, ids=[f"{e}:{p}" for e, _, p in BAD])
def test_bad_request_is_a_400_naming_the_field_and_leaks_nothing(tiny_server, endpoint, body, param):
    url = tiny_server.url
    base = {"prompt": [1, 2, 3], "max_tokens": 4} if endpoint == "completions" else {}
    text = json.dumps(base | body)   # Infinity and NaN as Python's json writes them
    r = httpx.post(f"{url}/v1/{endpoint}", content=text, headers={"content-type": "application/json"})
    check_400(r, param)
    assert "Traceback" not in r.text and ".py" not in r.text
    assert_idle(url)


def test_huge_top_k_keeps_every_token_and_the_engine_lives(tiny_server):
    "top_k 2^31 used to overflow the input batch's int32 and kill the engine for good; past 64 bits it is a 400."
    url = tiny_server.url
    before = greedy_text(url)
    for top_k in (2**31, 2**63 - 1, 256, 257):
        r = httpx.post(f"{url}/v1/completions", json=GREEDY | {"top_k": top_k, "temperature": 0.7, "seed": 1})
        assert r.status_code == 200, r.text
    check_400(httpx.post(f"{url}/v1/completions", json=GREEDY | {"top_k": 2**64}), "top_k")
    assert greedy_text(url) == before
    assert_idle(url)


def test_streamed_bad_request_gets_400_before_the_stream(tiny_server):
    url = tiny_server.url
    body = {"prompt": [1, 2, 3], "stream": True, "stop_token_ids": [1000000000]}
    with httpx.stream("POST", f"{url}/v1/completions", json=body) as r:
        r.read()
    check_400(r, "stop_token_ids")
    assert r.headers["content-type"].startswith("application/json")


def test_logprobs_cap_matches_vllm(tiny_server):
    url = tiny_server.url
    ok = httpx.post(f"{url}/v1/completions", json=GREEDY | {"logprobs": 20})
    assert ok.status_code == 200 and len(ok.json()["choices"][0]["logprobs"]["top_logprobs"][0]) == 20
    check_400(httpx.post(f"{url}/v1/completions", json=GREEDY | {"logprobs": 21}), "logprobs")
    check_400(httpx.post(f"{url}/v1/completions", json=GREEDY | {"prompt_logprobs": 21}), "prompt_logprobs")
    with pytest.raises(ValueError, match="max allowed: 20"):    # AsyncLLM's own: LLM's check and message
        asyncio.run(tiny_server.async_llm.add_request("x", [1, 2], SamplingParams(logprobs=21)))
    assert_idle(url)


def test_abort_ends_the_readers_stream(tiny_server):
    "AsyncLLM.abort(id) used to leave the reader waiting forever; now it reads finish_reason='abort'."
    async_llm, url = tiny_server.async_llm, tiny_server.url
    async def run(sp):
        agen = async_llm.generate([3, 4, 5], sp, "to-abort")
        first = await anext(agen)
        async_llm.abort("to-abort")
        rest = [out async for out in agen]   # ends: no hang
        return first, rest
    for sp in (SamplingParams(temperature=0, max_tokens=200, ignore_eos=True),
               SamplingParams(n=2, seed=3, temperature=1, max_tokens=200, ignore_eos=True)):
        first, rest = asyncio.run(asyncio.wait_for(run(sp), 30))
        assert rest and rest[-1].finished
        reasons = {c.index: c.finish_reason for out in [first, *rest] for c in out.outputs if c.finish_reason}
        assert set(reasons.values()) == {"abort"} and len(reasons) == sp.n
    assert_idle(url)


def test_failed_send_is_undone(tiny_server, monkeypatch):
    "Registration and sending are one step: a send that fails leaves nothing registered."
    async_llm, url = tiny_server.async_llm, tiny_server.url
    def broken(frames): raise OSError("socket gone")
    monkeypatch.setattr(async_llm, "_send_frames", broken)
    sp = SamplingParams(n=3, seed=1, temperature=1, max_tokens=4)
    with pytest.raises(OSError): asyncio.run(async_llm.add_request("x", [1, 2, 3], sp))
    monkeypatch.undo()
    assert async_llm.num_requests_in_flight == 0 and not async_llm.output_processor.parent_requests
    assert_idle(url)


def test_text_prompts_are_tokenised_off_the_event_loop(tiny_server, monkeypatch):
    "A 2 MB prompt is tokenised in the tokenizer thread, so the event loop keeps answering /health."
    async_llm, url = tiny_server.async_llm, tiny_server.url
    threads = []
    original = async_llm.tokenize_prompt
    def spy(prompt):
        threads.append(threading.current_thread().name)
        return original(prompt)
    monkeypatch.setattr(async_llm, "tokenize_prompt", spy)
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "x" * 2_000_000}, timeout=60)
    check_400(r, "prompt")                              # the tiny model has no tokenizer
    assert threads and all(t.startswith("tokenizer") for t in threads), threads


async def _tokens(async_llm, prompt, sp, request_id):
    delta = RequestOutputKind.DELTA
    return [t async for out in async_llm.generate(prompt, sp, request_id, output_kind=delta)
            for t in out.outputs[0].token_ids]


def test_a_failing_request_fails_alone(tiny_server):
    """A request that slips past the door and fails inside the engine's step (a logit_bias token id past the
    vocabulary indexes out of the logits) joins a running batch: it gets an error, the others finish with the same tokens. The batch
    is long enough (200 tokens) to be seen running together on a loaded machine, where 24 tokens could finish first."""
    async_llm, url = tiny_server.async_llm, tiny_server.url
    prompts = [[7 + i, 3, 9, 11 + i] * 3 for i in range(4)]
    sp = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
    async def alone(): return [await _tokens(async_llm, p, sp, f"alone-{i}") for i, p in enumerate(prompts)]
    expected = asyncio.run(alone())

    async def with_poison():
        tasks = [asyncio.create_task(_tokens(async_llm, p, sp, f"batch-{i}")) for i, p in enumerate(prompts)]
        while (await async_llm.get_stats())["num_running_reqs"] < 4:   # all four in one batch
            assert not any(t.done() for t in tasks), "a request of the batch finished before all four ran"
            await asyncio.sleep(0.01)
        # bypass AsyncLLM.add_request's checks: register and send by hand, as a buggy client might
        # valid alone; only the input processor, bypassed here, knows the vocabulary
        sp_poison = SamplingParams(temperature=1, max_tokens=8, logit_bias={10**6: 1.0})
        poison = Request("poison", [1, 2, 3], sp_poison, None)
        collector = RequestOutputCollector(asyncio.get_running_loop())
        with async_llm.processor_lock:
            async_llm.output_processor.add_request(poison, None, None, 0, collector)
        async_llm._send_frames(encode_request(EngineCoreRequestType.ADD, request_to_wire(poison)))
        # fails in the step (the sampler's logit_bias), or at the engine's door if it ever checks ids
        with pytest.raises((EngineRequestError, ValueError)): await collector.get()
        return await asyncio.gather(*tasks)
    got = asyncio.run(asyncio.wait_for(with_poison(), 120))
    assert got == expected
    assert_idle(url)
    assert httpx.get(f"{url}/health").status_code == 200


def _wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate(): return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("keep_alive", [False, True])
def test_a_stall_past_engine_stall_timeout_is_fatal(tiny_llama_path, keep_alive):
    """With --engine-stall-timeout set, a frozen engine (SIGSTOP) is declared dead past it: an in-flight request
    gets an error, the frozen process is killed, and the server exits with a log line (or stays up answering 503
    when told to). No traceback reaches clients. (Without the flag a stall is never fatal: test_server_fuzz.py.)"""
    # a request long enough to be still running when the engine stops, on a loaded machine too
    with AsyncLLM(tiny_llama_path, num_threads=1, heartbeat_timeout=1.0, engine_stall_timeout=2.0,
                  **{**TINY, "max_model_len": 1024}) as async_llm:
        app = build_app(async_llm, "tiny", keep_alive_on_engine_death=keep_alive)
        with serve_in_thread(app) as url:
            assert httpx.get(f"{url}/health").status_code == 200
            results = {}
            def stream():
                body = {"prompt": [1, 2, 3], "max_tokens": 1000, "ignore_eos": True, "stream": True}
                with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as r:
                    results["lines"] = [line for line in r.iter_lines() if line]
            reader = threading.Thread(target=stream); reader.start()
            assert _wait_for(lambda: async_llm.num_requests_in_flight == 1, 10)
            os.kill(async_llm.proc.pid, signal.SIGSTOP)
            try:
                reader.join(30)
                health = [httpx.get(f"{url}/health", timeout=2).status_code] if keep_alive else []
            finally:
                if async_llm.proc.is_alive(): os.kill(async_llm.proc.pid, signal.SIGCONT)
            error = json.loads(results["lines"][-2][6:])["error"]
            assert results["lines"][-1] == "data: [DONE]" and error["code"] == 500
            assert "Traceback" not in error["message"] and ".py" not in error["message"]
            assert isinstance(async_llm.errored, EngineDeadError) and "engine_stall_timeout" in str(async_llm.errored)
            assert _wait_for(lambda: not async_llm.proc.is_alive(), 10)      # killed: it holds no device
            if keep_alive:
                assert health == [503]
                r = httpx.post(f"{url}/v1/completions", json={"prompt": [1, 2], "max_tokens": 2})
                assert r.status_code == 500 and "Traceback" not in r.text
            else:
                def down():
                    try: httpx.get(f"{url}/health", timeout=1); return False
                    except httpx.TransportError: return True
                assert _wait_for(down, 10)


def test_serve_exits_when_the_engine_dies(tiny_llama_path):
    """`serve` (what `minivllm serve` runs) logs the step's token budget at start-up (vLLM's line), and stops with
    status 1 and one clear log line once its engine dies."""
    import socket, subprocess, sys
    psutil = pytest.importorskip("psutil")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    code = (f"from minivllm.entrypoints.openai.api_server import serve; serve({str(tiny_llama_path)!r}, port={port}, "
            "num_threads=1, num_gpu_blocks=64, max_model_len=256, max_num_batched_tokens=512)")
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def up():
            try: return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.TransportError: return False
        assert _wait_for(up, 300), "the server did not start"
        engines = [p for p in psutil.Process(server.pid).children()
                   if "resource_tracker" not in " ".join(p.cmdline())]
        assert len(engines) == 1, engines
        engines[0].kill()
        out, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None: server.kill()
    assert server.returncode == 1, out[-2000:]
    assert "INFO" in out and "Chunked prefill is enabled with max_num_batched_tokens=512." in out, out[-2000:]
    assert "engine dead (engine process exited with code -9); shutting the server down" in out, out[-2000:]
    assert "the engine died, so the server stopped" in out
