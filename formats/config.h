// The architecture description of a Llama-family decoder, read from HF config.json or
// GGUF metadata, validated, and written back as config.json.
#ifndef LRKV_FORMATS_CONFIG_H_
#define LRKV_FORMATS_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formats/gguf.h"

namespace lrkv {

// How the two coordinates of each RoPE rotation plane sit inside a head.
enum class RopeLayout {
  // Plane i pairs dims (i, i + rope_dim/2): HF Llama/Qwen checkpoints ("NeoX style").
  kHalfSplit,
  // Plane i pairs dims (2i, 2i+1): Meta/llama2.c weights and GGUF `llama` tensors.
  kAdjacent,
};

const char* RopeLayoutName(RopeLayout layout);

// RoPE frequency scaling for long contexts (HF config.json `rope_scaling`), with
// the formulas of transformers' modeling_rope_utils.
enum class RopeScalingType { kNone, kLinear, kDynamic, kLlama3, kYarn };

const char* RopeScalingName(RopeScalingType type);

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  /// Context extension factor (linear, dynamic, llama3, yarn); >= 1.
  double factor = 1.0;
  /// The pretraining context (llama3, yarn; dynamic uses max_position_embeddings).
  int64_t original_max_position_embeddings = 0;
  /// llama3: wavelengths longer than original/low_freq_factor are divided by factor,
  /// shorter than original/high_freq_factor kept, those between interpolated.
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  /// yarn: the rotation counts bounding the interpolation ramp, and whether the
  /// ramp's ends are rounded to whole dimensions.
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  /// yarn: cos and sin are multiplied by this (given, or from mscale/mscale_all_dim).
  double attention_factor = 1.0;
  /// yarn: the stated values, kept for export (0 when absent).
  double mscale = 0.0, mscale_all_dim = 0.0;
  bool attention_factor_given = false;
};

// A base inverse frequency after llama3 scaling `s` (transformers'
// _compute_llama3_parameters): wavelengths above original/low_freq_factor divided by
// factor, below original/high_freq_factor kept, interpolated between.
double Llama3InverseFrequency(const RopeScaling& s, double inv_freq);

// How converted K/V projections are stored (dense = the usual per-KV-head weights,
// which also covers GQA/MQA conversions).
enum class KvLayout { kDense, kLrkv, kMla };

// How RoPE meets a low-rank K (docs/design.md, "The math that must hold").
// kReconstruct and kPlane leave the model's function unchanged (plane mode
// constrains B_h at surgery time); kPartial keeps RoPE only on the first
// `rope_planes_kept` (highest-frequency) planes, which the shared key carries,
// and is an approximation of the source. kSharedPlane (LRKV, exact): the K
// residual is H_kv·r/2 latent planes shared by all KV heads, each read through
// a per-head complex factor (surgery/shared_plane.h); K's down is then [H_kv·r,
// d] and its up [H_kv, d_h, H_kv·r].
enum class RopeMode { kReconstruct, kPlane, kPartial, kSharedPlane };

// What a RoPE mode does, for the code that asks about one property of it
// rather than naming modes.
struct RopeModeTraits {
  RopeMode mode;
  const char* name;
  // The converted model computes the source's function (all but partial).
  bool exact;
  // Surgery constrains the K up-projections to whole RoPE planes, which
  // healing then keeps fixed (plane, partial, shared-plane).
  bool fixes_key_up;
  // Latents are rotated at write time with their planes' frequencies (plane,
  // shared-plane).
  bool rotates_latents;
  // K's latent planes are shared by all KV heads (shared-plane).
  bool shares_planes;
  // Only the first rope_planes_kept planes stay rotated (partial).
  bool keeps_some_planes;
};
const RopeModeTraits& RopeModeTraitsOf(RopeMode mode);

const char* KvLayoutName(KvLayout layout);
const char* RopeModeName(RopeMode mode);
absl::StatusOr<RopeMode> ParseRopeMode(const std::string& name);

// The compressed form of the K/V projections of a converted model.
struct KvCompression {
  KvLayout layout = KvLayout::kDense;
  /// LRKV rank r (0 <= r <= head_dim).
  int64_t rank = 0;
  /// MLA latent size d_c.
  int64_t latent = 0;
  RopeMode rope_mode = RopeMode::kReconstruct;
  /// kPartial: RoPE planes 0..rope_planes_kept-1 stay rotated; the rest are position-free.
  int64_t rope_planes_kept = 0;
  /// A budget allocated across layers: layer i's LRKV rank (K and V alike) or MLA latent.
  /// Empty: every layer has `rank` / `latent`. When set, `rank` / `latent` hold the
  /// largest entry.
  std::vector<int64_t> layer_sizes;
  int64_t RankAt(int64_t layer) const {
    return layer_sizes.empty() ? rank : layer_sizes[static_cast<size_t>(layer)];
  }
  /// K/V stored factored (LRKV or MLA), not as dense per-head projections.
  bool Factored() const { return layout != KvLayout::kDense; }
  int64_t LatentAt(int64_t layer) const {
    return layer_sizes.empty() ? latent : layer_sizes[static_cast<size_t>(layer)];
  }
  /// MLA with decoupled RoPE (the DeepSeek layout): a RoPE-free latent of d_c plus one
  /// rotated key of RopeWidth() = 2·rope_planes_kept shared by every head, whose
  /// pair m turns with RoPE plane m's frequency.
  bool DecoupledRope() const {
    return layout == KvLayout::kMla && rope_mode == RopeMode::kPartial;
  }
  int64_t RopeWidth() const { return DecoupledRope() ? 2 * rope_planes_kept : 0; }
  /// MLA with decoupled RoPE only: an RMSNorm on the latent, ĉ_t = γ ⊙ c_t / rms(c_t)
  /// (weight γ [d_c] per layer, ε = the model's rms_norm_eps), applied before the
  /// up-projections and cached in place of c_t, as DeepSeek-V3's kv_a_layernorm. It
  /// adds no cached element; the K/V projections are then no longer linear in x.
  bool latent_norm = false;
};

struct ModelConfig {
  // "llama", "mistral", "qwen2", "qwen3", "smollm3" or "olmo2": the HF model_type
  // written back on export.
  std::string model_type = "llama";
  /// Model width d.
  int64_t hidden_size = 0;
  /// SwiGLU hidden width.
  int64_t intermediate_size = 0;
  /// Number of decoder layers N.
  int64_t num_layers = 0;
  /// Query heads H.
  int64_t num_heads = 0;
  /// Key/value heads H_kv (== H for MHA); must divide H.
  int64_t num_kv_heads = 0;
  /// Per-head dimension d_h.
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  /// Longest context the model was trained for (positions beyond are allowed but flagged).
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  /// Dimensions of each head that RoPE rotates (the leading ones); == head_dim for Llama.
  int64_t rope_dim = 0;
  RopeScaling rope_scaling;
  RopeLayout rope_layout = RopeLayout::kHalfSplit;
  /// RMSNorm on q and k after projection, before RoPE (Qwen3, OLMo-2).
  bool qk_norm = false;
  /// OLMo-2: that RMSNorm runs over the whole q / k projection (all heads at once, one
  /// σ per token and weights of H·d_h / H_kv·d_h), not per head (Qwen3: d_h weights).
  bool qk_norm_over_heads = false;
  /// OLMo-2: each block normalises its output (post_attention_layernorm,
  /// post_feedforward_layernorm: x + norm(f(x))) instead of its input (Llama:
  /// x + f(norm(x))); attn_norm / ffn_norm hold those weights.
  bool post_norm = false;
  /// Biases on the q, k, v projections (Qwen2).
  bool qkv_bias = false;
  /// Mistral's sliding window: a query attends to the last `sliding_window` positions
  /// (itself included); 0 for full causal attention.
  int64_t sliding_window = 0;
  /// SmolLM3's NoPE layers: nope_layers[i] is true where layer i applies no RoPE
  /// (HF `no_rope_layers[i] == 0`). Empty: every layer rotates.
  std::vector<bool> nope_layers;
  bool UsesRope(int64_t layer) const {
    return nope_layers.empty() || !nope_layers[static_cast<size_t>(layer)];
  }
  /// The output head reuses the token embedding.
  bool tie_word_embeddings = false;
  /// -1 when neither config.json nor the tokenizer names one.
  int64_t bos_token_id = -1;
  /// Every id that ends a generation (HF allows a list: Llama-3.1 has three).
  std::vector<int64_t> eos_token_ids;
  bool IsEos(int64_t id) const;
  /// Compressed K/V projections of a converted model (dense for source models).
  KvCompression kv;
  /// The checkpoint stores MLA with decoupled RoPE in the DeepSeek-V3 layout (fused
  /// q_proj, kv_a_proj_with_mqa, kv_b_proj; runtime/deepseek_layout.h); loading splits
  /// it into this project's tensors, and writers write their own layout.
  bool deepseek_layout = false;

  // Checks every field and their relations; InvalidArgument naming the field.
  absl::Status Validate() const;
};

// Parses an HF config.json (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM).
// `source` names the file in messages. Unknown architectures and unsupported
// settings (rope_scaling, sliding windows, non-SiLU activations) are rejected.
absl::StatusOr<ModelConfig> ConfigFromHfJson(const std::string& json_text,
                                             const std::string& source);

// Builds the config from GGUF `llama` metadata. Weights in GGUF use kAdjacent.
absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufContents& gguf);

// The HF config.json text for `config`. HF loaders assume the half-split RoPE layout:
// writers of adjacent-layout weights must permute Q/K first (see PermuteRopeLayout).
// `torch_dtype` names the storage of the weights written beside it.
std::string ConfigToHfJson(const ModelConfig& config, const std::string& torch_dtype = "float32");

}  // namespace lrkv

#endif  // LRKV_FORMATS_CONFIG_H_
