"""CUDA graphs for decode: capture sizes, padding into static buffers, and padded == unpadded.

Everything but capture and replay runs on the CPU (the padded path runs eagerly there); the
CUDA-only tests at the end are skipped without a GPU.
"""
import pytest
import torch

from minivllm.attention.backend import PAD_SLOT_ID
from minivllm.worker.utils import make_attn_metadata
from minivllm.compilation.cuda_graph import (CUDAGraphWrapper, cudagraph_capture_sizes,
    is_uniform_decode, padded_batch_size)
from minivllm.model_executor.model_loader import load_model, make_kv_caches
from minivllm.testing.sync import NoScalarReads

CUDA = torch.cuda.is_available()
BLOCK = 16


# ---------------------------------------------------------------- capture sizes and padding rule
@pytest.mark.parametrize("max_num_seqs", [1, 2, 3, 4, 5, 8, 9, 20, 256, 300, 511, 512, 513, 10_000])
def test_capture_sizes_rule(max_num_seqs):
    sizes = cudagraph_capture_sizes(max_num_seqs)
    head = [s for s in (1, 2, 4) if s <= sizes[-1]]
    assert sizes[:len(head)] == head
    rest = sizes[len(head):]
    assert rest == list(range(8, 8 * len(rest) + 1, 8))        # then every multiple of 8
    target = min(max_num_seqs, 512)
    assert sizes[-1] >= target and sizes[-1] <= 512              # covers every batch the scheduler makes
    assert len(sizes) == 1 or sizes[-2] < target                 # ... and stops at the first that does


def test_capture_sizes_bad_input():
    with pytest.raises(ValueError, match="at least 1"): cudagraph_capture_sizes(0)


def test_padded_batch_size():
    sizes = cudagraph_capture_sizes(64)
    for n in range(1, 65):
        p = padded_batch_size(n, sizes)
        assert p in sizes and p >= n and all(s < n for s in sizes if s < p)   # the smallest that fits
    assert padded_batch_size(65, sizes) is None


def test_is_uniform_decode():
    _, decode = make_attn_metadata([[0], [1], [2]], [4, 9, 1], [1, 1, 1], BLOCK)
    _, mixed = make_attn_metadata([[0], [1]], [4, 0], [1, 2], BLOCK)
    assert is_uniform_decode(3, decode) and not is_uniform_decode(3, mixed)


# ---------------------------------------------------------------- the static buffers
def test_load_inputs_pads_rows():
    w = CUDAGraphWrapper(torch.nn.Identity(), max_num_seqs=16, max_num_blocks_per_req=4, device="cpu")
    w.seq_lens.fill_(99); w.query_start_loc.fill_(99)     # stale values from an earlier, larger step
    positions, md = make_attn_metadata([[3, 4], [6], [8, 9]], [17, 2, 30], [1, 1, 1], BLOCK)
    out = w._load_inputs(torch.tensor([5, 6, 7]), positions, md, batch_size=8)
    assert out.query_start_loc.tolist() == [0, 1, 2, 3] + [3] * 5     # padding rows have no query
    assert out.seq_lens.tolist() == [18, 3, 31] + [0] * 5
    assert out.slot_mapping.tolist() == [4 * BLOCK + 1, 6 * BLOCK + 2, 9 * BLOCK + 14] + [PAD_SLOT_ID] * 5
    assert w.input_ids[:8].tolist() == [5, 6, 7, 0, 0, 0, 0, 0]
    assert w.positions[:8].tolist() == [17, 2, 30, 0, 0, 0, 0, 0]
    assert out.block_table[:3, :2].tolist() == [[3, 4], [6, 0], [8, 9]]
    assert out.max_query_len == 1 and out.block_table.shape == (8, 4)


def test_block_table_wider_than_buffer_raises():
    w = CUDAGraphWrapper(torch.nn.Identity(), max_num_seqs=4, max_num_blocks_per_req=1, device="cpu")
    positions, md = make_attn_metadata([[3, 4]], [17], [1], BLOCK)
    with pytest.raises(ValueError, match="max_num_blocks_per_req"):
        w._load_inputs(torch.tensor([5]), positions, md, batch_size=1)


def test_graphs_need_cuda():
    if not CUDA:
        with pytest.raises(ValueError, match="CUDA device"):
            CUDAGraphWrapper(torch.nn.Identity(), max_num_seqs=4, max_num_blocks_per_req=4, device="cpu",
                             use_graphs=True)
    w = CUDAGraphWrapper(torch.nn.Identity(), max_num_seqs=4, max_num_blocks_per_req=4, device="cpu")
    assert w.use_graphs is False and w.capture() is w and not w.graphs    # nothing to capture on a CPU


# ---------------------------------------------------------------- padded == unpadded, through the model
def _prefilled(tiny_qwen3_path, backend, device, ctx_lens):
    "A tiny model whose KV cache holds `ctx_lens` tokens of random context for each request."
    model = load_model(tiny_qwen3_path, dtype="float32", device=device, attn_backend=backend)
    num_layers, num_kv_heads, head_dim, dtype = model.kv_cache_spec()
    nblk = [-(-(c + 1) // BLOCK) for c in ctx_lens]
    caches = make_kv_caches(num_layers, num_kv_heads, head_dim, dtype, sum(nblk) + 2, BLOCK, device)
    model.bind_kv_caches(caches)
    perm = torch.randperm(sum(nblk) + 2, generator=torch.Generator().manual_seed(1)).tolist()
    tables, start = [], 0
    for n in nblk: tables.append(perm[start:start + n]); start += n
    g = torch.Generator().manual_seed(2)
    positions, md = make_attn_metadata(tables, [0] * len(ctx_lens), ctx_lens, BLOCK, device)
    ids = torch.randint(3, 250, (sum(ctx_lens),), generator=g).to(device)
    with torch.no_grad(): model(ids, positions, md)
    return model, tables


@pytest.mark.parametrize("backend,ctx_lens", [("torch", [5, 40, 17]), ("torch", [1, 16, 33, 2, 70]),
                                               ("triton", [5, 40, 17])])
def test_padded_decode_equals_unpadded(tiny_qwen3_path, backend, ctx_lens):
    "The wrapper's padded step gives the same hidden states and writes the same KV as the plain step."
    device = "cuda" if CUDA and backend == "triton" else "cpu"
    model, tables = _prefilled(tiny_qwen3_path, backend, device, ctx_lens)
    n = len(ctx_lens)
    before = [c.clone() for c in model.kv_caches]
    positions, md = make_attn_metadata(tables, ctx_lens, [1] * n, BLOCK, device)
    ids = torch.arange(10, 10 + n, device=device)
    with torch.no_grad():
        plain = model(ids, positions, md).clone()
        after_plain = [c.clone() for c in model.kv_caches]
        for c, b in zip(model.kv_caches, before): c.copy_(b)               # undo the step's KV writes
        w = CUDAGraphWrapper(model, max_num_seqs=8, max_num_blocks_per_req=8, device=device, use_graphs=False)
        padded = w(ids, positions, md)
    assert padded_batch_size(n, w.capture_sizes) > n and w.stats["padded_eager"] == 1
    assert padded.shape == plain.shape
    torch.testing.assert_close(padded, plain, atol=1e-5, rtol=1e-5)
    real_slots = set(md.slot_mapping.tolist())
    for c, b, ref in zip(model.kv_caches, before, after_plain):
        torch.testing.assert_close(c, ref, atol=1e-5, rtol=1e-5)   # same K/V (up to matmul batching)
        blk, _, off = torch.nonzero((c != b).any(-1).any(-1), as_tuple=True)   # [block, kv, offset]
        assert set((blk * BLOCK + off).tolist()) <= real_slots                 # padding wrote no KV


def test_padded_decode_reads_no_host_values(tiny_qwen3_path):
    "What a graph would replay must decide nothing on the host: no tensor value is read into Python."
    device = "cuda" if CUDA else "cpu"
    model, tables = _prefilled(tiny_qwen3_path, "triton", device, [5, 40, 17])
    w = CUDAGraphWrapper(model, max_num_seqs=8, max_num_blocks_per_req=8, device=device, use_graphs=False)
    positions, md = make_attn_metadata(tables, [5, 40, 17], [1, 1, 1], BLOCK, device)
    with torch.no_grad(), NoScalarReads():
        w(torch.tensor([4, 5, 6], device=device), positions, md)
    assert w.stats["padded_eager"] == 1


def test_other_steps_run_eagerly(tiny_qwen3_path):
    model, tables = _prefilled(tiny_qwen3_path, "torch", "cpu", [5, 9, 3])
    w = CUDAGraphWrapper(model, max_num_seqs=2, max_num_blocks_per_req=8, device="cpu")
    assert w.capture_sizes == [1, 2]
    with torch.no_grad():
        positions, md = make_attn_metadata(tables[:2], [5, 9], [2, 1], BLOCK)          # a chunk + a decode
        ids = torch.tensor([4, 5, 6])
        torch.testing.assert_close(w(ids, positions, md), model(ids, positions, md))
        positions, md = make_attn_metadata(tables, [5, 9, 3], [1, 1, 1], BLOCK)        # 3 > largest size
        w(torch.tensor([4, 5, 6]), positions, md)
    assert dict(w.stats) == {"eager": 2}


def test_wrapper_delegates_to_model(tiny_qwen3_path):
    model = load_model(tiny_qwen3_path, dtype="float32", device="cpu", attn_backend="torch")
    w = CUDAGraphWrapper(model, max_num_seqs=4, max_num_blocks_per_req=4, device="cpu")
    assert w.config is model.config and w.kv_cache_spec() == model.kv_cache_spec()
    caches = make_kv_caches(*model.kv_cache_spec(), 8, BLOCK)
    w.bind_kv_caches(caches)
    assert all(a is b for a, b in zip(model.kv_caches, caches))
    h = torch.randn(2, model.config.hidden_size)
    assert torch.equal(w.compute_logits(h), model.compute_logits(h))
    with pytest.raises(AttributeError): w.no_such_attribute


# ---------------------------------------------------------------- whole engine: same tokens
PROMPTS = [[(7 * i + j) % 250 + 3 for j in range(5 + 3 * i)] for i in range(7)]


def _generate(tiny_qwen3_path, wrap, backend, max_tokens):
    from minivllm.entrypoints.llm import LLM
    from minivllm.sampling_params import SamplingParams
    device = "cuda" if CUDA else "cpu"
    llm = LLM(tiny_qwen3_path, device=device, dtype="float32", num_gpu_blocks=64, max_num_seqs=8,
              attention_backend=backend, enforce_eager=not wrap)     # on CUDA, LLM captures the graphs
    runner = llm.engine_core.model_executor
    if wrap and not CUDA:                                          # on a CPU, wrap by hand: padded eager
        width = runner.input_batch.block_table.block_table.shape[1]
        runner.model = CUDAGraphWrapper(llm.model, max_num_seqs=8, max_num_blocks_per_req=width, device=device)
    assert isinstance(runner.model, CUDAGraphWrapper) == wrap
    params = [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True) for m in max_tokens]
    tokens = [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:len(max_tokens)], params, use_tqdm=False)]
    return tokens, runner.model


@pytest.mark.parametrize("backend,max_tokens", [("torch", (4, 8, 12, 12, 8, 12, 6)), ("triton", (2, 4, 3))])
def test_generate_with_wrapper_equals_plain(tiny_qwen3_path, backend, max_tokens):
    "Greedy tokens are identical when every decode step is padded (batch 7->8, 5->8, 3->4, ...)."
    if backend == "torch" and CUDA: pytest.skip("CUDA runs the triton backend")
    plain, _ = _generate(tiny_qwen3_path, False, backend, max_tokens)
    padded, w = _generate(tiny_qwen3_path, True, backend, max_tokens)
    assert padded == plain
    decode_steps = max(max_tokens) - 1                       # one prefill step, then decodes only
    assert w.stats["replay" if CUDA else "padded_eager"] == decode_steps and w.stats["eager"] == 1


# ---------------------------------------------------------------- CUDA only: capture and replay
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_replay_equals_eager_and_reuses_buffers(tiny_qwen3_path):
    model, tables = _prefilled(tiny_qwen3_path, "triton", "cuda", [5, 40, 17, 64, 3])
    w = CUDAGraphWrapper(model, max_num_seqs=8, max_num_blocks_per_req=8, device="cuda").capture()
    assert sorted(w.graphs) == [1, 2, 4, 8]
    before = [c.clone() for c in model.kv_caches]
    for n in (1, 3, 5):
        positions, md = make_attn_metadata(tables[:n], [5, 40, 17, 64, 3][:n], [1] * n, BLOCK, "cuda")
        ids = torch.arange(20, 20 + n, device="cuda")
        with torch.no_grad():
            for c, b in zip(model.kv_caches, before): c.copy_(b)
            eager = model(ids, positions, md).clone()
            eager_kv = [c.clone() for c in model.kv_caches]
            for c, b in zip(model.kv_caches, before): c.copy_(b)
            replayed = w(ids, positions, md)
        torch.testing.assert_close(replayed, eager, atol=1e-4, rtol=1e-4)
        for c, ref in zip(model.kv_caches, eager_kv): torch.testing.assert_close(c, ref, atol=1e-4, rtol=1e-4)
    assert w.stats["replay"] == 3


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_capture_refuses_torch_backend_and_unbound_caches(tiny_qwen3_path):
    model = load_model(tiny_qwen3_path, dtype="float32", device="cuda", attn_backend="triton")
    with pytest.raises(RuntimeError, match="KV caches"):
        CUDAGraphWrapper(model, max_num_seqs=2, max_num_blocks_per_req=4, device="cuda").capture()
    model, _ = _prefilled(tiny_qwen3_path, "torch", "cuda", [3])
    with pytest.raises(ValueError, match="triton"):
        CUDAGraphWrapper(model, max_num_seqs=2, max_num_blocks_per_req=4, device="cuda").capture()
