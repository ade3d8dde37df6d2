"""The Llama-family model: same weights as transformers give the same logits (tiny Llama, Qwen2, Qwen3 and the
embedded SmolLM2), running in pieces through the paged KV cache equals one full forward, bad folders fail clearly."""
import json
import os
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from minivllm.worker.utils import make_attn_metadata
from minivllm.envs import cache_dir
from minivllm.model_executor.layers.rotary_embedding import rope_inv_freq
from minivllm.model_executor.model_loader import (HUGE_PAGE, asked_for_huge_pages, default_model_path,
                                                  empty_on_huge_pages, load_model, make_kv_caches,
                                                  resolve_dtype)
from minivllm.transformers_utils.config import rope_parameters
from minivllm.testing.tiny_models import TINY_CONFIG, make_tiny_model

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
VARIANTS = {  # name -> make_tiny_model arguments
    "llama_tied": dict(arch="LlamaForCausalLM", tie_word_embeddings=True),
    "llama_untied": dict(arch="LlamaForCausalLM", tie_word_embeddings=False),
    "llama_llama3_rope": dict(arch="LlamaForCausalLM", rope_parameters=LLAMA3_ROPE),
    "llama_sharded": dict(arch="LlamaForCausalLM", tie_word_embeddings=False, max_shard_size="200KB"),
    "qwen2_untied": dict(arch="Qwen2ForCausalLM", tie_word_embeddings=False),
    "qwen2_tied": dict(arch="Qwen2ForCausalLM", tie_word_embeddings=True),
    "qwen3_tied": dict(arch="Qwen3ForCausalLM", tie_word_embeddings=True),
    "qwen3_untied": dict(arch="Qwen3ForCausalLM", tie_word_embeddings=False),
}
IDS = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(0)).tolist()


@pytest.fixture(scope="module")
def variant_paths(tmp_path_factory):
    "One tiny random checkpoint per `VARIANTS` entry (this file's subject: config variants)."
    root = tmp_path_factory.mktemp("tiny_models")
    return {name: make_tiny_model(root / name, seed=i, **kw) for i, (name, kw) in enumerate(VARIANTS.items())}


def hf_logits(model_dir, ids):
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad(): return hf(torch.tensor([ids])).logits[0]


def run_steps(model, seqs, chunks, block_size=16, num_blocks=12, seed=0):
    "Feed each request's tokens in the given chunk sizes (one list per step, in shuffled blocks); logits per request."
    model.bind_kv_caches(make_kv_caches(*model.kv_cache_spec(), num_blocks, block_size))
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
    tables = [perm[i::len(seqs)] for i in range(len(seqs))]
    done, out = [0] * len(seqs), [[] for _ in seqs]
    for step in chunks:
        positions, md = make_attn_metadata(tables, done, step, block_size)
        ids = torch.tensor([t for s, c, n in zip(seqs, done, step) for t in s[c:c + n]])
        logits = model.compute_logits(model(ids, positions, md)).split(step)
        for i, n in enumerate(step): out[i].append(logits[i]); done[i] += n
    return [torch.cat(o) for o in out]


# ---------------------------------------------------------------- same weights, same logits

@pytest.mark.parametrize("name", VARIANTS)
def test_logits_equal_transformers(variant_paths, name):
    if name == "llama_sharded": assert (variant_paths[name] / "model.safetensors.index.json").is_file()
    ours = run_steps(load_model(variant_paths[name]), [IDS], [[len(IDS)]])[0]
    theirs = hf_logits(variant_paths[name], IDS)
    assert ours.dtype == torch.float32 and ours.shape == (len(IDS), 256)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_old_style_rope_config(variant_paths, tmp_path):
    "config.json with top-level rope_theta and rope_scaling = {type: linear} (pre-5.x form) still loads and matches."
    d = tmp_path / "old"
    shutil.copytree(variant_paths["llama_untied"], d)
    config = json.loads((d / "config.json").read_text())
    config.pop("rope_parameters")
    config.update(rope_theta=5000.0, rope_scaling={"type": "linear", "factor": 2.0})
    (d / "config.json").write_text(json.dumps(config))
    model = load_model(d)
    assert model.model.rotary_emb.inv_freq[0] == 0.5  # theta**0 / factor
    torch.testing.assert_close(run_steps(model, [IDS], [[40]])[0], hf_logits(d, IDS), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind,scaling", [
    ("linear", {"factor": 4.0}),
    ("llama3", {k: v for k, v in LLAMA3_ROPE.items() if k not in ("rope_type", "rope_theta")}),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": 256}),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": 256, "mscale": 0.7, "mscale_all_dim": 1.0}),
])
def test_rope_frequencies_equal_transformers(kind, scaling):
    cfg = LlamaConfig(**TINY_CONFIG, rope_parameters={"rope_type": kind, "rope_theta": 10000.0, **scaling})
    (ours, ours_scale), (theirs, their_scale) = rope_inv_freq(cfg), ROPE_INIT_FUNCTIONS[kind](cfg)
    torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=1e-6)
    assert ours_scale == pytest.approx(their_scale)


def test_rope_parameters_read_both_config_forms():
    old = SimpleNamespace(rope_theta=500000.0, max_position_embeddings=8192, rope_scaling={"type": "linear", "factor": 4.0})
    new = SimpleNamespace(max_position_embeddings=8192, rope_parameters={"rope_type": "linear", "rope_theta": 500000.0,
                                                                        "factor": 4.0})
    bare = SimpleNamespace(max_position_embeddings=64)
    expected = {"rope_type": "linear", "rope_theta": 500000.0, "factor": 4.0, "original_max_position_embeddings": 8192}
    assert rope_parameters(old) == rope_parameters(new) == expected
    assert rope_parameters(bare) == {"rope_type": "default", "rope_theta": 10000.0, "original_max_position_embeddings": 64}


def test_dynamic_rope_refused():
    cfg = LlamaConfig(**TINY_CONFIG, rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0})
    with pytest.raises(ValueError, match="unsupported rope_type 'dynamic'"): rope_inv_freq(cfg)


# ---------------------------------------------------------------- the paged cache

@pytest.mark.parametrize("name", ["llama_tied", "qwen2_untied", "qwen3_tied"])
def test_prefill_then_decode_equals_full_forward(variant_paths, name):
    model = load_model(variant_paths[name])
    a, b = IDS[:37], IDS[10:33]
    full = run_steps(model, [a, b], [[37, 23]], seed=2)
    # a: chunked prefill 16 + 19 then two decodes; b: whole prefill then three decodes
    steps = run_steps(model, [a, b], [[16, 20], [19, 1], [1, 1], [1, 1]], seed=1)
    for s, f in zip(steps, full): torch.testing.assert_close(s, f, atol=1e-4, rtol=1e-4)
    # both chunked at once, in other blocks
    chunked = run_steps(model, [a, b], [[5, 7], [32, 16]], seed=3)
    for s, f in zip(chunked, full): torch.testing.assert_close(s, f, atol=1e-4, rtol=1e-4)


def test_triton_backend_matches_torch_backend(variant_paths):
    "The model through the Triton kernels (the interpreter on CPU) gives the torch backend's logits."
    steps = [[9, 16], [1, 1]]
    torch_out = run_steps(load_model(variant_paths["qwen3_tied"], attn_backend="torch"), [IDS[:10], IDS[:17]], steps)
    triton_out = run_steps(load_model(variant_paths["qwen3_tied"], attn_backend="triton"), [IDS[:10], IDS[:17]], steps)
    for t, r in zip(torch_out, triton_out): torch.testing.assert_close(r, t, atol=1e-4, rtol=1e-4)


def test_model_interface(variant_paths):
    model = load_model(variant_paths["qwen3_untied"], dtype="bfloat16")
    assert model.kv_cache_spec() == (2, 2, 32, torch.bfloat16)
    assert model.config.architectures == ["Qwen3ForCausalLM"]
    with pytest.raises(ValueError, match="expected 2 KV caches"): model.bind_kv_caches([])
    with pytest.raises(ValueError, match="does not match"):
        model.bind_kv_caches(make_kv_caches(2, 2, 32, torch.float32, 4, 16))
    logits = run_steps(model, [IDS], [[40]])[0]
    assert logits.dtype == torch.float32  # logits are float32 whatever the model's dtype
    assert (logits.argmax(-1) == hf_logits(variant_paths["qwen3_untied"], IDS).argmax(-1)).float().mean() > 0.9
    assert resolve_dtype("auto", model.config, "cpu") == torch.float32
    assert model.config.dtype == torch.float32                          # the tiny checkpoint was saved in fp32
    assert resolve_dtype("auto", model.config, "cuda") == torch.bfloat16  # ... and runs in bf16 on a GPU
    assert resolve_dtype(torch.float16, model.config, "cpu") == torch.float16
    with pytest.raises(ValueError, match="unsupported dtype"): resolve_dtype("int8", model.config, "cpu")


def test_stacked_projections_hold_the_checkpoint_tensors(variant_paths):
    "qkv_proj and gate_up_proj (vLLM's stacked weights) are the checkpoint's q/k/v and gate/up, biases included."
    model = load_model(variant_paths["qwen2_untied"])
    sd = load_file(variant_paths["qwen2_untied"] / "model.safetensors")
    attn, mlp = model.model.layers[1].self_attn, model.model.layers[1].mlp
    sizes = [attn.q_size, attn.kv_size, attn.kv_size]
    for part in ("weight", "bias"):
        for shard, name in zip(getattr(attn.qkv_proj, part).split(sizes), ("q", "k", "v")):
            assert torch.equal(shard, sd[f"model.layers.1.self_attn.{name}_proj.{part}"])
    gate, up = mlp.gate_up_proj.weight.chunk(2)
    assert torch.equal(gate, sd["model.layers.1.mlp.gate_proj.weight"])
    assert torch.equal(up, sd["model.layers.1.mlp.up_proj.weight"])
    assert "model.layers.1.self_attn.q_proj.weight" not in dict(model.named_parameters())


THP = "/sys/kernel/mm/transparent_hugepage/enabled"


@pytest.mark.skipif(not os.path.exists(THP) or "[never]" in open(THP).read(), reason="no huge pages here")
def test_parameters_live_in_one_block_on_huge_pages(variant_paths):
    """A CPU model's parameters share one storage, 64-byte aligned, and still hold the checkpoint; a block of
    empty_on_huge_pages starts on a 2 MiB boundary and asks Linux for huge pages (MADV_HUGEPAGE: "hg" in its
    VmFlags), which an ordinary tensor does not. Whether Linux gives them depends on its free memory: not asserted."""
    model = load_model(variant_paths["qwen2_untied"])
    params = list(model.parameters())
    assert len({p.untyped_storage().data_ptr() for p in params}) == 1
    assert all(p.data_ptr() % 64 == 0 and p.is_contiguous() for p in params)
    sd = load_file(variant_paths["qwen2_untied"] / "model.safetensors")
    assert torch.equal(model.model.embed_tokens.weight, sd["model.embed_tokens.weight"])
    assert torch.equal(model.lm_head.weight, sd["lm_head.weight"])
    block = empty_on_huge_pages(8 << 20).fill_(1)
    assert block.data_ptr() % HUGE_PAGE == 0 and block.numel() == 8 << 20
    assert asked_for_huge_pages(block) and not asked_for_huge_pages(torch.ones(1 << 10))


def test_empty_on_huge_pages_without_them(monkeypatch):
    "Where the OS has no huge pages (no MADV_HUGEPAGE: macOS, Windows), ordinary memory of the same size."
    monkeypatch.delattr("mmap.MADV_HUGEPAGE", raising=False)
    block = empty_on_huge_pages(1000).fill_(7)
    assert block.dtype == torch.uint8 and block.shape == (1000,) and int(block.sum()) == 7000


def test_decode_step_makes_four_matmuls_per_layer(variant_paths):
    "One decode step: qkv, o, gate_up and down per layer, nothing else that multiplies matrices."
    from torch.profiler import ProfilerActivity, profile
    model = load_model(variant_paths["llama_untied"])
    model.bind_kv_caches(make_kv_caches(*model.kv_cache_spec(), 2, 16))
    positions, md = make_attn_metadata([[1]], [0], [5], 16)
    model(torch.tensor(IDS[:5]), positions, md)
    positions, md = make_attn_metadata([[1]], [5], [1], 16)
    with profile(activities=[ProfilerActivity.CPU]) as prof: model(torch.tensor(IDS[5:6]), positions, md)
    counts = {e.key: e.count for e in prof.key_averages()}
    matmuls = ("aten::mm", "aten::addmm", "minivllm::cpu_linear")   # F.linear's or our op (oneDNN's, ours)
    mlp_ops = counts.get("minivllm::cpu_mlp", 0)                     # gate_up and down in one op
    assert sum(counts.get(k, 0) for k in matmuls) + 2 * mlp_ops == 4 * model.config.num_hidden_layers


def test_resolve_dtype():
    half = torch.bfloat16 if not torch.cuda.is_available() or torch.cuda.is_bf16_supported() else torch.float16
    assert resolve_dtype("auto", torch.float32, "cuda") == half
    assert resolve_dtype("auto", "float16", "cuda") == half
    assert resolve_dtype("auto", torch.bfloat16, "cuda") == torch.bfloat16
    assert resolve_dtype("auto", torch.bfloat16, "cpu") == torch.float32
    assert resolve_dtype("float16", torch.float32, "cuda") == torch.float16      # explicit wins
    assert resolve_dtype(torch.float32, torch.float32, "cuda") == torch.float32
    with pytest.raises(ValueError, match="unsupported dtype"): resolve_dtype("auto", "int8", "cuda")


# ---------------------------------------------------------------- clear errors

def _altered(src, dst, edit_state=None, edit_config=None):
    shutil.copytree(src, dst)
    if edit_state: save_file(edit_state(load_file(dst / "model.safetensors")), dst / "model.safetensors")
    if edit_config:
        (dst / "config.json").write_text(json.dumps(edit_config(json.loads((dst / "config.json").read_text()))))
    return dst


def test_errors_name_the_problem(variant_paths, tmp_path):
    src = variant_paths["llama_tied"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"): load_model(tmp_path / "empty")
    no_weights = _altered(src, tmp_path / "no_weights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="no safetensors weights"): load_model(no_weights)
    mistral = _altered(src, tmp_path / "mistral", edit_config=lambda c: {**c, "architectures": ["MistralForCausalLM"]})
    with pytest.raises(ValueError, match="unsupported architecture 'MistralForCausalLM'"): load_model(mistral)
    missing = _altered(src, tmp_path / "missing",
                       lambda sd: {k: v for k, v in sd.items() if k != "model.layers.1.mlp.up_proj.weight"})
    with pytest.raises(ValueError, match=r"missing tensors \['model.layers.1.mlp.up_proj.weight'\]"):
        load_model(missing)
    extra = _altered(src, tmp_path / "extra", lambda sd: {**sd, "model.layers.0.self_attn.q_norm.weight": torch.ones(32)})
    with pytest.raises(ValueError, match=r"unexpected tensors \['model.layers.0.self_attn.q_norm.weight'\]"):
        load_model(extra)
    shape = _altered(src, tmp_path / "shape", lambda sd: {**sd, "model.norm.weight": torch.ones(7)})
    with pytest.raises(ValueError, match="model.norm.weight has shape"): load_model(shape)
    with pytest.raises(ValueError, match="attention backend"): load_model(src, attn_backend="flash")


# ---------------------------------------------------------------- the embedded default model

def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIVLLM_CACHE", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("MINIVLLM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "minivllm"


def test_smollm2_logits_equal_transformers():
    path = default_model_path()
    assert default_model_path() == path  # converted once, then reused
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    assert (tok.eos_token, tok.eos_token_id, tok.bos_token_id) == ("<|im_end|>", 2, 1)
    chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)
    assert chat.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    ids = tok("The capital of France is").input_ids
    ours = run_steps(load_model(path), [ids], [[len(ids)]])[0]
    theirs = hf_logits(path, ids)
    torch.testing.assert_close(ours, theirs, atol=1e-3, rtol=1e-4)
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    assert tok.decode(ours[-1].argmax()) == " Paris"
