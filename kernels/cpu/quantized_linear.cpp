// Weight-only quantized matrix-vector products for CPU decode (one to a few rows at a time),
// and the float32 one beside them.
//
// Decoding one token reads every weight once, so on a CPU its speed is set by how many bytes a
// weight takes and by whether the kernel keeps up with memory. No bf16 hardware is needed
// (most CPUs have none):
//   int8: weights widened to float32 in registers, accumulated in float32 against float32
//         activations: within float32 rounding of dequantize-then-matmul.
//   int4: widening 4-bit codes to floats costs more instructions than memory saves, so, as
//         llama.cpp does, the activations are quantized to 8 bits per block of 32 (Q8_1) and
//         the products are summed in integers. The PyTorch reference (kernels/cpu/reference.py)
//         quantizes the activations the same way.
//
// Layouts (kernels/cpu/reference.py packs and unpacks them):
//   int8: qweight [N, K] int8, scales [N] float32; w[n, k] = q[n, k] * scales[n].
//   int4: packed [N, K / 2] uint8 in blocks of 32 weights along K (GGUF's Q4_1 layout): byte j
//         of a block holds weight j in its low nibble and weight j + 16 in its high nibble;
//         scales, mins [N, K / 32] float16; w = q * scale + min, q in 0..15. Five bits a
//         weight, as in a Q4_1 file, whose float16 scales and mins are kept exactly.
//         Interleaved by 8 (`interleave`; the AVX2 and AVX512 builds' choice, int4_kernel_interleave):
//         the same tensors with their bytes reordered so that a group of eight rows comes
//         block by block, each block's codes as four 32-byte chunks of eight rows' four bytes
//         (reference.interleave_int4_rows) and its scales and mins as eight rows' values side
//         by side. One register then holds eight rows' codes for the same four activation
//         bytes, so the sums of eight rows build up in eight lanes: no horizontal sums, no
//         scale shuffles, no per-row tail, and one 32-byte store for eight outputs.
//
// Up to kRows activation rows share one pass over a weight row (the widened weights are reused
// from registers); the caller sends larger batches to dequantize-then-GEMM instead. Output
// rows are split over ATen's intra-op threads. Every activation row is computed the same way
// whatever rows come with it (activations quantized per row, sums in a fixed order, no split
// along K), so a few rows at once give each row exactly what it gets alone: the rows of a
// speculative verification step match the one-row decode bit for bit.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "ops.h"
#include "vec.h"

// AVX512 with VNNI (Ice Lake and later Xeons, Zen 4): 64 4-bit-by-8-bit products summed per
// instruction (vpdpbusd), where the AVX2 path sums 32 in three.
#if defined(PLATFORM_AVX512) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)
#define PLATFORM_AVX512_VNNI 1
#if defined(__AVX512VL__)
#define PLATFORM_VNNI256 1  // vpdpbusd on 256-bit registers (the interleaved int4 kernel)
#endif
#endif

namespace {

#ifdef PLATFORM_AVX2
using platform_cpu::hsum4;
using platform_cpu::hsum8;
#endif

constexpr int kRows = 4;
constexpr int64_t kBlock = 32;  // int4 weights per scale/min

#ifdef PLATFORM_AVX512
// Sixteen weights from memory, as float32 lanes.
inline __m512 widen16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 widen16(const float* p) { return _mm512_loadu_ps(p); }
#endif

#ifdef PLATFORM_AVX2
// Eight weights from memory, as float32 lanes.
inline __m256 widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 widen8(const float* p) { return _mm256_loadu_ps(p); }

// The low eight bytes of v (values 0..15), as float32 lanes.
inline __m256 widen_u8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

inline float half_to_float(at::Half h) { return _cvtsh_ss(h.x); }
#else
inline float half_to_float(at::Half h) { return static_cast<float>(h); }
#endif

// The int8 and float32 kernels compute a tile of NT weight rows (output columns) times R
// activation rows at a time: the NT weight vectors and R activation vectors loaded at each step
// feed NT * R fused multiply-adds, so each load serves several products (a row at a time, the
// loads would outnumber the products). Every (weight row, activation row) pair has exactly two
// accumulators of kLanes floats, for the even and the odd steps over K, in the same order
// whatever the tile: a row's result is the same alone or beside others, and whatever column
// tile it falls in. With one, a one-row decode (the LM head) waited on each multiply-add's
// latency: 6.6 GB/s on one AVX2 core, 13 on two, where memory gives 20.
#if defined(PLATFORM_AVX512)
using Lanes = __m512;
constexpr int64_t kLanes = 16;
inline Lanes lanes_zero() { return _mm512_setzero_ps(); }
inline Lanes lanes_load(const float* p) { return _mm512_loadu_ps(p); }
inline Lanes lanes_fma(Lanes a, Lanes b, Lanes c) { return _mm512_fmadd_ps(a, b, c); }
inline Lanes lanes_add(Lanes a, Lanes b) { return _mm512_add_ps(a, b); }
inline float lanes_sum(Lanes v) { return _mm512_reduce_add_ps(v); }
inline Lanes lanes_widen(const float* p) { return widen16(p); }
inline Lanes lanes_widen(const int8_t* p) { return widen16(p); }
constexpr int kTileN = 2;  // weight rows a tile of 2 to 4 activation rows takes (16 accumulators)
#elif defined(PLATFORM_AVX2)
using Lanes = __m256;
constexpr int64_t kLanes = 8;
inline Lanes lanes_zero() { return _mm256_setzero_ps(); }
inline Lanes lanes_load(const float* p) { return _mm256_loadu_ps(p); }
inline Lanes lanes_fma(Lanes a, Lanes b, Lanes c) { return _mm256_fmadd_ps(a, b, c); }
inline Lanes lanes_add(Lanes a, Lanes b) { return _mm256_add_ps(a, b); }
inline float lanes_sum(Lanes v) { return hsum8(v); }
inline Lanes lanes_widen(const float* p) { return widen8(p); }
inline Lanes lanes_widen(const int8_t* p) { return widen8(p); }
constexpr int kTileN = 1;  // (8 accumulators of 16 registers)
#else
using Lanes = float;
constexpr int64_t kLanes = 1;
inline Lanes lanes_zero() { return 0.f; }
inline Lanes lanes_load(const float* p) { return *p; }
inline Lanes lanes_fma(Lanes a, Lanes b, Lanes c) { return a * b + c; }
inline Lanes lanes_add(Lanes a, Lanes b) { return a + b; }
inline float lanes_sum(Lanes v) { return v; }
template <typename W>
inline Lanes lanes_widen(const W* p) { return static_cast<float>(*p); }
constexpr int kTileN = 2;
#endif

// How far ahead, in weight rows, a product of one weight row at a time asks for its weights
// (dot_tile with one weight row: the LM head of a decode): the hardware prefetchers alone
// kept SmolLM2's LM head (49152 rows of 576 int8 weights, one stream per thread) at 20-22
// GB/s of the 30 a sum reads on the 2-core AVX2 EPYC; asking 8 rows (4.6 KB) ahead, 24.
constexpr int64_t kPrefetchRows = 8;

template <typename W>
inline void prefetch(const W* p) {
#ifdef PLATFORM_AVX2
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
#else
  (void)p;
#endif
}

// y[r * ldy + j] = scale[j] * dot(x[r], q[j]) for R rows of x (row stride ldx) and NT rows of
// q (row stride K), q int8 or float32 (scale null: no scaling, as for float32 weights).
template <int NT, int R, typename W>
void dot_tile(const float* x, int64_t ldx, const W* q, int64_t K, const float* scale, float* y,
              int64_t ldy) {
  Lanes acc[2][NT][R];
  for (int a = 0; a < 2; ++a)
    for (int j = 0; j < NT; ++j)
      for (int r = 0; r < R; ++r) acc[a][j][r] = lanes_zero();
  // One step of kLanes columns into accumulator a.
  auto step = [&](int64_t k, int a) {
    // NT rows read side by side train the hardware prefetchers poorly (they follow one
    // stream running through memory): fetch the next tile's rows while this one runs.
    if (NT > 1 && (k * sizeof(W)) % 64 == 0)
      for (int j = 0; j < NT; ++j) prefetch(q + (NT + j) * K + k);
    if (NT == 1 && (k * sizeof(W)) % 64 == 0) prefetch(q + kPrefetchRows * K + k);
    Lanes w[NT];
    for (int j = 0; j < NT; ++j) w[j] = lanes_widen(q + j * K + k);
    for (int r = 0; r < R; ++r) {
      const Lanes xv = lanes_load(x + r * ldx + k);
      for (int j = 0; j < NT; ++j) acc[a][j][r] = lanes_fma(xv, w[j], acc[a][j][r]);
    }
  };
  int64_t k = 0;
  for (; k + 2 * kLanes <= K; k += 2 * kLanes) {
    step(k, 0);
    step(k + kLanes, 1);
  }
  if (k + kLanes <= K) {
    step(k, 0);
    k += kLanes;
  }
  for (int j = 0; j < NT; ++j)
    for (int r = 0; r < R; ++r) {
      float sum = lanes_sum(lanes_add(acc[0][j][r], acc[1][j][r]));
      for (int64_t t = k; t < K; ++t) sum += x[r * ldx + t] * static_cast<float>(q[j * K + t]);
      y[r * ldy + j] = scale != nullptr ? sum * scale[j] : sum;
    }
}

// Activations for the int4 kernel, per block of 32: codes xq = round(x / dx) in -127..127 with
// dx = max|x| / 127 (0 and all-zero codes for a zero block), and the exact float sum of the
// block (what its weights' min multiplies). llama.cpp's Q8_1 activations, computed the same
// way as kernels/cpu/reference.py's quantize_activations.
void quantize_activations(const float* x, int64_t K, int8_t* xq, float* dx, float* xsum) {
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.f, sum = 0.f;
    for (int i = 0; i < kBlock; ++i) {
      amax = std::max(amax, std::fabs(xb[i]));
      sum += xb[i];
    }
    const float d = amax / 127.f;
    for (int i = 0; i < kBlock; ++i)
      xq[b * kBlock + i] = d > 0.f ? static_cast<int8_t>(std::nearbyint(xb[i] / d)) : 0;
    dx[b] = d;
    xsum[b] = sum;
  }
}

// The SIMD loops read a group of g blocks (VNNI: four, then a pair; AVX2: pairs) as g * 16
// bytes of codes split into their low nibbles (weights 0..15 of each block) and then their
// high ones (16..31); interleave reorders a group's activations the same way: [x[0..15] of
// each block, then x[16..31] of each]. A last single block is already in that order.
#if defined(PLATFORM_AVX2) || defined(PLATFORM_AVX512_VNNI)
void interleave(int8_t* x, int g) {
  int8_t group[4 * kBlock];
  for (int j = 0; j < g; ++j) {
    std::memcpy(group + j * 16, x + j * kBlock, 16);
    std::memcpy(group + g * 16 + j * 16, x + j * kBlock + 16, 16);
  }
  std::memcpy(x, group, g * kBlock);
}
#endif

#ifdef PLATFORM_AVX512_VNNI
// The VNNI loop takes blocks four at a time, then a pair, then a last single block.
void interleave_groups(int8_t* xq, int64_t K) {
  const int64_t blocks = K / kBlock;
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) interleave(xq + b * kBlock, 4);
  if (b + 2 <= blocks) interleave(xq + b * kBlock, 2);
}
#elif defined(PLATFORM_AVX2)
// The AVX2 loop takes blocks in pairs, then a last single block.
void interleave_pairs(int8_t* xq, int64_t K) {
  for (int64_t b = 0; b + 2 <= K / kBlock; b += 2) interleave(xq + b * kBlock, 2);
}
#endif

#ifdef PLATFORM_AVX512_VNNI
// y[r * ldy] = sum over blocks b of scale[b] * dx[r][b] * dot(codes, xq[r]) + min[b] * xsum[r][b],
// with AVX512-VNNI: vpdpbusd sums 64 products of 4-bit codes and 8-bit activations in one
// instruction. int32 lane i of a group's sums belongs to block i / 4 of the group (a pair
// repeats after eight lanes), and the scale vector spreads each block's factor over its lanes
// the same way.
template <int R>
void int4_dot_rows(const int8_t* xq, const float* dx, const float* xsum, int64_t K,
                   const uint8_t* q, const at::Half* scale, const at::Half* mins, float* y,
                   int64_t ldy) {
  const int64_t blocks = K / kBlock;
  __m512 acc[R];
  __m128 min_acc[R];
  float tail[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    min_acc[r] = _mm_setzero_ps();
    tail[r] = 0.f;
  }
  const __m512i nibbles = _mm512_set1_epi8(0x0F);
  const __m512i spread4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i spread2 = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    const __m512i bytes = _mm512_loadu_si512(q + b * 16);
    const __m512i lo = _mm512_and_si512(bytes, nibbles);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibbles);
    const __m128 dw = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scale + b)));
    const __m128 mw = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins + b)));
    for (int r = 0; r < R; ++r) {
      const int8_t* xg = xq + r * K + b * kBlock;
      __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xg));
      dot = _mm512_dpbusd_epi32(dot, hi, _mm512_loadu_si512(xg + 64));
      const __m128 factors = _mm_mul_ps(dw, _mm_loadu_ps(dx + r * blocks + b));
      const __m512 sc = _mm512_permutexvar_ps(spread4, _mm512_castps128_ps512(factors));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[r]);
      min_acc[r] = _mm_fmadd_ps(mw, _mm_loadu_ps(xsum + r * blocks + b), min_acc[r]);
    }
  }
  if (b + 2 <= blocks) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 16));
    const __m256i nib = _mm512_castsi512_si256(nibbles);
    const __m512i codes = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(bytes, nib)),
                                             _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nib), 1);
    const float d0 = half_to_float(scale[b]), d1 = half_to_float(scale[b + 1]);
    const float m0 = half_to_float(mins[b]), m1 = half_to_float(mins[b + 1]);
    for (int r = 0; r < R; ++r) {
      const int8_t* xg = xq + r * K + b * kBlock;
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, _mm512_loadu_si512(xg));
      const float* dxr = dx + r * blocks + b;
      const __m512 sc = _mm512_permutexvar_ps(
          spread2, _mm512_castps128_ps512(_mm_setr_ps(d0 * dxr[0], d1 * dxr[1], 0.f, 0.f)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[r]);
      tail[r] += m0 * xsum[r * blocks + b] + m1 * xsum[r * blocks + b + 1];
    }
    b += 2;
  }
  if (b < blocks) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 16));
    const __m128i nib = _mm512_castsi512_si128(nibbles);
    const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), nib),
                                           _mm_and_si128(bytes, nib));
    const float d = half_to_float(scale[b]), m = half_to_float(mins[b]);
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + r * K + b * kBlock));
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(codes),
                                              _mm512_zextsi256_si512(xv));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(d * dx[r * blocks + b]), acc[r]);
      tail[r] += m * xsum[r * blocks + b];
    }
  }
  for (int r = 0; r < R; ++r)
    y[r * ldy] = _mm512_reduce_add_ps(acc[r]) + hsum4(min_acc[r]) + tail[r];
}
#else
// y[r * ldy] = sum over blocks b of scale[b] * dx[r][b] * dot(codes, xq[r]) + min[b] * xsum[r][b]:
// 4-bit weights times 8-bit activations in integers, 32 products in three instructions.
template <int R>
void int4_dot_rows(const int8_t* xq, const float* dx, const float* xsum, int64_t K,
                   const uint8_t* q, const at::Half* scale, const at::Half* mins, float* y,
                   int64_t ldy) {
  const int64_t blocks = K / kBlock;
#ifdef PLATFORM_AVX2
  // Blocks in pairs: one 32-byte load holds a pair's codes, its low nibbles are weights 0..15 of
  // both blocks and its high ones 16..31, against activations interleaved the same way
  // (interleave_pairs): two byte multiply-adds, one add, one widening a pair, about half the
  // instructions of a block at a time, which was what bound this kernel (10.7 GB/s a core with
  // the weights in cache, 8 from memory; pairs: 17 and 10). The scale products of eight blocks
  // are computed at once and spread four lanes a block. Two accumulators a row, for even and
  // odd pairs; the mins' share beside them, eight blocks at a time. Every row is summed in the
  // same order whatever R is.
  __m256 acc[R][2], min_acc[R];
  float tail[R];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = acc[r][1] = min_acc[r] = _mm256_setzero_ps();
    tail[r] = 0.f;
  }
  const __m256i nibbles = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  // the codes of blocks b and b + 1: their low nibbles, then their high ones
  auto pair_codes = [&](int64_t b) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 16));
    return std::pair<__m256i, __m256i>{_mm256_and_si256(bytes, nibbles),
                                       _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibbles)};
  };
  // a pair's codes times its interleaved activations x, summed per block: lanes 0..3 the
  // first block, 4..7 the second
  auto dot = [&](const std::pair<__m256i, __m256i>& codes, const int8_t* x) {
    const __m256i sums16 = _mm256_add_epi16(
        _mm256_maddubs_epi16(codes.first, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
        _mm256_maddubs_epi16(codes.second, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32))));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(sums16, ones));
  };
  const __m256i spread[4] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
                             _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7)};
  int64_t b = 0;
  for (; b + 8 <= blocks; b += 8) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scale + b)));
    const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins + b)));
    __m256 f[R];
    for (int r = 0; r < R; ++r) {
      f[r] = _mm256_mul_ps(d, _mm256_loadu_ps(dx + r * blocks + b));
      min_acc[r] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xsum + r * blocks + b), min_acc[r]);
    }
    for (int i = 0; i < 4; ++i) {
      const auto codes = pair_codes(b + 2 * i);
      for (int r = 0; r < R; ++r)
        acc[r][i & 1] = _mm256_fmadd_ps(dot(codes, xq + r * K + (b + 2 * i) * kBlock),
                                        _mm256_permutevar8x32_ps(f[r], spread[i]), acc[r][i & 1]);
    }
  }
  // Pairs past the last eight blocks, then a last single block (its activations not interleaved).
  for (; b + 2 <= blocks; b += 2) {
    const auto codes = pair_codes(b);
    const int slot = (b / 2) & 1;
    const float d0 = half_to_float(scale[b]), d1 = half_to_float(scale[b + 1]);
    for (int r = 0; r < R; ++r) {
      const float s0 = d0 * dx[r * blocks + b], s1 = d1 * dx[r * blocks + b + 1];
      acc[r][slot] = _mm256_fmadd_ps(dot(codes, xq + r * K + b * kBlock),
                                     _mm256_setr_ps(s0, s0, s0, s0, s1, s1, s1, s1), acc[r][slot]);
      tail[r] += half_to_float(mins[b]) * xsum[r * blocks + b];
      tail[r] += half_to_float(mins[b + 1]) * xsum[r * blocks + b + 1];
    }
  }
  if (b < blocks) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 16));
    const __m128i nibble = _mm256_castsi256_si128(nibbles);
    const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), nibble),
                                           _mm_and_si128(bytes, nibble));
    const int slot = (b / 2) & 1;
    const float d = half_to_float(scale[b]);
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + r * K + b * kBlock));
      const __m256i dots = _mm256_madd_epi16(_mm256_maddubs_epi16(codes, xv), ones);
      acc[r][slot] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_set1_ps(d * dx[r * blocks + b]),
                                     acc[r][slot]);
      tail[r] += half_to_float(mins[b]) * xsum[r * blocks + b];
    }
  }
  for (int r = 0; r < R; ++r)
    y[r * ldy] = hsum8(_mm256_add_ps(acc[r][0], acc[r][1])) + hsum8(min_acc[r]) + tail[r];
#else
  float sums[R];
  for (int r = 0; r < R; ++r) {
    sums[r] = 0.f;
    for (int64_t b = 0; b < blocks; ++b) {
      const int8_t* xb = xq + r * K + b * kBlock;
      int32_t dot = 0;
      for (int j = 0; j < 16; ++j) {
        const uint8_t byte = q[b * 16 + j];
        dot += static_cast<int32_t>(byte & 15) * xb[j] + static_cast<int32_t>(byte >> 4) * xb[j + 16];
      }
      sums[r] += static_cast<float>(dot) * (half_to_float(scale[b]) * dx[r * blocks + b]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float m = 0.f;
    for (int64_t b = 0; b < blocks; ++b) m += half_to_float(mins[b]) * xsum[r * blocks + b];
    y[r * ldy] = sums[r] + m;
  }
#endif
}
#endif  // PLATFORM_AVX512_VNNI

constexpr int64_t kGroup = 8;  // rows of an interleaved int4 group

#ifdef PLATFORM_AVX2
// y[r * ldy + j], j < 8: one interleaved group of eight weight rows against R activation rows
// (codes xq not interleaved; dx, xsum per block). Per block, each 32-byte chunk holds the eight
// rows' bytes for activations 4c..4c+3 (low nibbles) and 16+4c..16+4c+3 (high ones): two byte
// multiply-adds against those four activation bytes broadcast to every lane. A block's eight
// partial sums stay in 16 bits (each at most 2 * 15 * 127, eight of them 30,480 < 32,767),
// then one multiply-add widens them to a row per 32-bit lane and one float multiply-add applies
// the eight scales times the block's activation scale. The mins' share follows block by block.
// With VNNI (PLATFORM_VNNI256) vpdpbusd does each half's products and sums in one instruction,
// straight into the 32-bit lanes: the same integers, so the same results (four activation rows
// at once: 4.1 ms against 5.4 for a token's 120 products on the 2-core Xeon). Every row is
// summed in the same order whatever R is.
template <int R>
void int4_dot_group8(const int8_t* xq, const float* dx, const float* xsum, int64_t K,
                     const uint8_t* q, const at::Half* scale, const at::Half* mins, float* y,
                     int64_t ldy) {
  const int64_t blocks = K / kBlock;
  const __m256i nibbles = _mm256_set1_epi8(0x0F);
#ifndef PLATFORM_VNNI256
  const __m256i ones = _mm256_set1_epi16(1);
#endif
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* qb = q + b * kGroup * (kBlock / 2);
    // The codes two groups ahead (4.6 KB for SmolLM2's 576-wide rows, as kPrefetchRows for
    // the LM head): on the 2-core AVX2 EPYC the stream of SmolLM2-135M went 8-9% faster
    // (alternating warm processes; one group ahead 3-7%, four 2-5%).
    prefetch(qb + 2 * kGroup * (K / 2));
    prefetch(qb + 2 * kGroup * (K / 2) + 64);
    __m256i sums[R];
    for (int r = 0; r < R; ++r) sums[r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 32 * c));
      const __m256i lo = _mm256_and_si256(bytes, nibbles);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibbles);
      for (int r = 0; r < R; ++r) {
        const int8_t* xb = xq + r * K + b * kBlock + 4 * c;
        int32_t low4, high4;
        std::memcpy(&low4, xb, 4);
        std::memcpy(&high4, xb + 16, 4);
#ifdef PLATFORM_VNNI256
        // One instruction a half: four byte products summed into each row's 32-bit lane.
        sums[r] = _mm256_dpbusd_epi32(sums[r], lo, _mm256_set1_epi32(low4));
        sums[r] = _mm256_dpbusd_epi32(sums[r], hi, _mm256_set1_epi32(high4));
#else
        sums[r] = _mm256_add_epi16(sums[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(low4)));
        sums[r] = _mm256_add_epi16(sums[r], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(high4)));
#endif
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scale + b * kGroup)));
    for (int r = 0; r < R; ++r) {
#ifdef PLATFORM_VNNI256
      const __m256i dots = sums[r];
#else
      const __m256i dots = _mm256_madd_epi16(sums[r], ones);
#endif
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_mul_ps(d, _mm256_set1_ps(dx[r * blocks + b])),
                               acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 m = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b)
      m = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins + b * kGroup))),
                          _mm256_set1_ps(xsum[r * blocks + b]), m);
    _mm256_storeu_ps(y + r * ldy, _mm256_add_ps(acc[r], m));
  }
}
#else
// The same products without SIMD, reading the interleaved layout byte by byte.
template <int R>
void int4_dot_group8(const int8_t* xq, const float* dx, const float* xsum, int64_t K,
                     const uint8_t* q, const at::Half* scale, const at::Half* mins, float* y,
                     int64_t ldy) {
  const int64_t blocks = K / kBlock;
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kGroup; ++j) {
      float sum = 0.f, m = 0.f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* qb = q + b * kGroup * (kBlock / 2);
        const int8_t* xb = xq + r * K + b * kBlock;
        int32_t dot = 0;
        for (int i = 0; i < 16; ++i) {
          const uint8_t byte = qb[(i / 4) * 32 + j * 4 + i % 4];
          dot += static_cast<int32_t>(byte & 15) * xb[i] + static_cast<int32_t>(byte >> 4) * xb[i + 16];
        }
        sum += static_cast<float>(dot) * (half_to_float(scale[b * kGroup + j]) * dx[r * blocks + b]);
        m += half_to_float(mins[b * kGroup + j]) * xsum[r * blocks + b];
      }
      y[r * ldy + j] = sum + m;
    }
}
#endif

// Calls rows(m, R) over the rows of x in groups of kRows, then once for the leftover rows
// (a weight row is widened once per group: 7 rows are two groups, not four).
template <typename F>
void for_row_groups(int64_t M, F&& rows) {
  int64_t m = 0;
  for (; m + kRows <= M; m += kRows) rows(m, std::integral_constant<int, kRows>{});
  static_assert(kRows == 4, "the leftover cases below assume groups of four");
  switch (M - m) {
    case 3: rows(m, std::integral_constant<int, 3>{}); break;
    case 2: rows(m, std::integral_constant<int, 2>{}); break;
    case 1: rows(m, std::integral_constant<int, 1>{}); break;
    default: break;
  }
}

// y [M, N] = x [M, K] times q [N, K] transposed (times scales [N] unless null), in tiles of
// kTileN weight rows by up to kRows activation rows; weight rows are split over the threads.
template <typename W>
void tiled_linear(const float* x, int64_t M, int64_t K, const W* q, const float* scales, float* y,
                  int64_t N) {
  at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
    // kTileN weight rows at a time, for every row group while they are in cache
    for (int64_t span = n0; span < n1; span += kTileN) {
      const int64_t end = std::min(span + kTileN, n1);
      for_row_groups(M, [&](int64_t m, auto rows) {
        constexpr int R = decltype(rows)::value;
        // One activation row (a plain decode) reads its weight rows one after the other, the
        // stream the prefetchers follow best; it is bound by memory, not by the loads.
        constexpr int NT = R == 1 ? 1 : kTileN;
        const float* xm = x + m * K;
        float* ym = y + m * N;
        int64_t n = span;
        for (; n + NT <= end; n += NT)
          dot_tile<NT, R>(xm, K, q + n * K, K, scales != nullptr ? scales + n : nullptr, ym + n, N);
        for (; n < end; ++n)
          dot_tile<1, R>(xm, K, q + n * K, K, scales != nullptr ? scales + n : nullptr, ym + n, N);
      });
    }
  });
}

void check_x(const at::Tensor& x, int64_t K) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat,
              "x must be a 2-D float32 tensor, got ", x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(x.size(1) == K, "x has ", x.size(1), " columns, the weight ", K);
}

}  // namespace

namespace platform_cpu {

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales) {
  TORCH_CHECK(qweight.dim() == 2 && qweight.scalar_type() == at::kChar && qweight.is_contiguous(),
              "qweight must be a contiguous 2-D int8 tensor");
  const int64_t N = qweight.size(0), K = qweight.size(1);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == N && scales.is_contiguous(),
              "scales must be ", N, " contiguous float32 values");
  check_x(x, K);
  const at::Tensor xc = x.contiguous();
  const int64_t M = xc.size(0);
  at::Tensor y = at::empty({M, N}, xc.options());
  const float* xp = xc.data_ptr<float>();
  const int8_t* qp = qweight.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  tiled_linear(xp, M, K, qp, sp, yp, N);
  return y;
}

// x [M, K] times a float32 weight [N, K], transposed: F.linear without a bias for decode rows.
// BLAS picks its kernel (and its order of sums) by the number of rows, so a row's result
// depends on the batch it came in; here it never does (see dot_tile).
at::Tensor float_linear(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.is_contiguous(),
              "weight must be a contiguous 2-D float32 tensor");
  const int64_t N = weight.size(0), K = weight.size(1);
  check_x(x, K);
  const at::Tensor xc = x.contiguous();
  const int64_t M = xc.size(0);
  at::Tensor y = at::empty({M, N}, xc.options());
  const float* xp = xc.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  tiled_linear(xp, M, K, wp, static_cast<const float*>(nullptr), yp, N);
  return y;
}

int64_t int4_kernel_interleave() {
#ifdef PLATFORM_AVX2
  // SmolLM2-135M's 120 products a token from memory, 2 threads (docs/kernels.md): on the
  // AVX2 EPYC 2.6 ms in rows, 2.35 in groups of eight; on the AVX512-VNNI Xeon 3.6 ms with
  // the VNNI row kernel, 2.6 in groups (4.1 against 8.3-9.1 ms for four activation rows).
  return kGroup;
#else
  return 1;
#endif
}

namespace {

void check_int4(const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& mins, int64_t interleave) {
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == at::kByte && packed.is_contiguous(),
              "packed must be a contiguous 2-D uint8 tensor");
  const int64_t N = packed.size(0), K = packed.size(1) * 2, blocks = K / kBlock;
  TORCH_CHECK(K % kBlock == 0, "int4 weights come in blocks of 32 along K, got K = ", K);
  for (const at::Tensor* t : {&scales, &mins})
    TORCH_CHECK(t->scalar_type() == at::kHalf && t->is_contiguous() && t->dim() == 2 &&
                    t->size(0) == N && t->size(1) == blocks,
                "scales and mins must be contiguous float16 [", N, ", ", blocks, "]");
  TORCH_CHECK(interleave == 1 || (interleave == kGroup && N % kGroup == 0),
              "int4 rows are interleaved by 1 or by ", kGroup, " (a multiple of ", kGroup,
              " rows), got ", interleave, " for ", N, " rows");
}

}  // namespace

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& mins, int64_t interleave) {
  check_int4(packed, scales, mins, interleave);
  const int64_t N = packed.size(0), K = packed.size(1) * 2, blocks = K / kBlock;
  check_x(x, K);
  const at::Tensor xc = x.contiguous();
  const int64_t M = xc.size(0);
  std::vector<int8_t> xq(M * K);
  std::vector<float> dx(M * blocks), xsum(M * blocks);
  for (int64_t m = 0; m < M; ++m) {
    quantize_activations(xc.data_ptr<float>() + m * K, K, xq.data() + m * K, dx.data() + m * blocks,
                         xsum.data() + m * blocks);
    if (interleave != 1) continue;  // the group kernel reads the activations in order
#ifdef PLATFORM_AVX512_VNNI
    interleave_groups(xq.data() + m * K, K);
#elif defined(PLATFORM_AVX2)
    interleave_pairs(xq.data() + m * K, K);
#endif
  }
  at::Tensor y = at::empty({M, N}, xc.options());
  const uint8_t* qp = packed.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* mp = mins.data_ptr<at::Half>();
  float* yp = y.data_ptr<float>();
  if (interleave == kGroup) {
    at::parallel_for(0, N / kGroup, 2, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g)
        for_row_groups(M, [&](int64_t m, auto rows) {
          int4_dot_group8<decltype(rows)::value>(xq.data() + m * K, dx.data() + m * blocks,
                                                 xsum.data() + m * blocks, K, qp + g * kGroup * (K / 2),
                                                 sp + g * kGroup * blocks, mp + g * kGroup * blocks,
                                                 yp + m * N + g * kGroup, N);
        });
    });
    return y;
  }
  at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for_row_groups(M, [&](int64_t m, auto rows) {
        int4_dot_rows<decltype(rows)::value>(xq.data() + m * K, dx.data() + m * blocks,
                                             xsum.data() + m * blocks, K, qp + n * (K / 2),
                                             sp + n * blocks, mp + n * blocks, yp + m * N + n, N);
      });
  });
  return y;
}

// The float32 matrix of an int4 weight (for batches too large for the kernels above).
at::Tensor int4_dequantize(const at::Tensor& packed, const at::Tensor& scales,
                           const at::Tensor& mins, int64_t interleave) {
  check_int4(packed, scales, mins, interleave);
  const int64_t N = packed.size(0), K = packed.size(1) * 2, blocks = K / kBlock;
  at::Tensor w = at::empty({N, K}, scales.options().dtype(at::kFloat));
  const uint8_t* qp = packed.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* mp = mins.data_ptr<at::Half>();
  float* wp = w.data_ptr<float>();
  if (interleave == kGroup) {
    // block b of group g: its rows' codes in 4-byte chunks (see the layout at the top)
    at::parallel_for(0, N / kGroup * blocks, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t g = i / blocks, b = i % blocks;
        const uint8_t* src = qp + i * kGroup * (kBlock / 2);
        for (int64_t j = 0; j < kGroup; ++j) {
          float* dst = wp + (g * kGroup + j) * K + b * kBlock;
          const float d = half_to_float(sp[i * kGroup + j]), m = half_to_float(mp[i * kGroup + j]);
          for (int t = 0; t < 16; ++t) {
            const uint8_t byte = src[(t / 4) * 32 + j * 4 + t % 4];
            dst[t] = static_cast<float>(byte & 15) * d + m;
            dst[t + 16] = static_cast<float>(byte >> 4) * d + m;
          }
        }
      }
    });
    return w;
  }
  at::parallel_for(0, N * blocks, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* src = qp + b * 16;
      float* dst = wp + b * kBlock;
      const float d = half_to_float(sp[b]), m = half_to_float(mp[b]);
      for (int j = 0; j < 16; ++j) {
        dst[j] = static_cast<float>(src[j] & 15) * d + m;
        dst[j + 16] = static_cast<float>(src[j] >> 4) * d + m;
      }
    }
  });
  return w;
}

}  // namespace platform_cpu

TORCH_LIBRARY(platform_cpu, m) {
  m.def("int8_linear(Tensor x, Tensor qweight, Tensor scales) -> Tensor");
  m.def("float_linear(Tensor x, Tensor weight) -> Tensor");
  m.def("int4_linear(Tensor x, Tensor packed, Tensor scales, Tensor mins, int interleave=1) -> Tensor");
  m.def("int4_dequantize(Tensor packed, Tensor scales, Tensor mins, int interleave=1) -> Tensor");
  m.def("int4_kernel_interleave() -> int", &platform_cpu::int4_kernel_interleave);
}

TORCH_LIBRARY_IMPL(platform_cpu, CPU, m) {
  m.impl("int8_linear", &platform_cpu::int8_linear);
  m.impl("float_linear", &platform_cpu::float_linear);
  m.impl("int4_linear", &platform_cpu::int4_linear);
  m.impl("int4_dequantize", &platform_cpu::int4_dequantize);
}
