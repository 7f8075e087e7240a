// Decode attention straight from the paged KV cache (float32 or bfloat16, computed in float32):
// one query token per sequence; and the write of a step's K and V into that cache, one op for
// both.
//
// The PyTorch path (engine/attention/torch_backend.py, the reference) gathers every sequence's
// keys and values out of their blocks into a padded batch, then runs SDPA with a mask: for
// decode the gather moves more bytes than the attention reads, and costs a dozen calls a layer.
// This kernel reads each sequence's K/V where they lie, block by block, with no copy and no
// padding. Work items are fixed parts of a sequence's tokens, so a row's result never depends on
// the batch beside it; the rows that share a block table (a speculative verification step) and
// the query heads that share a KV head (GQA) read each chunk of keys and values while it is in
// cache. The arithmetic of a part is in attention_part.h.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "attention_part.h"
#include "lanes.h"
#include "ops.h"
#include "vec.h"

namespace {

using namespace platform_cpu;

void check_cache(const at::Tensor& k_cache, const at::Tensor& v_cache) {
  TORCH_CHECK((k_cache.scalar_type() == at::kFloat || k_cache.scalar_type() == at::kBFloat16) &&
                  k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.sizes() == k_cache.sizes() &&
                  v_cache.is_contiguous() && v_cache.scalar_type() == k_cache.scalar_type(),
              "k_cache and v_cache must be contiguous float32 or bfloat16 [blocks, block_size, "
              "kv_heads, head_dim] tensors of one shape and dtype");
}

// Tokens of one part of a sequence's attention (see decode_attention).
constexpr int64_t kPartTokens = 64;
// Tokens of a part whose values every row and head of a work item adds before the next ones:
// their V rows (4 KB per KV head at head_dim 64, float32) stay in the L1 cache meanwhile.
constexpr int64_t kChunkTokens = 16;
// How far ahead of the multiply-adds a part's K and V rows are read (touch_rows).
constexpr int64_t kAheadTokens = 16;

// Rows a work item runs together at most: a verification step's 1 + 7 drafts. Splitting them
// into work items of 4 shares a few hundred tokens better between the cores when K/V are in
// the CPU caches, but in a decode step they come from memory, and reading each part once for
// all 8 rows measured faster (docs/benchmarks.md).
constexpr int64_t kGroupRows = 8;

// Up to kGroupRows consecutive rows of the batch that read the same blocks: rows of one
// speculative verification step (engine/worker/step_inputs.py), or one sequence alone.
struct RowGroup {
  int64_t first, count, longest;  // rows [first, first + count); longest: the largest length
};

std::vector<RowGroup> row_groups(const int64_t* tables, int64_t ldt, const int64_t* lens, int64_t B, int64_t BS) {
  std::vector<RowGroup> groups;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t blocks = (lens[b] + BS - 1) / BS;
    if (!groups.empty() && groups.back().count < kGroupRows) {
      RowGroup& g = groups.back();
      const int64_t* shared = tables + g.first * ldt;
      if (std::equal(shared, shared + blocks, tables + b * ldt)) {
        g.count += 1;
        g.longest = std::max(g.longest, lens[b]);
        continue;
      }
    }
    groups.push_back({b, 1, lens[b]});
  }
  return groups;
}

template <typename T>
struct Caches {
  const T* k;
  const T* v;
  int64_t block_size, token_stride, heads, kv_heads, head_dim, q_stride;
  float scale;
};

// Where one work item's results go: each row's o [H, D], m [H] and l [H] for the part.
struct PartOut {
  float* o;
  float* m;
  float* l;
};

// A thread's scratch for its work items: the rows' queries widened to float32 (each head
// zero-padded to q_stride), their scores, the part's token offsets, a row of zeros.
template <typename T>
struct Scratch {
  std::vector<float> q, scores;
  std::vector<int64_t> offsets;
  std::vector<T> zeros;
  int64_t widened = -1;  // the group whose queries q holds
};

// Reads one byte of each cache line of n tokens' rows (all KV heads), in memory order, ahead of
// their use. A chunk's multiply-adds read a token's row a KV head at a time, in strides (and
// from fully unrolled loads) that the hardware prefetchers follow poorly: without this, one
// row's attention over a context out of the CPU caches (every decode step's, past a few hundred
// tokens) waited on memory longer than the old token-by-token loop. Loads rather than prefetch
// instructions, and one chunk ahead rather than two or a whole part: what measured fastest in a
// decode step (docs/benchmarks.md).
template <typename T>
inline void touch_rows(const T* cache, const int64_t* offsets, int64_t n, int64_t row_bytes) {
  for (int64_t i = 0; i < n; ++i) {
    const char* row = reinterpret_cast<const char*>(cache + offsets[i]);
    for (int64_t b = 0; b < row_bytes; b += 64) (void)*reinterpret_cast<const volatile char*>(row + b);
  }
}

// One part (tokens [t0, t0 + kPartTokens)) of every row of a group, each row over its own
// tokens up to its length: per row and head the largest score m, the sum l of exp(score - m)
// and o = the sum of exp(score - m) * v, not yet divided by l (so parts can be merged). The
// rows and the query heads of one KV head run over each chunk of tokens in turn, so the chunk's
// K and V rows are read from memory once for all of them; each row's arithmetic is that of the
// row alone (attention_part.h).
template <typename T>
void attend_group_part(const Caches<T>& c, const int64_t* table, const int64_t* lens, int64_t rows, int64_t t0,
                       Scratch<T>& s, PartOut* out) {
  const int64_t H = c.heads, D = c.head_dim, G = H / c.kv_heads, BS = c.block_size;
  const int64_t end = std::min(t0 + kPartTokens, *std::max_element(lens, lens + rows));
  for (int64_t t = t0; t < end; ++t) s.offsets[t - t0] = (table[t / BS] * BS + t % BS) * c.token_stride;
  auto tokens = [&](int64_t r) { return std::max<int64_t>(std::min(t0 + kPartTokens, lens[r]) - t0, 0); };
  auto scores = [&](int64_t r, int64_t h) { return s.scores.data() + (r * H + h) * kPartTokens; };
  const int64_t n = end - t0, row_bytes = c.token_stride * static_cast<int64_t>(sizeof(T));
  // Rows [from, from + count) of the part, clipped to it, asked for ahead of their use.
  auto ahead = [&](const T* cache, int64_t from, int64_t count) {
    touch_rows(cache, s.offsets.data() + from, std::min(count, n - from), row_bytes);
  };
  ahead(c.k, 0, kAheadTokens);
  for (int64_t i = 0; i < n; i += lanes::W) {
    ahead(c.k, i + kAheadTokens, lanes::W);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < H && i < tokens(r); ++h)
        score_chunk(s.q.data() + (r * H + h) * c.q_stride, c.k + (h / G) * D, s.offsets.data() + i,
                    std::min(lanes::W, tokens(r) - i), D, c.scale, s.zeros.data(), scores(r, h) + i);
  }
  ahead(c.v, 0, kAheadTokens);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H && tokens(r) > 0; ++h) {
      out[r].m[h] = max_score(scores(r, h), tokens(r));
      out[r].l[h] = softmax_numerators(scores(r, h), tokens(r), out[r].m[h]);
    }
  for (int64_t i = 0; i < n; i += kChunkTokens) {
    ahead(c.v, i + kAheadTokens, kChunkTokens);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < H && i < tokens(r); ++h)
        value_chunk(scores(r, h) + i, c.v + (h / G) * D, s.offsets.data() + i,
                    std::min(kChunkTokens, tokens(r) - i), D, i == 0, out[r].o + h * D);
  }
}

// One sequence's output from its S parts (o, m, l of each, part-major): the parts' sums scaled
// by exp(m - the largest m) and added in part order, then divided by their total.
template <typename T>
void merge_parts(const float* o, const float* m, const float* l, int64_t S, int64_t H, int64_t D,
                 std::vector<float>& weight, std::vector<float>& row, T* out) {
  using namespace lanes;
  weight.resize(S);
  row.resize(D);
  for (int64_t h = 0; h < H; ++h) {
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t s = 0; s < S; ++s) top = std::max(top, m[s * H + h]);
    float total = 0.f;
    for (int64_t s = 0; s < S; ++s) {
      weight[s] = std::exp(m[s * H + h] - top);
      total += weight[s] * l[s * H + h];
    }
    for (int64_t d = 0; d < D; d += W) {
      const int64_t used = std::min(W, D - d);
      Vec acc = zero();
      for (int64_t s = 0; s < S; ++s) {
        const float* os = o + (s * H + h) * D + d;
        acc = fma(set1(weight[s]), used == W ? load(os) : load_first(os, used), acc);
      }
      store_first(row.data() + d, div(acc, set1(total)), used);
    }
    for (int64_t d = 0; d < D; ++d) out[h * D + d] = static_cast<T>(row[d]);
  }
}

template <typename T>
void decode_attention(const at::Tensor& query, const at::Tensor& k_cache, const at::Tensor& v_cache,
                      const int64_t* tables, int64_t ldt, const int64_t* lens, float sc, at::Tensor& out) {
  const int64_t B = query.size(0), H = query.size(1), D = query.size(2);
  const int64_t KVH = k_cache.size(2), BS = k_cache.size(1);
  // token_stride: elements between consecutive slots of one KV head
  const Caches<T> caches{k_cache.data_ptr<T>(), v_cache.data_ptr<T>(), BS, KVH * D, H, KVH, D,
                         (D + lanes::W - 1) / lanes::W * lanes::W, sc};
  const T* qp = query.data_ptr<T>();
  T* op = out.data_ptr<T>();

  // Work items are parts of kPartTokens tokens of a group of rows reading the same blocks, all
  // heads together. Parts let every core read one long context (flash-decoding), and their
  // boundaries depend on the position alone, never on the batch or the thread count; each row
  // of a part is computed as it would be alone. So a sequence's output is bit for bit the same
  // whether it is decoded alone or beside others, which is what makes the rows of a speculative
  // verification step (engine/spec_decode/) exact.
  std::vector<int64_t> first_part(B + 1, 0);  // row b's parts' results: first_part[b] ...
  for (int64_t b = 0; b < B; ++b) first_part[b + 1] = first_part[b] + (lens[b] + kPartTokens - 1) / kPartTokens;
  const std::vector<RowGroup> groups = row_groups(tables, ldt, lens, B, BS);
  std::vector<int64_t> first_item(groups.size() + 1, 0);  // group g's items: first_item[g] ...
  int64_t most_rows = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    first_item[g + 1] = first_item[g] + (groups[g].longest + kPartTokens - 1) / kPartTokens;
    most_rows = std::max(most_rows, groups[g].count);
  }
  const int64_t P = first_part[B];
  // Every element is written before it is read: no zero fill (a quarter of a megabyte a call
  // for 8 rows of 800 tokens).
  const std::unique_ptr<float[]> part_o(new float[P * H * D]), part_m(new float[P * H]), part_l(new float[P * H]);
  at::parallel_for(0, first_item.back(), 1, [&](int64_t i0, int64_t i1) {
    Scratch<T> s{std::vector<float>(most_rows * H * caches.q_stride, 0.f),
                 std::vector<float>(most_rows * H * kPartTokens), std::vector<int64_t>(kPartTokens),
                 std::vector<T>(D, T(0))};
    std::vector<PartOut> outs(most_rows);
    size_t g = std::upper_bound(first_item.begin(), first_item.end(), i0) - first_item.begin() - 1;
    for (int64_t i = i0; i < i1; ++i) {
      while (i >= first_item[g + 1]) ++g;
      const RowGroup& group = groups[g];
      if (s.widened != static_cast<int64_t>(g)) {
        for (int64_t r = 0; r < group.count; ++r)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t d = 0; d < D; ++d)
              s.q[(r * H + h) * caches.q_stride + d] = to_float(qp[((group.first + r) * H + h) * D + d]);
        s.widened = static_cast<int64_t>(g);
      }
      const int64_t part = i - first_item[g];
      for (int64_t r = 0; r < group.count; ++r) {
        const int64_t b = group.first + r, slot = first_part[b] + part;
        outs[r] = slot < first_part[b + 1]
                      ? PartOut{part_o.get() + slot * H * D, part_m.get() + slot * H, part_l.get() + slot * H}
                      : PartOut{nullptr, nullptr, nullptr};  // the row ends before this part
      }
      const int64_t* longest_table = tables + group.first * ldt;
      for (int64_t r = 0; r < group.count; ++r)
        if (lens[group.first + r] == group.longest) longest_table = tables + (group.first + r) * ldt;
      attend_group_part(caches, longest_table, lens + group.first, group.count, part * kPartTokens, s, outs.data());
    }
  });
  at::parallel_for(0, B, 16, [&](int64_t b0, int64_t b1) {
    std::vector<float> weight, row;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = first_part[b];
      merge_parts(part_o.get() + p0 * H * D, part_m.get() + p0 * H, part_l.get() + p0 * H,
                  first_part[b + 1] - p0, H, D, weight, row, op + b * H * D);
    }
  });
}

}  // namespace

namespace platform_cpu {

at::Tensor paged_decode_attention(const at::Tensor& query, const at::Tensor& k_cache,
                                  const at::Tensor& v_cache, const at::Tensor& block_tables,
                                  const at::Tensor& seq_lens, double scale) {
  check_cache(k_cache, v_cache);
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
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(lens[b] > 0 && lens[b] <= max_blocks * BS, "sequence ", b, " has length ", lens[b],
                ", its block table holds ", max_blocks * BS);
    for (int64_t i = 0; i < (lens[b] + BS - 1) / BS; ++i)
      TORCH_CHECK(tables[b * ldt + i] >= 0 && tables[b * ldt + i] < num_blocks, "sequence ", b,
                  " names block ", tables[b * ldt + i], " of ", num_blocks);
  }
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
  check_cache(k_cache, v_cache);
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
