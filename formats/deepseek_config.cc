// DeepSeek-V2/V3 config.json to a ModelConfig (see deepseek_config.h).
#include "formats/deepseek_config.h"

#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/status_macros.h"

namespace lrkv {
namespace {

using json_fields::BoolField;
using json_fields::IntField;
using json_fields::NumberField;
using nlohmann::json;

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

}  // namespace

bool IsDeepseekConfig(const std::string& architecture,
                      const std::string& model_type) {
  return architecture == "DeepseekV3ForCausalLM" ||
         architecture == "DeepseekV2ForCausalLM" ||
         (architecture.empty() &&
          (model_type == "deepseek_v3" || model_type == "deepseek_v2"));
}

absl::StatusOr<ModelConfig> ConfigFromDeepseekJson(const json& j,
                                                   const std::string& source) {
  ModelConfig c;
  c.model_type =
      "llama";  // what this project writes it back as (its own layout)
  c.deepseek_layout = true;
  ASSIGN_OR_RETURN(c.hidden_size, IntField(j, "hidden_size", source));
  ASSIGN_OR_RETURN(c.intermediate_size,
                   IntField(j, "intermediate_size", source));
  ASSIGN_OR_RETURN(c.num_layers, IntField(j, "num_hidden_layers", source));
  ASSIGN_OR_RETURN(c.num_heads, IntField(j, "num_attention_heads", source));
  ASSIGN_OR_RETURN(c.vocab_size, IntField(j, "vocab_size", source));
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   IntField(j, "max_position_embeddings", source, 2048));
  ASSIGN_OR_RETURN(c.rms_norm_eps,
                   NumberField(j, "rms_norm_eps", source, 1e-6));
  ASSIGN_OR_RETURN(c.rope_theta, NumberField(j, "rope_theta", source, 10000.0));
  ASSIGN_OR_RETURN(c.tie_word_embeddings,
                   BoolField(j, "tie_word_embeddings", source, false));
  ASSIGN_OR_RETURN(const int64_t kv_heads,
                   IntField(j, "num_key_value_heads", source, c.num_heads));
  ASSIGN_OR_RETURN(const int64_t latent, IntField(j, "kv_lora_rank", source));
  ASSIGN_OR_RETURN(const int64_t rope, IntField(j, "qk_rope_head_dim", source));
  ASSIGN_OR_RETURN(const int64_t nope, IntField(j, "qk_nope_head_dim", source));
  ASSIGN_OR_RETURN(const int64_t v_dim, IntField(j, "v_head_dim", source));
  ASSIGN_OR_RETURN(const int64_t dense,
                   IntField(j, "first_k_dense_replace", source, 0));
  ASSIGN_OR_RETURN(const bool latent_norm,
                   BoolField(j, "qk_latent_layernorm", source, true));
  ASSIGN_OR_RETURN(const bool interleave,
                   BoolField(j, "rope_interleave", source, true));
  ASSIGN_OR_RETURN(const bool bias,
                   BoolField(j, "attention_bias", source, false));
  auto refuse = [&](const std::string& field, const std::string& why) {
    return Invalid(absl::StrCat(source, ": field '", field, "' ", why));
  };
  if (auto q = j.find("q_lora_rank"); q != j.end() && !q->is_null()) {
    return refuse("q_lora_rank",
                  "is set: a low-rank query (q_a_proj) is not supported");
  }
  if (dense < c.num_layers && j.value("n_routed_experts", json()).is_number()) {
    return refuse(
        "first_k_dense_replace",
        absl::StrCat("= ", dense,
                     ": layers from there on are MoE, not supported"));
  }
  if (!interleave)
    return refuse("rope_interleave", "is false: only interleaved pairs");
  if (bias) return refuse("attention_bias", "is true: not supported");
  if (kv_heads != c.num_heads) {
    return refuse("num_key_value_heads",
                  "must equal num_attention_heads in DeepSeek MLA");
  }
  if (v_dim != nope) return refuse("v_head_dim", "must equal qk_nope_head_dim");
  if (rope <= 0 || rope % 2 != 0 || rope > nope) {
    return refuse("qk_rope_head_dim",
                  "must be even, positive and at most qk_nope_head_dim");
  }
  if (auto act = j.value("hidden_act", std::string("silu")); act != "silu") {
    return refuse("hidden_act", absl::StrCat("is '", act, "'; only 'silu'"));
  }
  if (auto r = j.find("rope_scaling"); r != j.end() && !r->is_null()) {
    const json type =
        r->contains("rope_type") ? (*r)["rope_type"] : r->value("type", json());
    if (!type.is_string() || type.get<std::string>() != "linear") {
      return refuse("rope_scaling",
                    absl::StrCat("= ", r->dump(), ": only linear scaling"));
    }
    c.rope_scaling.type = RopeScalingType::kLinear;
    ASSIGN_OR_RETURN(c.rope_scaling.factor,
                     NumberField(*r, "factor", source, 1.0));
  }
  c.num_kv_heads = c.num_heads;
  c.head_dim = nope;
  c.rope_dim = rope;
  c.rope_layout = RopeLayout::kHalfSplit;
  c.kv.layout = KvLayout::kMla;
  c.kv.latent = latent;
  c.kv.rope_mode = RopeMode::kPartial;
  c.kv.rope_planes_kept = rope / 2;
  // DeepSeek always normalises the latent (kv_a_layernorm); only TransMLA's
  // loaders read qk_latent_layernorm, which its norm-free checkpoints set
  // false.
  c.kv.latent_norm = latent_norm;
  if (auto b = j.find("bos_token_id"); b != j.end() && b->is_number_integer()) {
    c.bos_token_id = b->get<int64_t>();
  }
  if (auto e = j.find("eos_token_id"); e != j.end() && !e->is_null()) {
    for (const auto& id : e->is_array() ? *e : json::array({*e})) {
      if (id.is_number_integer()) c.eos_token_ids.push_back(id.get<int64_t>());
    }
  }
  if (auto s = c.Validate(); !s.ok())
    return Invalid(absl::StrCat(source, ": ", s.message()));
  return c;
}

absl::StatusOr<ModelConfig> ConfigFromDeepseekGguf(const GgufContents& g) {
  const std::string source = "deepseek2 GGUF";
  auto key = [](const char* k) { return absl::StrCat("deepseek2.", k); };
  json j = {{"num_key_value_heads", nullptr}};
  // DeepSeek config.json field <- GGUF key; required unless a default is given.
  struct Field {
    const char* hf;
    const char* gguf;
    bool required;
  };
  static constexpr Field kFields[] = {
      {"hidden_size", "embedding_length", true},
      {"intermediate_size", "feed_forward_length", true},
      {"num_hidden_layers", "block_count", true},
      {"num_attention_heads", "attention.head_count", true},
      {"max_position_embeddings", "context_length", false},
      {"kv_lora_rank", "attention.kv_lora_rank", true},
      {"qk_rope_head_dim", "rope.dimension_count", true},
      {"v_head_dim", "attention.value_length_mla", true},
      {"first_k_dense_replace", "leading_dense_block_count", false},
      {"vocab_size", "vocab_size", false}};
  for (const Field& f : kFields) {
    auto v = GgufUint(g, key(f.gguf));
    if (v.ok()) {
      j[f.hf] = *v;
    } else if (f.required || !absl::IsNotFound(v.status())) {
      return Invalid(absl::StrCat(source, ": ", v.status().message()));
    }
  }
  ASSIGN_OR_RETURN(const uint64_t key_mla,
                   GgufUint(g, key("attention.key_length_mla")));
  j["qk_nope_head_dim"] =
      static_cast<int64_t>(key_mla) - j["qk_rope_head_dim"].get<int64_t>();
  j["num_key_value_heads"] = j["num_attention_heads"];
  if (auto q = GgufUint(g, key("attention.q_lora_rank")); q.ok() && *q > 0) {
    j["q_lora_rank"] = *q;
  }
  if (auto e = GgufUint(g, key("expert_count")); e.ok() && *e > 0) {
    j["n_routed_experts"] = *e;
    if (!j.contains("first_k_dense_replace")) j["first_k_dense_replace"] = 0;
  }
  if (auto eps = GgufFloat(g, key("attention.layer_norm_rms_epsilon"));
      eps.ok()) {
    j["rms_norm_eps"] = *eps;
  }
  if (auto theta = GgufFloat(g, key("rope.freq_base")); theta.ok()) {
    j["rope_theta"] = *theta;
  }
  if (auto type = GgufString(g, key("rope.scaling.type"));
      type.ok() && *type != "none") {
    auto factor = GgufFloat(g, key("rope.scaling.factor"));
    j["rope_scaling"] = {{"rope_type", *type},
                         {"factor", factor.ok() ? *factor : 1.0}};
  }
  bool has_output = false;
  for (const auto& t : g.tensors) {
    has_output = has_output || t.name == "output.weight";
    if (t.name == "token_embd.weight" && t.shape.size() == 2 &&
        !j.contains("vocab_size")) {
      j["vocab_size"] = t.shape[0];
    }
  }
  j["tie_word_embeddings"] = !has_output;
  if (auto v = GgufUint(g, "tokenizer.ggml.bos_token_id"); v.ok())
    j["bos_token_id"] = *v;
  if (auto v = GgufUint(g, "tokenizer.ggml.eos_token_id"); v.ok())
    j["eos_token_id"] = *v;
  return ConfigFromDeepseekJson(j, source);
}

}  // namespace lrkv
