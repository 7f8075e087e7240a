// A decode step's decoder layers in one call: for one query token per sequence, every layer's
// add+RMSNorm, q|k|v projection (bias, Qwen3's per-head q/k norm), rotary, KV write, paged
// decode attention, o_proj, add+RMSNorm, gate|up, SiLU-and-mul and down.
//
// On a CPU a small model's decode token is thirty-odd PyTorch calls a layer, each costing
// microseconds of Python and dispatch: for SmolLM2-135M (30 layers) about a fifth of the
// token. Here the layer loop runs in C++ and calls the same functions the per-op path reaches
// through torch.ops.platform_cpu (ops.h) and at::linear, in the same order and with the same
// arguments, so its results are bit-identical to the per-op path's (the reference: the layer
// loop of engine/models/decoder.py, with the native ops on).
//
// Arguments (engine/models/fused_decode.py lays them out once, at load):
//   hidden [T, hidden]: the embedded tokens (residual None: before the first layer) or the
//     previous layer's output (residual: the residual stream), T = the number of sequences;
//   kv_caches: k_cache, v_cache of each layer, in turn;
//   layout: five ints a layer: the kinds of its q|k|v, o, gate|up and down weights (kFloat
//     and the others below) and a bitmask of what it has (kQkvBias and the others below);
//   weights: a layer's tensors in this order: input norm, q|k|v weight, [q|k|v bias],
//     [q norm, k norm], o weight, [o bias], post-attention norm, gate|up weight, [its bias],
//     down weight, [its bias]; a weight is one tensor (float, or oneDNN-packed bfloat16), two
//     (int8: codes, scales) or three (int4: packed codes, scales, mins; kInt4 with its rows in
//     order, kInt4Rows8 interleaved by eight: quantized_linear.cpp).
// Returns (x, residual) after the last layer; the caller applies the final add+RMSNorm.
//
// decode_stack is the same call with the KV caches, the weights and the layout held by a
// DecodeStack object made once per model: passing 420 weight tensors and 60 caches as lists
// converted every one of them from Python on every call, 4% of a SmolLM2 token.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ops.h"

namespace {

// Kinds of projection weight (engine/models/fused_decode.py: WEIGHT_KINDS).
constexpr int64_t kFloat = 0, kPacked = 1, kInt8 = 2, kInt4 = 3, kInt4Rows8 = 4;
// What a layer has (bits of its layout's fifth int).
constexpr int64_t kQkvBias = 1, kQkNorm = 2, kOBias = 4, kGateUpBias = 8, kDownBias = 16;
constexpr int64_t kLayoutInts = 5;

struct Projection {
  int64_t kind;
  std::vector<at::Tensor> tensors;
  std::optional<at::Tensor> bias;
};

// Hands out a layer's tensors in the order of the layout above.
class Cursor {
 public:
  explicit Cursor(at::TensorList list) : list_(list) {}
  const at::Tensor& next() {
    TORCH_CHECK(at_ < list_.size(), "decode_layers: the weights end before the layout does");
    return list_[at_++];
  }
  Projection projection(int64_t kind, bool has_bias) {
    const int count = kind == kInt8 ? 2 : kind == kInt4 || kind == kInt4Rows8 ? 3 : 1;
    TORCH_CHECK(kind >= kFloat && kind <= kInt4Rows8, "decode_layers: unknown weight kind ", kind);
    Projection p{kind, {}, std::nullopt};
    for (int i = 0; i < count; ++i) p.tensors.push_back(next());
    if (has_bias) p.bias = next();
    return p;
  }
  bool done() const { return at_ == list_.size(); }

 private:
  at::TensorList list_;
  size_t at_ = 0;
};

// engine.layers.packed_linear.packed_linear: oneDNN's linear on a weight packed at load.
// Called boxed, so that this file does not depend on the C++ signature of an internal op.
at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  std::vector<c10::IValue> stack{x,
                                 packed,
                                 bias.has_value() ? c10::IValue(*bias) : c10::IValue(),
                                 std::string("none"),
                                 c10::List<std::optional<at::Scalar>>(),
                                 std::string("")};
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

// engine.layers.quantized_linear.linear, step for step: float32 rows, the matrix-vector
// kernels up to kernel_max_rows rows and dequantize-then-GEMM past them, the result in x's
// dtype, then the bias.
at::Tensor quantized_linear(const at::Tensor& x, const Projection& p, int64_t kernel_max_rows) {
  const at::Tensor rows = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  const bool few = rows.size(0) <= kernel_max_rows;
  const std::vector<at::Tensor>& w = p.tensors;
  at::Tensor y;
  if (p.kind == kInt8)
    y = few ? platform_cpu::int8_linear(rows, w[0], w[1]) : at::linear(rows, w[0].to(at::kFloat)) * w[1];
  else {
    const int64_t interleave = p.kind == kInt4Rows8 ? 8 : 1;
    y = few ? platform_cpu::int4_linear(rows, w[0], w[1], w[2], interleave)
            : at::linear(rows, platform_cpu::int4_dequantize(w[0], w[1], w[2], interleave));
  }
  if (y.scalar_type() != x.scalar_type()) y = y.to(x.scalar_type());
  if (p.bias.has_value()) y = y + *p.bias;
  return y;
}

// engine.layers.quantized_linear.linear's float path: float32 decode rows take the kernel whose
// rows do not depend on each other, anything else at::linear.
at::Tensor float_projection(const at::Tensor& x, const Projection& p, int64_t kernel_max_rows) {
  const at::Tensor& w = p.tensors[0];
  if (x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat || x.size(0) > kernel_max_rows)
    return at::linear(x, w, p.bias);
  at::Tensor y = platform_cpu::float_linear(x, w);
  if (p.bias.has_value()) y = y + *p.bias;
  return y;
}

at::Tensor project(const at::Tensor& x, const Projection& p, int64_t kernel_max_rows) {
  if (p.kind == kFloat) return float_projection(x, p, kernel_max_rows);
  if (p.kind == kPacked) return packed_linear(x, p.tensors[0], p.bias);
  return quantized_linear(x, p, kernel_max_rows);
}

struct Step {
  const at::Tensor& positions;
  const at::Tensor& slot_mapping;
  const at::Tensor& block_tables;
  const at::Tensor& seq_lens;
  const at::Tensor& cos;
  const at::Tensor& sin;
  int64_t heads, kv_heads, head_dim;
  double eps, scale;
  int64_t kernel_max_rows;
};

// One layer: (x, residual) in, (x, residual) out; residual undefined before the first layer.
std::tuple<at::Tensor, at::Tensor> layer(const Step& s, const at::Tensor& hidden, const at::Tensor& residual_in,
                                         at::Tensor& k_cache, at::Tensor& v_cache, const int64_t* layout,
                                         Cursor& weights) {
  const int64_t T = hidden.size(0), flags = layout[4];
  const int64_t q_size = s.heads * s.head_dim, kv_size = s.kv_heads * s.head_dim;
  const at::Tensor& input_norm = weights.next();
  at::Tensor x, residual;
  if (residual_in.defined()) {
    std::tie(x, residual) = platform_cpu::fused_add_rms_norm(hidden, residual_in, input_norm, s.eps);
  } else {
    x = platform_cpu::rms_norm(hidden, input_norm, s.eps);
    residual = hidden;
  }
  const Projection qkv_w = weights.projection(layout[0], flags & kQkvBias);
  const at::Tensor qkv = project(x, qkv_w, s.kernel_max_rows);  // [T, q_size + 2 * kv_size]
  at::Tensor q = qkv.narrow(1, 0, q_size).view({T, s.heads, s.head_dim});
  at::Tensor k = qkv.narrow(1, q_size, kv_size).view({T, s.kv_heads, s.head_dim});
  const at::Tensor v = qkv.narrow(1, q_size + kv_size, kv_size).view({T, s.kv_heads, s.head_dim});
  if (flags & kQkNorm) {  // Qwen3: RMSNorm over each head of q and k
    const at::Tensor& q_norm = weights.next();
    const at::Tensor& k_norm = weights.next();
    q = platform_cpu::rms_norm(q.reshape({-1, s.head_dim}), q_norm, s.eps).view(q.sizes());
    k = platform_cpu::rms_norm(k.reshape({-1, s.head_dim}), k_norm, s.eps).view(k.sizes());
  }
  std::tie(q, k) = platform_cpu::rotary_embedding(s.positions, q, k, s.cos, s.sin);
  platform_cpu::write_kv(k, v, k_cache, v_cache, s.slot_mapping);
  const at::Tensor attn = platform_cpu::paged_decode_attention(q.contiguous(), k_cache, v_cache, s.block_tables,
                                                               s.seq_lens, s.scale)
                              .reshape({T, q_size});
  const Projection o_w = weights.projection(layout[1], flags & kOBias);
  x = project(attn, o_w, s.kernel_max_rows);
  const at::Tensor& post_norm = weights.next();
  std::tie(x, residual) = platform_cpu::fused_add_rms_norm(x, residual, post_norm, s.eps);
  const Projection gate_up_w = weights.projection(layout[2], flags & kGateUpBias);
  const at::Tensor act = platform_cpu::silu_and_mul(project(x, gate_up_w, s.kernel_max_rows));
  const Projection down_w = weights.projection(layout[3], flags & kDownBias);
  return {project(act, down_w, s.kernel_max_rows), residual};
}

}  // namespace

namespace platform_cpu {

std::tuple<at::Tensor, at::Tensor> decode_layers(const at::Tensor& hidden, const std::optional<at::Tensor>& residual,
                                                 const at::Tensor& positions, const at::Tensor& slot_mapping,
                                                 const at::Tensor& block_tables, const at::Tensor& seq_lens,
                                                 at::TensorList kv_caches, at::TensorList weights,
                                                 at::IntArrayRef layout, const at::Tensor& cos,
                                                 const at::Tensor& sin, int64_t num_heads, int64_t num_kv_heads,
                                                 int64_t head_dim, double eps, double scale,
                                                 int64_t kernel_max_rows) {
  TORCH_CHECK(hidden.dim() == 2, "hidden must be [num_seqs, hidden_size], got ", hidden.sizes());
  const int64_t T = hidden.size(0);
  TORCH_CHECK(positions.numel() == T && slot_mapping.numel() == T && seq_lens.numel() == T &&
                  block_tables.size(0) == T,
              "decode_layers takes one query token per sequence: ", T, " tokens, ", seq_lens.numel(),
              " sequences");
  TORCH_CHECK(layout.size() % kLayoutInts == 0, "layout holds ", kLayoutInts, " ints a layer");
  const int64_t num_layers = static_cast<int64_t>(layout.size()) / kLayoutInts;
  TORCH_CHECK(static_cast<int64_t>(kv_caches.size()) == 2 * num_layers, "kv_caches must hold a K and a V cache for each of ",
              num_layers, " layers, got ", kv_caches.size(), " tensors");
  TORCH_CHECK(num_kv_heads > 0 && num_heads % num_kv_heads == 0 && head_dim > 0, "bad head counts");
  const Step step{positions, slot_mapping, block_tables, seq_lens, cos, sin, num_heads, num_kv_heads,
                  head_dim, eps, scale, kernel_max_rows};
  Cursor cursor(weights);
  at::Tensor x = hidden;
  at::Tensor res = residual.has_value() ? *residual : at::Tensor();
  for (int64_t i = 0; i < num_layers; ++i) {
    // Handles to the caches: write_kv fills the tensors they share storage with.
    at::Tensor k_cache = kv_caches[2 * i], v_cache = kv_caches[2 * i + 1];
    std::tie(x, res) = layer(step, x, res, k_cache, v_cache, layout.data() + i * kLayoutInts, cursor);
  }
  TORCH_CHECK(cursor.done(), "decode_layers: more weights than the layout names");
  return {x, res};
}

// A model's KV caches, weights and layout, as decode_layers takes them.
struct DecodeStack : torch::CustomClassHolder {
  DecodeStack(std::vector<at::Tensor> kv_caches, std::vector<at::Tensor> weights, std::vector<int64_t> layout)
      : kv_caches(std::move(kv_caches)), weights(std::move(weights)), layout(std::move(layout)) {}
  std::vector<at::Tensor> kv_caches, weights;
  std::vector<int64_t> layout;
};

std::tuple<at::Tensor, at::Tensor> decode_stack(const at::Tensor& hidden, const std::optional<at::Tensor>& residual,
                                                const at::Tensor& positions, const at::Tensor& slot_mapping,
                                                const at::Tensor& block_tables, const at::Tensor& seq_lens,
                                                const c10::intrusive_ptr<DecodeStack>& stack, const at::Tensor& cos,
                                                const at::Tensor& sin, int64_t num_heads, int64_t num_kv_heads,
                                                int64_t head_dim, double eps, double scale, int64_t kernel_max_rows) {
  return decode_layers(hidden, residual, positions, slot_mapping, block_tables, seq_lens, stack->kv_caches,
                       stack->weights, stack->layout, cos, sin, num_heads, num_kv_heads, head_dim, eps, scale,
                       kernel_max_rows);
}

}  // namespace platform_cpu

TORCH_LIBRARY_FRAGMENT(platform_cpu, m) {
  m.class_<platform_cpu::DecodeStack>("DecodeStack")
      .def(torch::init<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<int64_t>>());
  m.def("decode_stack(Tensor hidden, Tensor? residual, Tensor positions, Tensor slot_mapping, "
        "Tensor block_tables, Tensor seq_lens, __torch__.torch.classes.platform_cpu.DecodeStack stack, "
        "Tensor cos, Tensor sin, int num_heads, int num_kv_heads, int head_dim, float eps, float scale, "
        "int kernel_max_rows) -> (Tensor, Tensor)");
  m.def("decode_layers(Tensor hidden, Tensor? residual, Tensor positions, Tensor slot_mapping, "
        "Tensor block_tables, Tensor seq_lens, Tensor(a!)[] kv_caches, Tensor[] weights, int[] layout, "
        "Tensor cos, Tensor sin, int num_heads, int num_kv_heads, int head_dim, float eps, float scale, "
        "int kernel_max_rows) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(platform_cpu, CPU, m) {
  m.impl("decode_layers", &platform_cpu::decode_layers);
  m.impl("decode_stack", &platform_cpu::decode_stack);
}

// oneDNN-packed bfloat16 weights are tensors of their own backend (MkldnnCPU), which then
// decides the dispatch: the same function serves it.
TORCH_LIBRARY_IMPL(platform_cpu, MkldnnCPU, m) { m.impl("decode_layers", &platform_cpu::decode_layers); }
