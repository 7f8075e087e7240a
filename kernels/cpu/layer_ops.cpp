// The small per-layer operations of a decoder, one op each instead of five to twenty PyTorch
// calls, for float32 and bfloat16 tensors (arithmetic in float32, see vec.h).
//
// A decode step on a CPU runs a few microseconds of arithmetic per operation and several
// microseconds of dispatch per PyTorch call: RMSNorm is eight calls, rotary twenty. Each of
// these is one call. The PyTorch references with the same arguments are kernels/reference
// (rms_norm, fused_add_rms_norm, silu_and_mul) and kernels/cpu/reference.py (rotary). Built with
// -ffp-contract=off: the elementwise ops round every product and sum as PyTorch does (in
// bfloat16, also at every point where PyTorch stores a bfloat16 tensor), so rotary is
// bit-identical to its reference; RMSNorm and SiLU differ in the last bits at most (the order
// of the sum of squares; SiLU's exp is vec.h's exp8, within 2 ulp).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "ops.h"
#include "vec.h"

namespace {

using namespace platform_cpu;

void check_rows(const at::Tensor& x, const char* name) {
  TORCH_CHECK((x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) && x.dim() == 2 &&
                  x.stride(1) == 1,
              name, " must be a 2-D float32 or bfloat16 tensor with contiguous rows, got ", x.sizes(),
              " ", x.scalar_type());
}

void check_same_type(const at::Tensor& x, const at::Tensor& other, const char* name) {
  TORCH_CHECK(other.scalar_type() == x.scalar_type(), name, " must be ", x.scalar_type(), " like x, got ",
              other.scalar_type());
}

// out[row] = weight * (x[row] / sqrt(mean(x[row]^2) + eps)), in transformers' order; the
// normalized row is rounded to T before the weight multiplies it, as the reference does.
template <typename T>
void norm_row(const T* x, const T* w, int64_t H, float eps, T* out) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= H; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float v = to_float(x[i + j]);
      partial[j] += v * v;
    }
  float sum = 0.f;
  for (int j = 0; j < 8; ++j) sum += partial[j];
  for (; i < H; ++i) sum += to_float(x[i]) * to_float(x[i]);
  const float inv = 1.f / std::sqrt(sum / static_cast<float>(H) + eps);
  int64_t h = 0;
#ifdef PLATFORM_AVX2
  const __m256 iv = _mm256_set1_ps(inv);
  for (; h + 8 <= H; h += 8)
    store8(out + h, _mm256_mul_ps(load8(w + h), round8<T>(_mm256_mul_ps(load8(x + h), iv))));
#endif
  for (; h < H; ++h) out[h] = static_cast<T>(to_float(w[h]) * round_to<T>(to_float(x[h]) * inv));
}

template <typename T>
void rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor& out) {
  const int64_t T_ = x.size(0), H = x.size(1), ldx = x.stride(0);
  const T* xp = x.data_ptr<T>();
  const T* wp = weight.data_ptr<T>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, T_, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) norm_row(xp + t * ldx, wp, H, static_cast<float>(eps), op + t * H);
  });
}

template <typename T>
void add_rms_norm_rows(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps,
                       at::Tensor& summed, at::Tensor& out) {
  const int64_t T_ = x.size(0), H = x.size(1), ldx = x.stride(0), ldr = residual.stride(0);
  const T* xp = x.data_ptr<T>();
  const T* rp = residual.data_ptr<T>();
  const T* wp = weight.data_ptr<T>();
  T* sp = summed.data_ptr<T>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, T_, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const T* xr = xp + t * ldx;
      const T* rr = rp + t * ldr;
      T* s = sp + t * H;
      int64_t h = 0;
#ifdef PLATFORM_AVX2
      for (; h + 8 <= H; h += 8) store8(s + h, _mm256_add_ps(load8(xr + h), load8(rr + h)));
#endif
      for (; h < H; ++h) s[h] = static_cast<T>(to_float(xr[h]) + to_float(rr[h]));
      norm_row(s, wp, H, static_cast<float>(eps), op + t * H);
    }
  });
}

// One tensor of [T, heads, head_dim] rotated by each token's position into a new contiguous
// one. Every product and every sum is rounded to T, as the reference's separate ops do.
template <typename T>
at::Tensor rotate(const at::Tensor& x, const int64_t* pos, const T* cos, const T* sin, int64_t half) {
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1 && x.size(2) == 2 * half,
              "query and key must be [tokens, heads, ", 2 * half, "] with contiguous heads, got ",
              x.sizes());
  const int64_t T_ = x.size(0), heads = x.size(1);
  at::Tensor out = at::empty({T_, heads, 2 * half}, x.options());
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const int64_t s0 = x.stride(0), s1 = x.stride(1);
  at::parallel_for(0, T_, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const T* c = cos + pos[t] * half;
      const T* s = sin + pos[t] * half;
      for (int64_t h = 0; h < heads; ++h) {
        const T* x1 = xp + t * s0 + h * s1;
        const T* x2 = x1 + half;
        T* o = op + (t * heads + h) * 2 * half;
        int64_t i = 0;
#ifdef PLATFORM_AVX2
        for (; i + 8 <= half; i += 8) {
          const __m256 a = load8(x1 + i), b = load8(x2 + i), cv = load8(c + i), sv = load8(s + i);
          store8(o + i, _mm256_sub_ps(round8<T>(_mm256_mul_ps(a, cv)), round8<T>(_mm256_mul_ps(b, sv))));
          store8(o + i + half,
                 _mm256_add_ps(round8<T>(_mm256_mul_ps(b, cv)), round8<T>(_mm256_mul_ps(a, sv))));
        }
#endif
        for (; i < half; ++i) {
          const float a = to_float(x1[i]), b = to_float(x2[i]), cv = to_float(c[i]), sv = to_float(s[i]);
          o[i] = static_cast<T>(round_to<T>(a * cv) - round_to<T>(b * sv));
          o[i + half] = static_cast<T>(round_to<T>(b * cv) + round_to<T>(a * sv));
        }
      }
    }
  });
  return out;
}


// silu(gate) * up for x = [gate | up] of [T, 2 * I]; silu(gate) is rounded to T before the
// product, as the reference's two ops do.
template <typename T>
void silu_and_mul_rows(const at::Tensor& x, at::Tensor& out) {
  const int64_t T_ = x.size(0), I = x.size(1) / 2, ldx = x.stride(0);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, T_, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const T* g = xp + t * ldx;
      const T* u = g + I;
      T* o = op + t * I;
      int64_t i = 0;
#ifdef PLATFORM_AVX2
      const __m256 one = _mm256_set1_ps(1.f);
      for (; i + 8 <= I; i += 8) {
        const __m256 gv = load8(g + i);
        const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        store8(o + i, _mm256_mul_ps(round8<T>(_mm256_div_ps(gv, _mm256_add_ps(one, e))), load8(u + i)));
      }
#endif
      for (; i < I; ++i) {
        const float gv = to_float(g[i]);
        o[i] = static_cast<T>(round_to<T>(gv / (1.f + std::exp(-gv))) * to_float(u[i]));
      }
    }
  });
}

}  // namespace

namespace platform_cpu {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows(x, "x");
  check_same_type(x, weight, "weight");
  const int64_t T = x.size(0), H = x.size(1);
  TORCH_CHECK(weight.numel() == H && weight.is_contiguous(), "weight must be ", H, " contiguous values");
  at::Tensor out = at::empty({T, H}, x.options());
  if (x.scalar_type() == at::kFloat)
    rms_norm_rows<float>(x, weight, eps, out);
  else
    rms_norm_rows<bf16>(x, weight, eps, out);
  return out;
}

// (rms_norm(x + residual), x + residual): the sum is the next layer's residual.
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                      const at::Tensor& weight, double eps) {
  check_rows(x, "x");
  check_rows(residual, "residual");
  check_same_type(x, residual, "residual");
  check_same_type(x, weight, "weight");
  TORCH_CHECK(x.sizes() == residual.sizes(), "x and residual differ in shape");
  const int64_t T = x.size(0), H = x.size(1);
  TORCH_CHECK(weight.numel() == H && weight.is_contiguous(), "weight must be ", H, " contiguous values");
  at::Tensor summed = at::empty({T, H}, x.options());
  at::Tensor out = at::empty({T, H}, x.options());
  if (x.scalar_type() == at::kFloat)
    add_rms_norm_rows<float>(x, residual, weight, eps, summed, out);
  else
    add_rms_norm_rows<bf16>(x, residual, weight, eps, summed, out);
  return {out, summed};
}

// (query, key) rotated by position (neox / transformers' rotate_half layout). cos and sin are
// [max_position, head_dim / 2] tables of the query's dtype.
std::tuple<at::Tensor, at::Tensor> rotary_embedding(const at::Tensor& positions, const at::Tensor& query,
                                                    const at::Tensor& key, const at::Tensor& cos,
                                                    const at::Tensor& sin) {
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.dim() == 1 && positions.is_contiguous(),
              "positions must be a contiguous 1-D int64 tensor");
  TORCH_CHECK(query.scalar_type() == at::kFloat || query.scalar_type() == at::kBFloat16,
              "query must be float32 or bfloat16, got ", query.scalar_type());
  check_same_type(query, key, "key");
  check_same_type(query, cos, "cos");
  check_same_type(query, sin, "sin");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.sizes() == sin.sizes() && cos.dim() == 2,
              "cos and sin must be contiguous [max_position, head_dim / 2] tables");
  const int64_t T = positions.size(0), half = cos.size(1), max_pos = cos.size(0);
  TORCH_CHECK(query.size(0) == T && key.size(0) == T, "one position per token");
  const int64_t* pos = positions.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    TORCH_CHECK(pos[t] >= 0 && pos[t] < max_pos, "position ", pos[t], " is outside the table (",
                max_pos, " positions)");
  if (query.scalar_type() == at::kFloat) {
    const float* c = cos.data_ptr<float>();
    const float* s = sin.data_ptr<float>();
    return {rotate(query, pos, c, s, half), rotate(key, pos, c, s, half)};
  }
  const bf16* c = cos.data_ptr<bf16>();
  const bf16* s = sin.data_ptr<bf16>();
  return {rotate(query, pos, c, s, half), rotate(key, pos, c, s, half)};
}

at::Tensor silu_and_mul(const at::Tensor& x) {
  check_rows(x, "x");
  TORCH_CHECK(x.size(1) % 2 == 0, "x must be [num_tokens, 2 * intermediate]");
  at::Tensor out = at::empty({x.size(0), x.size(1) / 2}, x.options());
  if (x.scalar_type() == at::kFloat)
    silu_and_mul_rows<float>(x, out);
  else
    silu_and_mul_rows<bf16>(x, out);
  return out;
}

}  // namespace platform_cpu

TORCH_LIBRARY_FRAGMENT(platform_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("rotary_embedding(Tensor positions, Tensor query, Tensor key, Tensor cos, Tensor sin) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(platform_cpu, CPU, m) {
  m.impl("rms_norm", &platform_cpu::rms_norm);
  m.impl("fused_add_rms_norm", &platform_cpu::fused_add_rms_norm);
  m.impl("rotary_embedding", &platform_cpu::rotary_embedding);
  m.impl("silu_and_mul", &platform_cpu::silu_and_mul);
}
