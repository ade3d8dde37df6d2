"""Shared pytest setup: Triton kernels in the interpreter when there is no GPU, and the tiny models.

One fixture per kind of tiny model (random weights, `minivllm.testing.tiny_models`), built once per
session and shared by the test files (`make pytest` runs two sessions, pytest-xdist's workers, each
taking whole files):

- checkpoint folders: `tiny_llama_path`, `tiny_qwen2_path`, `tiny_qwen3_path` (`TINY_CONFIG`, a
  256-token vocabulary, no tokenizer); `tiny_paths_by_arch` (the three by architecture name);
  `tiny_llama_1k_vocab_path` (a 1024-token vocabulary); `tiny_llama_smollm2_tokenizer_path`
  (SmolLM2's 49152-token vocabulary, tokenizer and chat template);
  `tiny_llama_with_generation_config(config)` (a copy of `tiny_llama_path` with that
  generation_config.json).
- `tiny_llama_hf`: transformers' model of `tiny_llama_path`, the reference (do not modify it).
- `tiny_llm`: an `LLM` over `tiny_llama_path` with `TINY_LLM_ARGS` (compiled on CPU).
- `tiny_server`: a `TinyServer` (`.async_llm`, `.url`, `.path`, `.engine_args`): an `AsyncLLM` over
  `tiny_llama_path` with `TINY_SERVER_ARGS` behind the OpenAI server, serving the name "tiny".
- `serve_tiny`: starts another one, `with serve_tiny(path, **engine_args) as server: ...`.

And the embedded SmolLM2-135M-Instruct (real weights and tokenizer: text, stop strings, chat), for
the tests that read what it says:

- `smollm2_llm`: an `LLM` with `SMOLLM2_LLM_ARGS`.
- `smollm2_server`: a `TinyServer` over it with `SMOLLM2_SERVER_ARGS`, serving its folder's name.

The folders are never written to. The engines and servers are shared by several files: send
them requests, which leave the engine as they found it (idle, every block free). A test that needs
a fresh engine or other options builds its own from a path fixture (`LLM(tiny_llama_path, ...)`,
`serve_tiny(...)`), so nothing it does reaches another file.
"""
import contextlib
import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():
    # Must happen before any module defining a @triton.jit kernel is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.manual_seed(0)

ARCH_SEEDS = {"LlamaForCausalLM": 0, "Qwen2ForCausalLM": 1, "Qwen3ForCausalLM": 2}
TINY_LLM_ARGS = dict(num_gpu_blocks=64, max_model_len=256)
TINY_SERVER_ARGS = dict(num_gpu_blocks=320, max_model_len=1024, seed=0)
SMOLLM2_LLM_ARGS = dict(num_gpu_blocks=96, max_model_len=512)
SMOLLM2_SERVER_ARGS = dict(num_gpu_blocks=128, max_model_len=1024, seed=0)


def _tiny_checkpoint(tmp_path_factory, kind: str, name: str, **kwargs) -> Path:
    "A folder `name` (the model name in metrics and reports) in a folder of its own per kind."
    from minivllm.testing.tiny_models import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp(kind) / name, **kwargs)


# ---------------------------------------------------------------- checkpoints
@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory) -> Path:
    "A tiny random Llama checkpoint (`TINY_CONFIG`: 256-token vocabulary, no tokenizer)."
    return _tiny_checkpoint(tmp_path_factory, "tiny_llama", "tiny", arch="LlamaForCausalLM",
                            seed=ARCH_SEEDS["LlamaForCausalLM"])


@pytest.fixture(scope="session")
def tiny_qwen2_path(tmp_path_factory) -> Path:
    "A tiny random Qwen2 checkpoint (biases on q, k, v)."
    return _tiny_checkpoint(tmp_path_factory, "tiny_qwen2", "qwen2", arch="Qwen2ForCausalLM",
                            seed=ARCH_SEEDS["Qwen2ForCausalLM"])


@pytest.fixture(scope="session")
def tiny_qwen3_path(tmp_path_factory) -> Path:
    "A tiny random Qwen3 checkpoint (q and k norms)."
    return _tiny_checkpoint(tmp_path_factory, "tiny_qwen3", "qwen3", arch="Qwen3ForCausalLM",
                            seed=ARCH_SEEDS["Qwen3ForCausalLM"])


@pytest.fixture(scope="session")
def tiny_paths_by_arch(tiny_llama_path, tiny_qwen2_path, tiny_qwen3_path) -> dict[str, Path]:
    "The tiny checkpoint of each architecture, by its `architectures` name."
    return {"LlamaForCausalLM": tiny_llama_path, "Qwen2ForCausalLM": tiny_qwen2_path,
            "Qwen3ForCausalLM": tiny_qwen3_path}


@pytest.fixture(scope="session")
def tiny_llama_1k_vocab_path(tmp_path_factory) -> Path:
    "A tiny random Llama with a 1024-token vocabulary (room for the worked examples' prompt ids)."
    return _tiny_checkpoint(tmp_path_factory, "tiny_llama_1k_vocab", "llama",
                            arch="LlamaForCausalLM", seed=0, vocab_size=1024)


@pytest.fixture(scope="session")
def tiny_llama_smollm2_tokenizer_path(tmp_path_factory) -> Path:
    "A tiny random Llama with SmolLM2's 49152-token vocabulary, tokenizer and chat template."
    from minivllm.model_executor.model_loader import default_model_path
    path = _tiny_checkpoint(tmp_path_factory, "tiny_llama_smollm2_tokenizer", "tiny",
                            arch="LlamaForCausalLM", seed=0, vocab_size=49152)
    for f in default_model_path().iterdir():
        if f.name not in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copy(f, path)
    return path


@pytest.fixture(scope="session")
def tiny_llama_with_generation_config(tiny_llama_path, tmp_path_factory):
    "`make(config, name)`: a copy of `tiny_llama_path` whose generation_config.json is `config`."
    import json
    def make(generation_config: dict, name: str = "tiny_gen") -> Path:
        path = tmp_path_factory.mktemp("tiny_llama_with_generation_config") / name
        shutil.copytree(tiny_llama_path, path)
        (path / "generation_config.json").write_text(json.dumps(generation_config))
        return path
    return make


# ---------------------------------------------------------------- models and engines
@pytest.fixture(scope="session")
def tiny_llama_hf(tiny_llama_path):
    "transformers' model of `tiny_llama_path`, float32, eval mode: the reference. Do not modify it."
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(tiny_llama_path, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tiny_llm(tiny_llama_path):
    "An `LLM` over `tiny_llama_path` with `TINY_LLM_ARGS`, every other option its default."
    from minivllm.entrypoints.llm import LLM
    return LLM(tiny_llama_path, **TINY_LLM_ARGS)


@dataclasses.dataclass(frozen=True)
class TinyServer:
    "A served model: its `AsyncLLM`, the server's base URL, and what it was started with."
    async_llm: Any
    url: str
    path: Path
    name: str                          # the served model name (`"model"` in requests)
    engine_args: dict                  # the `AsyncLLM` options besides the path and num_threads=1


@pytest.fixture(scope="session")
def serve_tiny():
    """`with serve_tiny(path, name="tiny", **engine_args) as server`: the engine `serve` starts (one
    torch thread) behind the OpenAI server in a thread, both shut down after the block; a `TinyServer`."""
    from minivllm.entrypoints.openai.api_server import (build_app, build_async_engine_client,
                                                       serve_in_thread)

    @contextlib.contextmanager
    def serve(path, name: str = "tiny", **engine_args):
        with build_async_engine_client(path, num_threads=1, **engine_args) as async_llm, \
             serve_in_thread(build_app(async_llm, name)) as url:
            yield TinyServer(async_llm, url, Path(path), name, engine_args)
    return serve


@pytest.fixture(scope="session")
def tiny_server(serve_tiny, tiny_llama_path):
    "`tiny_llama_path` behind an `AsyncLLM` with `TINY_SERVER_ARGS` and the server, named tiny."
    with serve_tiny(tiny_llama_path, "tiny", **TINY_SERVER_ARGS) as server:
        yield server


@pytest.fixture(scope="session")
def smollm2_llm():
    "An `LLM` over the embedded SmolLM2-135M-Instruct with `SMOLLM2_LLM_ARGS`."
    from minivllm.entrypoints.llm import LLM
    return LLM(**SMOLLM2_LLM_ARGS)


@pytest.fixture(scope="session")
def smollm2_server(serve_tiny):
    "The embedded SmolLM2-135M-Instruct behind an `AsyncLLM` with `SMOLLM2_SERVER_ARGS` and the server."
    from minivllm.model_executor.model_loader import DEFAULT_MODEL, default_model_path
    with serve_tiny(default_model_path(), DEFAULT_MODEL, **SMOLLM2_SERVER_ARGS) as server:
        yield server
