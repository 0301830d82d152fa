// Reading and writing the DeepSeek-V3 layout of decoupled-RoPE MLA (see
// header).
#include "runtime/deepseek_layout.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "formats/checkpoint_files.h"
#include "formats/safetensors.h"
#include "runtime/rope.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

// DeepSeek's attention scale is 1/sqrt(qk_nope + qk_rope); this project's, the
// source's 1/sqrt(d_h). q_proj carries the ratio.
double QueryScale(const ModelConfig& c) {
  return std::sqrt(static_cast<double>(c.head_dim + c.kv.RopeWidth()) /
                   static_cast<double>(c.head_dim));
}

}  // namespace

absl::StatusOr<DeepseekRope> DeepseekRopeFor(const ModelConfig& c) {
  if (c.rope_scaling.type == RopeScalingType::kDynamic) {
    return Invalid(
        "DeepSeek export: dynamic rope_scaling turns each position with its "
        "own "
        "frequencies, which DeepSeek's rotary cannot express");
  }
  const int64_t k = c.kv.rope_planes_kept;
  DeepseekRope out;
  if (k == 0) return out;
  const at::Tensor inv = RopeInverseFrequencies(c, c.max_position_embeddings);
  const double f0 = inv[0].item<double>();
  out.linear_factor = 1.0 / f0;
  const double ratio = k > 1 ? inv[1].item<double>() / f0 : 1.0 / c.rope_theta;
  out.theta = std::pow(ratio, -static_cast<double>(k));
  for (int64_t i = 0; i < k; ++i) {
    const double want = f0 * std::pow(ratio, static_cast<double>(i)),
                 have = inv[i].item<double>();
    if (std::abs(have - want) > 1e-9 * want) {
      return absl::FailedPreconditionError(
          absl::StrCat("DeepSeek export: RoPE plane ", i,
                       " turns with frequency ", have, ", not ", want,
                       " of the geometric progression DeepSeek's rotary "
                       "computes from planes 0 and 1 (",
                       RopeScalingName(c.rope_scaling.type),
                       " rope_scaling reshapes it there); convert keeping "
                       "planes 0..",
                       i - 1, " only (--rope-planes ", i, ")"));
    }
  }
  if (std::abs(out.linear_factor - 1.0) < 1e-12) out.linear_factor = 1.0;
  return out;
}

namespace {

absl::Status CheckExportable(const ModelConfig& c) {
  RETURN_IF_ERROR(c.Validate());
  if (!c.kv.DecoupledRope()) {
    return Invalid(absl::StrCat(
        "DeepSeek export needs MLA with decoupled RoPE (convert with "
        "--variant mla --rope-mode partial); this model is ",
        KvLayoutName(c.kv.layout), " with rope mode ",
        RopeModeName(c.kv.rope_mode)));
  }
  const char* why = c.qkv_bias ? "attention biases (DeepSeek's q_proj has none)"
                    : c.qk_norm ? "QK-norm (Qwen3, OLMo-2: serve such a model "
                                  "with lrkv)"
                    : !c.kv.latent_norm
                        ? "a latent without its RMSNorm (kv_a_layernorm, which "
                          "stock DeepSeek-V3 always applies): convert with "
                          "--latent-norm"
                    : !c.kv.layer_sizes.empty()
                        ? "per-layer latent sizes (one kv_lora_rank)"
                    : !c.nope_layers.empty() ? "NoPE layers"
                    : c.sliding_window > 0   ? "a sliding window"
                    : c.post_norm            ? "post-norm blocks"
                                             : nullptr;
  if (why != nullptr) {
    return Invalid(
        absl::StrCat("DeepSeek export: the layout has no place for ", why));
  }
  return absl::OkStatus();
}

std::string DeepseekConfigJson(const ModelConfig& c, const DeepseekRope& rope,
                               const std::string& torch_dtype) {
  const int64_t w = c.kv.RopeWidth();
  json j = {
      {"architectures", {"DeepseekV3ForCausalLM"}},
      {"model_type", "deepseek_v3"},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_heads},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"hidden_act", "silu"},
      {"kv_lora_rank", c.kv.latent},
      {"q_lora_rank", nullptr},
      {"qk_rope_head_dim", w},
      {"qk_nope_head_dim", c.head_dim},
      {"v_head_dim", c.head_dim},
      {"head_dim", w},
      {"rope_theta", rope.theta},
      {"rope_interleave", true},
      {"attention_bias", false},
      // Every layer dense: the MoE fields are inert but present for loaders
      // that read them.
      {"first_k_dense_replace", c.num_layers},
      {"moe_intermediate_size", c.intermediate_size},
      {"n_routed_experts", 1},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 1},
      {"n_group", 1},
      {"topk_group", 1},
      {"routed_scaling_factor", 1.0},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"bos_token_id", c.bos_token_id >= 0 ? json(c.bos_token_id) : json()},
      {"eos_token_id", c.eos_token_ids.empty()       ? json()
                       : c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0])
                                                     : json(c.eos_token_ids)},
      {"torch_dtype", torch_dtype},
      {"rope_scaling",
       rope.linear_factor != 1.0
           ? json{{"rope_type", "linear"}, {"factor", rope.linear_factor}}
           : json()},
  };
  return j.dump(2) + "\n";
}

}  // namespace

absl::Status UnfuseDeepseekAttention(const ModelConfig& c,
                                     LlamaWeights* weights) {
  const int64_t h = c.num_heads, dh = c.head_dim, w = c.kv.RopeWidth(),
                d = c.hidden_size;
  const double scale = QueryScale(c);
  for (size_t i = 0; i < weights->layers.size(); ++i) {
    LayerWeights& l = weights->layers[i];
    const int64_t dc = c.kv.LatentAt(static_cast<int64_t>(i));
    const auto q = (l.wq.to(at::kFloat) / scale).view({h, dh + w, d});
    l.wq = q.narrow(1, 0, dh).reshape({h * dh, d}).contiguous();
    l.q_rope = q.narrow(1, dh, w).reshape({h * w, d}).contiguous();
    const auto kv_a = l.kv_down.to(at::kFloat);
    l.kv_down = kv_a.narrow(0, 0, dc).contiguous();
    l.k_rope = kv_a.narrow(0, dc, w).contiguous();
    const auto kv_b = l.k_up.to(at::kFloat).view({h, 2 * dh, dc});
    l.k_up = kv_b.narrow(1, 0, dh).reshape({h * dh, dc}).contiguous();
    l.v_up = kv_b.narrow(1, dh, dh).reshape({h * dh, dc}).contiguous();
  }
  return absl::OkStatus();
}

absl::Status CheckDeepseekExport(const ModelConfig& config) {
  RETURN_IF_ERROR(CheckExportable(config));
  return DeepseekRopeFor(config).status();
}

absl::Status SaveDeepseekCheckpoint(const std::string& dir,
                                    const ModelConfig& config,
                                    const LlamaWeights& weights,
                                    const Tokenizer* tokenizer, DType matrices,
                                    uint64_t max_shard_bytes) {
  RETURN_IF_ERROR(CheckExportable(config));
  ASSIGN_OR_RETURN(const DeepseekRope rope, DeepseekRopeFor(config));
  ModelConfig c = config;
  c.deepseek_layout = true;
  c.num_kv_heads = c.num_heads;  // as written (kv_b_proj's rows are per head)
  RETURN_IF_ERROR(SaveSafetensorsWeights(dir, c,
                                         FuseDeepseekAttention(config, weights),
                                         matrices, max_shard_bytes));
  RETURN_IF_ERROR(WriteFileAtomically(
      (fs::path(dir) / kConfigFileName).string(),
      DeepseekConfigJson(config, rope, TorchDTypeName(matrices))));
  return WriteTokenizerFiles(dir, tokenizer);
}

LlamaWeights FuseDeepseekAttention(const ModelConfig& c,
                                   const LlamaWeights& weights) {
  const int64_t h = c.num_heads, hkv = c.num_kv_heads, group = h / hkv,
                dh = c.head_dim, w = c.kv.RopeWidth(), d = c.hidden_size,
                dc = c.kv.latent;
  const double scale = QueryScale(c);
  LlamaWeights fused = weights;
  for (auto& l : fused.layers) {
    const auto q = at::cat({l.wq.to(at::kFloat).view({h, dh, d}),
                            l.q_rope.to(at::kFloat).view({h, w, d})},
                           1);
    l.wq = (q * scale).reshape({h * (dh + w), d});
    l.kv_down = at::cat({l.kv_down.to(at::kFloat), l.k_rope.to(at::kFloat)}, 0);
    // kv_b_proj up-projects per query head: each KV head's rows for its group.
    const auto kv_b = at::cat({l.k_up.to(at::kFloat).view({hkv, dh, dc}),
                               l.v_up.to(at::kFloat).view({hkv, dh, dc})},
                              1);
    l.k_up = kv_b.repeat_interleave(group, 0).reshape({h * 2 * dh, dc});
    l.v_up = l.q_rope = l.k_rope = at::Tensor();
  }
  return fused;
}

}  // namespace lrkv
