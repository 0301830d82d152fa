// The weights of a Llama-family decoder as float32 ATen tensors (PyTorch layout:
// projections are [out, in]), loaded from a Checkpoint with every shape checked,
// initialised at random for tests, permuted between RoPE layouts, and saved.
#ifndef LRKV_MODEL_LLAMA_WEIGHTS_H_
#define LRKV_MODEL_LLAMA_WEIGHTS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/tokenizer.h"

namespace lrkv {

struct LayerWeights {
  at::Tensor attn_norm;           // [d]
  at::Tensor wq, wk, wv, wo;      // [H*dh, d], [Hkv*dh, d], [Hkv*dh, d], [d, H*dh]
  at::Tensor bq, bk, bv;          // undefined unless config.qkv_bias
  at::Tensor q_norm, k_norm;      // [dh], undefined unless config.qk_norm
  at::Tensor ffn_norm;            // [d]
  at::Tensor w_gate, w_up;        // [ff, d]
  at::Tensor w_down;              // [d, ff]
};

struct LlamaWeights {
  at::Tensor embed;       // [V, d]
  at::Tensor final_norm;  // [d]
  at::Tensor lm_head;     // [V, d]; shares storage with embed when tied
  std::vector<LayerWeights> layers;
};

// Loads and converts to float32 every tensor `config` needs. InvalidArgument names
// the tensor for a missing tensor, a wrong shape, a non-float dtype or an
// unexpected extra tensor.
absl::StatusOr<LlamaWeights> LoadLlamaWeights(const Checkpoint& checkpoint);

// Random weights of the right shapes (normal, std 0.02 for projections, ~1 for
// norms), deterministic in `seed`.
LlamaWeights RandomLlamaWeights(const ModelConfig& config, uint64_t seed);

// Re-expresses q/k projections (rows, biases, QK-norm scales) from config.rope_layout
// in `to`, so that the model computes the same function; updates config.rope_layout.
void PermuteRopeLayout(ModelConfig* config, LlamaWeights* weights, RopeLayout to);

// Writes config.json, model.safetensors (float32, HF names) and, when given, the
// tokenizer into `dir` (created if needed). Adjacent-layout weights are permuted to
// the half-split layout HF loaders assume.
absl::Status SaveSafetensorsCheckpoint(const std::string& dir, const ModelConfig& config,
                                       const LlamaWeights& weights,
                                       const Tokenizer* tokenizer);

}  // namespace lrkv

#endif  // LRKV_MODEL_LLAMA_WEIGHTS_H_
