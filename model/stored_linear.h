// x Wᵀ for a few activation rows with W in its stored dtype (bf16/f16 views of a
// checkpoint, or fp32 weights under fp64 activations), through the project's
// WeightMatVec kernel: the weight bytes are streamed once, never widened into a copy.
// Decode steps and verify's engines (one token, fp32 or fp64) take this path; larger
// batches (prefill, training) widen W and use ATen's GEMM.
#ifndef LRKV_MODEL_STORED_LINEAR_H_
#define LRKV_MODEL_STORED_LINEAR_H_

#include <ATen/ATen.h>

namespace lrkv {

// Most activation rows the kernel path takes (beyond, a widened GEMM is faster).
inline constexpr int64_t kStoredLinearMaxRows = 16;

// x [..., cols] times w [rows, cols]ᵀ, or an undefined tensor when the kernel path
// does not apply (a GPU tensor, autograd, a weight already in x's dtype, too many rows).
at::Tensor StoredLinear(const at::Tensor& x, const at::Tensor& w);

// x Wᵀ under autograd for a frozen weight kept in its stored dtype (healing with the
// rest of the model frozen in bf16): the widened weight is a temporary of the forward
// and is widened again in the backward, so the graph keeps the stored view, not an
// fp32 copy of every frozen matrix. Only x gets a gradient.
at::Tensor FrozenStoredLinear(const at::Tensor& x, const at::Tensor& w);

}  // namespace lrkv

#endif  // LRKV_MODEL_STORED_LINEAR_H_
