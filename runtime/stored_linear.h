// x Wᵀ for a few activation rows with W in its stored dtype (bf16/f16 views of a
// checkpoint, or fp32 weights under fp64 activations), through the project's
// WeightMatVec kernel: the weight bytes are streamed once, never widened into a copy.
// Decode steps and verify's engines (one token, fp32 or fp64) take this path; larger
// batches (prefill, training) widen W and use ATen's GEMM — or, inside a
// Bf16ProductsScope, multiply bf16-rounded activations by the bf16 weight (oneDNN).
#ifndef LRKV_RUNTIME_STORED_LINEAR_H_
#define LRKV_RUNTIME_STORED_LINEAR_H_

#include <ATen/ATen.h>

namespace lrkv {

// Most activation rows the kernel path takes (beyond, a widened GEMM is faster).
inline constexpr int64_t kStoredLinearMaxRows = 16;

// While one is alive on this thread (and enabled), fp32 products with bf16-stored weights
// over more rows than the mat-vec kernel takes round the activations to bf16 and sum in
// fp32 (kernels/bf16_weight_gemm.h: llama.cpp's arithmetic for a bf16 model, 2.2x the
// fp32 GEMM of a widened weight on AVX512-BF16) instead of widening the weight. Off by
// default: verify's engines and training keep the exact products of the stored weights;
// the runtime's eval, generate and bench turn it on (LanguageModelOptions).
class Bf16ProductsScope {
 public:
  explicit Bf16ProductsScope(bool enabled = true);
  ~Bf16ProductsScope();
  Bf16ProductsScope(const Bf16ProductsScope&) = delete;
  Bf16ProductsScope& operator=(const Bf16ProductsScope&) = delete;

  // Whether a scope is on for this thread.
  static bool Active();
  // Whether this CPU runs the bf16 products natively (else the scope changes nothing).
  static bool Available();

 private:
  bool previous_;
};

// x [..., cols] times w [rows, cols]ᵀ, or an undefined tensor when no kernel path
// applies (a GPU tensor, autograd, a weight already in x's dtype, too many rows outside
// a Bf16ProductsScope).
at::Tensor StoredLinear(const at::Tensor& x, const at::Tensor& w);

// x Wᵀ under autograd for a frozen weight kept in its stored dtype (healing with the
// rest of the model frozen in bf16): the widened weight is a temporary of the forward
// and is widened again in the backward, so the graph keeps the stored view, not an
// fp32 copy of every frozen matrix. Only x gets a gradient.
at::Tensor FrozenStoredLinear(const at::Tensor& x, const at::Tensor& w);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_STORED_LINEAR_H_
