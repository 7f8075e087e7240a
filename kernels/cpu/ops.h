// The ops of kernels/cpu as C++ functions, so that one op can call the others directly:
// decode_layers.cpp runs a whole decoder layer with these, the very functions each
// torch.ops.platform_cpu.* op registers, with no Python and no dispatch between them.
// Each is defined in the .cpp file named beside it; the comments there give the contracts.

#pragma once

#include <ATen/ATen.h>

#include <string>
#include <tuple>

namespace platform_cpu {

// quantized_linear.cpp
at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales);
at::Tensor float_linear(const at::Tensor& x, const at::Tensor& weight);
at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& mins, int64_t interleave);
at::Tensor int4_dequantize(const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& mins,
                           int64_t interleave);
// The row interleave (1 or 8) the int4 kernel of this build reads fastest.
int64_t int4_kernel_interleave();

// layer_ops.cpp
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                      const at::Tensor& weight, double eps);
std::tuple<at::Tensor, at::Tensor> rotary_embedding(const at::Tensor& positions, const at::Tensor& query,
                                                    const at::Tensor& key, const at::Tensor& cos,
                                                    const at::Tensor& sin);
at::Tensor silu_and_mul(const at::Tensor& x);

// attention.cpp
at::Tensor paged_decode_attention(const at::Tensor& query, const at::Tensor& k_cache,
                                  const at::Tensor& v_cache, const at::Tensor& block_tables,
                                  const at::Tensor& seq_lens, double scale);
void write_kv(const at::Tensor& key, const at::Tensor& value, at::Tensor& k_cache, at::Tensor& v_cache,
              const at::Tensor& slot_mapping);
// Refuses caches that are not contiguous float32/bfloat16 [blocks, block_size, kv_heads, head_dim] pairs.
void check_paged_cache(const at::Tensor& k_cache, const at::Tensor& v_cache);
// Refuses a sequence of seq_len tokens (`which`, in the message) whose block table of max_blocks
// entries cannot hold it or names a block outside the cache's num_blocks.
void check_block_table(const int64_t* table, int64_t max_blocks, int64_t seq_len, int64_t block_size,
                       int64_t num_blocks, const std::string& which);

// prefill_attention.cpp
at::Tensor paged_prefill_attention(const at::Tensor& query, const at::Tensor& k_cache,
                                   const at::Tensor& v_cache, const at::Tensor& block_table,
                                   int64_t seq_len, double scale);

}  // namespace platform_cpu
