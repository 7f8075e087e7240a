// The arithmetic of decode attention over one part of a sequence's tokens (attention.cpp splits
// sequences into parts and merges them): one head's scores W tokens at a time, their maximum and
// softmax numerators, and the numerators' weighted sum of the values.
//
// Every function computes each query row and head by itself, in an order fixed by the token
// positions alone: the caller may interleave rows and heads as suits the cache (attention.cpp
// runs all the rows of a verification step, which read the same K/V, over each chunk of tokens
// in turn), and a row's result stays bit for bit what it is when the row comes alone.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "lanes.h"
#include "vec.h"

namespace platform_cpu {

// Floats of one head's output kept in registers over a chunk of tokens (4 AVX512 or 8 AVX2
// registers): loading and storing them for every token cost more than the multiply-adds.
constexpr int64_t kHeldFloats = 64;

// score_chunk for a head_dim of NC whole registers: the query held in registers and each
// token's multiply-adds unrolled, the same arithmetic with fewer loads and spills.
template <int64_t NC, typename T>
[[gnu::always_inline]] inline void score_chunk_unrolled(const float* q, const T* k, const int64_t* offsets, int64_t n,
                                                        float scale, const T* zeros, float* scores) {
  using namespace lanes;
  Vec qr[NC];
  for (int64_t j = 0; j < NC; ++j) qr[j] = load(q + j * W);
  Vec acc[W];
#pragma GCC unroll 16
  for (int64_t i = 0; i < W; ++i) {
    const T* ki = i < n ? k + offsets[i] : zeros;
    Vec a = zero();
#pragma GCC unroll 8
    for (int64_t j = 0; j < NC; ++j) a = fma(qr[j], load(ki + j * W), a);
    acc[i] = a;
  }
  store(scores, mul(sums_of_lanes(acc), set1(scale)));
}

// scores[i] = (q . k_i) * scale for the n <= W tokens at offsets[0, n) (k_i = k + offsets[i]),
// written to all W slots of scores; q is zero-padded to whole registers and zeros holds
// head_dim zeros. Each token's products are summed in the lanes of its own register, the W
// tokens side by side so that their multiply-adds do not wait on each other, then the W
// registers summed at once (sums_of_lanes): no token pays a horizontal sum, and each is summed
// in one fixed order. Rows of zeros stand in past the n-th token, so every token takes the
// same path.
template <typename T>
[[gnu::always_inline]] inline void score_chunk(const float* q, const T* k, const int64_t* offsets, int64_t n,
                                               int64_t D, float scale, const T* zeros, float* scores) {
  using namespace lanes;
  if (D == 4 * W) return score_chunk_unrolled<4>(q, k, offsets, n, scale, zeros, scores);
  if (D == 8 * W) return score_chunk_unrolled<8>(q, k, offsets, n, scale, zeros, scores);
  const int64_t whole = D / W * W;
  const T* rows[W];
  Vec acc[W];
  for (int64_t i = 0; i < W; ++i) {
    rows[i] = i < n ? k + offsets[i] : zeros;
    acc[i] = zero();
  }
  for (int64_t d = 0; d < whole; d += W) {
    const Vec qd = load(q + d);
#pragma GCC unroll 16
    for (int64_t i = 0; i < W; ++i) acc[i] = fma(qd, load(rows[i] + d), acc[i]);
  }
  if (whole < D) {
    const Vec qd = load(q + whole);
    for (int64_t i = 0; i < W; ++i) acc[i] = fma(qd, load_first(rows[i] + whole, D - whole), acc[i]);
  }
  store(scores, mul(sums_of_lanes(acc), set1(scale)));
}

inline float max_score(const float* s, int64_t n) {
  using namespace lanes;
  Vec top = set1(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + W <= n; i += W) top = lanes::max(top, load(s + i));
  float m = max_lane(top);
  for (; i < n; ++i) m = std::max(m, s[i]);
  return m;
}

// s[i] = exp(s[i] - max) over n scores; returns their sum. The last, part-filled register
// too is computed whole (its lanes past n left out of the store and the sum), so every score
// takes the same exp.
inline float softmax_numerators(float* s, int64_t n, float max) {
  using namespace lanes;
  const Vec m = set1(max);
  Vec total = zero();
  for (int64_t i = 0; i < n; i += W) {
    const int64_t used = std::min(W, n - i);
    if (used == W) {
      const Vec e = lanes::exp(sub(load(s + i), m));
      store(s + i, e);
      total = add(total, e);
    } else {
      store_first(s + i, lanes::exp(sub(load_first(s + i, used), m)), used);
      total = add(total, load_first(s + i, used));
    }
  }
  return sum_lane(total);
}

// o[0, R * W) += p[i] * v_i over n tokens in order (o = 0 before the first when start): o stays
// in R registers over the tokens, which is the same arithmetic as adding a token at a time.
template <int64_t R, typename T>
void values_in_registers(const float* p, const T* v, const int64_t* offsets, int64_t n, bool start, float* o) {
  using namespace lanes;
  Vec acc[R];
  for (int64_t j = 0; j < R; ++j) acc[j] = start ? zero() : load(o + j * W);
  for (int64_t i = 0; i < n; ++i) {
    const Vec pi = set1(p[i]);
    const T* vi = v + offsets[i];
#pragma GCC unroll 8
    for (int64_t j = 0; j < R; ++j) acc[j] = fma(pi, load(vi + j * W), acc[j]);
  }
  for (int64_t j = 0; j < R; ++j) store(o + j * W, acc[j]);
}

// The same for width < kHeldFloats columns, a head_dim's last ones: a register at a time, the
// last one part filled.
template <typename T>
void values_narrow(const float* p, const T* v, const int64_t* offsets, int64_t n, int64_t width, bool start,
                   float* o) {
  using namespace lanes;
  for (int64_t d = 0; d < width; d += W) {
    const int64_t used = std::min(W, width - d);
    Vec acc = start ? zero() : (used == W ? load(o + d) : load_first(o + d, used));
    for (int64_t i = 0; i < n; ++i) {
      const T* vi = v + offsets[i] + d;
      acc = fma(set1(p[i]), used == W ? load(vi) : load_first(vi, used), acc);
    }
    store_first(o + d, acc, used);
  }
}

// o[0, D) += p[i] * v_i over n tokens (o = 0 before the first when start), kHeldFloats
// columns at a time.
template <typename T>
void value_chunk(const float* p, const T* v, const int64_t* offsets, int64_t n, int64_t D, bool start, float* o) {
  constexpr int64_t R = kHeldFloats / lanes::W;
  int64_t d = 0;
  for (; d + kHeldFloats <= D; d += kHeldFloats) values_in_registers<R>(p, v + d, offsets, n, start, o + d);
  if (d < D) values_narrow(p, v + d, offsets, n, D - d, start, o + d);
}

}  // namespace platform_cpu
