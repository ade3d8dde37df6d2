// What our C++ kernels share (chapter 12's attention, chapter 16's products): vectors of
// 16 floats through GCC's vector extension, and e^x on them.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

constexpr int W = 16;                      // floats per vector: 512 bits (the compiler splits it
typedef float vec __attribute__((vector_size(W * sizeof(float))));   // where registers are less)
static vec load(const float* p) { vec v; std::memcpy(&v, p, sizeof v); return v; }
static void store(float* p, vec v) { std::memcpy(p, &v, sizeof v); }
typedef int32_t ivec __attribute__((vector_size(W * sizeof(int32_t))));

// e^x in every lane, for x <= 0 (a softmax's scores minus their maximum, or SiLU's -|x|):
// e^x = 2^k e^r, k = round(x / ln 2), |r| <= ln(2) / 2, e^r by its Taylor polynomial of degree 6
// (relative error about 1e-7, float's own rounding), 2^k written into the exponent bits. Below -87,
// e^x is about 1e-38: as good as 0.
static vec exp16(vec x) {
    x = x < -87.0f ? -87.0f : x;
    const float round = 12582912.0f;                   // 1.5 * 2^23: adding it rounds to an integer
    const vec k = (x * 1.44269504f + round) - round;
    const vec r = x - k * 0.693145752f - k * 1.42860677e-06f;     // ln 2 in two parts: exact k ln 2
    vec p = 1.0f / 720 + r * 0.0f;
    for (float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = p * r + c;
    const ivec bits = (__builtin_convertvector(k, ivec) + 127) << 23;
    vec scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
