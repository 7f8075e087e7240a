// Decode attention straight from the paged KV cache (float32 or bfloat16, computed in float32):
// one query token per sequence; and the write of a step's K and V into that cache, one op for
// both.
//
// The PyTorch path (engine/attention/torch_backend.py, the reference) gathers every sequence's
// keys and values out of their blocks into a padded batch, then runs SDPA with a mask: for
// decode the gather moves more bytes than the attention reads, and costs a dozen calls a layer.
// This kernel reads each sequence's K/V where they lie, block by block, with no copy and no
// padding. Work items are fixed parts of a sequence's tokens, so a row's result never depends on
// the batch beside it; the query heads that share a KV head (GQA) read its keys and values while
// they are in cache.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops.h"
#include "vec.h"

namespace {

using namespace platform_cpu;

template <typename T>
inline float dot(const float* a, const T* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.f;
#if defined(PLATFORM_AVX512)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load16(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), load16(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load16(b + i), acc0);
  sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif defined(PLATFORM_AVX2)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load8(b + i + 8), acc1);
  }
  sum = hsum8(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * to_float(b[i]);
  return sum;
}

// out += p * v over n floats.
template <typename T>
inline void axpy(float p, const T* v, float* out, int64_t n) {
  int64_t i = 0;
#if defined(PLATFORM_AVX512)
  const __m512 pw = _mm512_set1_ps(p);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_fmadd_ps(pw, load16(v + i), _mm512_loadu_ps(out + i)));
#endif
#ifdef PLATFORM_AVX2
  const __m256 pv = _mm256_set1_ps(p);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, load8(v + i), _mm256_loadu_ps(out + i)));
#endif
  for (; i < n; ++i) out[i] += p * to_float(v[i]);
}

// Tokens of one part of a sequence's attention (see decode_attention). 32 rather than 64: one
// stream of a few hundred tokens then splits into enough parts for the threads to end close
// together (SmolLM2-135M int4, one 256-token stream on the 2-core AVX2 EPYC: the main thread
// spent 9% of its time in attention, the other 4.5%; 1-2% more tokens/s with parts of 32).
constexpr int64_t kPartTokens = 32;

template <typename T>
struct SequenceView {
  const T* k;
  const T* v;
  const int64_t* table;
  int64_t block_size, token_stride, heads, group, head_dim;
  float scale;
};

// One sequence's attention over its tokens [t0, t1), all heads: per head the largest score
// m[h], the sum l[h] of exp(score - m[h]), and o[h] = the sum of exp(score - m[h]) * v, not
// yet divided by l[h] (so partial ranges of one sequence can be merged).
template <typename T>
void attend_tokens(const SequenceView<T>& seq, const float* q, int64_t t0, int64_t t1,
                   std::vector<float>& scores, float* o, float* m, float* l) {
  const int64_t H = seq.heads, D = seq.head_dim, G = seq.group, BS = seq.block_size, n = t1 - t0;
  std::fill(o, o + H * D, 0.f);
  std::fill(m, m + H, -std::numeric_limits<float>::infinity());
  std::fill(l, l + H, 0.f);
  if (n <= 0) return;
  scores.resize(H * n);
  for (int64_t t = t0; t < t1; ++t) {
    const T* k = seq.k + (seq.table[t / BS] * BS + t % BS) * seq.token_stride;
    for (int64_t h = 0; h < H; ++h) {
      const float s = dot(q + h * D, k + (h / G) * D, D) * seq.scale;
      scores[h * n + t - t0] = s;
      m[h] = std::max(m[h], s);
    }
  }
  for (int64_t h = 0; h < H; ++h) l[h] = softmax_numerators(scores.data() + h * n, n, m[h]);
  for (int64_t t = t0; t < t1; ++t) {
    const T* v = seq.v + (seq.table[t / BS] * BS + t % BS) * seq.token_stride;
    for (int64_t h = 0; h < H; ++h) axpy(scores[h * n + t - t0], v + (h / G) * D, o + h * D, D);
  }
}

template <typename T>
void decode_attention(const at::Tensor& query, const at::Tensor& k_cache, const at::Tensor& v_cache,
                      const int64_t* tables, int64_t ldt, const int64_t* lens, float sc, at::Tensor& out) {
  const int64_t B = query.size(0), H = query.size(1), D = query.size(2);
  const int64_t KVH = k_cache.size(2);
  const T* qp = query.data_ptr<T>();
  T* op = out.data_ptr<T>();
  auto view = [&](int64_t b) {
    // token_stride: elements between consecutive slots of one KV head
    return SequenceView<T>{k_cache.data_ptr<T>(), v_cache.data_ptr<T>(), tables + b * ldt, k_cache.size(1),
                           KVH * D, H, H / KVH, D, sc};
  };
  auto widen_query = [&](int64_t b, std::vector<float>& q) {
    for (int64_t i = 0; i < H * D; ++i) q[i] = to_float(qp[b * H * D + i]);
  };

  // Work items are parts of kPartTokens tokens of one sequence, all heads together: a token's K
  // (and V) for every KV head is one contiguous row of the block, so reading them in token order
  // streams through memory (per KV head, the rows would be read a third at a time, several times
  // slower). Parts let every core read one long context (flash-decoding), and their boundaries
  // depend on the position alone, never on the batch or the thread count: a sequence's output
  // is bit for bit the same whether it is decoded alone or beside others, which is what makes
  // the rows of a speculative verification step (engine/spec_decode/) exact.
  std::vector<int64_t> first_part(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) first_part[b + 1] = first_part[b] + (lens[b] + kPartTokens - 1) / kPartTokens;
  const int64_t P = first_part[B];
  std::vector<float> part_o(P * H * D), part_m(P * H), part_l(P * H);
  at::parallel_for(0, P, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores, q(H * D);
    int64_t b = std::upper_bound(first_part.begin(), first_part.end(), i0) - first_part.begin() - 1;
    int64_t widened = -1;
    for (int64_t i = i0; i < i1; ++i) {
      while (i >= first_part[b + 1]) ++b;
      if (widened != b) widen_query(b, q), widened = b;
      const int64_t t0 = (i - first_part[b]) * kPartTokens, t1 = std::min(t0 + kPartTokens, lens[b]);
      attend_tokens(view(b), q.data(), t0, t1, scores, part_o.data() + i * H * D, part_m.data() + i * H,
                    part_l.data() + i * H);
    }
  });
  // Every sequence's parts merged by their softmax maxima, in part order (one part included).
  at::parallel_for(0, B, 16, [&](int64_t b0, int64_t b1) {
    std::vector<float> weight;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = first_part[b], S = first_part[b + 1] - p0;
      weight.resize(S);
      T* ob = op + b * H * D;
      for (int64_t h = 0; h < H; ++h) {
        float top = -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < S; ++s) top = std::max(top, part_m[(p0 + s) * H + h]);
        float total = 0.f;
        for (int64_t s = 0; s < S; ++s) {
          weight[s] = std::exp(part_m[(p0 + s) * H + h] - top);
          total += weight[s] * part_l[(p0 + s) * H + h];
        }
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0.f;
          for (int64_t s = 0; s < S; ++s) acc += weight[s] * part_o[((p0 + s) * H + h) * D + d];
          ob[h * D + d] = static_cast<T>(acc / total);
        }
      }
    }
  });
}

}  // namespace

namespace platform_cpu {

void check_paged_cache(const at::Tensor& k_cache, const at::Tensor& v_cache) {
  TORCH_CHECK((k_cache.scalar_type() == at::kFloat || k_cache.scalar_type() == at::kBFloat16) &&
                  k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.sizes() == k_cache.sizes() &&
                  v_cache.is_contiguous() && v_cache.scalar_type() == k_cache.scalar_type(),
              "k_cache and v_cache must be contiguous float32 or bfloat16 [blocks, block_size, "
              "kv_heads, head_dim] tensors of one shape and dtype");
}

void check_block_table(const int64_t* table, int64_t max_blocks, int64_t seq_len, int64_t block_size,
                       int64_t num_blocks, const std::string& which) {
  TORCH_CHECK(seq_len > 0 && seq_len <= max_blocks * block_size, which, " has length ", seq_len,
              ", its block table holds ", max_blocks * block_size);
  for (int64_t i = 0; i < (seq_len + block_size - 1) / block_size; ++i)
    TORCH_CHECK(table[i] >= 0 && table[i] < num_blocks, which, " names block ", table[i], " of ", num_blocks);
}

at::Tensor paged_decode_attention(const at::Tensor& query, const at::Tensor& k_cache,
                                  const at::Tensor& v_cache, const at::Tensor& block_tables,
                                  const at::Tensor& seq_lens, double scale) {
  check_paged_cache(k_cache, v_cache);
  TORCH_CHECK(query.scalar_type() == k_cache.scalar_type() && query.dim() == 3 && query.is_contiguous(),
              "query must be a contiguous [seqs, heads, head_dim] tensor of the cache's dtype");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.dim() == 2 &&
                  block_tables.stride(1) == 1,
              "block_tables must be int64 [seqs, max_blocks] with contiguous rows");
  TORCH_CHECK(seq_lens.scalar_type() == at::kLong && seq_lens.dim() == 1 && seq_lens.is_contiguous(),
              "seq_lens must be a contiguous 1-D int64 tensor");
  const int64_t B = query.size(0), H = query.size(1), D = query.size(2);
  const int64_t num_blocks = k_cache.size(0), BS = k_cache.size(1), KVH = k_cache.size(2);
  TORCH_CHECK(k_cache.size(3) == D, "query and cache head_dim differ");
  TORCH_CHECK(H % KVH == 0, H, " query heads do not group over ", KVH, " KV heads");
  TORCH_CHECK(block_tables.size(0) >= B && seq_lens.size(0) >= B, "one block table and length per sequence");
  const int64_t max_blocks = block_tables.size(1), ldt = block_tables.stride(0);
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  const int64_t* lens = seq_lens.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    check_block_table(tables + b * ldt, max_blocks, lens[b], BS, num_blocks, "sequence " + std::to_string(b));
  at::Tensor out = at::empty({B, H, D}, query.options());
  const float sc = static_cast<float>(scale);
  if (query.scalar_type() == at::kFloat)
    decode_attention<float>(query, k_cache, v_cache, tables, ldt, lens, sc, out);
  else
    decode_attention<bf16>(query, k_cache, v_cache, tables, ldt, lens, sc, out);
  return out;
}

// k_cache/v_cache slot slot_mapping[t] = key/value[t]: this step's K and V into the cache.
void write_kv(const at::Tensor& key, const at::Tensor& value, at::Tensor& k_cache, at::Tensor& v_cache,
              const at::Tensor& slot_mapping) {
  check_paged_cache(k_cache, v_cache);
  const int64_t KVH = k_cache.size(2), D = k_cache.size(3), slots = k_cache.size(0) * k_cache.size(1);
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.dim() == 1 && slot_mapping.is_contiguous(),
              "slot_mapping must be a contiguous 1-D int64 tensor");
  const int64_t T = slot_mapping.size(0);
  for (const at::Tensor* t : {&key, &value})
    TORCH_CHECK(t->scalar_type() == k_cache.scalar_type() && t->dim() == 3 && t->size(0) == T &&
                    t->size(1) == KVH && t->size(2) == D && t->stride(2) == 1 && t->stride(1) == D,
                "key and value must be [", T, ", ", KVH, ", ", D,
                "] tensors of the cache's dtype with contiguous tokens");
  const int64_t* slot = slot_mapping.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    TORCH_CHECK(slot[t] >= 0 && slot[t] < slots, "slot ", slot[t], " is outside the cache (", slots, " slots)");
  const int64_t size = k_cache.element_size();
  const char* kp = static_cast<const char*>(key.data_ptr());
  const char* vp = static_cast<const char*>(value.data_ptr());
  char* kc = static_cast<char*>(k_cache.data_ptr());
  char* vc = static_cast<char*>(v_cache.data_ptr());
  const int64_t row = KVH * D * size, ldk = key.stride(0) * size, ldv = value.stride(0) * size;
  at::parallel_for(0, T, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      std::memcpy(kc + slot[t] * row, kp + t * ldk, row);
      std::memcpy(vc + slot[t] * row, vp + t * ldv, row);
    }
  });
}

}  // namespace platform_cpu

TORCH_LIBRARY_FRAGMENT(platform_cpu, m) {
  m.def("write_kv(Tensor key, Tensor value, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor slot_mapping) -> ()");
  m.def("paged_decode_attention(Tensor query, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor seq_lens, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(platform_cpu, CPU, m) {
  m.impl("paged_decode_attention", &platform_cpu::paged_decode_attention);
  m.impl("write_kv", &platform_cpu::write_kv);
}
