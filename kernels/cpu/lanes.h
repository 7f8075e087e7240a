// One SIMD register of float32 lanes, written once for the three builds: 16 lanes with AVX512,
// 8 with AVX2, 1 (a plain float) without. A kernel on these runs the same arithmetic per lane in
// every build width, so a lane's result depends on its own inputs and on nothing beside it.
//
// sums_of_lanes is what decode attention's scores need: W registers, each holding one token's
// products in its lanes, summed into one register of W token scores. A tree of shuffles does it
// for all W at once, about 3 instructions a token, where a horizontal sum per token costs a
// dependent chain of 8 or more; and each lane's sum is taken in one fixed order, whatever the
// other registers hold.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "vec.h"

namespace platform_cpu::lanes {

#if defined(PLATFORM_AVX512)
using Vec = __m512;
constexpr int64_t W = 16;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec set1(float x) { return _mm512_set1_ps(x); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec load(const bf16* p) { return load16(p); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec exp(Vec v) { return exp16(v); }
inline float sum_lane(Vec v) { return _mm512_reduce_add_ps(v); }
inline Vec max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline float max_lane(Vec v) { return _mm512_reduce_max_ps(v); }

// Adjacent registers' lanes interleaved and added, within each 128-bit quarter.
inline Vec pair_sums(Vec a, Vec b) { return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)); }
inline Vec quad_sums(Vec ab, Vec cd) {
  const __m512d x = _mm512_castps_pd(ab), y = _mm512_castps_pd(cd);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
}
// Quarters 0+1 and 2+3 of a, then of b.
inline Vec quarter_sums(Vec a, Vec b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
}

// Lane i of the result: the sum of v[i]'s 16 lanes.
[[gnu::always_inline]] inline Vec sums_of_lanes(const Vec* v) {
  Vec q[4];
  for (int i = 0; i < 4; ++i)  // quarter k of q[i]: 4 partial sums, of v[4i] .. v[4i + 3]
    q[i] = quad_sums(pair_sums(v[4 * i], v[4 * i + 1]), pair_sums(v[4 * i + 2], v[4 * i + 3]));
  return quarter_sums(quarter_sums(q[0], q[1]), quarter_sums(q[2], q[3]));
}
#elif defined(PLATFORM_AVX2)
using Vec = __m256;
constexpr int64_t W = 8;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec set1(float x) { return _mm256_set1_ps(x); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec load(const bf16* p) { return load8(p); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec exp(Vec v) { return exp8(v); }
inline float sum_lane(Vec v) { return hsum8(v); }
inline Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline float max_lane(Vec v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline Vec pair_sums(Vec a, Vec b) { return _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b)); }
inline Vec quad_sums(Vec ab, Vec cd) {
  const __m256d x = _mm256_castps_pd(ab), y = _mm256_castps_pd(cd);
  return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
}

// Lane i of the result: the sum of v[i]'s 8 lanes.
[[gnu::always_inline]] inline Vec sums_of_lanes(const Vec* v) {
  const Vec lo = quad_sums(pair_sums(v[0], v[1]), pair_sums(v[2], v[3]));  // halves: v[0..3]'s partial sums
  const Vec hi = quad_sums(pair_sums(v[4], v[5]), pair_sums(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}
#else
using Vec = float;
constexpr int64_t W = 1;
inline Vec zero() { return 0.f; }
inline Vec set1(float x) { return x; }
inline Vec load(const float* p) { return *p; }
inline Vec load(const bf16* p) { return to_float(*p); }
inline void store(float* p, Vec v) { *p = v; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline Vec mul(Vec a, Vec b) { return a * b; }
inline Vec div(Vec a, Vec b) { return a / b; }
inline Vec add(Vec a, Vec b) { return a + b; }
inline Vec sub(Vec a, Vec b) { return a - b; }
inline Vec exp(Vec v) { return std::exp(v); }
inline float sum_lane(Vec v) { return v; }
inline Vec max(Vec a, Vec b) { return std::max(a, b); }
inline float max_lane(Vec v) { return v; }
inline Vec sums_of_lanes(const Vec* v) { return v[0]; }
#endif

// The first n < W elements of p in the low lanes, zeros above: a head_dim's tail, read without
// touching memory past it.
template <typename T>
inline Vec load_first(const T* p, int64_t n) {
  float lanes[W] = {};
  for (int64_t i = 0; i < n; ++i) lanes[i] = to_float(p[i]);
  return load(lanes);
}

inline void store_first(float* p, Vec v, int64_t n) {
  float lanes[W];
  store(lanes, v);
  std::copy(lanes, lanes + n, p);
}

}  // namespace platform_cpu::lanes
