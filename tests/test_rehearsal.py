"""`import minivllm` from a plain checkout (issue 21, item 1): the GPU check only puts the repository on
PYTHONPATH, so the package must import without its installed metadata (no `pip install`)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(code: str, *flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, *flags, "-c", code], cwd="/", env=env, capture_output=True,
                          text=True, timeout=300)


def test_import_without_site_packages():
    "`python -S`: no site-packages, so neither the editable install's finder nor its dist-info is seen."
    p = run("import importlib.metadata as m, minivllm\n"
            "try: m.version('minivllm'); print('METADATA FOUND')\n"
            "except m.PackageNotFoundError: pass\n"
            "print(repr(minivllm.__version__), minivllm.__file__)", "-S")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "METADATA FOUND" not in p.stdout, "the metadata was not hidden: the test proves nothing"
    version, path = p.stdout.split()
    assert eval(version) and isinstance(eval(version), str)
    assert Path(path).resolve() == ROOT / "minivllm" / "__init__.py"


def test_public_api_without_metadata():
    "With importlib.metadata answering PackageNotFoundError for minivllm, the public API still loads."
    p = run("import importlib.metadata as m\n"
            "real = m.version\n"
            "def version(name):\n"
            "    if name == 'minivllm': raise m.PackageNotFoundError(name)\n"
            "    return real(name)\n"
            "m.version = version\n"
            "import minivllm\n"
            "from minivllm import LLM, SamplingParams, EngineArgs, Scheduler\n"
            "print(minivllm.__version__, SamplingParams(max_tokens=3).max_tokens)")
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-1] == "3", p.stdout
