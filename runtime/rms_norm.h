// RMSNorm, the normalisation every supported model applies before attention and
// the feed-forward block, to QK-norm's heads and to MLA's latent.
#ifndef LRKV_RUNTIME_RMS_NORM_H_
#define LRKV_RUNTIME_RMS_NORM_H_

#include <ATen/ATen.h>

namespace lrkv {

// RMSNorm over the last dimension: x / rms(x) * gamma, gamma [x.size(-1)].
//
// Float32 CPU tensors outside autograd take one loop over the rows: a decode
// step normalises a few rows of a few hundred elements, where the ATen
// expression's five operations (each dispatched, allocated and iterated) cost
// far more than the arithmetic — QK-norm of one sequence's keys ran ~16 µs per
// layer, 3.7 ms of an 8-sequence step at the Qwen3-0.6B shape. The loop sums
// the squares in float64 (the ATen expression sums in float32) and then
// rounds as the expression does: the mean and rsqrt in float32, x·r, then ·γ.
// Everything else (float64, autograd, other devices) is the ATen expression.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& gamma, double eps);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_RMS_NORM_H_
