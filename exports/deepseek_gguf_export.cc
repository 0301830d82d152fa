// The deepseek2 GGUF export of decoupled-RoPE MLA (see header).
#include "exports/deepseek_gguf_export.h"

#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "runtime/deepseek_layout.h"
#include "exports/gguf_export.h"

namespace lrkv {
namespace {

constexpr char kArch[] = "deepseek2";

// `t` stored in `dtype` (F32, F16 or BF16), owned by `keep`, as a view.
TensorView StoredView(std::string name, const at::Tensor& t, DType dtype,
                      std::vector<at::Tensor>* keep) {
  const at::ScalarType scalar = dtype == DType::kF16    ? at::kHalf
                                : dtype == DType::kBF16 ? at::kBFloat16
                                                        : at::kFloat;
  keep->push_back(t.to(at::kFloat).to(scalar).contiguous());
  TensorView v;
  v.name = std::move(name);
  v.dtype = dtype;
  v.shape = keep->back().sizes().vec();
  v.data = static_cast<const uint8_t*>(keep->back().data_ptr());
  v.nbytes = static_cast<uint64_t>(keep->back().nbytes());
  return v;
}

// The hyperparameters llama.cpp's deepseek2 loader reads, for a dense model.
void AddHyperparameters(const ModelConfig& c, const DeepseekRope& rope,
                        DType matrices, GgufBuilder* g) {
  auto key = [](const char* k) { return absl::StrCat(kArch, ".", k); };
  const int64_t w = c.kv.RopeWidth(), dc = c.kv.latent, dh = c.head_dim;
  g->AddString("general.architecture", kArch);
  g->AddString("general.name", "lrkv export (MLA, decoupled RoPE)");
  // llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32.
  g->AddUint32("general.file_type", matrices == DType::kF16    ? 1
                                    : matrices == DType::kBF16 ? 32
                                                               : 0);
  const std::pair<const char*, int64_t> sizes[] = {
      {"context_length", c.max_position_embeddings},
      {"embedding_length", c.hidden_size},
      {"feed_forward_length", c.intermediate_size},
      {"block_count", c.num_layers},
      {"attention.head_count", c.num_heads},
      // The absorbed form llama.cpp runs: one latent "head" of d_c + d_rope.
      {"attention.head_count_kv", 1},
      {"attention.key_length", dc + w},
      {"attention.value_length", dc},
      {"attention.key_length_mla", dh + w},
      {"attention.value_length_mla", dh},
      {"attention.q_lora_rank", 0},
      {"attention.kv_lora_rank", dc},
      {"rope.dimension_count", w},
      // Dense: every block a leading dense block, no experts.
      {"leading_dense_block_count", c.num_layers},
      {"expert_count", 0},
      {"expert_used_count", 0},
      {"expert_shared_count", 0},
      {"expert_feed_forward_length", 0},
      // Softmax gating, what llama.cpp assumes of DeepSeek-V2 files (unused).
      {"expert_gating_func", 1},
      {"vocab_size", c.vocab_size}};
  for (const auto& [name, value] : sizes) {
    g->AddUint32(key(name), static_cast<uint32_t>(value));
  }
  g->AddFloat32(key("expert_weights_scale"), 1.0f);
  g->AddBool(key("expert_weights_norm"), false);
  g->AddFloat32(key("rope.freq_base"), static_cast<float>(rope.theta));
  if (rope.linear_factor != 1.0) {
    g->AddString(key("rope.scaling.type"), "linear");
    g->AddFloat32(key("rope.scaling.factor"),
                  static_cast<float>(rope.linear_factor));
  }
  g->AddFloat32(key("attention.layer_norm_rms_epsilon"),
                static_cast<float>(c.rms_norm_eps));
}

// The GGUF name of a fused DeepSeek-layout tensor ("" for kv_b_proj, which is
// written split).
std::string DeepseekGgufName(const std::string& canonical) {
  constexpr std::string_view kKvB = ".self_attn.kv_b_proj.weight";
  if (canonical.size() > kKvB.size() &&
      canonical.compare(canonical.size() - kKvB.size(), kKvB.size(), kKvB) ==
          0) {
    return "";
  }
  return GgufNameFromCanonical(canonical);
}

}  // namespace

absl::Status CheckDeepseekGgufExport(const ModelConfig& config) {
  RETURN_IF_ERROR(CheckDeepseekExport(config));
  if (!config.kv.latent_norm) {
    return absl::InvalidArgumentError(
        "llama.cpp's deepseek2 always applies an RMSNorm to the MLA latent "
        "(attn_kv_a_norm); this model has none: convert with --latent-norm");
  }
  if (config.qk_norm) {
    return absl::InvalidArgumentError(
        "llama.cpp's deepseek2 has no QK-norm; a model with one (Qwen3, "
        "OLMo-2) has no GGUF form as MLA: serve it with lrkv");
  }
  if (config.rope_scaling.type == RopeScalingType::kYarn) {
    return absl::InvalidArgumentError(
        "yarn rope_scaling: the deepseek2 export writes plain or linear "
        "rotary only");
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufBuilder> DeepseekGgufBuilder(const ModelConfig& config,
                                                const LlamaWeights& weights,
                                                const Tokenizer& tokenizer,
                                                std::vector<at::Tensor>* keep,
                                                DType matrices) {
  RETURN_IF_ERROR(CheckDeepseekGgufExport(config));
  ASSIGN_OR_RETURN(const DeepseekRope rope, DeepseekRopeFor(config));
  GgufBuilder g;
  AddHyperparameters(config, rope, matrices, &g);
  RETURN_IF_ERROR(AddGgufTokenizer(tokenizer, config.vocab_size, &g));

  ModelConfig written = config;
  written.deepseek_layout = true;
  written.num_kv_heads = written.num_heads;
  const LlamaWeights fused = FuseDeepseekAttention(config, weights);
  ASSIGN_OR_RETURN(std::vector<TensorView> views,
                   WeightViews(written, fused, keep, matrices));
  for (TensorView& v : views) {
    const std::string name = DeepseekGgufName(v.name);
    if (!name.empty()) {
      v.name = name;
      g.AddTensor(v);
    }
  }
  // kv_b_proj split per head as convert_hf_to_gguf.py does: k_b transposed to
  // [H, d_c, d_h] (llama.cpp multiplies the query's RoPE-free part by it to
  // reach the latent), v_b [H, d_h, d_c].
  const int64_t h = config.num_heads, dh = config.head_dim,
                dc = config.kv.latent;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const at::Tensor kv_b = fused.layers[i].k_up.view({h, 2 * dh, dc});
    const std::string blk = absl::StrCat("blk.", i, ".");
    g.AddTensor(StoredView(blk + "attn_k_b.weight",
                           kv_b.narrow(1, 0, dh).transpose(1, 2), matrices,
                           keep));
    g.AddTensor(StoredView(blk + "attn_v_b.weight", kv_b.narrow(1, dh, dh),
                           matrices, keep));
  }
  return g;
}

}  // namespace lrkv
