// Paged attention on a CPU, float32: every row of a step's packed batch.
// KV cache [num_blocks, 2, block_size, num_kv_heads, head_dim]; query, out [tokens, heads, dim].
#include <algorithm>
#include <atomic>
#include <vector>
#include "attention.h"
#include "vec.h"

// Lane j of the result: the sum of the lanes of v[j] (16 vectors in, a butterfly of shuffles).
static vec sum16(vec* v) {
    for (int n = W / 2; n >= 1; n /= 2)
        for (int i = 0; i < n; ++i)
            v[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 2, 4, 6, 8, 10, 12, 14, 16,
                                           18, 20, 22, 24, 26, 28, 30)
                 + __builtin_shufflevector(v[2 * i], v[2 * i + 1], 1, 3, 5, 7, 9, 11, 13, 15, 17,
                                           19, 21, 23, 25, 27, 29, 31);
    return v[0];
}

// The next work item's keys and values, asked for a few memory lines at a time from inside the
// loops of the current one (`step`), so that its misses overlap this item's arithmetic.
struct Ahead {
    const float* const* rows = nullptr;
    int64_t n = 0, width = 0, per_step = 0;          // rows, floats a row, lines a step
    int64_t j = 0, x = 0;                            // the next line: row j, floats x on
    void step() { step(per_step); }
    void rest() {                                    // all the lines not yet asked for
        for (; j < n; ++j, x = 0)
            for (; x < width; x += W) __builtin_prefetch(rows[j] + x, 0, 2);
    }
    void step(int64_t lines) {
        for (; lines > 0 && j < n; --lines) {
            __builtin_prefetch(rows[j] + x, 0, 2);
            if ((x += W) == width) x = 0, ++j;
        }
    }
};

// The `G` query heads of one KV head (GQA: they share its keys and values) against keys `k[0..n)`
// and values `v[0..n)` (rows of the paged cache), each key and value read once for all of them:
// scores 16 keys at a time, a softmax per head, then out = p @ V. Rows are fetched ahead of use:
// the blocks lie anywhere in memory, where the CPU's own prefetcher does not follow.
// `G` is a template argument, as `D` is: the queries and accumulators stay in registers.
template <int D, int G>
static void attend(const float* q, const float* const* k, const float* const* v, int64_t n,
                   float scale, float* s, float* out, Ahead& ahead) {
    const int64_t stride = (n + W - 1) / W * W;              // head g's scores: s[g * stride...]
    vec qv[G][D / W], acc[G][D / W] = {};
    for (int g = 0; g < G; ++g)
        for (int x = 0; x < D / W; ++x) qv[g][x] = load(q + g * D + x * W) * scale;
    for (int64_t j0 = 0; j0 < n; j0 += W) {                              // scores
        vec part[G][W];
        const int64_t m = std::min<int64_t>(W, n - j0);
        ahead.step();
        for (int64_t j = 0; j < m; ++j) {
            if (j0 + j + W < n)                          // the key 16 rows ahead, to L1
                for (int x = 0; x < D; x += W) __builtin_prefetch(k[j0 + j + W] + x);
            vec key[D / W];
            for (int x = 0; x < D / W; ++x) key[x] = load(k[j0 + j] + x * W);
            for (int g = 0; g < G; ++g) {
                vec a = qv[g][0] * key[0];
                for (int x = 1; x < D / W; ++x) a += qv[g][x] * key[x];
                part[g][j] = a;
            }
        }
        for (int g = 0; g < G; ++g) {
            for (int64_t j = m; j < W; ++j) part[g][j] = vec{};      // past the last key: 0
            const vec sums = sum16(part[g]);
            std::memcpy(s + g * stride + j0, &sums, m * sizeof(float));
        }
    }
    float inv[G];
    for (int g = 0; g < G; ++g) {                                        // softmax
        float* sg = s + g * stride;
        vec top = sg[0] + vec{};
        int64_t j = 0;
        for (; j + W <= n; j += W) { const vec x = load(sg + j); top = x > top ? x : top; }
        float mx = sg[0];
        for (int x = 0; x < W; ++x) mx = std::max(mx, top[x]);
        for (; j < n; ++j) mx = std::max(mx, sg[j]);
        vec sums = {};
        j = 0;
        for (; j + W <= n; j += W) {                              // 16 exponentials at a time
            const vec e = exp16(load(sg + j) - mx);
            store(sg + j, e);
            sums += e;
        }
        float sum = 0.0f;
        for (int x = 0; x < W; ++x) sum += sums[x];
        for (; j < n; ++j) sum += (sg[j] = std::exp(sg[j] - mx));
        inv[g] = 1.0f / sum;
    }
    for (int64_t j = 0; j < n; ++j) {                                     // p @ V
        if (j + W < n)
            for (int x = 0; x < D; x += W) __builtin_prefetch(v[j + W] + x);
        if (j % W == 0) ahead.step();
        vec value[D / W];
        for (int x = 0; x < D / W; ++x) value[x] = load(v[j] + x * W);
        for (int g = 0; g < G; ++g)
            for (int x = 0; x < D / W; ++x) acc[g][x] += s[g * stride + j] * value[x];
    }
    for (int g = 0; g < G; ++g)
        for (int x = 0; x < D / W; ++x) store(out + g * D + x * W, acc[g][x] * inv[g]);
}

constexpr int MAX_GROUP = 8;                  // query heads per call; larger groups take more calls
typedef void (*attend_fn)(const float*, const float* const*, const float* const*, int64_t, float,
                          float*, float*, Ahead&);
template <int D>
static attend_fn attend_group(int64_t G) {                  // the kernel for G <= MAX_GROUP heads
    static constexpr attend_fn kernels[] = {nullptr, attend<D, 1>, attend<D, 2>, attend<D, 3>,
                                            attend<D, 4>, attend<D, 5>, attend<D, 6>,
                                            attend<D, 7>, attend<D, 8>};
    return kernels[G];
}

// A request with several queries (a prefill, a chunk): its query tokens in tiles of `TILE`, and
// a tile's query vectors (its tokens times the query heads of one KV head) against that head's
// keys as small matrix products, each key and value row read once for all of them. Scores are
// laid out key-major, s[j][r], so that a vector holds 16 query vectors' scores for one key: the
// products, the causal mask and the softmax (per lane) all work 16 queries at a time.
constexpr int TILE = 16;                // query tokens per work item of a request with several
constexpr int KB = 8;                   // keys per step of the scores' product

// s[j][r] = k_j . q_r for keys [j0, j0 + KB) and the RV vectors of queries from `qt` on, the
// queries transposed (qt[d][r], `R` floats a row): KB x RV accumulators in registers.
template <int D, int RV>
static void score_keys(const float* qt, int64_t R, const float* const* k, int64_t j0, float* s) {
    vec acc[KB][RV] = {};
    for (int d = 0; d < D; ++d) {
        vec q[RV];
        for (int v = 0; v < RV; ++v) q[v] = load(qt + d * R + v * W);
        for (int j = 0; j < KB; ++j) {
            const float x = k[j0 + j][d];
            for (int v = 0; v < RV; ++v) acc[j][v] += x * q[v];
        }
    }
    for (int j = 0; j < KB; ++j)
        for (int v = 0; v < RV; ++v) store(s + (j0 + j) * R + v * W, acc[j][v]);
}

// out_r = sum_j p[j][r] v_j for the 16 / (D / W) query vectors from `r0` on (16 accumulators),
// over the keys [0, n) they may see.
template <int D>
static void weigh_values(const float* p, int64_t R, int64_t r0, const float* const* v, int64_t n,
                         const float* inv, float* const* out) {
    constexpr int RB = 16 / (D / W);
    vec acc[RB][D / W] = {};
    for (int64_t j = 0; j < n; ++j) {
        vec value[D / W];
        for (int x = 0; x < D / W; ++x) value[x] = load(v[j] + x * W);
        for (int r = 0; r < RB; ++r)
            for (int x = 0; x < D / W; ++x) acc[r][x] += p[j * R + r0 + r] * value[x];
    }
    for (int r = 0; r < RB; ++r)
        if (out[r0 + r] != nullptr)
            for (int x = 0; x < D / W; ++x) store(out[r0 + r] + x * W, acc[r][x] * inv[r0 + r]);
}

// One tile: `T` query tokens, token i seeing keys [0, n0 + i), the `G` query heads of one KV head
// (query vector r = i G + g at `q[r]`, its output at `out[r]`), keys k[j], values v[j] for
// j < n0 + T - 1, rounded up to KB (the rows past the end repeat row 0: masked).
template <int D>
static void attend_tile(const float* const* q, int64_t T, int64_t G, const float* const* k,
                        const float* const* v, int64_t n0, float scale, float* const* out,
                        std::vector<float>& scratch) {
    const int64_t R = (T * G + W - 1) / W * W, n = n0 + T - 1, N = (n + KB - 1) / KB * KB;
    scratch.resize(D * R + N * R + R);
    float *qt = scratch.data(), *s = qt + D * R, *inv = s + N * R;
    std::fill(qt, qt + D * R, 0.0f);
    for (int64_t r = 0; r < T * G; ++r)                          // queries transposed, scaled
        for (int d = 0; d < D; ++d) qt[d * R + r] = q[r][d] * scale;
    for (int64_t j0 = 0; j0 < N; j0 += KB)                       // scores
        for (int64_t r = 0; r < R; r += 3 * W) {
            const int64_t left = (R - r) / W;
            if (left >= 3) score_keys<D, 3>(qt + r, R, k, j0, s + r);
            else if (left == 2) score_keys<D, 2>(qt + r, R, k, j0, s + r);
            else score_keys<D, 1>(qt + r, R, k, j0, s + r);
        }
    for (int64_t r = 0; r < R; r += W) {                         // mask, softmax per lane
        vec token;                                               // lane -> its query token
        for (int x = 0; x < W; ++x) token[x] = std::min<int64_t>((r + x) / G, T - 1);
        const vec none = token * 0.0f - INFINITY;
        for (int64_t j = n0; j < N; ++j) {           // key j: seen by tokens i > j - n0 only
            float* sj = s + j * R + r;
            store(sj, token > float(j - n0) ? load(sj) : none);
        }
        vec mx = none, sum = token * 0.0f;
        for (int64_t j = 0; j < n; ++j) { const vec x = load(s + j * R + r); mx = x > mx ? x : mx; }
        for (int64_t j = 0; j < n; ++j) {
            const vec x = load(s + j * R + r), e = x == none ? token * 0.0f : exp16(x - mx);
            store(s + j * R + r, e);
            sum += e;
        }
        store(inv + r, 1.0f / sum);
    }
    constexpr int RB = 16 / (D / W);
    for (int64_t r0 = 0; r0 < T * G; r0 += RB) {                 // p @ V
        const int64_t last = std::min<int64_t>(r0 + RB, T * G) - 1;
        weigh_values<D>(s, R, r0, v, n0 + last / G, inv, out);
    }
}

// A work item: rows [t0, t1) of request b (-1: padding rows), its KV heads [kh0, kh1).
struct Item { int64_t b, t0, t1, kh0, kh1; };

extern "C" int cpu_attention_with_kv_cache(
        const float* query, int64_t query_row_stride, const float* kv_cache, float* out,
        const int32_t* query_start_loc, const int32_t* seq_lens, const int32_t* block_table,
        int64_t block_table_stride, int64_t num_seqs, int64_t num_tokens, int64_t num_heads,
        int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale,
        int64_t num_threads) {
    const auto row = head_dim == 32 ? attend_group<32> : head_dim == 64 ? attend_group<64>
                     : head_dim == 128 ? attend_group<128> : nullptr;
    const auto tile = head_dim == 32 ? attend_tile<32> : head_dim == 64 ? attend_tile<64>
                      : attend_tile<128>;
    if (row == nullptr) return 1;
    const int64_t group = num_heads / num_kv_heads, token = num_kv_heads * head_dim;
    const int64_t used = query_start_loc[num_seqs];                 // rows past it: padding
    int64_t work = 0, decodes = num_tokens - used;   // keys read (to decide on threads), rows
    for (int64_t b = 0; b < num_seqs; ++b) {
        const int64_t queries = query_start_loc[b + 1] - query_start_loc[b];
        work += queries * seq_lens[b];
        decodes += queries == 1;
    }
    const int64_t threads = work * num_kv_heads > 256 ? num_threads : 1;
    // A decode row's item: its KV heads, or a share of them where the rows are fewer than the
    // threads (a single decode row would leave every core but one idle). A request with several
    // queries: an item per tile of its queries and KV head.
    const int64_t share = std::max<int64_t>(1, num_kv_heads * decodes / threads);
    std::vector<Item> items;
    for (int64_t b = 0; b < num_seqs; ++b) {
        const int64_t q0 = query_start_loc[b], q1 = query_start_loc[b + 1];
        if (q1 - q0 == 1)
            for (int64_t kh = 0; kh < num_kv_heads; kh += share)
                items.push_back({b, q0, q1, kh, std::min(num_kv_heads, kh + share)});
        else
            for (int64_t t0 = q0; t0 < q1; t0 += TILE)
                for (int64_t kh = 0; kh < num_kv_heads; ++kh)
                    items.push_back({b, t0, std::min(q1, t0 + TILE), kh, kh + 1});
    }
    for (int64_t t = used; t < num_tokens; ++t) items.push_back({-1, t, t + 1, 0, num_kv_heads});
    // Where item i's keys and values lie: rows[j] and rows[padded + j] for KV head kh0, the keys
    // it reads rounded up to KB (past the end: row 0 again, masked); returns the keys.
    const auto rows_of = [&](const Item& item, std::vector<const float*>& rows) -> int64_t {
        if (item.b < 0) return rows.clear(), 0;
        const int64_t n = seq_lens[item.b] - query_start_loc[item.b + 1] + item.t1;
        const int64_t padded = (n + KB - 1) / KB * KB;
        const int32_t* blocks = block_table + item.b * block_table_stride;
        rows.resize(2 * padded);
        for (int64_t j = 0; j < padded; ++j) {
            const int64_t at = j < n ? j : 0;
            const int64_t slot = blocks[at / block_size] * 2 * block_size + at % block_size;
            rows[j] = kv_cache + (slot * num_kv_heads + item.kh0) * head_dim;
            rows[padded + j] = rows[j] + block_size * token;
        }
        return n;
    };
    // An item's keys and values (`rows`) to fetch, spread evenly over `steps` steps.
    const auto ahead_of = [&](const Item& item, const std::vector<const float*>& rows,
                              int64_t steps) {
        const int64_t n = rows.size(), width = (item.kh1 - item.kh0) * head_dim;
        const int64_t lines = n * (width / W);
        return Ahead{rows.data(), n, width, (lines + steps - 1) / std::max<int64_t>(1, steps)};
    };
    std::atomic<size_t> taken{0};             // items claimed by the threads: each claims the
    #pragma omp parallel num_threads(threads)  // next while it works on one, to fetch it ahead
    {
        std::vector<float> scratch;
        std::vector<const float*> rows, next_rows, queries;
        std::vector<float*> outs;
        size_t i = taken++;
        int64_t n = i < items.size() ? rows_of(items[i], rows) : 0;
        Ahead ahead = i < items.size() ? ahead_of(items[i], rows, 1) : Ahead{};
        while (i < items.size()) {
            const auto [b, t0, t1, kh0, kh1] = items[i];
            const size_t next = taken++;
            const int64_t next_n = next < items.size() ? rows_of(items[next], next_rows) : 0;
            ahead.rest();                             // this item's rows not yet asked for
            if (next < items.size())                  // the next item's, over this one's loops
                ahead = ahead_of(items[next], next_rows, 2 * (n + W - 1) / W * (kh1 - kh0)
                                                         * ((group + MAX_GROUP - 1) / MAX_GROUP));
            const int64_t padded = (int64_t)rows.size() / 2;
            float* o = out + t0 * num_heads * head_dim;
            if (n <= 0) {                          // padding: no request, or no keys (seq_len 0)
                std::fill(o + kh0 * group * head_dim, o + kh1 * group * head_dim, 0.0f);
            } else if (t1 - t0 > 1) {                   // a tile of a request with several queries
                const int64_t T = t1 - t0, R = (T * group + W - 1) / W * W;
                queries.resize(R);
                outs.assign(R, nullptr);
                for (int64_t r = 0; r < T * group; ++r) {
                    const int64_t t = t0 + r / group, h = kh0 * group + r % group;
                    queries[r] = query + t * query_row_stride + h * head_dim;
                    outs[r] = out + (t * num_heads + h) * head_dim;
                }
                tile(queries.data(), T, group, &rows[0], &rows[padded], n - T + 1, scale,
                     outs.data(), scratch);
            } else {
                scratch.resize(std::min<int64_t>(group, MAX_GROUP) * ((n + W - 1) / W * W));
                for (int64_t kh = kh0; kh < kh1; ++kh) {   // its query heads, a group at a time
                    if (kh > kh0)
                        for (auto& r : rows) r += head_dim;
                    for (int64_t g = 0; g < group; g += MAX_GROUP) {
                        const int64_t h = kh * group + g;
                        row(std::min<int64_t>(MAX_GROUP, group - g))(
                            query + t0 * query_row_stride + h * head_dim, &rows[0],
                            &rows[padded], n, scale, scratch.data(), o + h * head_dim, ahead);
                    }
                }
            }
            i = next, n = next_n;
            std::swap(rows, next_rows);
        }
    }
    return 0;
}

// vLLM's cpu_attn_reshape_and_cache: token t's key and value (heads packed; rows
// `key_row_stride` and `value_row_stride` floats apart) into slot `slot_mapping[t]`, -1 meaning
// none (padding). Returns 1, having written nothing, if a slot lies outside the cache.
extern "C" int cpu_attn_reshape_and_cache(
        const float* key, int64_t key_row_stride, const float* value, int64_t value_row_stride,
        float* kv_cache, const int64_t* slot_mapping, int64_t num_tokens, int64_t num_kv_heads,
        int64_t head_dim, int64_t block_size, int64_t num_slots) {
    for (int64_t t = 0; t < num_tokens; ++t)
        if (slot_mapping[t] < -1 || slot_mapping[t] >= num_slots) return 1;
    const int64_t token = num_kv_heads * head_dim;
    for (int64_t t = 0; t < num_tokens; ++t) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        float* k = kv_cache + (slot / block_size * 2 * block_size + slot % block_size) * token;
        std::memcpy(k, key + t * key_row_stride, token * sizeof(float));
        std::memcpy(k + block_size * token, value + t * value_row_stride, token * sizeof(float));
    }
    return 0;
}
