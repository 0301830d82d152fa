// MLA with decoupled RoPE in the DeepSeek-V2/V3 checkpoint layout (HF
// DeepseekV3ForCausalLM): config.json with kv_lora_rank, qk_rope_head_dim,
// qk_nope_head_dim and v_head_dim; fused q_proj ([q_nope | q_rope] per head),
// kv_a_proj_with_mqa ([latent | shared rotated key]) and kv_b_proj ([k_nope |
// v] per head). Read and written with these rules, documented in the README:
//  - q_lora_rank null, dense MLP in every layer (first_k_dense_replace =
//  layers), no
//    attention biases (DeepSeek's q_proj has none), v_head_dim =
//    qk_nope_head_dim;
//  - the latent's RMSNorm (kv_a_layernorm), which stock DeepSeek-V3 always
//    applies: a model without one (kv.latent_norm false) is refused on
//    writing; reading, a config with "qk_latent_layernorm": false (TransMLA's
//    loaders' field) loads as such a model;
//  - rope_interleave: pair m of the rotated parts is dims (2m, 2m+1) and turns
//  with
//    DeepSeek's m-th frequency rope_theta^(-2m/qk_rope_head_dim), times
//    1/factor under linear rope_scaling;
//  - DeepSeek scales scores by 1/sqrt(qk_nope + qk_rope); the export folds
//    sqrt((d_h + d_rope)/d_h) into q_proj so that scores keep the source's
//    1/sqrt(d_h).
#ifndef LRKV_RUNTIME_DEEPSEEK_LAYOUT_H_
#define LRKV_RUNTIME_DEEPSEEK_LAYOUT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "formats/config.h"
#include "formats/deepseek_config.h"
#include "runtime/llama_weights.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

// DeepSeek's rotary for the kept planes: the base and linear factor that
// reproduce their frequencies as one progression
// rope_theta^(-2m/d_rope)/factor.
struct DeepseekRope {
  double theta = 10000.0;
  double linear_factor = 1.0;
};

// FailedPrecondition where the kept planes' frequencies are no such
// progression.
absl::StatusOr<DeepseekRope> DeepseekRopeFor(const ModelConfig& config);

// A decoupled-RoPE MLA model's attention in DeepSeek's fused form, float32:
// wq = q_proj ([q_nope | q_rope] per head, times sqrt((d_h + d_rope)/d_h)),
// kv_down = kv_a_proj_with_mqa ([latent | shared rotated key]), k_up =
// kv_b_proj ([k_nope | v] per query head, each KV head's rows repeated for its
// group); v_up, q_rope and k_rope cleared. Its config as written has
// num_kv_heads = num_heads.
LlamaWeights FuseDeepseekAttention(const ModelConfig& config,
                                   const LlamaWeights& weights);

// Splits the fused tensors a deepseek_layout load leaves in each layer's wq,
// kv_down and k_up into wq, q_rope, kv_down, k_rope, k_up and v_up (float32).
absl::Status UnfuseDeepseekAttention(const ModelConfig& config,
                                     LlamaWeights* weights);

// Whether SaveDeepseekCheckpoint can write a model with `config` (the errors it
// would return), checked before any work.
absl::Status CheckDeepseekExport(const ModelConfig& config);

// Writes a decoupled-RoPE MLA model as a DeepSeek-V3 checkpoint in `dir`:
// shards (model.safetensors[.index.json]), config.json, tokenizer files.
// InvalidArgument for a model the layout cannot hold (biases, QK-norm,
// per-layer latents, NoPE layers, sliding windows, post-norm blocks),
// FailedPrecondition where the kept planes' frequencies are not one geometric
// progression (DeepSeek's rotary computes them so).
absl::Status SaveDeepseekCheckpoint(const std::string& dir,
                                    const ModelConfig& config,
                                    const LlamaWeights& weights,
                                    const Tokenizer* tokenizer, DType matrices,
                                    uint64_t max_shard_bytes);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_DEEPSEEK_LAYOUT_H_
