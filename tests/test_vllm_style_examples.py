"""Scripts written the way vLLM's examples are (issue 50): each in tests/vllm_style_examples/ is our
own code in the form of one of vLLM 0.33's `examples/offline_inference/` scripts, and runs here as a
subprocess, on a tiny model, with only its imports changed (`vllm` -> `minivllm`, `v1.` dropped).
The other direction is checked too: every name they import from minivllm is where the porting rule
puts it in vLLM 0.33's source (`make vllm-env`), so the same scripts with `vllm` imports run on vLLM."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "vllm_style_examples"
VLLM_VENV = Path(os.environ.get("VLLM_VENV", ROOT / "build" / "vllm-venv"))
SMALL = ["--enforce-eager", "--num-gpu-blocks-override", "64", "--max-model-len", "256"]


def run(script: str, *args, model: Path) -> str:
    "Run one example as a script (one torch thread, $MODEL set); its stdout, after exit status 0."
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MODEL=str(model))
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_llm_engine_step_loop(tiny_llama_smollm2_tokenizer_path):
    "LLMEngine.from_engine_args(EngineArgs.from_cli_args(...)), add_request between steps."
    out = run("llm_engine_example.py", "--model", tiny_llama_smollm2_tokenizer_path, *SMALL,
              model=tiny_llama_smollm2_tokenizer_path)
    finished = re.findall(r"RequestOutput\(request_id=(\S+?),", out)
    assert sorted(finished) == ["'0'", "'1'", "'2'"], out[-2000:]
    assert out.count("-" * 50) == 1 + len(finished)


def test_flexible_parser_with_engine_args_and_sampling_flags(tiny_llama_smollm2_tokenizer_path):
    "FlexibleArgumentParser + EngineArgs.add_cli_args + its own flags, then LLM(**vars(args))."
    out = run("generate.py", "--model", tiny_llama_smollm2_tokenizer_path, *SMALL,
              "--max_tokens", "5", "--temperature", "0", model=tiny_llama_smollm2_tokenizer_path)
    prompts = re.findall(r"^Prompt: '(.*)'$", out, re.M)
    assert prompts == ["Hello, my name is", "The president of the United States is",
                       "The capital of France is", "The future of AI is"]


def test_async_llm_from_engine_args_streams(tiny_llama_smollm2_tokenizer_path):
    "AsyncLLM.from_engine_args(AsyncEngineArgs(...)) and DELTA outputs until finished."
    out = run("async_llm_streaming.py", model=tiny_llama_smollm2_tokenizer_path)
    assert re.findall(r"^Done: (\S+)$", out, re.M) == [f"stream-example-{i}" for i in range(3)]


def test_get_metrics_reader_types(tiny_llama_smollm2_tokenizer_path):
    "LLM(disable_log_stats=False).get_metrics() with the reader's Counter/Gauge/Histogram/Vector."
    out = run("metrics.py", model=tiny_llama_smollm2_tokenizer_path)
    counters = dict(re.findall(r"^(vllm:\S+) \(counter\) = (\d+)$", out, re.M))
    assert int(counters["vllm:prompt_tokens"]) > 0 and int(counters["vllm:generation_tokens"]) >= 4
    assert "vllm:time_to_first_token_seconds (histogram)" in out
    assert re.search(r"^vllm:num_requests_running \(gauge\) = 0", out, re.M)


def test_two_llms_with_cleanup_between(tiny_llama_smollm2_tokenizer_path):
    "del llm; cleanup_dist_env_and_memory(); a second LLM, whose greedy answers are the same."
    out = run("prefix_caching.py", model=tiny_llama_smollm2_tokenizer_path)
    assert out.strip().endswith("Generated answers are the same: True"), out[-2000:]


def imports(script: Path) -> list[tuple[str, str]]:
    "(module, name) of every `from minivllm... import name` in a script."
    tree = ast.parse(script.read_text())
    return [(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] == "minivllm"
            for alias in node.names]


def vllm_defines(module: str, name: str) -> bool:
    "Whether vLLM 0.33 has `name` in `vllm.<module>` or `vllm.v1.<module>` (the porting rule)."
    root = next(VLLM_VENV.glob("lib/python3*/site-packages/vllm"))
    rel = module.removeprefix("minivllm").lstrip(".").replace(".", "/")
    candidates = [p for base in (root, root / "v1")
                  for p in ((base / rel).with_suffix(".py"), base / rel / "__init__.py") if rel] \
        or [root / "__init__.py"]
    return any(p.is_file() and defines(p, name) for p in candidates)


def defines(path: Path, name: str) -> bool:
    "Whether a source file defines or imports `name`, following its `from .x import *`."
    text = path.read_text()
    pattern = rf"(def|class) {name}\b|^{name}\s*[:=]|import[^\n]*\b{name}\b|[\"']{name}[\"']"
    if re.search(pattern, text, re.M): return True
    stars = re.findall(r"^from \.(\w+) import \*", text, re.M)
    return any(defines(path.parent / f"{star}.py", name) for star in stars
               if (path.parent / f"{star}.py").is_file())


def test_the_examples_imports_exist_in_vllm():
    if not VLLM_VENV.exists(): pytest.skip("no vLLM venv (make vllm-env)")
    names = [(m, n) for script in sorted(EXAMPLES.glob("*.py")) for m, n in imports(script)]
    assert len(names) >= 15
    assert [(m, n) for m, n in names if not vllm_defines(m, n)] == []
