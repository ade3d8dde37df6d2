"""The engine core's KV-cache sizing: the profiling step stays within the model's positions (a step
of more tokens than the model has positions is run as several prefills, as vLLM's dummy run is)."""
from pathlib import Path

import pytest
import torch

from minivllm import load_model
from minivllm.worker.gpu_worker import profile_kv_cache_memory, profile_seq_lens


@pytest.fixture
def cuda_memory_on_cpu(monkeypatch):
    "torch.cuda's memory calls answered on a CPU: 8 GiB in all, 100 MiB in use, a 300 MiB peak."
    total = 8 << 30
    for name, value in {"empty_cache": lambda *a, **k: None,
                        "reset_peak_memory_stats": lambda *a, **k: None,
                        "synchronize": lambda *a, **k: None,
                        "max_memory_allocated": lambda *a, **k: 300 << 20,
                        "mem_get_info": lambda *a, **k: (total - (100 << 20), total),
                        "memory_reserved": lambda *a, **k: 100 << 20}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    return total


def test_profile_splits_past_the_models_positions(tiny_qwen3_path, cuda_memory_on_cpu):
    path = tiny_qwen3_path
    model = load_model(str(path), dtype="float32", device="cpu", attn_backend="torch")
    positions = model.config.max_position_embeddings
    num_tokens = positions + positions // 2               # one sequence would index past the table
    with pytest.raises(IndexError):
        profile_kv_cache_memory(model, num_tokens, 8, 16, 0.9)
    budget = profile_kv_cache_memory(model, num_tokens, 8, 16, 0.9, max_model_len=positions)
    assert budget == int(cuda_memory_on_cpu * 0.9) - (300 << 20)   # total x 0.9 - peak - 0 other
    assert profile_seq_lens(num_tokens, positions) == [positions, positions // 2]


def test_cpu_kv_cache_is_one_zeroed_block_on_huge_pages(tiny_llama_path):
    """Every layer's cache in one block (chapter 14), zeroed, aligned to 2 MiB and asked to be on huge pages
    (MADV_HUGEPAGE: "hg" in the mapping's VmFlags). Whether Linux then backs it with huge pages depends on
    the free contiguous memory at that moment (a CI run on a loaded machine got none), so that is not asserted."""
    from minivllm.entrypoints.llm import LLM
    from minivllm.model_executor.model_loader import HUGE_PAGE, asked_for_huge_pages
    llm = LLM(tiny_llama_path, num_gpu_blocks=64, max_model_len=256, enforce_eager=True)
    caches = llm.engine_core.model_executor.kv_caches
    assert len(caches) > 1 and len({c.untyped_storage().data_ptr() for c in caches}) == 1
    assert all(not c.any() for c in caches)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists() and "[never]" not in thp.read_text():
        assert caches[0].data_ptr() % HUGE_PAGE == 0 and asked_for_huge_pages(caches[0])
