"""The CPU fast path: oneDNN products (on weights packed once after loading), our kernel for products of a few rows,
the compiled decoder layer, and the engine that uses them by default.

The equality tests against transformers (test_generate.py, test_model.py) already run through the compiled engine,
since compiling is the CPU default; here: compiled equals eager on every step shape, two graphs of one layer serve every layer
of every step (no recompilation), `enforce_eager=True` compiles nothing, and a failing compiler leaves a working eager model."""
import random
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import minivllm._custom_ops as ops
import minivllm.compilation.caching as caching
from minivllm._custom_ops import cpu_attn_op_library, cpu_gemm, cpu_gemm_library, pack_panels
from minivllm.attention.backends.cpu_attn import CPUAttentionBackend
from minivllm.attention.selector import get_attn_backend
from minivllm.compilation.caching import load_or_aot_compile, traced_sources_unchanged
from minivllm.compilation.compiler_interface import compile_cache_dir, inductor_call, trust_known_vec_isa
from minivllm.compilation.wrapper import (TorchCompileWithNoGuardsWrapper, layer_example, padding_decode_metadata,
    probe_like)
from minivllm.worker.utils import make_attn_metadata
from minivllm.entrypoints.llm import LLM
from minivllm.model_executor.layers.linear import Linear
from minivllm.model_executor.layers.utils import CPU_GEMM_MAX_ROWS, dispatch_cpu_unquantized_gemm, unquantized_gemm
from minivllm.forward_context import get_forward_context, set_forward_context
from minivllm.model_executor.model_loader import load_model, make_kv_caches
from minivllm.sampling_params import SamplingParams

ARCHS = ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"]


@pytest.mark.parametrize("rows", [1, 3, 64])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_unquantized_gemm_equals_linear_eager_and_compiled(rows, bias, packed):
    """oneDNN (eager), the streamed one-row loop and the oneDNN op (compiled) all compute `F.linear`, from
    the plain weight or from its copy in oneDNN's packed layout (which every product but a compiled
    one-row one reads: here the plain weight is zeroed after packing, so reading it would fail)."""
    g = torch.Generator().manual_seed(rows)
    layer = Linear(96, 80, bias).requires_grad_(False)
    with torch.no_grad(): layer.weight.copy_(torch.randn(80, 96, generator=g))
    x, w, b = torch.randn(rows, 96, generator=g), layer.weight.clone(), layer.bias
    want = F.linear(x, w, b)
    if packed:
        dispatch_cpu_unquantized_gemm(layer)
        assert layer.packed_weight.layout == torch._mkldnn
        if rows > 1: layer.weight.data.zero_()
    gemm = lambda x: unquantized_gemm(x, layer.weight, b, layer.packed_weight)
    torch.testing.assert_close(gemm(x), want, rtol=1e-5, atol=1e-5)
    compiled = torch.compile(gemm, fullgraph=True)
    torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)


OUR_KERNEL = pytest.mark.skipif(cpu_gemm_library() is None, reason="no AVX-512 or no C++ compiler")


@OUR_KERNEL
@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), panels=st.integers(1, 5), k=st.integers(1, 300), bias=st.booleans(),
       pad=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_cpu_gemm_equals_float64_product(rows, panels, k, bias, pad, seed):
    """Our kernel against the product in float64, for any rows (12 at a time, the last block shorter), any inputs,
    with or without a bias, and rows of `x` further apart than `k` (a column slice of a wider tensor)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k + pad, generator=g)[:, pad:]
    w, b = torch.randn(32 * panels, k, generator=g), torch.randn(32 * panels, generator=g)
    want = x.double() @ w.double().T + (b.double() if bias else 0)
    got = cpu_gemm(x, pack_panels(w), b if bias else None)
    scale = x.double().abs() @ w.double().abs().T + (b.double().abs() if bias else 0)   # rounding's scale
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert ((got.double() - want).abs() <= 1e-6 * scale + 1e-30).all()


@OUR_KERNEL
def test_products_of_a_few_rows_read_the_panels_and_more_rows_onednn():
    """`unquantized_gemm` picks by rows when it runs: up to CPU_GEMM_MAX_ROWS rows read our panels (zeroed here, so
    the product is 0), more rows oneDNN's packed copy; compiled, one graph traced on 2 rows makes the same choice
    for every later row count (no guard on the rows), and a one-row compiled product streams the plain weight."""
    layer = Linear(64, 96).requires_grad_(False)
    dispatch_cpu_unquantized_gemm(layer)
    layer.panel_weight.zero_()
    gemm = lambda x: unquantized_gemm(x, layer.weight, layer.bias, layer.packed_weight, layer.panel_weight)
    compiled = torch.compile(gemm, fullgraph=True, dynamic=True)
    for rows in (2, 5, CPU_GEMM_MAX_ROWS, CPU_GEMM_MAX_ROWS + 1, 300):
        x = torch.randn(rows, 64)
        want = F.linear(x, layer.weight, layer.bias) if rows > CPU_GEMM_MAX_ROWS else layer.bias.expand(rows, 96)
        torch.testing.assert_close(gemm(x), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
    x = torch.randn(1, 64)
    torch.testing.assert_close(torch.compile(gemm, fullgraph=True)(x), F.linear(x, layer.weight, layer.bias))


def test_no_panels_without_our_kernel_or_whole_panels(monkeypatch):
    "Weights whose outputs are not whole panels of 32, or any weight where the kernel is not built: oneDNN alone."
    odd = Linear(64, 48)
    dispatch_cpu_unquantized_gemm(odd)
    assert odd.packed_weight is not None and odd.panel_weight is None
    monkeypatch.setattr(ops, "cpu_gemm_library", lambda: None)
    layer = Linear(64, 64)
    dispatch_cpu_unquantized_gemm(layer)
    assert layer.packed_weight is not None and layer.panel_weight is None
    x = torch.randn(3, 64)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@OUR_KERNEL
def test_cpu_gemm_rejects_what_it_cannot_read():
    panels = pack_panels(torch.randn(32, 8))
    for x, p in [(torch.randn(2, 8, dtype=torch.float64), panels), (torch.randn(2, 9), panels),
                 (torch.randn(2, 8), panels.transpose(0, 1))]:
        with pytest.raises(ValueError, match="float32 CPU tensors"): cpu_gemm(x, p)


def test_linear_keeps_nn_linear_parameters_and_other_dtypes():
    layer = Linear(16, 8)
    assert set(dict(layer.named_parameters())) == {"weight", "bias"}
    x = torch.randn(2, 16, dtype=torch.float64)
    torch.testing.assert_close(unquantized_gemm(x, layer.weight.double(), layer.bias.double()),
                               F.linear(x, layer.weight.double(), layer.bias.double()))


def test_attention_needs_a_forward_context(tiny_llama_path):
    model = load_model(tiny_llama_path)
    with pytest.raises(RuntimeError, match="no forward context"): get_forward_context()
    attn = model.model.layers[0].self_attn
    positions = torch.tensor([0])
    cos_sin = model.model.rotary_emb(positions)
    kv = make_kv_caches(*model.kv_cache_spec(), 2, 16)[0]
    with pytest.raises(RuntimeError, match="no forward context"):
        attn(torch.randn(1, model.config.hidden_size), positions, cos_sin, kv)
    _, md = make_attn_metadata([[1]], [0], [1], 16)
    with torch.no_grad(), set_forward_context(md, get_attn_backend("torch")):
        assert get_forward_context().attn_metadata is md
        attn(torch.randn(1, model.config.hidden_size), positions, cos_sin, kv)
    with pytest.raises(RuntimeError): get_forward_context()        # reset after the pass


def compiled_model(path, num_blocks=4, block_size=16, cache=None):
    "The model of `path` with its KV caches, compiled (the wrapper the engine runs; its `compile()` checked)."
    wrapper = TorchCompileWithNoGuardsWrapper(load_model(path), cache)
    wrapper.bind_kv_caches(make_kv_caches(*wrapper.kv_cache_spec(), num_blocks, block_size))
    assert wrapper.compile()
    return wrapper


def runs_compiled(llm) -> bool:
    "Whether the engine's runner runs the compiled wrapper."
    return isinstance(llm.engine_core.model_executor.model, TorchCompileWithNoGuardsWrapper)


def prompts(lengths, seed):
    rng = random.Random(seed)
    return [[rng.randrange(3, 256) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize("arch", ARCHS)
def test_compiled_engine_equals_eager_without_recompiling(tiny_paths_by_arch, arch):
    """Greedy tokens of the default (compiled) engine equal enforce_eager's, for a batch and a single stream,
    chunked prefills and prefix hits included, and the graphs compiled at start-up serve every step."""
    d, greedy = tiny_paths_by_arch[arch], SamplingParams(temperature=0, max_tokens=12)
    batch = prompts([5, 40, 17, 1, 33], seed=1) + [prompts([40], seed=1)[0][:20]]   # shares a prefix
    single = prompts([9], seed=2)
    eager = LLM(d, num_gpu_blocks=64, max_num_batched_tokens=32, enforce_eager=True)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled = LLM(d, num_gpu_blocks=64, max_num_batched_tokens=32)
    # one layer's two graphs (one token, 2+ tokens) serve every layer, plus one-row logits
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs <= 3
    assert not runs_compiled(eager) and runs_compiled(compiled)   # every layer: one compiled layer's code
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    got = [o.outputs[0].token_ids for o in compiled.generate(batch + single, greedy, use_tqdm=False)]
    got_single = compiled.generate(single, greedy, use_tqdm=False)[0].outputs[0].token_ids
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs      # nothing recompiled
    want = [o.outputs[0].token_ids for o in eager.generate(batch + single, greedy, use_tqdm=False)]
    assert got == want
    assert got_single == want[-1]



@pytest.mark.skipif(cpu_attn_op_library() is None, reason="the C++ op did not build (compiler, torch headers)")
def test_compiled_steps_attend_in_cpp_without_python(tiny_llama_path, monkeypatch):
    """A compiled CPU engine's graphs, of one token and of more, call the C++ attention op (chapter 12): the
    backend's Python attention runs in no step, neither the prefill nor the decodes (their tokens: the test above)."""
    llm = LLM(tiny_llama_path, num_gpu_blocks=16)
    layers = llm.model.model.layers
    assert runs_compiled(llm)
    assert all(layer.self_attn.attn.compiled_op is torch.ops.minivllm.cpu_layer_attention for layer in layers)
    calls, forward = [], CPUAttentionBackend.forward
    monkeypatch.setattr(CPUAttentionBackend, "forward", lambda self, *args: calls.append(1) or forward(self, *args))
    out = llm.generate([prompts([5], seed=3)[0]], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
                       use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 6 and calls == []                   # 1 prefill, 5 decode steps


def test_compiled_steps_call_the_graphs_code_past_its_wrappers(tiny_llama_path, monkeypatch):
    """A compiled CPU engine calls its graphs' generated code itself (inductor_call): in the prefill step (the
    graph of 2+ tokens) and in decode steps (one row) nothing reaches inductor's CompiledFxGraph (the wrappers'
    last step)."""
    from torch._inductor.output_code import CompiledFxGraph
    llm = LLM(tiny_llama_path, num_gpu_blocks=16)
    calls, call_graph = [], CompiledFxGraph.__call__
    monkeypatch.setattr(CompiledFxGraph, "__call__", lambda self, args: calls.append(1) or call_graph(self, args))
    out = llm.generate([prompts([5], seed=3)[0]], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
                       use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 6 and calls == []
    wrapper = llm.engine_core.model_executor.model
    assert hasattr(wrapper.one_row, "compiled") and hasattr(wrapper.more_rows, "compiled")   # inductor_call's


def test_inductor_call_equals_the_wrapped_call_or_gives_up(tiny_llama_path):
    """The direct call returns what the compiled function does, on new inputs and other weights (another layer),
    for one row and for several (whose count reaches the graph through every input that has it); where the probe
    cannot show where an argument comes from (two KV blocks, as many as K and V: the variable size has two
    sources, at two dimensions) it gives up, and so it does for a function that is not one inductor graph."""
    wrapper = compiled_model(tiny_llama_path)
    model = wrapper.unwrap()
    layers = model.model.layers
    direct = wrapper.one_row
    compiled = direct.compiled
    backend = model.attn_backend
    with torch.no_grad(), set_forward_context(padding_decode_metadata(1), backend):
        inputs = probe_like(layer_example(model, 1))
        for layer in layers:
            got, want = direct(layer, *inputs), compiled(layer, *inputs)
            assert len(got) == len(want) == 2 and all(torch.equal(g, w) for g, w in zip(got, want))
        assert inductor_call(compiled, layers[0], layer_example(model, 1)) is None
        assert inductor_call(lambda m, *xs: xs[0] * 2, layers[0], inputs) is None
    many = wrapper.more_rows
    for rows in (3, 7):                        # other counts than the probe's
        x, residual, positions, cos_sin, kv_cache = layer_example(model, rows)
        inputs = (torch.randn_like(x), torch.randn_like(residual), positions,
                  tuple(map(torch.randn_like, cos_sin)), torch.randn_like(kv_cache))
        with torch.no_grad(), set_forward_context(padding_decode_metadata(rows), backend):
            for layer in layers:
                got, want = many(layer, *inputs), many.compiled(layer, *inputs)
                assert all(g.shape[0] == rows and torch.equal(g, w) for g, w in zip(got, want))


def test_two_layouts_compiled_in_one_process_keep_their_graphs_called_directly(tiny_llama_path, monkeypatch,
                                                                               tmp_path):
    """A process that compiles the layer for two KV layouts (16- and 32-token blocks, on two models' weights)
    calls both layouts' graphs' code directly: the second compile makes no size a variable that the example did
    not mark (TorchDynamo's automatic dynamic shapes are off), which inductor_call could not place."""
    monkeypatch.setattr(caching, "_COMPILED", {})                         # compiled here, not loaded
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    for block_size in (16, 32):
        wrapper = compiled_model(tiny_llama_path, 4, block_size, tmp_path)
        assert hasattr(wrapper.one_row, "compiled") and hasattr(wrapper.more_rows, "compiled"), block_size


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen3ForCausalLM"])
def test_triton_backend_runs_eagerly_on_its_kernels(tiny_paths_by_arch, arch):
    """On the Triton backend a CPU engine (the interpreter) is not compiled: its norms and RoPE are Triton kernels,
    picked when the layers were built (`forward_cuda`), and its tokens are the eager torch path's."""
    path, greedy = tiny_paths_by_arch[arch], SamplingParams(temperature=0, max_tokens=6)
    batch = prompts([5, 20], seed=5)
    want = [o.outputs[0].token_ids for o in
            LLM(path, num_gpu_blocks=16, enforce_eager=True).generate(batch, greedy, use_tqdm=False)]
    llm = LLM(path, num_gpu_blocks=16, attention_backend="triton")
    norm = llm.model.model.norm
    assert not runs_compiled(llm) and norm._forward_method == norm.forward_cuda
    assert [o.outputs[0].token_ids for o in llm.generate(batch, greedy, use_tqdm=False)] == want

def test_failed_compile_warns_and_runs_eagerly(tiny_llama_path, monkeypatch, tmp_path):
    "Without a working compiler (here: a torch.compile whose aot_compile raises) the model stays eager and correct."
    model = load_model(tiny_llama_path)
    with pytest.raises(RuntimeError, match="bind the KV caches"): TorchCompileWithNoGuardsWrapper(model).compile()
    wrapper = TorchCompileWithNoGuardsWrapper(model, tmp_path)
    wrapper.bind_kv_caches(make_kv_caches(*model.kv_cache_spec(), 4, 16))

    class BrokenCompile:                  # what torch.compile gives where no C++ compiler works
        def __init__(self, fn, **kwargs): pass
        def aot_compile(self, example): raise OSError("no C++ compiler")
    monkeypatch.setattr(torch, "compile", BrokenCompile)
    monkeypatch.setattr(caching, "_COMPILED", {})     # a process that never compiled this model
    with pytest.warns(UserWarning, match="torch.compile failed, running eagerly.*no C\\+\\+ compiler"):
        assert wrapper.compile() is False      # (an empty cache: nothing to load)
    assert wrapper.one_row is wrapper.more_rows is wrapper.one_row_logits is None
    positions, md = make_attn_metadata([[1]], [0], [3], 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model(torch.tensor([5, 6, 7]), positions, md).shape == (3, model.config.hidden_size)


def test_compiled_code_has_no_size_checks_and_other_blocks_are_refused(tiny_llama_path, monkeypatch, tmp_path):
    """vLLM's inductor settings on a CPU: the compiled layers carry no size assertions (inductor's
    `assert_size_stride`), so `bind_kv_caches` refuses caches of another block layout after compiling."""
    monkeypatch.setattr(caching, "_COMPILED", {})     # compile here, with a fresh cache folder
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    from torch._inductor.codecache import PyCodeCache
    seen = set(PyCodeCache.modules)
    model = compiled_model(tiny_llama_path, 4, 16, tmp_path)
    wrappers = [m for m in PyCodeCache.modules if m not in seen and hasattr(m, "call")]
    assert wrappers and not any("assert_size_stride(" in open(m.__file__).read() for m in wrappers)
    model.bind_kv_caches(make_kv_caches(*model.kv_cache_spec(), 9, 16))      # more blocks: fine
    with pytest.raises(ValueError, match="compiled for KV blocks"):
        model.bind_kv_caches(make_kv_caches(*model.kv_cache_spec(), 9, 32))

def test_load_model_packs_float32_product_weights(tmp_path):
    """vLLM's process_weights_after_loading on a CPU: every product weight of a float32 model (the layers' and the
    output head's, tied or not) also in oneDNN's packed layout, which is what a step of 2+ rows reads; other
    dtypes pack nothing (F.linear's path)."""
    from minivllm.testing.tiny_models import make_tiny_model
    for tied in (True, False):
        path = make_tiny_model(tmp_path / str(tied), tie_word_embeddings=tied)
        model = load_model(path)
        assert (model.lm_head is model.model.embed_tokens) is tied
        products = {model.lm_head, *(m for m in model.modules() if isinstance(m, Linear))}
        assert len(products) == 1 + 4 * model.config.num_hidden_layers
        assert all(m.packed_weight.layout == torch._mkldnn for m in products)
        x = torch.randn(3, model.config.hidden_size)
        torch.testing.assert_close(model.compute_logits(x), x @ model.lm_head.weight.T, rtol=1e-5, atol=1e-5)
    model = load_model(path, dtype="bfloat16")
    assert not any("packed_weight" in vars(m) for m in model.modules())


def test_an_engine_replaced_by_another_frees_its_model(tiny_llama_path):
    """`llm = LLM(...)` again, as a notebook does: the first engine's model is freed (its compiled methods make a
    reference cycle; when build_engine_core froze the heap with gc.freeze(), as vLLM's engine process does, a
    second engine froze the first one's cycle and every replaced engine stayed alive: 1.8 GB each for SmolLM2)."""
    import gc
    import weakref
    llm = LLM(tiny_llama_path, num_gpu_blocks=16)
    assert runs_compiled(llm)
    out = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, temperature=0), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3
    first = weakref.ref(llm.model)
    llm = LLM(tiny_llama_path, num_gpu_blocks=16)
    gc.collect()
    assert first() is None and llm.model is not None


def test_only_float32_is_compiled_on_cpu(tiny_llama_path):
    "bfloat16 on a CPU runs eagerly (a compiled graph would keep float32 intermediates and change tokens)."
    llm = LLM(tiny_llama_path, dtype="bfloat16", num_gpu_blocks=16)
    assert not runs_compiled(llm)


def test_models_of_different_shapes_keep_their_own_graphs_without_guards(tmp_path):
    """The wrapper compiles the layer's forward ahead of time (vLLM's AOT compile) per parameter
    layout, constants and step shape (one row, 2+ rows), and the one-row logits, each without guards
    (vLLM's guard_filter_fn), and the model calls them with their guard check off. Models of one shape
    share the compiled functions, whatever their weights (parameters and the oneDNN-packed copies are
    the graph's inputs, not constants: the twin, other weights, computes its own results) and number of
    KV blocks (marked dynamic); a model with another parameter layout gets its own, and so does one
    whose parameters have the same shapes but whose heads differ (8 heads of 16 against 4 of 32), which
    only the constants in the key tell apart."""
    from minivllm.testing.tiny_models import make_tiny_model
    paths = {"a": make_tiny_model(tmp_path / "a"), "a_twin": make_tiny_model(tmp_path / "t", seed=1),
             "wider": make_tiny_model(tmp_path / "w", intermediate_size=56),
             "heads": make_tiny_model(tmp_path / "h", num_attention_heads=8, num_key_value_heads=4, head_dim=16)}
    compiled = lambda path, num_blocks: compiled_model(path, num_blocks, 16, tmp_path / "cache")
    models = {"a": compiled(paths["a"], 1), "a_twin": compiled(paths["a_twin"], 9),
              "wider": compiled(paths["wider"], 4), "heads": compiled(paths["heads"], 4)}
    def functions(wrapper):        # what it calls: the compiled functions (or their code itself)
        return tuple(getattr(f, "compiled", f) for f in (wrapper.one_row, wrapper.more_rows,
                                                         wrapper.one_row_logits))
    assert functions(models["a"]) == functions(models["a_twin"])
    for other in ("wider", "heads"):
        assert not {id(f) for f in functions(models["a"])} & {id(f) for f in functions(models[other])}
    # no guards were kept: even the other models' layers pass the check the model no longer runs
    one_row, more_rows, logits = functions(models["a"])
    for other in (wrapper.unwrap() for wrapper in models.values()):
        layer, kv = other.model.layers[0], other.kv_caches[0]
        for f, example in ((one_row, layer_example(other, 1)), (more_rows, layer_example(other, 5))):
            assert f.guard_check(layer, *example[:-1], kv)
        assert logits.guard_check(other, torch.zeros(1, other.config.hidden_size))
    for name, num_blocks in (("a_twin", 9), ("heads", 4)):
        eager = load_model(paths[name])                       # the same weights, never compiled
        eager.bind_kv_caches(make_kv_caches(*eager.kv_cache_spec(), num_blocks, 16))
        for n in (1, 3):
            positions, md = make_attn_metadata([[1]], [0], [n], 16)
            ids = torch.tensor([5, 6, 7][:n])
            with torch.no_grad():
                got, want = (m.compute_logits(m(ids, positions, md)[-1:]) for m in (models[name], eager))
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_new_process_loads_the_compiled_model_without_tracing_it(tiny_llama_path, tmp_path, monkeypatch):
    """The first compile saves its three compiled functions in the cache folder; a process that
    never compiled the model (here: the in-process table emptied) loads them from there, TorchDynamo tracing
    nothing, and the loaded model computes what the compiled one did."""
    compiled = lambda: compiled_model(tiny_llama_path, 4, 16, tmp_path)
    traced = lambda: torch._dynamo.utils.counters["stats"]["calls_captured"]    # ops TorchDynamo saw
    monkeypatch.setattr(caching, "_COMPILED", {})
    before = traced()
    first = compiled()
    assert traced() > before and len(list((tmp_path / "aot_compile").glob("*.bin"))) == 3
    monkeypatch.setattr(caching, "_COMPILED", {})
    before = traced()
    second = compiled()
    assert traced() == before                                                  # nothing traced
    for n in (1, 3):
        positions, md = make_attn_metadata([[1]], [0], [n], 16)
        ids = torch.tensor([5, 6, 7][:n])
        with torch.no_grad():
            got, want = (m.compute_logits(m(ids, positions, md)[-1:]) for m in (second, first))
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_a_changed_source_is_compiled_again(tmp_path, monkeypatch):
    """A saved compiled function records the source of every module TorchDynamo traced (vLLM checks it on
    load too): after its module's code changes, load_or_aot_compile compiles the new code instead of
    loading the old, and the saved file then holds the new one."""
    import importlib
    src = tmp_path / "aot_probe.py"
    src.write_text("def f(x):\n    return x * 2 + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import aot_probe
    x, path = torch.randn(4), tmp_path / "f.bin"
    first = load_or_aot_compile(aot_probe.f, (x,), path)
    assert path.exists() and traced_sources_unchanged(first)
    torch.testing.assert_close(load_or_aot_compile(aot_probe.f, (x,), path)(x), x * 2 + 1)
    src.write_text("def f(x):\n    return x * 3 + 1\n")
    importlib.reload(aot_probe)
    assert not traced_sources_unchanged(first)
    torch.testing.assert_close(load_or_aot_compile(aot_probe.f, (x,), path)(x), x * 3 + 1)
    with path.open("rb") as f: saved = torch.compiler.load_compiled_function(f)
    torch.testing.assert_close(saved(x), x * 3 + 1)


def test_vec_isa_probe_runs_once_and_is_trusted_only_where_the_flags_pick_the_same(tmp_path,
                                                                                  monkeypatch):
    """Inductor probes each vector ISA the CPU's flags list in a new process (about a second in every
    process). trust_known_vec_isa runs that probe once per torch, compiler and CPU, keeps its verdict
    in the compile cache, and trusts the CPU's flags (in every process alike, so the compiled
    graphs' cache keys agree) only where that picks the verdict's ISA; the user's setting wins."""
    from torch._inductor import config, cpu_vec_isa
    probes = []
    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build",
                        lambda self, code: probes.append(str(self)) or True)
    with config.patch({"cpp.vec_isa_ok": True}): flagged = str(cpu_vec_isa.pick_vec_isa())
    with config.patch({"cpp.vec_isa_ok": None}):          # and what the function sets, undone
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        probed = str(cpu_vec_isa.pick_vec_isa())          # what the probe picks, done beforehand
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        verdict = trust_known_vec_isa(tmp_path)           # nothing known: it probes
        assert verdict.parent == tmp_path and verdict.read_text() == probed
        assert config.cpp.vec_isa_ok is (True if probed == flagged else None)
    with config.patch({"cpp.vec_isa_ok": None}):
        verdict.write_text("sse2")              # a verdict that trusting the flags would not give
        trust_known_vec_isa(tmp_path)
        assert config.cpp.vec_isa_ok is None    # the probe decides, keeping nothing computed trusting
        assert cpu_vec_isa.valid_vec_isa_list.cache_info().currsize == 0
    with config.patch({"cpp.vec_isa_ok": None}):
        verdict.write_text(flagged)
        cpu_vec_isa.valid_vec_isa_list.cache_clear(); probes.clear()
        assert trust_known_vec_isa(tmp_path) == verdict and config.cpp.vec_isa_ok is True
        assert str(cpu_vec_isa.pick_vec_isa()) == flagged and probes == []
    verdict.unlink()
    with config.patch({"cpp.vec_isa_ok": False}):         # the user's own setting wins
        trust_known_vec_isa(tmp_path)
        assert config.cpp.vec_isa_ok is False and not verdict.exists()
    cpu_vec_isa.valid_vec_isa_list.cache_clear()


def test_compile_cache_dir_is_the_users_or_ours_never_torchs_default(monkeypatch, tmp_path):
    """`$TORCHINDUCTOR_CACHE_DIR` where the user set it; otherwise `torch_compile/` in minivllm's folder, also once
    torch has written its own default (under /tmp) into the variable, as importing TorchDynamo does."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    monkeypatch.setenv("MINIVLLM_CACHE", str(tmp_path / "ours"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "users"))
    assert compile_cache_dir() == tmp_path / "users"
    for torchs in (default_cache_dir(), ""):
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", torchs)
        assert compile_cache_dir() == tmp_path / "ours" / "torch_compile"
