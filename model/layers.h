// Building blocks shared by the runtime and the decode engines of verify/.
#ifndef LRKV_MODEL_LAYERS_H_
#define LRKV_MODEL_LAYERS_H_

#include <ATen/ATen.h>

#include "model/llama_weights.h"

namespace lrkv {

// RMSNorm over the last dimension: x / rms(x) * gamma.
inline at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& gamma, double eps) {
  return x * at::rsqrt(x.pow(2).mean({-1}, /*keepdim=*/true) + eps) * gamma;
}

// x Wᵀ + b, with b optional (undefined).
inline at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

// The SwiGLU feed-forward block.
inline at::Tensor FeedForward(const LayerWeights& l, const at::Tensor& x) {
  return at::linear(at::silu(at::linear(x, l.w_gate)) * at::linear(x, l.w_up), l.w_down);
}

}  // namespace lrkv

#endif  // LRKV_MODEL_LAYERS_H_
