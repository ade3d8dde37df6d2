// attention.cpp's two kernels, as attention_op.cpp calls them (and ctypes, from Python).
#pragma once
#include <cstdint>

extern "C" int cpu_attention_with_kv_cache(
        const float* query, int64_t query_row_stride, const float* kv_cache, float* out,
        const int32_t* query_start_loc, const int32_t* seq_lens, const int32_t* block_table,
        int64_t block_table_stride, int64_t num_seqs, int64_t num_tokens, int64_t num_heads,
        int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale,
        int64_t num_threads);

extern "C" int cpu_attn_reshape_and_cache(
        const float* key, int64_t key_row_stride, const float* value, int64_t value_row_stride,
        float* kv_cache, const int64_t* slot_mapping, int64_t num_tokens, int64_t num_kv_heads,
        int64_t head_dim, int64_t block_size, int64_t num_slots);
