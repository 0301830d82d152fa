// The Llama-family decoder runtime on LibTorch (fp32): full-sequence forward for
// training and perplexity, and incremental decoding with a standard KV cache.
#ifndef LRKV_RUNTIME_TRANSFORMER_H_
#define LRKV_RUNTIME_TRANSFORMER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/config.h"
#include "runtime/llama_weights.h"
#include "runtime/rope.h"

namespace lrkv {

// Per-layer key/value tensors [B, H_kv, capacity, d_h] holding post-QK-norm,
// post-RoPE keys and values for positions [0, length).
struct KVCache {
  std::vector<at::Tensor> k;
  std::vector<at::Tensor> v;
  int64_t length = 0;
  int64_t capacity = 0;
};

// Sees each layer's attention input (the normalised hidden state [B, T, d] that the
// Q/K/V projections read); used to collect calibration statistics.
using AttentionInputObserver = std::function<void(int64_t layer, const at::Tensor& x)>;

class Transformer {
 public:
  // Checks that the weights match the config.
  static absl::StatusOr<std::unique_ptr<Transformer>> Create(ModelConfig config,
                                                             LlamaWeights weights);

  // Logits [B, T, V] for token ids [B, T] at positions 0..T-1 (no cache).
  at::Tensor Forward(const at::Tensor& tokens,
                     const AttentionInputObserver& observer = nullptr) const;
  // Logits [B, T, V] for packed sequences: token i of row b sits at RoPE position
  // positions[b][i] and attends only to earlier tokens of the same segment
  // (segments[b][i]), so documents packed into one row never see each other.
  at::Tensor ForwardPacked(const at::Tensor& tokens, const at::Tensor& positions,
                           const at::Tensor& segments) const;

  KVCache NewCache(int64_t batch, int64_t capacity) const;
  // Appends token ids [B, T] at positions cache.length.. and returns their logits
  // [B, T, V]; T = 1 is one decode step, T > 1 a prefill. Grows the cache as needed.
  at::Tensor ForwardCached(KVCache& cache, const at::Tensor& tokens) const;

  // Greedy continuation of `prompt` (ids, BOS included by the caller): at most
  // `max_new_tokens` ids, stopping after EOS when `stop_at_eos`.
  std::vector<int32_t> GenerateGreedy(const std::vector<int32_t>& prompt,
                                      int64_t max_new_tokens, bool stop_at_eos) const;

  const ModelConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }

  // With grad mode on, keep only each layer's input for the backward pass and run the
  // layer again there (runtime/layer_checkpoint.h): training holds one layer's
  // activations, not all of them. Off by default.
  void set_activation_checkpointing(bool on) { checkpoint_layers_ = on; }

 private:
  Transformer(ModelConfig config, LlamaWeights weights)
      : config_(std::move(config)), weights_(std::move(weights)), ropes_(LayerRopes(config_)) {}

  // RMSNorm over the last dimension.
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& gamma) const;
  // Rotates the first rope_dim dims of x [B, T, heads, d_h] at positions [T], as
  // decoder layer `layer` does (SmolLM3's NoPE layers do not).
  at::Tensor ApplyRope(int64_t layer, const at::Tensor& x, const at::Tensor& positions) const;
  // q, k, v [B, T, heads, d_h] for x [B, T, d], after QK-norm and RoPE.
  void ProjectQkv(int64_t layer, const LayerWeights& l, const at::Tensor& x, const at::Tensor& positions,
                  at::Tensor* q, at::Tensor* k, at::Tensor* v) const;
  // Attention of q [B, T, H, d_h] over k, v [B, H_kv, S, d_h]; `hidden` [T, S] or
  // [B, T, S] is true where a key must not be seen. Returns [B, T, H*d_h].
  at::Tensor Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& hidden) const;
  // Keys after the query (query positions start..start+T-1, keys 0..S-1), and keys
  // outside a sliding window: [T, S].
  // Decoupled RoPE: rotates the pairs of x [B, T, n, w] (Rope::RotateLeadingPlanes).
  at::Tensor RotateDecoupled(int64_t layer, const at::Tensor& x,
                             const at::Tensor& positions) const;
  at::Tensor CausalMask(int64_t start, int64_t t, int64_t s, at::Device device) const;
  at::Tensor Run(const at::Tensor& tokens, const at::Tensor& positions,
                 const at::Tensor& hidden, const AttentionInputObserver& observer) const;
  at::Tensor FeedForward(const LayerWeights& l, const at::Tensor& x) const;

  ModelConfig config_;
  LlamaWeights weights_;
  std::vector<Rope> ropes_;  // one per layer
  bool checkpoint_layers_ = false;
};

}  // namespace lrkv

#endif  // LRKV_RUNTIME_TRANSFORMER_H_
