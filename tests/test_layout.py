"""The package's layout (issue 18): each module where vLLM keeps its namesake, one notebook writing
each module, no chapter importing a later one, and what must stay light stays light."""
import ast, importlib.util, json, re, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NBS = sorted((ROOT / "nbs").glob("*.ipynb"))

# minivllm's module -> where vLLM 0.33 keeps its namesake (a module, or a package of that name).
# minivllm drops vLLM's `v1/` (it has no V0 engine beside it); every other folder is vLLM's.
VLLM_NAMESAKES = {
    "request.py": "vllm/v1/request.py",
    "sampling_params.py": "vllm/sampling_params.py",
    "outputs.py": "vllm/outputs.py",
    "inputs/llm.py": "vllm/inputs/llm.py",
    "config.py": "vllm/config",
    "forward_context.py": "vllm/forward_context.py",
    "core/block_pool.py": "vllm/v1/core/block_pool.py",
    "core/kv_cache_manager.py": "vllm/v1/core/kv_cache_manager.py",
    "core/sched/output.py": "vllm/v1/core/sched/output.py",
    "core/sched/request_queue.py": "vllm/v1/core/sched/request_queue.py",
    "core/sched/scheduler.py": "vllm/v1/core/sched/scheduler.py",
    "core/sched/async_scheduler.py": "vllm/v1/core/sched/async_scheduler.py",
    "executor/uniproc_executor.py": "vllm/v1/executor/uniproc_executor.py",
    "worker/gpu_input_batch.py": "vllm/v1/worker/gpu_input_batch.py",
    "worker/block_table.py": "vllm/v1/worker/block_table.py",
    "worker/gpu_model_runner.py": "vllm/v1/worker/gpu_model_runner.py",
    "worker/utils.py": "vllm/v1/worker/utils.py",
    "sample/sampler.py": "vllm/v1/sample/sampler.py",
    "utils/torch_utils.py": "vllm/utils/torch_utils.py",
    "utils/math_utils.py": "vllm/utils/math_utils.py",
    "triton_utils/importing.py": "vllm/triton_utils/importing.py",
    "transformers_utils/config.py": "vllm/transformers_utils/config.py",
    "_custom_ops.py": "vllm/_custom_ops.py",
    "attention/backend.py": "vllm/v1/attention/backend.py",
    "attention/selector.py": "vllm/v1/attention/selector.py",
    "attention/backends/triton_attn.py": "vllm/v1/attention/backends/triton_attn.py",
    "attention/backends/cpu_attn.py": "vllm/v1/attention/backends/cpu_attn.py",
    "model_executor/custom_op.py": "vllm/model_executor/custom_op.py",
    "model_executor/layers/layernorm.py": "vllm/model_executor/layers/layernorm.py",
    "model_executor/layers/rotary_embedding.py": "vllm/model_executor/layers/rotary_embedding",
    "model_executor/layers/activation.py": "vllm/model_executor/layers/activation.py",
    "model_executor/layers/linear.py": "vllm/model_executor/layers/linear.py",
    "model_executor/layers/utils.py": "vllm/model_executor/layers/utils.py",
    "model_executor/layers/logits_processor.py": "vllm/model_executor/layers/logits_processor.py",
    "model_executor/layers/attention/attention.py": "vllm/model_executor/layers/attention/attention.py",
    "model_executor/models/llama.py": "vllm/model_executor/models/llama.py",
    "model_executor/model_loader.py": "vllm/model_executor/model_loader",
    "compilation/cuda_graph.py": "vllm/compilation/cuda_graph.py",
    "compilation/wrapper.py": "vllm/compilation/wrapper.py",
    "compilation/caching.py": "vllm/compilation/caching.py",
    "compilation/compiler_interface.py": "vllm/compilation/compiler_interface.py",
    "worker/gpu_worker.py": "vllm/v1/worker/gpu_worker.py",
    "engine/arg_utils.py": "vllm/engine/arg_utils.py",
    "engine/llm_engine.py": "vllm/v1/engine/llm_engine.py",
    "utils/argparse_utils.py": "vllm/utils/argparse_utils.py",
    "distributed/parallel_state.py": "vllm/distributed/parallel_state.py",
    "metrics/reader.py": "vllm/v1/metrics/reader.py",
    "renderers/chat_utils.py": "vllm/renderers/chat_utils",
    "engine/core.py": "vllm/v1/engine/core.py",
    "engine/output_processor.py": "vllm/v1/engine/output_processor.py",
    "engine/async_llm.py": "vllm/v1/engine/async_llm.py",
    "engine/input_processor.py": "vllm/v1/engine/input_processor.py",
    "entrypoints/llm.py": "vllm/entrypoints/llm.py",
    "entrypoints/openai/api_server.py": "vllm/entrypoints/openai/api_server.py",
    "entrypoints/cli/main.py": "vllm/entrypoints/cli/main.py",
    "benchmarks/serve.py": "vllm/benchmarks/serve.py",
    "metrics/stats.py": "vllm/v1/metrics/stats.py",
    "platforms/cpu.py": "vllm/platforms/cpu.py",
    "usage/usage_lib.py": "vllm/usage/usage_lib.py",
    "entrypoints/common/cli_args.py": "vllm/entrypoints/common/cli_args.py",
}


VLLM = ROOT / "build" / "vllm-venv" / "lib" / "python3.11" / "site-packages"


def test_modules_sit_where_vllm_keeps_their_namesakes():
    for ours, theirs in VLLM_NAMESAKES.items():
        assert (ROOT / "minivllm" / ours).is_file(), ours
        relative = theirs.removeprefix("vllm/").removeprefix("v1/")
        assert ours.removesuffix(".py") == relative.removesuffix(".py"), (ours, theirs)
        if VLLM.is_dir():          # vLLM 0.33's own tree, where it is installed beside the checkout
            assert (VLLM / theirs).exists(), theirs


def test_cpp_sources_are_cpp_files():
    "The C++ kernels live in `csrc/cpu/` (vLLM's place), as files a compiler reads; no module holds C++."
    assert {p.name for p in (ROOT / "minivllm" / "csrc" / "cpu").iterdir()} >= {
        "vec.h", "attention.h", "attention.cpp", "attention_op.cpp", "gemm.cpp"}
    for path in (ROOT / "minivllm").rglob("*.py"):
        text = path.read_text()
        assert "#include" not in text and 'extern "C"' not in text, path


def src(cell) -> str:
    return "".join(cell["source"])


def export_targets(nb_path: Path) -> set[str]:
    "The modules a notebook writes: its `default_exp` and every `#| export MODULE`."
    cells = [src(c) for c in json.loads(nb_path.read_text())["cells"] if c["cell_type"] == "code"]
    default = next((m.group(1) for s in cells for m in [re.search(r"#\| default_exp (\S+)", s)] if m),
                   None)
    targets = set()
    for s in cells:
        m = re.match(r"#\|\s*export[ \t]*(\S*)[ \t]*$", s.split("\n", 1)[0])
        if m: targets.add(m.group(1) or default)
    return targets


WRITERS = {}
for nb in NBS:
    for module in export_targets(nb): WRITERS.setdefault(module, []).append(nb.stem)


def test_one_notebook_writes_each_module():
    assert {m: w for m, w in WRITERS.items() if len(w) > 1} == {}
    written = {m.replace(".", "/") + ".py" for m in WRITERS}
    on_disk = {p.relative_to(ROOT / "minivllm").as_posix() for p in (ROOT / "minivllm").rglob("*.py")}
    generated = {p for p in on_disk if p.endswith("__init__.py") and p not in written} | {"_modidx.py"}
    assert on_disk - generated == written


def test_one_cell_writes_each_cpp_file():
    "Each file under minivllm/csrc/ is one cell's `%%writefile` (which tools/export.py writes)."
    spec = importlib.util.spec_from_file_location("export", ROOT / "tools" / "export.py")
    spec.loader.exec_module(export := importlib.util.module_from_spec(spec))
    csrc = ROOT / "minivllm" / "csrc"
    written = export.csrc_files(ROOT / "nbs", csrc)   # ValueError: two cells write one file
    assert {p.resolve() for p in csrc.rglob("*") if p.is_file()} == set(written)


def imported_modules(code: str, public: dict[str, str]) -> set[str]:
    "The minivllm modules a cell imports (`from minivllm import X`: the module that defines X)."
    mods = set(re.findall(r"^\s*(?:from|import) minivllm\.([\w.]+)", code, re.M))
    for names in re.findall(r"^\s*from minivllm import \(?([\w, ]+)", code, re.M):
        mods |= {public[n.strip()] for n in names.split(",") if n.strip() in public}
    return mods


def test_no_chapter_imports_a_later_one():
    init = ast.parse((ROOT / "minivllm" / "__init__.py").read_text())
    api = next(n.value for n in init.body if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", "") == "PUBLIC_API")
    public = {name: mod for mod, names in ast.literal_eval(api).items() for name in names}
    order = {nb.stem: i for i, nb in enumerate(NBS)}
    later = []
    for nb in NBS:
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "code": continue
            for mod in imported_modules(src(cell), public):
                writer = WRITERS.get(mod, [None])[0]
                if writer and order[writer] > order[nb.stem]: later.append((nb.stem, mod, writer))
    assert sorted(set(later)) == []


def loaded_after(code: str) -> set[str]:
    "Heavy packages a fresh interpreter has loaded after running `code`."
    probe = (code + "\nimport sys; print(sorted(m for m in ('torch', 'transformers', 'triton', "
             "'matplotlib', 'fastapi', 'zmq') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


def test_model_free_worker_and_cli_help_load_no_torch():
    assert loaded_after("import minivllm.testing.fake_worker") == set()
    assert loaded_after("import minivllm.core.sched.scheduler, minivllm.config") == set()
    help_run = ("import sys, contextlib, io; sys.argv = ['minivllm', '--help']\n"
                "from minivllm.entrypoints.cli.main import main\n"
                "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()): main()")
    assert loaded_after(help_run) == set()


def test_editors_see_whole_classes():
    "`make export` writes every `@patch`ed method into its class, where jedi finds it."
    jedi = pytest.importorskip("jedi")
    cases = [("from minivllm import Scheduler\nScheduler(None, None).", "schedule"),
             ("from minivllm import KVCacheManager\nKVCacheManager(1, 1, 1).", "allocate_slots"),
             ("from minivllm import InputBatch\nInputBatch(1, 1, 1, 1).", "add_request")]
    for code, method in cases:
        script = jedi.Script(code, path=str(ROOT / "probe.py"), project=jedi.Project(ROOT))
        last = code.splitlines()[-1]
        assert method in [c.name for c in script.complete(2, len(last))], method


# Layers from the bottom up; a module may import its own layer and those below, never one above
# (lazy imports inside functions count too).
# Metrics' stats sit with the outputs (vLLM's `RequestOutput` carries them).
# The compile wrappers wrap a model and sit below the worker, which applies them (as vLLM's runner does).
LAYERS = [("utils", "platforms", "usage", "distributed", "triton_utils", "transformers_utils"),
          ("request", "sampling_params", "config", "inputs", "outputs", "core", "metrics.stats"),
          ("attention", "forward_context", "_custom_ops"), ("model_executor", "sample"), ("compilation",),
          ("worker",), ("executor",), ("engine", "metrics", "renderers"), ("entrypoints", "benchmarks")]


def layer_of(module: str) -> int | None:
    "The layer of the longest prefix of `module` that LAYERS names."
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        for i, names in enumerate(LAYERS):
            if ".".join(parts[:n]) in names: return i


def package_imports(path: Path) -> set[str]:
    """minivllm modules a file imports (relative imports resolved), also inside functions; not the
    ones under `if TYPE_CHECKING:` (annotations only: nothing is loaded)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    tree, found = ast.parse(path.read_text()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            found.add(name)
        elif isinstance(node, ast.Import): found.update(a.name for a in node.names)
    return {n.removeprefix("minivllm.") for n in found if n.startswith("minivllm.")}


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for path in (ROOT / "minivllm").rglob("*.py"):
        module = path.relative_to(ROOT / "minivllm").with_suffix("").as_posix().replace("/", ".")
        own = layer_of(module)
        if own is None: continue
        upward += [(module, m) for m in package_imports(path)
                   if (layer_of(m) or -1) > own]
    assert upward == []


def test_engine_core_leaves_the_model_to_the_worker():
    """vLLM's engine core hands loading, profiling, KV-cache allocation, compiling and graph capture to the executor's
    worker: `engine/core.py` imports no model, compilation, attention or kernel module (lazily neither)."""
    model_code = ("model_executor", "compilation", "attention", "forward_context", "_custom_ops", "triton_utils")
    imports = package_imports(ROOT / "minivllm" / "engine" / "core.py")
    assert sorted(m for m in imports if m.split(".")[0] in model_code) == []
    assert "worker.gpu_worker" in imports
