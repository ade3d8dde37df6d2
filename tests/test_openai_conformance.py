"""Every request field of vLLM's OpenAI protocol is honoured by minivllm's server or answered with a 400 that names
it: never a silent 200 (issue 20). Unknown fields follow vLLM's rule: accepted and ignored.

The field lists are vLLM 0.33.0's pydantic models, `list(CompletionRequest.model_fields)` of
vllm/entrypoints/openai/completion/protocol.py and `list(ChatCompletionRequest.model_fields)` of
vllm/entrypoints/openai/chat_completion/protocol.py, printed once from /tmp/oracle/venv and pasted here."""
import httpx, pytest, torch
from minivllm.entrypoints.openai.api_server import ChatCompletionRequest, CompletionRequest, UNSUPPORTED

torch.set_num_threads(1)
VLLM_VERSION = "0.33.0"
VLLM_COMPLETION_FIELDS = [
    'model', 'prompt', 'echo', 'frequency_penalty', 'logit_bias', 'logprobs', 'max_tokens', 'n', 'presence_penalty',
    'seed', 'stop', 'stream', 'stream_options', 'suffix', 'temperature', 'top_p', 'user', 'use_beam_search', 'top_k',
    'min_p', 'repetition_penalty', 'watermarking', 'length_penalty', 'stop_token_ids', 'include_stop_str_in_output',
    'ignore_eos', 'min_tokens', 'skip_special_tokens', 'spaces_between_special_tokens', 'truncate_prompt_tokens',
    'truncation_side', 'allowed_token_ids', 'prompt_logprobs', 'logprob_token_ids', 'bad_words', 'prompt_embeds',
    'add_special_tokens', 'response_format', 'structured_outputs', 'priority', 'request_id', 'session_id',
    'return_tokens_as_token_ids', 'return_token_ids', 'return_weight_versions', 'routed_experts_prompt_start',
    'return_token_offsets', 'mm_payload', 'return_mm_kwargs', 'cache_salt', 'kv_transfer_params', 'ec_transfer_params',
    'vllm_xargs', 'repetition_detection', 'thinking_token_budget', 'stream_interval']
VLLM_CHAT_FIELDS = [
    'messages', 'model', 'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs', 'max_tokens',
    'max_completion_tokens', 'n', 'presence_penalty', 'response_format', 'seed', 'stop', 'stream', 'stream_options',
    'temperature', 'top_p', 'tools', 'tool_choice', 'reasoning_effort', 'thinking_token_budget', 'include_reasoning',
    'parallel_tool_calls', 'user', 'use_beam_search', 'top_k', 'min_p', 'repetition_penalty', 'watermarking',
    'length_penalty', 'stop_token_ids', 'include_stop_str_in_output', 'ignore_eos', 'min_tokens',
    'skip_special_tokens', 'spaces_between_special_tokens', 'truncate_prompt_tokens', 'truncation_side',
    'prompt_logprobs', 'logprob_token_ids', 'allowed_token_ids', 'bad_words', 'echo', 'add_generation_prompt',
    'continue_final_message', 'add_special_tokens', 'documents', 'chat_template', 'chat_template_kwargs',
    'media_io_kwargs', 'mm_processor_kwargs', 'structured_outputs', 'priority', 'request_id', 'session_id',
    'return_tokens_as_token_ids', 'return_token_ids', 'return_weight_versions', 'routed_experts_prompt_start',
    'return_token_offsets', 'return_prompt_text', 'mm_payload', 'return_mm_kwargs', 'cache_salt',
    'kv_transfer_params', 'ec_transfer_params', 'vllm_xargs', 'repetition_detection', 'stream_interval']

# an honoured field, a value other than its default, and the test that checks its effect
HONOURED = {
    "model": ("SmolLM2-135M-Instruct", "test_server.py::test_bad_requests_get_openai_400"),
    "echo": (True, "test_server.py::test_echo_and_bad_words_embedded"),
    "frequency_penalty": (0.5, "test_server.py::test_sampling_fields_reach_the_engine"),
    "presence_penalty": (0.5, "test_server.py::test_sampling_fields_reach_the_engine"),
    "repetition_penalty": (1.2, "test_server.py::test_sampling_fields_reach_the_engine"),
    "temperature": (0.5, "test_server.py::test_server_defaults_come_from_the_generation_config"),
    "top_p": (0.9, "test_server.py::test_server_defaults_come_from_the_generation_config"),
    "top_k": (5, "test_server.py::test_server_defaults_come_from_the_generation_config"),
    "min_p": (0.1, "test_server.py::test_sampling_fields_reach_the_engine"),
    "logit_bias": ({"42": 5.0}, "test_server.py::test_logit_bias_allowed_token_ids_and_seed_minus_one"),
    "logprobs": (2, "test_server.py::test_n_and_logprobs_tiny"),
    "top_logprobs": (2, "test_server.py::test_chat_logprobs_and_n_embedded"),
    "max_tokens": (3, "test_server.py::test_bad_requests_get_openai_400"),
    "max_completion_tokens": (3, "test_server.py::test_chat_template_options"),
    "n": (2, "test_server.py::test_n_and_logprobs_tiny"),
    "seed": (-1, "test_server.py::test_logit_bias_allowed_token_ids_and_seed_minus_one"),
    "stop": (["\n"], "test_server.py::test_stop_strings_and_validation"),
    "stream": (True, "test_server.py::test_n_and_logprobs_tiny"),
    "stream_options": ({"include_usage": True}, "test_server.py::test_unknown_fields_are_ignored_and_stream_options_need_stream"),
    "user": ("someone", "nothing to do: vLLM ignores it too"),
    "stop_token_ids": ([13], "test_robustness.py::test_streamed_bad_request_gets_400_before_the_stream"),
    "include_stop_str_in_output": (True, "test_server.py::test_stop_strings_and_validation"),
    "ignore_eos": (True, "test_server.py::test_n_and_logprobs_tiny"),
    "min_tokens": (2, "test_server.py::test_sampling_fields_reach_the_engine"),
    "skip_special_tokens": (False, "test_server.py::test_skip_special_tokens_reaches_the_engine"),
    "allowed_token_ids": ([13, 14], "test_server.py::test_logit_bias_allowed_token_ids_and_seed_minus_one"),
    "prompt_logprobs": (1, "test_server.py::test_prompt_arrays_prompt_logprobs_and_echo"),
    "bad_words": (["Paris"], "test_server.py::test_echo_and_bad_words_embedded"),
    "add_special_tokens": (False, "encode_prompt in chapter 25"),
    "priority": (1, "400 unless the scheduling policy is 'priority', as vLLM"),
    "request_id": ("my-id", "test_openai_conformance.py::test_request_id_names_the_response"),
    "return_tokens_as_token_ids": (True, "test_openai_conformance.py::test_return_tokens_as_token_ids"),
    "return_token_ids": (True, "test_server.py::test_n_and_logprobs_tiny"),
    "add_generation_prompt": (False, "test_server.py::test_chat_template_options"),
    "continue_final_message": (True, "test_server.py::test_chat_template_options"),
    "chat_template": ("{{ messages }}", "test_server.py::test_chat_template_options"),
    "chat_template_kwargs": ({"enable_thinking": False}, "test_server.py::test_chat_template_options"),
    "include_reasoning": (False, "no reasoning parser: nothing to include or leave out"),
    "parallel_tool_calls": (False, "about tools only, and tools are refused"),
    "prompt": ([[1, 2], [3, 4]], "test_server.py::test_prompt_arrays_prompt_logprobs_and_echo"),
    "messages": ([{"role": "user", "content": "Hi"}], "test_server.py::test_chat_template_options"),
}


@pytest.fixture(scope="module")
def url(smollm2_server):
    return smollm2_server.url


def base(chat: bool) -> dict:
    if chat: return {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
    return {"prompt": "Hi", "max_tokens": 2, "temperature": 0}


@pytest.mark.parametrize("fields,model", [(VLLM_COMPLETION_FIELDS, CompletionRequest),
                                          (VLLM_CHAT_FIELDS, ChatCompletionRequest)])
def test_every_vllm_field_is_declared_or_refused(fields, model):
    "No field of vLLM's falls through to 'unknown, ignored': each is the server's own or in UNSUPPORTED."
    for name in fields:
        assert (name in model.model_fields) != (name in UNSUPPORTED), name
        assert name in UNSUPPORTED or name in HONOURED, name


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_unsupported_fields_are_400s_naming_them(url, chat):
    path, fields = ("chat/completions", VLLM_CHAT_FIELDS) if chat else ("completions", VLLM_COMPLETION_FIELDS)
    for name in (f for f in fields if f in UNSUPPORTED):
        r = httpx.post(f"{url}/v1/{path}", json=base(chat) | {name: "__probe__"}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == name, (name, r.text)
        for no_op in UNSUPPORTED[name]:   # vLLM's defaults ask for nothing: they pass
            r = httpx.post(f"{url}/v1/{path}", json=base(chat) | {name: no_op}, timeout=60)
            assert r.status_code == 200, (name, no_op, r.text)


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_honoured_fields_answer_200_or_a_400_naming_them(url, chat):
    path, fields = ("chat/completions", VLLM_CHAT_FIELDS) if chat else ("completions", VLLM_COMPLETION_FIELDS)
    for name in (f for f in fields if f not in UNSUPPORTED):
        value = HONOURED[name][0]
        if name == "prompt" and chat: continue
        body = base(chat) | {name: value}
        if name == "top_logprobs": body["logprobs"] = True
        if name == "logprobs" and chat: body["logprobs"] = True
        r = httpx.post(f"{url}/v1/{path}", json=body, timeout=60)
        if r.status_code != 200:
            assert r.status_code == 400 and r.json()["error"]["param"] == name, (name, r.text)


def test_unknown_fields_are_ignored_as_vllm(url):
    "vLLM's OpenAIBaseModel (vllm/entrypoints/serve/engine/protocol.py) has extra='allow' and logs them."
    for chat in (False, True):
        path = "chat/completions" if chat else "completions"
        r = httpx.post(f"{url}/v1/{path}", json=base(chat) | {"not_a_field": [1, {"x": None}]}, timeout=60)
        assert r.status_code == 200, r.text


def test_request_id_names_the_response(url):
    "vLLM: the response id is `cmpl-<request_id>` (serving.py `_base_request_id`)."
    r = httpx.post(f"{url}/v1/completions", json=base(False) | {"request_id": "abc"}, timeout=60).json()
    assert r["id"] == "cmpl-abc"


def test_return_tokens_as_token_ids(url):
    r = httpx.post(f"{url}/v1/completions", json=base(False) | {"logprobs": 1, "return_tokens_as_token_ids": True},
                   timeout=60).json()
    assert all(t.startswith("token_id:") for t in r["choices"][0]["logprobs"]["tokens"])


def test_each_honoured_field_names_an_existing_test():
    "Where HONOURED says a test checks a field's effect, that test exists."
    from pathlib import Path
    here = Path(__file__).parent
    for name, (_, where) in HONOURED.items():
        if "::" in where:
            file, test = where.split("::")
            assert f"def {test}(" in (here / file).read_text(), (name, where)
