"""The installed `minivllm` command, run as a shell runs it (issue 50): exit status 0 when it did its
work, 1 and one line on stderr when it could not, 2 (argparse's) for a flag it does not know."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MINIVLLM = Path(sys.executable).with_name("minivllm")        # the console script of the install
SMALL = ["--enforce-eager", "--num-gpu-blocks-override", "32", "--max-model-len", "256"]


def minivllm(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([str(MINIVLLM), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=900)


def test_help_exits_zero():
    for args in (["--help"], ["bench", "serve", "--help"], ["generate", "--help"]):
        done = minivllm(*args)
        assert done.returncode == 0 and done.stdout.startswith("usage: minivllm"), done.stderr


def test_generate_exits_zero(tiny_llama_smollm2_tokenizer_path):
    done = minivllm("generate", "What is the capital of France?", "Name a colour.", "--model",
                    tiny_llama_smollm2_tokenizer_path, "--max-tokens", "4", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [l for l in done.stdout.splitlines() if l.startswith("> ")] == [
        "> What is the capital of France?", "> Name a colour."]


def test_bench_throughput_exits_zero(tiny_llama_path):
    done = minivllm("bench", "throughput", "--model", tiny_llama_path, "--num-prompts", "2",
                    "--input-len", "8", "--output-len", "4", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("Throughput: ") and "Total num output tokens:  8" in done.stdout


def test_failures_exit_one_with_one_line():
    cases = [(["generate", "Hi", "--model", "/no/such/model"],
              "minivllm generate: error: model '/no/such/model' is not a folder"),
             (["bench", "serve", "--base-url", "http://127.0.0.1:9", "--num-prompts", "1"],
              "minivllm bench serve: error: cannot read http://127.0.0.1:9/v1/models"),
             (["timeline", "/no/such/run.jsonl"], "minivllm timeline: error: ")]
    for args, start in cases:
        done = minivllm(*args)
        assert done.returncode == 1, (args, done.stderr[-2000:])
        assert done.stderr.strip().splitlines()[-1].startswith(start), done.stderr[-2000:]
        assert "Traceback" not in done.stderr
    done = minivllm("generate", "Hi", "--max-tokenz", "3")
    assert done.returncode == 2 and "unrecognized arguments: --max-tokenz" in done.stderr
