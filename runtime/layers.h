// Building blocks shared by the transformer and the decode engines.
#ifndef LRKV_RUNTIME_LAYERS_H_
#define LRKV_RUNTIME_LAYERS_H_

#include <ATen/ATen.h>

#include "runtime/llama_weights.h"
#include "runtime/rms_norm.h"
#include "runtime/stored_linear.h"

namespace lrkv {

// The dtype activations are computed in for weights held as `w`: float64 for a
// float64 model (verify's reference), float32 otherwise (weights loaded in their
// stored bf16/f16 are widened on use).
inline at::ScalarType ComputeDtype(const at::Tensor& w) {
  return w.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// `w` in the dtype of `x`: a weight kept in its stored dtype is converted when used,
// one tensor at a time, so the model is never held twice (a no-op when they agree).
inline at::Tensor AsDtypeOf(const at::Tensor& w, const at::Tensor& x) {
  return !w.defined() || w.scalar_type() == x.scalar_type() ? w : w.to(x.scalar_type());
}

// x Wᵀ + b, with b optional (undefined). A weight in its stored dtype is streamed
// by the WeightMatVec kernel for a few rows (decode steps) and widened for a GEMM
// otherwise.
inline at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  if (w.scalar_type() != x.scalar_type()) {
    if (at::Tensor y = StoredLinear(x, w); y.defined()) return b.defined() ? y + AsDtypeOf(b, x) : y;
    if (x.requires_grad() && !w.requires_grad() && at::GradMode::is_enabled()) {
      const at::Tensor y = FrozenStoredLinear(x, w);
      return b.defined() ? y + AsDtypeOf(b, x) : y;
    }
  }
  return b.defined() ? at::linear(x, AsDtypeOf(w, x), AsDtypeOf(b, x))
                     : at::linear(x, AsDtypeOf(w, x));
}

// The embedding rows of `tokens`, in `dtype` (by default the compute dtype of the
// embedding's own storage).
inline at::Tensor Embed(const at::Tensor& embed, const at::Tensor& tokens) {
  return at::embedding(embed, tokens).to(ComputeDtype(embed));
}
inline at::Tensor Embed(const at::Tensor& embed, const at::Tensor& tokens,
                        at::ScalarType dtype) {
  return at::embedding(embed, tokens).to(dtype);
}

// The MLA latent of x, kv_down·x, through the latent's RMSNorm where the model has
// one (kv.latent_norm, DeepSeek-V3's kv_a_layernorm): what MLA engines cache.
// The latent as cached from its projection x·kv_downᵀ (the latent norm, if any, applied).
inline at::Tensor NormedLatent(const ModelConfig& c, const LayerWeights& l, const at::Tensor& latent) {
  if (!c.kv.latent_norm) return latent;
  return RmsNorm(latent, AsDtypeOf(l.kv_norm, latent), c.rms_norm_eps);
}
inline at::Tensor MlaLatent(const ModelConfig& c, const LayerWeights& l, const at::Tensor& x) {
  return NormedLatent(c, l, Linear(x, l.kv_down));
}

// The SwiGLU feed-forward block.
inline at::Tensor FeedForward(const LayerWeights& l, const at::Tensor& x) {
  return Linear(at::silu(Linear(x, l.w_gate)) * Linear(x, l.w_up), l.w_down);
}

// QK-norm of x [..., heads, d_h]: per head (Qwen3, gamma [d_h]) or over every head at
// once (OLMo-2, gamma [heads·d_h]).
inline at::Tensor QkNorm(const ModelConfig& c, const at::Tensor& x, const at::Tensor& gamma) {
  if (!c.qk_norm_over_heads) return RmsNorm(x, gamma, c.rms_norm_eps);
  return RmsNorm(x.flatten(-2), gamma, c.rms_norm_eps).view(x.sizes());
}

// A decoder block's residual wiring. Pre-norm (Llama, Qwen, Mistral, SmolLM):
// x + attn(norm(x)), then x + ffn(norm(x)). Post-norm (OLMo-2): x + norm(attn(x)),
// then x + norm(ffn(x)).
inline at::Tensor AttentionInput(const ModelConfig& c, const LayerWeights& l,
                                 const at::Tensor& x) {
  return c.post_norm ? x : RmsNorm(x, l.attn_norm, c.rms_norm_eps);
}

// x + the block's attention output `attn` [..., H·d_h] through o_proj.
inline at::Tensor AddAttention(const ModelConfig& c, const LayerWeights& l,
                               const at::Tensor& x, const at::Tensor& attn) {
  const auto out = Linear(attn, l.wo);
  return x + (c.post_norm ? RmsNorm(out, l.attn_norm, c.rms_norm_eps) : out);
}

inline at::Tensor AddFeedForward(const ModelConfig& c, const LayerWeights& l,
                                 const at::Tensor& x) {
  if (c.post_norm) return x + RmsNorm(FeedForward(l, x), l.ffn_norm, c.rms_norm_eps);
  return x + FeedForward(l, RmsNorm(x, l.ffn_norm, c.rms_norm_eps));
}

}  // namespace lrkv

#endif  // LRKV_RUNTIME_LAYERS_H_
