// GGUF export of plain models (see gguf_export.h).
#include "exports/gguf_export.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template.h"
#include "model/checkpoint.h"
#include "formats/gguf_writer.h"
#include "exports/deepseek_gguf_export.h"
#include "runtime/rope.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// The architecture llama.cpp knows the model by; the same rule as ConfigToHfJson.
std::string GgufArchitecture(const ModelConfig& c) {
  if (c.qk_norm) return "qwen3";
  if (c.model_type == "qwen2" && c.qkv_bias) return "qwen2";
  return "llama";
}

}  // namespace

absl::Status AddGgufTokenizer(const Tokenizer& tokenizer, int64_t rows,
                              GgufBuilder* g) {
  ASSIGN_OR_RETURN(GgufVocabulary v, tokenizer.ToGgufVocabulary());
  // llama.cpp wants one token per embedding row: pad as its converter does.
  for (int64_t id = static_cast<int64_t>(v.tokens.size()); id < rows; ++id) {
    v.tokens.push_back(absl::StrCat("[PAD", id, "]"));
    v.types.push_back(static_cast<int32_t>(TokenType::kUnused));
    if (!v.scores.empty()) v.scores.push_back(-1e4f);
  }
  g->AddString("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) g->AddString("tokenizer.ggml.pre", v.pre);
  g->AddStrings("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) g->AddFloat32s("tokenizer.ggml.scores", v.scores);
  g->AddInt32s("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty()) g->AddStrings("tokenizer.ggml.merges", v.merges);
  const SpecialTokens& s = tokenizer.specials();
  if (s.bos_id >= 0) g->AddUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(s.bos_id));
  if (s.eos_id >= 0) g->AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(s.eos_id));
  if (v.unk_id >= 0) {
    g->AddUint32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk_id));
  }
  g->AddBool("tokenizer.ggml.add_bos_token", s.add_bos);
  if (v.model == "llama") g->AddBool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  if (const std::string t = ChatTemplateSource(tokenizer); !t.empty()) {
    g->AddString("tokenizer.chat_template", t);
  }
  return absl::OkStatus();
}

absl::Status CheckGgufExportable(const ModelConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  if (config.kv.DecoupledRope()) return CheckDeepseekGgufExport(config);
  if (config.kv.Factored()) {
    return Invalid(absl::StrCat("a ", KvLayoutName(config.kv.layout),
                                " checkpoint has no GGUF form llama.cpp runs; convert with "
                                "--expand for the plain model it stands for"));
  }
  if (!RopeModeTraitsOf(config.kv.rope_mode).exact) {
    return Invalid("a partial-RoPE conversion has no GGUF form llama.cpp runs");
  }
  if (config.post_norm) {
    return Invalid("OLMo-2 (post-norm blocks, QK-norm over the whole projection) has no "
                   "GGUF export here (llama/qwen2/qwen3 only): use --format safetensors");
  }
  if (!config.nope_layers.empty()) {
    return Invalid("the model has NoPE layers (SmolLM3's no_rope_layers); the GGUF export "
                   "writes llama/qwen2/qwen3 only: use --format safetensors");
  }
  if (config.sliding_window > 0) {
    return Invalid(absl::StrCat("sliding_window ", config.sliding_window,
                                ": llama.cpp's llama architecture attends to the whole "
                                "context, so the GGUF would be another model"));
  }
  const RopeScalingType scaling = config.rope_scaling.type;
  if (scaling == RopeScalingType::kDynamic) {
    return Invalid(absl::StrCat("rope_scaling '", RopeScalingName(scaling),
                                "' is not exported to GGUF (linear, llama3 and yarn are)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufBuilder> GgufExportBuilder(const ModelConfig& config,
                                              const LlamaWeights& weights,
                                              const Tokenizer& tokenizer,
                                              std::vector<at::Tensor>* keep,
                                              DType matrices) {
  RETURN_IF_ERROR(CheckGgufExportable(config));
  if (config.kv.DecoupledRope()) {
    return DeepseekGgufBuilder(config, weights, tokenizer, keep, matrices);
  }
  const RopeScalingType scaling = config.rope_scaling.type;
  const std::string arch = GgufArchitecture(config);
  ModelConfig c = config;
  LlamaWeights w = weights;
  PermuteRopeLayout(&c, &w, arch == "llama" ? RopeLayout::kAdjacent : RopeLayout::kHalfSplit);

  GgufBuilder g;
  auto key = [&](const char* k) { return absl::StrCat(arch, ".", k); };
  g.AddString("general.architecture", arch);
  g.AddString("general.name", "lrkv export");
  // llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32.
  g.AddUint32("general.file_type", matrices == DType::kF16    ? 1
                                   : matrices == DType::kBF16 ? 32
                                                              : 0);
  for (const auto& [name, value] : {std::pair{"context_length", c.max_position_embeddings},
                                     {"embedding_length", c.hidden_size},
                                     {"feed_forward_length", c.intermediate_size},
                                     {"block_count", c.num_layers},
                                     {"attention.head_count", c.num_heads},
                                     {"attention.head_count_kv", c.num_kv_heads},
                                     {"attention.key_length", c.head_dim},
                                     {"attention.value_length", c.head_dim},
                                     {"rope.dimension_count", c.rope_dim}}) {
    g.AddUint32(key(name), static_cast<uint32_t>(value));
  }
  g.AddFloat32(key("rope.freq_base"), static_cast<float>(c.rope_theta));
  g.AddFloat32(key("attention.layer_norm_rms_epsilon"), static_cast<float>(c.rms_norm_eps));
  g.AddUint32(key("vocab_size"), static_cast<uint32_t>(c.vocab_size));
  if (scaling == RopeScalingType::kLlama3) {
    // llama.cpp's form of Llama-3.1's scaling (its convert_hf_to_gguf.py): no scaling
    // keys, a rope_freqs tensor of per-plane divisors of the base frequencies instead.
    const at::Tensor base = at::scalar_tensor(c.rope_theta, at::kDouble)
                                .pow(-at::arange(0, c.rope_dim / 2, at::kDouble) * 2.0 /
                                     static_cast<double>(c.rope_dim));
    keep->push_back((base / RopeInverseFrequencies(c, 0)).to(at::kFloat).contiguous());
    TensorView v;
    v.name = "rope_freqs.weight";
    v.dtype = DType::kF32;
    v.shape = {c.rope_dim / 2};
    v.data = static_cast<const uint8_t*>(keep->back().data_ptr());
    v.nbytes = static_cast<uint64_t>(keep->back().nbytes());
    g.AddTensor(v);
  } else if (scaling != RopeScalingType::kNone) {
    g.AddString(key("rope.scaling.type"), scaling == RopeScalingType::kLinear ? "linear" : "yarn");
    g.AddFloat32(key("rope.scaling.factor"), static_cast<float>(c.rope_scaling.factor));
    if (scaling == RopeScalingType::kYarn) {
      g.AddUint32(key("rope.scaling.original_context_length"),
                  static_cast<uint32_t>(c.rope_scaling.original_max_position_embeddings));
      // llama.cpp multiplies this by 1 + 0.1 ln(factor) itself.
      g.AddFloat32(key("rope.scaling.attn_factor"),
                   static_cast<float>(c.rope_scaling.attention_factor /
                                      (0.1 * std::log(c.rope_scaling.factor) + 1.0)));
    }
  }
  RETURN_IF_ERROR(AddGgufTokenizer(tokenizer, c.vocab_size, &g));

  ASSIGN_OR_RETURN(std::vector<TensorView> views, WeightViews(c, w, keep, matrices));
  for (TensorView& v : views) {
    const std::string name = GgufNameFromCanonical(v.name);
    if (name.empty()) return Invalid(absl::StrCat("tensor '", v.name, "' has no GGUF name"));
    v.name = name;
    g.AddTensor(v);
  }
  return g;
}

absl::Status SaveGgufCheckpoint(const std::string& path, const ModelConfig& config,
                                const LlamaWeights& weights, const Tokenizer& tokenizer,
                                DType matrices) {
  std::vector<at::Tensor> keep;
  ASSIGN_OR_RETURN(GgufBuilder g,
                   GgufExportBuilder(config, weights, tokenizer, &keep, matrices));
  return g.Write(path);
}

}  // namespace lrkv
