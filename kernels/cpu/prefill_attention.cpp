// Attention of a prompt chunk that follows cached context, straight from the paged KV cache
// (float32 or bfloat16, computed in float32): the chunk's queries, at positions
// seq_len - q_len .. seq_len - 1 of one sequence, see every key before them and their own
// chunk's causally, all read from the cache blocks where write_kv has just put the chunk's K/V.
//
// The PyTorch path (engine/attention/torch_backend.py, _chunk_after_context: the reference)
// gathers the context's K/V out of their blocks, repeats the chunk's own K/V for every query
// head, runs two flash-attention calls and merges them by their log-sum-exps. For a short chunk
// after a long context, a conversation's next turn, those copies and the dozen calls a layer
// cost as much as the arithmetic, or more.
//
// Here a work item is up to four vectors of rows of one KV head, a row being a query token
// times one of the group's query heads (GQA: they read the same keys and values), laid across
// the vectors' lanes. Keys come kKeyTile at a time (FlashAttention's online softmax over
// tiles). Every step is vector FMAs over rows with one key's or one dimension's value
// broadcast: the scores, the causal mask and the softmax on whole vectors of rows, the
// weighted sum of values; nothing is transposed and nothing summed across lanes. Tiles start
// at multiples of kKeyTile and a row's lanes never mix with another's, so a row's result does
// not depend on the thread count or on the rows beside it.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops.h"
#include "vec.h"

namespace {

using namespace platform_cpu;

constexpr int64_t kKeyTile = 32;
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

template <typename T>
struct Chunk {
  const T* q;  // [q_len, heads, head_dim]; tokens ldq elements apart
  int64_t ldq;
  const T* k;  // the caches: [blocks, block_size, kv_heads, head_dim]
  const T* v;
  const int64_t* table;  // the sequence's block table
  int64_t block_size, kv_heads, heads, group, head_dim, context, q_len;
  float scale;
  T* out;  // [q_len, heads, head_dim], contiguous

  int64_t slot(int64_t t) const { return table[t / block_size] * block_size + t % block_size; }
  // Row r of KV head g's rows (the chunk's tokens times the group's query heads, token-major).
  const T* query_row(int64_t g, int64_t r) const { return q + (r / group) * ldq + (g * group + r % group) * head_dim; }
  T* out_row(int64_t g, int64_t r) const { return out + (r / group) * heads * head_dim + (g * group + r % group) * head_dim; }
  int64_t position(int64_t r) const { return context + r / group; }  // the last key row r sees
};

#if defined(PLATFORM_AVX2)

// The vector the kernel computes with: 16 floats on an AVX512 build, 8 on AVX2.
#if defined(PLATFORM_AVX512)
using Vec = __m512;
constexpr int64_t kWidth = 16;
inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vset(float x) { return _mm512_set1_ps(x); }
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
template <typename T>
inline Vec vwiden(const T* p) { return load16(p); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec vmax(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline Vec vexp(Vec x) { return exp16(x); }
// a where key <= limit, else `otherwise`.
inline Vec vwhere_at_or_before(Vec key, Vec limit, Vec a, Vec otherwise) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(key, limit, _CMP_LE_OQ), otherwise, a);
}
#else
using Vec = __m256;
constexpr int64_t kWidth = 8;
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vset(float x) { return _mm256_set1_ps(x); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
template <typename T>
inline Vec vwiden(const T* p) { return load8(p); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec vmax(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline Vec vexp(Vec x) { return exp8(x); }
inline Vec vwhere_at_or_before(Vec key, Vec limit, Vec a, Vec otherwise) {
  return _mm256_blendv_ps(otherwise, a, _mm256_cmp_ps(key, limit, _CMP_LE_OQ));
}
#endif

// Rows are laid across vectors (lane r of vector r / kWidth): a work item is up to kMaxRowVecs
// vectors of rows, and every step below is vector FMAs over rows with a key's or a dimension's
// value broadcast. No transposing, and the online softmax runs on whole vectors of rows.
constexpr int64_t kMaxRowVecs = 4;
constexpr int64_t kAtOnce = kWidth == 16 ? 4 : 2;  // keys (scores) or dims (values) per pass

struct Scratch {
  std::vector<float> qt, st, ot, kf, vf;  // [D, rows], [kKeyTile, rows], [D, rows], widened K/V
};

// st[j][:] = qt . key j for keys [j0, j0 + J): J keys times NR vectors of rows accumulate at once.
template <int64_t NR, int64_t J>
inline void scores(const float* qt, const float* const* keys, int64_t j0, int64_t D, float* st) {
  constexpr int64_t Rp = NR * kWidth;
  Vec acc[J][NR];
  for (auto& key : acc)
    for (auto& a : key) a = vzero();
  for (int64_t d = 0; d < D; ++d) {
    Vec q[NR];
    for (int64_t v = 0; v < NR; ++v) q[v] = vload(qt + d * Rp + v * kWidth);
    for (int64_t j = 0; j < J; ++j) {
      const Vec k = vset(keys[j0 + j][d]);
      for (int64_t v = 0; v < NR; ++v) acc[j][v] = vfma(k, q[v], acc[j][v]);
    }
  }
  for (int64_t j = 0; j < J; ++j)
    for (int64_t v = 0; v < NR; ++v) vstore(st + (j0 + j) * Rp + v * kWidth, acc[j][v]);
}

// ot[d][:] = ot[d][:] * keep + sum over the tile's n keys of value j[d] * st[j][:], for dims
// [d0, d0 + E).
template <int64_t NR, int64_t E>
inline void values(float* ot, const Vec* keep, const float* st, const float* const* vals, int64_t n, int64_t d0) {
  constexpr int64_t Rp = NR * kWidth;
  Vec acc[E][NR];
  for (int64_t e = 0; e < E; ++e)
    for (int64_t v = 0; v < NR; ++v) acc[e][v] = vmul(vload(ot + (d0 + e) * Rp + v * kWidth), keep[v]);
  for (int64_t j = 0; j < n; ++j) {
    Vec p[NR];
    for (int64_t v = 0; v < NR; ++v) p[v] = vload(st + j * Rp + v * kWidth);
    for (int64_t e = 0; e < E; ++e) {
      const Vec x = vset(vals[j][d0 + e]);
      for (int64_t v = 0; v < NR; ++v) acc[e][v] = vfma(x, p[v], acc[e][v]);
    }
  }
  for (int64_t e = 0; e < E; ++e)
    for (int64_t v = 0; v < NR; ++v) vstore(ot + (d0 + e) * Rp + v * kWidth, acc[e][v]);
}

// Rows [r0, r0 + rows) of KV head g, rows <= NR * kWidth.
template <typename T, int64_t NR>
void attend_rows(const Chunk<T>& c, int64_t g, int64_t r0, int64_t rows, Scratch& s) {
  constexpr int64_t Rp = NR * kWidth;
  const int64_t D = c.head_dim, ld = c.kv_heads * D;
  s.qt.assign(D * Rp, 0.f), s.st.resize(kKeyTile * Rp), s.ot.assign(D * Rp, 0.f);
  Vec limit[NR], m[NR], l[NR], keep[NR];
  float positions[Rp];  // compared as floats: exact below 2^24 tokens
  for (int64_t r = 0; r < Rp; ++r) {
    // Padding rows (past `rows`) have zero queries and see every key the last row sees.
    const int64_t row = r0 + std::min(r, rows - 1);
    positions[r] = static_cast<float>(c.position(row));
    if (r >= rows) continue;
    const T* q = c.query_row(g, row);
    for (int64_t d = 0; d < D; ++d) s.qt[d * Rp + r] = to_float(q[d]) * c.scale;
  }
  for (int64_t v = 0; v < NR; ++v) limit[v] = vload(positions + v * kWidth), m[v] = vset(kMinusInf), l[v] = vzero();
  if constexpr (!std::is_same_v<T, float>) s.kf.resize(kKeyTile * D), s.vf.resize(kKeyTile * D);
  const float* keys[kKeyTile];
  const float* vals[kKeyTile];
  const int64_t last = c.position(r0 + rows - 1);  // the last key any row sees
  for (int64_t t0 = 0; t0 <= last; t0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, last + 1 - t0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = c.slot(t0 + j) * ld + g * D;
      if constexpr (std::is_same_v<T, float>) {
        keys[j] = c.k + at, vals[j] = c.v + at;
      } else {  // widened once per tile: broadcasting then reads floats
        float* kf = s.kf.data() + j * D;
        float* vf = s.vf.data() + j * D;
        for (int64_t d = 0; d < D; ++d) kf[d] = to_float(c.k[at + d]), vf[d] = to_float(c.v[at + d]);
        keys[j] = kf, vals[j] = vf;
      }
    }
    int64_t j = 0;
    for (; j + kAtOnce <= n; j += kAtOnce) scores<NR, kAtOnce>(s.qt.data(), keys, j, D, s.st.data());
    for (; j < n; ++j) scores<NR, 1>(s.qt.data(), keys, j, D, s.st.data());
    // Causal mask and the online softmax, a vector of rows at a time.
    Vec top[NR];
    for (int64_t v = 0; v < NR; ++v) top[v] = m[v];
    for (int64_t k = 0; k < n; ++k)
      for (int64_t v = 0; v < NR; ++v) {
        float* sv = s.st.data() + k * Rp + v * kWidth;
        const Vec masked = vwhere_at_or_before(vset(static_cast<float>(t0 + k)), limit[v], vload(sv), vset(kMinusInf));
        vstore(sv, masked);
        top[v] = vmax(top[v], masked);
      }
    for (int64_t v = 0; v < NR; ++v) {
      // A row that sees no key yet keeps top -inf; subtracting 0 instead keeps its terms 0.
      const Vec shift = vwhere_at_or_before(top[v], vset(kMinusInf), vzero(), top[v]);
      // Nothing accumulated yet (m -inf): keep 0, not the clamped exp of -inf.
      keep[v] = vwhere_at_or_before(m[v], vset(kMinusInf), vzero(), vexp(vsub(m[v], shift)));
      Vec total = vzero();
      for (int64_t k = 0; k < n; ++k) {
        float* sv = s.st.data() + k * Rp + v * kWidth;
        const Vec score = vload(sv);
        // exp of -inf (a masked key) is 0 exactly, not the clamped exp8's tiny value.
        const Vec p = vwhere_at_or_before(score, vset(kMinusInf), vzero(), vexp(vsub(score, shift)));
        vstore(sv, p);
        total = vadd(total, p);
      }
      l[v] = vadd(vmul(l[v], keep[v]), total);
      m[v] = top[v];
    }
    int64_t d = 0;
    for (; d + kAtOnce <= D; d += kAtOnce) values<NR, kAtOnce>(s.ot.data(), keep, s.st.data(), vals, n, d);
    for (; d < D; ++d) values<NR, 1>(s.ot.data(), keep, s.st.data(), vals, n, d);
  }
  float totals[Rp];
  for (int64_t v = 0; v < NR; ++v) vstore(totals + v * kWidth, l[v]);
  for (int64_t r = 0; r < rows; ++r) {
    T* out = c.out_row(g, r0 + r);
    const float inv = 1.f / totals[r];
    for (int64_t d = 0; d < D; ++d) out[d] = static_cast<T>(s.ot[d * Rp + r] * inv);
  }
}

template <typename T>
void prefill_attention(const Chunk<T>& c) {
  // Work items of 1 to kMaxRowVecs vectors of rows: the size that ends the threads soonest,
  // counting an item's fixed cost (its pass over the keys) as half a vector of rows. The
  // threads take the items in equal runs: 144 rows of SmolLM2 (48 tokens) on 2 threads went
  // from items of 4, 4 and 1 vectors (one thread with 20 vectors' work, the other 7) to 3, 3, 3.
  const int64_t rows = c.q_len * c.group, threads = at::get_num_threads();
  const int64_t row_vecs = (rows + kWidth - 1) / kWidth;
  int64_t vecs = kMaxRowVecs;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t v = kMaxRowVecs; v >= 1; --v) {
    const int64_t items = c.kv_heads * ((row_vecs + v - 1) / v);
    const double time = static_cast<double>((items + threads - 1) / threads) * (v + 0.5);
    if (time < best) best = time, vecs = v;
  }
  const int64_t block = vecs * kWidth, blocks = (rows + block - 1) / block;
  at::parallel_for(0, c.kv_heads * blocks, 1, [&](int64_t w0, int64_t w1) {
    Scratch scratch;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t g = w % c.kv_heads, r0 = (w / c.kv_heads) * block, n = std::min(block, rows - r0);
      switch ((n + kWidth - 1) / kWidth) {
        case 1: attend_rows<T, 1>(c, g, r0, n, scratch); break;
        case 2: attend_rows<T, 2>(c, g, r0, n, scratch); break;
        case 3: attend_rows<T, 3>(c, g, r0, n, scratch); break;
        default: attend_rows<T, 4>(c, g, r0, n, scratch); break;
      }
    }
  });
}

#else  // no AVX2: one row at a time, in plain C++

template <typename T>
void prefill_attention(const Chunk<T>& c) {
  const int64_t D = c.head_dim, ld = c.kv_heads * D, rows = c.q_len * c.group;
  at::parallel_for(0, c.kv_heads * rows, 1, [&](int64_t w0, int64_t w1) {
    std::vector<float> o(D);
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t g = w % c.kv_heads, r = w / c.kv_heads;
      const T* q = c.query_row(g, r);
      float m = kMinusInf, l = 0.f;
      std::fill(o.begin(), o.end(), 0.f);
      for (int64_t t = 0; t <= c.position(r); ++t) {
        const int64_t at = c.slot(t) * ld + g * D;
        float score = 0.f;
        for (int64_t d = 0; d < D; ++d) score += to_float(q[d]) * c.scale * to_float(c.k[at + d]);
        const float top = std::max(m, score), keep = m == kMinusInf ? 0.f : std::exp(m - top);
        const float p = std::exp(score - top);
        l = l * keep + p, m = top;
        for (int64_t d = 0; d < D; ++d) o[d] = o[d] * keep + p * to_float(c.v[at + d]);
      }
      T* out = c.out_row(g, r);
      for (int64_t d = 0; d < D; ++d) out[d] = static_cast<T>(o[d] / l);
    }
  });
}

#endif

}  // namespace

namespace platform_cpu {

at::Tensor paged_prefill_attention(const at::Tensor& query, const at::Tensor& k_cache,
                                   const at::Tensor& v_cache, const at::Tensor& block_table,
                                   int64_t seq_len, double scale) {
  check_paged_cache(k_cache, v_cache);
  TORCH_CHECK(query.scalar_type() == k_cache.scalar_type() && query.dim() == 3 && query.stride(2) == 1 &&
                  query.stride(1) == query.size(2),
              "query must be a [tokens, heads, head_dim] tensor of the cache's dtype with contiguous heads");
  TORCH_CHECK(block_table.scalar_type() == at::kLong && block_table.dim() == 1 && block_table.is_contiguous(),
              "block_table must be a contiguous 1-D int64 tensor");
  const int64_t q_len = query.size(0), H = query.size(1), D = query.size(2);
  const int64_t num_blocks = k_cache.size(0), BS = k_cache.size(1), KVH = k_cache.size(2);
  TORCH_CHECK(k_cache.size(3) == D, "query and cache head_dim differ");
  TORCH_CHECK(H % KVH == 0, H, " query heads do not group over ", KVH, " KV heads");
  TORCH_CHECK(q_len > 0 && seq_len >= q_len, "a chunk of ", q_len, " tokens in a sequence of ", seq_len);
  const int64_t* table = block_table.data_ptr<int64_t>();
  check_block_table(table, block_table.size(0), seq_len, BS, num_blocks, "the sequence");
  at::Tensor out = at::empty({q_len, H, D}, query.options());
  const float sc = static_cast<float>(scale);
  auto run = [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    prefill_attention(Chunk<T>{query.data_ptr<T>(), query.stride(0), k_cache.data_ptr<T>(), v_cache.data_ptr<T>(),
                               table, BS, KVH, H, H / KVH, D, seq_len - q_len, q_len, sc, out.data_ptr<T>()});
  };
  if (query.scalar_type() == at::kFloat)
    run(static_cast<float*>(nullptr));
  else
    run(static_cast<bf16*>(nullptr));
  return out;
}

}  // namespace platform_cpu

TORCH_LIBRARY_FRAGMENT(platform_cpu, m) {
  m.def("paged_prefill_attention(Tensor query, Tensor k_cache, Tensor v_cache, Tensor block_table, "
        "int seq_len, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(platform_cpu, CPU, m) { m.impl("paged_prefill_attention", &platform_cpu::paged_prefill_attention); }
