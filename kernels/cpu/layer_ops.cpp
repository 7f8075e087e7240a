// The small per-layer operations of a decoder, one op each instead of five to twenty PyTorch
// calls (float32 only; other dtypes stay on PyTorch).
//
// A decode step on a CPU runs a few microseconds of arithmetic per operation and several
// microseconds of dispatch per PyTorch call: RMSNorm is eight calls, rotary twenty. Each of
// these is one call. The PyTorch references with the same arguments are kernels/reference
// (rms_norm, fused_add_rms_norm, silu_and_mul) and kernels/cpu/reference.py (rotary). Built with
// -ffp-contract=off: the elementwise ops round every product and sum as PyTorch does, so rotary
// is bit-identical to its reference; RMSNorm and SiLU differ in the last bits at most (the
// order of the sum of squares; SiLU's exp is a vectorized polynomial within 2 ulp).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PLATFORM_AVX2 1
#endif

namespace {

void check_rows(const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2 && x.stride(1) == 1, name,
              " must be a 2-D float32 tensor with contiguous rows, got ", x.sizes(), " ",
              x.scalar_type());
}

// out[row] = weight * (x[row] / sqrt(mean(x[row]^2) + eps)), in transformers' order.
void norm_row(const float* x, const float* w, int64_t H, float eps, float* out) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= H; i += 8)
    for (int j = 0; j < 8; ++j) partial[j] += x[i + j] * x[i + j];
  float sum = 0.f;
  for (int j = 0; j < 8; ++j) sum += partial[j];
  for (; i < H; ++i) sum += x[i] * x[i];
  const float inv = 1.f / std::sqrt(sum / static_cast<float>(H) + eps);
  for (int64_t h = 0; h < H; ++h) out[h] = w[h] * (x[h] * inv);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows(x, "x");
  const int64_t T = x.size(0), H = x.size(1);
  TORCH_CHECK(weight.numel() == H && weight.scalar_type() == at::kFloat && weight.is_contiguous(),
              "weight must be ", H, " contiguous float32 values");
  at::Tensor out = at::empty({T, H}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t ldx = x.stride(0);
  at::parallel_for(0, T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) norm_row(xp + t * ldx, wp, H, static_cast<float>(eps), op + t * H);
  });
  return out;
}

// (rms_norm(x + residual), x + residual): the sum is the next layer's residual.
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                      const at::Tensor& weight, double eps) {
  check_rows(x, "x");
  check_rows(residual, "residual");
  TORCH_CHECK(x.sizes() == residual.sizes(), "x and residual differ in shape");
  const int64_t T = x.size(0), H = x.size(1);
  TORCH_CHECK(weight.numel() == H && weight.scalar_type() == at::kFloat && weight.is_contiguous(),
              "weight must be ", H, " contiguous float32 values");
  at::Tensor summed = at::empty({T, H}, x.options());
  at::Tensor out = at::empty({T, H}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* rp = residual.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* sp = summed.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t ldx = x.stride(0), ldr = residual.stride(0);
  at::parallel_for(0, T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* s = sp + t * H;
      for (int64_t h = 0; h < H; ++h) s[h] = xp[t * ldx + h] + rp[t * ldr + h];
      norm_row(s, wp, H, static_cast<float>(eps), op + t * H);
    }
  });
  return {out, summed};
}

// One tensor of [T, heads, head_dim] rotated by each token's position into a new contiguous one.
at::Tensor rotate(const at::Tensor& x, const int64_t* pos, const float* cos, const float* sin,
                  int64_t half) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 3 && x.stride(2) == 1 &&
                  x.size(2) == 2 * half,
              "query and key must be float32 [tokens, heads, ", 2 * half,
              "] with contiguous heads, got ", x.sizes());
  const int64_t T = x.size(0), heads = x.size(1);
  at::Tensor out = at::empty({T, heads, 2 * half}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t s0 = x.stride(0), s1 = x.stride(1);
  at::parallel_for(0, T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = cos + pos[t] * half;
      const float* s = sin + pos[t] * half;
      for (int64_t h = 0; h < heads; ++h) {
        const float* x1 = xp + t * s0 + h * s1;
        const float* x2 = x1 + half;
        float* o = op + (t * heads + h) * 2 * half;
        for (int64_t i = 0; i < half; ++i) {
          o[i] = x1[i] * c[i] - x2[i] * s[i];
          o[i + half] = x2[i] * c[i] + x1[i] * s[i];
        }
      }
    }
  });
  return out;
}

// (query, key) rotated by position (neox / transformers' rotate_half layout). cos and sin are
// [max_position, head_dim / 2] float32 tables.
std::tuple<at::Tensor, at::Tensor> rotary_embedding(const at::Tensor& positions, const at::Tensor& query,
                                                    const at::Tensor& key, const at::Tensor& cos,
                                                    const at::Tensor& sin) {
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.dim() == 1 && positions.is_contiguous(),
              "positions must be a contiguous 1-D int64 tensor");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.is_contiguous() &&
                  sin.is_contiguous() && cos.sizes() == sin.sizes() && cos.dim() == 2,
              "cos and sin must be contiguous float32 [max_position, head_dim / 2] tables");
  const int64_t T = positions.size(0), half = cos.size(1), max_pos = cos.size(0);
  TORCH_CHECK(query.size(0) == T && key.size(0) == T, "one position per token");
  const int64_t* pos = positions.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    TORCH_CHECK(pos[t] >= 0 && pos[t] < max_pos, "position ", pos[t], " is outside the table (",
                max_pos, " positions)");
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();
  return {rotate(query, pos, c, s, half), rotate(key, pos, c, s, half)};
}

#ifdef PLATFORM_AVX2
// exp of eight floats (Cephes' expf: 2^n times a degree-5 polynomial on [-ln2/2, ln2/2]), within
// 2 ulp of std::exp; inputs are clamped to where float's exp is finite and normal.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365f)), _mm256_set1_ps(88.3762f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
#endif

// silu(gate) * up for x = [gate | up] of [T, 2 * I].
at::Tensor silu_and_mul(const at::Tensor& x) {
  check_rows(x, "x");
  TORCH_CHECK(x.size(1) % 2 == 0, "x must be [num_tokens, 2 * intermediate]");
  const int64_t T = x.size(0), I = x.size(1) / 2, ldx = x.stride(0);
  at::Tensor out = at::empty({T, I}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, T, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* g = xp + t * ldx;
      const float* u = g + I;
      float* o = op + t * I;
      int64_t i = 0;
#ifdef PLATFORM_AVX2
      const __m256 one = _mm256_set1_ps(1.f);
      for (; i + 8 <= I; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
      }
#endif
      for (; i < I; ++i) o[i] = (g[i] / (1.f + std::exp(-g[i]))) * u[i];
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(platform_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("rotary_embedding(Tensor positions, Tensor query, Tensor key, Tensor cos, Tensor sin) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(platform_cpu, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm);
  m.impl("rotary_embedding", &rotary_embedding);
  m.impl("silu_and_mul", &silu_and_mul);
}
