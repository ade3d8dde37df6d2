// attention.cpp's kernels as one torch op, `minivllm::cpu_layer_attention`, which compiled graphs
// call without Python. The step's metadata is the forward context's: published once per forward
// pass and per thread, as pointers to its tensors (the context keeps them alive meanwhile).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include "attention.h"

struct Step {
    const int32_t *query_start_loc = nullptr, *seq_lens = nullptr, *block_table = nullptr;
    int64_t block_table_stride = 0, num_seqs = 0, num_tokens = 0;
    const int64_t* slot_mapping = nullptr;
};
static thread_local Step step;                          // all null: no forward pass

extern "C" int cpu_attn_publish(const int32_t* query_start_loc, const int32_t* seq_lens,
                                const int32_t* block_table, int64_t block_table_stride,
                                int64_t num_seqs, const int64_t* slot_mapping, int64_t num_tokens) {
    step = {query_start_loc, seq_lens, block_table, block_table_stride, num_seqs, num_tokens,
            slot_mapping};
    return 0;
}

// float32 rows [num_tokens, heads, head_dim] on a CPU, each head's values contiguous
static void check_rows(const at::Tensor& t, int64_t heads, int64_t head_dim, const char* name) {
    TORCH_CHECK(t.dim() == 3 && t.size(0) == step.num_tokens && t.size(1) == heads
                && t.size(2) == head_dim && t.stride(2) == 1 && t.stride(1) == head_dim
                && t.scalar_type() == at::kFloat && t.device().is_cpu(),
                "cpu_layer_attention: ", name, " must be float32 rows [", step.num_tokens, ", ",
                heads, ", ", head_dim, "] on a CPU, got ", t.sizes(), " ", t.strides());
}

// vLLM's `unified_attention` for one layer: write its keys and values, then attend every row.
at::Tensor cpu_layer_attention(const at::Tensor& query, const at::Tensor& key,
                               const at::Tensor& value, at::Tensor& kv_cache, double scale) {
    TORCH_CHECK(step.seq_lens != nullptr,
                "cpu_layer_attention: no step published (it needs a forward context with the "
                "CPU backend and metadata in the kernels' layout: int32 rows, int64 slots)");
    TORCH_CHECK(kv_cache.dim() == 5 && kv_cache.is_contiguous() && kv_cache.device().is_cpu()
                && kv_cache.scalar_type() == at::kFloat,
                "cpu_layer_attention: a contiguous float32 KV cache on a CPU");
    const int64_t block_size = kv_cache.size(2), kv_heads = kv_cache.size(3);
    const int64_t head_dim = kv_cache.size(4), heads = query.size(1), n = step.num_tokens;
    TORCH_CHECK(heads % kv_heads == 0, "cpu_layer_attention: ", heads, " query heads over ",
                kv_heads, " KV heads");
    check_rows(query, heads, head_dim, "query");
    check_rows(key, kv_heads, head_dim, "key");
    check_rows(value, kv_heads, head_dim, "value");
    TORCH_CHECK(!cpu_attn_reshape_and_cache(
                    key.data_ptr<float>(), key.stride(0), value.data_ptr<float>(), value.stride(0),
                    kv_cache.data_ptr<float>(), step.slot_mapping, n, kv_heads, head_dim,
                    block_size, kv_cache.size(0) * block_size),
                "cpu_layer_attention: a slot outside the cache; nothing written");
    at::Tensor out = at::empty({n, heads, head_dim}, query.options());
    TORCH_CHECK(!cpu_attention_with_kv_cache(
                    query.data_ptr<float>(), query.stride(0), kv_cache.data_ptr<float>(),
                    out.data_ptr<float>(), step.query_start_loc, step.seq_lens, step.block_table,
                    step.block_table_stride, step.num_seqs, n, heads, kv_heads, head_dim,
                    block_size, static_cast<float>(scale), at::get_num_threads()),
                "cpu_layer_attention: the kernel has no head size ", head_dim);
    return out;
}

TORCH_LIBRARY_IMPL(minivllm, CPU, m) { m.impl("cpu_layer_attention", &cpu_layer_attention); }
