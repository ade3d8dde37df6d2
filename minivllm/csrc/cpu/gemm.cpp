// out = x @ W.T (+ bias) for a few rows of x, float32, W packed in panels of 32 outputs:
// panels[p][k][j] = W[32 p + j][k], each panel one contiguous run of memory; N a multiple of 32.
#include <algorithm>
#include "vec.h"                   // vectors of W = 16 floats, load, store, exp16

constexpr int NV = 2, PANEL = NV * W;           // a panel's row: two vectors of 16 floats
constexpr int MR = 12;                          // rows at a time: 24 accumulators in registers

// R rows of x times one panel. Along the way it asks for `n` k-rows of the next panel
// (`ahead`), one every `every` steps, into the first-level cache, so that the next panel's
// lines arrive while this one computes: reading each weight once from memory costs no waiting.
template <int R>
static void tile(const float* x, int64_t xs, const float* panel, const float* bias, int64_t K,
                 const float* ahead, int64_t n, int64_t every, float* out, int64_t os) {
    vec acc[R][NV];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = bias ? load(bias + v * W) : vec{};
    for (int64_t k = 0, wait = 0; k < K; ++k) {
        if (wait-- == 0 && n-- > 0) {          // a k-row of the next panel, every `every` steps
            for (int v = 0; v < NV; ++v) __builtin_prefetch(ahead + v * W, 0, 3);
            ahead += PANEL;
            wait = every - 1;
        }
        vec b[NV];
        for (int v = 0; v < NV; ++v) b[v] = load(panel + k * PANEL + v * W);
        for (int r = 0; r < R; ++r) {
            const float a = x[r * xs + k];
            for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) store(out + r * os + v * W, acc[r][v]);
}

typedef void (*tile_fn)(const float*, int64_t, const float*, const float*, int64_t, const float*,
                        int64_t, int64_t, float*, int64_t);
static constexpr tile_fn TILES[] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>,
                                    tile<7>, tile<8>, tile<9>, tile<10>, tile<11>, tile<12>};

extern "C" int cpu_gemm(const float* x, int64_t x_row_stride, const float* panels,
                        const float* bias, float* out, int64_t M, int64_t N, int64_t K,
                        int64_t threads) {
    if (M <= 0) return 0;
    const int64_t num_panels = N / PANEL;
    const int64_t blocks = (M + MR - 1) / MR, rows = (M + blocks - 1) / blocks;   // even blocks
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t p = 0; p < num_panels; ++p) {     // each thread: a contiguous run of panels
        const float* panel = panels + p * K * PANEL;
        // the next panel asked for where this one is read by several blocks of rows; one block
        // reads it once, in order, and the CPU's own prefetcher keeps up (faster without ours)
        const float* next = blocks > 1 && p + 1 < num_panels ? panel + K * PANEL : nullptr;
        for (int64_t r0 = 0, b = 0; r0 < M; r0 += rows, ++b) {
            // block b asks for its share of the next panel's k-rows: [k0, k1), spread over K
            const int64_t k0 = next ? b * K / blocks : 0, k1 = next ? (b + 1) * K / blocks : 0;
            const int64_t n = k1 - k0, every = n > 0 ? (K + n - 1) / n : K + 1;
            TILES[std::min(rows, M - r0)](x + r0 * x_row_stride, x_row_stride, panel,
                                           bias ? bias + p * PANEL : nullptr, K,
                                           next + k0 * PANEL, n, every,
                                           out + r0 * N + p * PANEL, N);
        }
    }
    return 0;
}

// vLLM's silu_and_mul: out[r][j] = silu(x[r][j]) * x[r][D + j], silu(g) = g / (1 + e^-g), taken
// as g e^g / (1 + e^g) for g < 0 so that exp16 always sees -|g|.
extern "C" int silu_and_mul(const float* x, int64_t x_row_stride, float* out, int64_t M,
                            int64_t D, int64_t threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) if (M * D >= 16384)
    for (int64_t r = 0; r < M; ++r) {
        const float *gate = x + r * x_row_stride, *up = gate + D;
        float* o = out + r * D;
        int64_t j = 0;
        for (; j + W <= D; j += W) {
            const vec g = load(gate + j), e = exp16(g < 0 ? g : -g), one = e * 0.0f + 1.0f;
            store(o + j, g * ((g < 0 ? e : one) / (one + e)) * load(up + j));
        }
        for (; j < D; ++j) o[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];
    }
    return 0;
}
