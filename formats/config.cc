// The architecture description of a Llama-family decoder, read from HF
// config.json or GGUF metadata, validated, and written back as config.json.
#include "formats/config.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/json_limits.h"
#include "base/status_macros.h"
#include "formats/deepseek_config.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

using json_fields::BoolField;
using json_fields::IntField;
using json_fields::NumberField;
using nlohmann::json;

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

absl::Status Positive(const char* field, int64_t v) {
  if (v <= 0) return Invalid(absl::StrCat(field, " must be positive, got ", v));
  return absl::OkStatus();
}

struct ArchInfo {
  const char* architecture;
  const char* model_type;
};
constexpr ArchInfo kArchitectures[] = {
    {"LlamaForCausalLM", "llama"},     {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},     {"MistralForCausalLM", "mistral"},
    {"SmolLM3ForCausalLM", "smollm3"}, {"Olmo2ForCausalLM", "olmo2"},
};

}  // namespace

const char* RopeScalingName(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone:
      return "default";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kDynamic:
      return "dynamic";
    case RopeScalingType::kLlama3:
      return "llama3";
    case RopeScalingType::kYarn:
      return "yarn";
  }
  return "?";
}

namespace {

double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// config.json's rope_scaling object. `max_positions` is the config's
// max_position_embeddings (yarn derives its factor from it, as transformers
// does when original_max_position_embeddings is given).
absl::StatusOr<RopeScaling> ParseRopeScaling(const json& r,
                                             int64_t max_positions,
                                             const std::string& source) {
  RopeScaling s;
  if (!r.is_object()) {
    return Invalid(absl::StrCat(
        source, ": field 'rope_scaling' must be an object, got ", r.dump()));
  }
  const json type_field =
      r.contains("rope_type") ? r["rope_type"] : r.value("type", json());
  const std::string type =
      type_field.is_string() ? type_field.get<std::string>() : "";
  const std::string where = absl::StrCat(source, ": field 'rope_scaling");
  if (type == "default") return s;
  if (type == "linear") {
    s.type = RopeScalingType::kLinear;
  } else if (type == "dynamic") {
    s.type = RopeScalingType::kDynamic;
  } else if (type == "llama3") {
    s.type = RopeScalingType::kLlama3;
  } else if (type == "yarn") {
    s.type = RopeScalingType::kYarn;
  } else {
    return Invalid(
        absl::StrCat(where, ".rope_type' is ", type_field.dump(),
                     ": not supported (supported: default, linear, dynamic, "
                     "llama3, yarn)"));
  }
  auto number = [&](const char* f, double fallback,
                    bool required) -> absl::StatusOr<double> {
    auto it = r.find(f);
    if (it == r.end() || it->is_null()) {
      if (required)
        return Invalid(absl::StrCat(where, ".", f, "' is required by ", type));
      return fallback;
    }
    if (!it->is_number())
      return Invalid(absl::StrCat(where, ".", f, "' must be a number"));
    return it->get<double>();
  };
  ASSIGN_OR_RETURN(s.factor, number("factor", 1.0, true));
  if (!(s.factor >= 1.0) || s.factor > 1e6) {
    return Invalid(absl::StrCat(where, ".factor' is ", s.factor,
                                "; it must lie in [1, 1e6]"));
  }
  const bool needs_original = s.type == RopeScalingType::kLlama3;
  ASSIGN_OR_RETURN(double original, number("original_max_position_embeddings",
                                           0, needs_original));
  s.original_max_position_embeddings = static_cast<int64_t>(original);
  if (s.type == RopeScalingType::kLlama3) {
    ASSIGN_OR_RETURN(s.low_freq_factor, number("low_freq_factor", 1.0, true));
    ASSIGN_OR_RETURN(s.high_freq_factor, number("high_freq_factor", 4.0, true));
    if (!(s.high_freq_factor > s.low_freq_factor) || !(s.low_freq_factor > 0) ||
        s.original_max_position_embeddings <= 0) {
      return Invalid(absl::StrCat(
          where,
          "': llama3 needs 0 < low_freq_factor < "
          "high_freq_factor and original_max_position_embeddings > 0"));
    }
  }
  if (s.type == RopeScalingType::kYarn) {
    if (s.original_max_position_embeddings > 0) {
      s.factor = static_cast<double>(max_positions) /
                 s.original_max_position_embeddings;
    } else {
      s.original_max_position_embeddings = max_positions;
    }
    ASSIGN_OR_RETURN(s.beta_fast, number("beta_fast", 32.0, false));
    ASSIGN_OR_RETURN(s.beta_slow, number("beta_slow", 1.0, false));
    ASSIGN_OR_RETURN(s.mscale, number("mscale", 0.0, false));
    ASSIGN_OR_RETURN(s.mscale_all_dim, number("mscale_all_dim", 0.0, false));
    s.truncate = r.value("truncate", true);
    if (auto af = r.find("attention_factor"); af != r.end() && !af->is_null()) {
      ASSIGN_OR_RETURN(s.attention_factor,
                       number("attention_factor", 1.0, true));
      s.attention_factor_given = true;
    } else if (s.mscale != 0 && s.mscale_all_dim != 0) {
      s.attention_factor = YarnMscale(s.factor, s.mscale) /
                           YarnMscale(s.factor, s.mscale_all_dim);
    } else {
      s.attention_factor = YarnMscale(s.factor, 1.0);
    }
  }
  return s;
}

json RopeScalingToJson(const RopeScaling& s, int64_t max_positions) {
  json j = {{"rope_type", RopeScalingName(s.type)}, {"factor", s.factor}};
  switch (s.type) {
    case RopeScalingType::kLlama3:
      j["low_freq_factor"] = s.low_freq_factor;
      j["high_freq_factor"] = s.high_freq_factor;
      j["original_max_position_embeddings"] =
          s.original_max_position_embeddings;
      break;
    case RopeScalingType::kYarn:
      if (s.original_max_position_embeddings != max_positions) {
        j["original_max_position_embeddings"] =
            s.original_max_position_embeddings;
      }
      j["beta_fast"] = s.beta_fast;
      j["beta_slow"] = s.beta_slow;
      if (!s.truncate) j["truncate"] = false;
      if (s.attention_factor_given) j["attention_factor"] = s.attention_factor;
      if (s.mscale != 0) j["mscale"] = s.mscale;
      if (s.mscale_all_dim != 0) j["mscale_all_dim"] = s.mscale_all_dim;
      break;
    default:
      break;
  }
  return j;
}

}  // namespace

const char* RopeLayoutName(RopeLayout layout) {
  return layout == RopeLayout::kHalfSplit ? "half-split" : "adjacent";
}

const char* KvLayoutName(KvLayout layout) {
  constexpr const char* kNames[] = {"dense", "lrkv", "mla"};
  return kNames[static_cast<int>(layout)];
}

const RopeModeTraits& RopeModeTraitsOf(RopeMode mode) {
  // In RopeMode order.
  static constexpr RopeModeTraits kModes[] = {
      {RopeMode::kReconstruct, "reconstruct", true, false, false, false, false},
      {RopeMode::kPlane, "plane", true, true, true, false, false},
      {RopeMode::kPartial, "partial", false, true, false, false, true},
      {RopeMode::kSharedPlane, "shared-plane", true, true, true, true, false},
  };
  return kModes[static_cast<int>(mode)];
}

const char* RopeModeName(RopeMode mode) { return RopeModeTraitsOf(mode).name; }

absl::StatusOr<RopeMode> ParseRopeMode(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (RopeMode m : {RopeMode::kReconstruct, RopeMode::kPlane,
                     RopeMode::kPartial, RopeMode::kSharedPlane}) {
    if (lower == RopeModeName(m)) return m;
  }
  return Invalid(
      absl::StrCat("unknown RoPE mode '", name,
                   "'; valid: reconstruct, plane, partial, shared-plane"));
}

bool ModelConfig::IsEos(int64_t id) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), id) !=
         eos_token_ids.end();
}

absl::Status ModelConfig::Validate() const {
  RETURN_IF_ERROR(Positive("hidden_size", hidden_size));
  RETURN_IF_ERROR(Positive("intermediate_size", intermediate_size));
  RETURN_IF_ERROR(Positive("num_hidden_layers", num_layers));
  RETURN_IF_ERROR(Positive("num_attention_heads", num_heads));
  RETURN_IF_ERROR(Positive("num_key_value_heads", num_kv_heads));
  RETURN_IF_ERROR(Positive("head_dim", head_dim));
  RETURN_IF_ERROR(Positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(Positive("max_position_embeddings", max_position_embeddings));
  if (sliding_window < 0) {
    return Invalid(
        absl::StrCat("sliding_window must be >= 0, got ", sliding_window));
  }
  if (!nope_layers.empty() &&
      static_cast<int64_t>(nope_layers.size()) != num_layers) {
    return Invalid(
        absl::StrCat("no_rope_layers lists ", nope_layers.size(),
                     " layers for num_hidden_layers = ", num_layers));
  }
  if (num_heads % num_kv_heads != 0) {
    return Invalid(absl::StrCat("num_key_value_heads (", num_kv_heads,
                                ") must divide num_attention_heads (",
                                num_heads, ")"));
  }
  if (rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
    return Invalid(
        absl::StrCat("rope dimension ", rope_dim,
                     " must be even and within [0, head_dim=", head_dim, "]"));
  }
  if (!(rms_norm_eps > 0) || rms_norm_eps > 1) {
    return Invalid(
        absl::StrCat("rms_norm_eps must be in (0, 1], got ", rms_norm_eps));
  }
  if (!(rope_theta > 1)) {
    return Invalid(absl::StrCat("rope_theta must be > 1, got ", rope_theta));
  }
  if (kv.layout == KvLayout::kLrkv && (kv.rank < 0 || kv.rank > head_dim)) {
    return Invalid(absl::StrCat("lrkv rank ", kv.rank,
                                " must lie in [0, head_dim=", head_dim, "]"));
  }
  if (kv.layout == KvLayout::kMla &&
      (kv.latent < 1 || kv.latent > 2 * num_kv_heads * head_dim)) {
    return Invalid(absl::StrCat("mla latent ", kv.latent, " must lie in [1, ",
                                2 * num_kv_heads * head_dim, "]"));
  }
  if (kv.rope_mode == RopeMode::kSharedPlane &&
      (kv.layout != KvLayout::kLrkv || qk_norm || qkv_bias ||
       !kv.layer_sizes.empty() || (num_kv_heads * kv.rank) % 2 != 0)) {
    return Invalid(
        "rope_mode shared-plane is for LRKV models without QK-norm, biases or "
        "per-layer ranks, with H_kv·r even (r/2 planes per head, shared)");
  }
  if (kv.layout == KvLayout::kMla && kv.rope_mode == RopeMode::kPlane) {
    return Invalid(
        "mla rope_mode must be reconstruct or partial (plane mode is LRKV's)");
  }
  if (deepseek_layout && !kv.DecoupledRope()) {
    return Invalid("the DeepSeek layout holds MLA with decoupled RoPE only");
  }
  if (kv.DecoupledRope() && qk_norm) {
    return Invalid(
        "mla with decoupled RoPE (rope_mode partial) needs a model without "
        "QK-norm: the "
        "DeepSeek layout normalises no key, and a norm over the latent and the "
        "shared "
        "RoPE key together cannot be factored");
  }
  if (!kv.layer_sizes.empty()) {
    if (kv.layout == KvLayout::kDense ||
        static_cast<int64_t>(kv.layer_sizes.size()) != num_layers) {
      return Invalid(absl::StrCat("layer_sizes has ", kv.layer_sizes.size(),
                                  " entries; it needs one per layer (",
                                  num_layers, ") of an lrkv or mla model"));
    }
    const bool lrkv = kv.layout == KvLayout::kLrkv;
    const int64_t lo = lrkv ? 0 : 1,
                  hi = lrkv ? head_dim : 2 * num_kv_heads * head_dim;
    int64_t largest = 0;
    for (size_t i = 0; i < kv.layer_sizes.size(); ++i) {
      if (kv.layer_sizes[i] < lo || kv.layer_sizes[i] > hi) {
        return Invalid(absl::StrCat(
            "layer ", i, ": ", lrkv ? "lrkv rank " : "mla latent ",
            kv.layer_sizes[i], " must lie in [", lo, ", ", hi, "]"));
      }
      largest = std::max(largest, kv.layer_sizes[i]);
    }
    if (largest != (lrkv ? kv.rank : kv.latent)) {
      return Invalid(
          absl::StrCat(lrkv ? "rank " : "latent ", lrkv ? kv.rank : kv.latent,
                       " must be the largest of layer_sizes (", largest, ")"));
    }
  }
  if (kv.latent_norm && !kv.DecoupledRope()) {
    return Invalid(
        absl::StrCat("latent_norm applies to MLA with decoupled RoPE (layout "
                     "mla, rope_mode partial); "
                     "this model is ",
                     KvLayoutName(kv.layout), " with rope mode ",
                     RopeModeName(kv.rope_mode)));
  }
  if (kv.rope_mode == RopeMode::kPartial &&
      (kv.rope_planes_kept < 0 || kv.rope_planes_kept > rope_dim / 2)) {
    return Invalid(absl::StrCat("rope_planes_kept ", kv.rope_planes_kept,
                                " must lie in [0, ", rope_dim / 2, "]"));
  }
  const int64_t limit = int64_t{1} << 24;
  if (hidden_size > limit || intermediate_size > limit || vocab_size > limit ||
      num_layers > 4096 || num_heads * head_dim > limit) {
    return Invalid(
        "model dimensions are implausibly large (a field exceeds 2^24)");
  }
  return absl::OkStatus();
}

namespace {

// The model_type of a supported architecture (the `architectures` entry, or
// `model_type` alone when there is none).
absl::StatusOr<std::string> KnownModelType(const std::string& arch,
                                           const std::string& model_type,
                                           const std::string& source) {
  std::string known;
  for (const auto& info : kArchitectures) {
    if (arch == info.architecture ||
        (arch.empty() && model_type == info.model_type)) {
      known = info.model_type;
    }
  }
  if (!known.empty()) return known;
  return Invalid(absl::StrCat(
      source, ": unsupported architecture (field 'architectures' = '", arch,
      "', 'model_type' = '", model_type,
      "'); supported: LlamaForCausalLM, MistralForCausalLM, "
      "Qwen2ForCausalLM, "
      "Qwen3ForCausalLM, SmolLM3ForCausalLM, Olmo2ForCausalLM, and (MLA with "
      "decoupled "
      "RoPE, as lrkv exports it) DeepseekV3ForCausalLM"));
}

// bos_token_id (one) and eos_token_id (one or a list).
absl::Status ReadSpecialTokenIds(const json& j, const std::string& source,
                                 ModelConfig* c) {
  if (auto b = j.find("bos_token_id"); b != j.end() && !b->is_null()) {
    if (!b->is_number_integer() || b->get<int64_t>() < 0) {
      return Invalid(
          absl::StrCat(source,
                       ": field 'bos_token_id' must be a non-negative "
                       "integer, got ",
                       b->dump()));
    }
    c->bos_token_id = b->get<int64_t>();
  }
  if (auto e = j.find("eos_token_id"); e != j.end() && !e->is_null()) {
    const json list = e->is_array() ? *e : json::array({*e});
    for (const auto& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        return Invalid(
            absl::StrCat(source,
                         ": field 'eos_token_id' must be a non-negative "
                         "integer or a list of them, got ",
                         e->dump()));
      }
      c->eos_token_ids.push_back(id.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

// SmolLM3's NoPE layers: no_rope_layers[i] = 1 where layer i uses RoPE;
// transformers derives it from no_rope_layer_interval (every interval-th layer
// is NoPE) when it is absent.
absl::Status ReadNopeLayers(const json& j, const std::string& source,
                            ModelConfig* c) {
  ASSIGN_OR_RETURN(const int64_t interval,
                   IntField(j, "no_rope_layer_interval", source, 4));
  std::vector<int64_t> uses(c->num_layers);
  if (auto n = j.find("no_rope_layers"); n != j.end() && !n->is_null()) {
    if (!n->is_array() || static_cast<int64_t>(n->size()) != c->num_layers) {
      return Invalid(
          absl::StrCat(source,
                       ": field 'no_rope_layers' must list one 0/1 per "
                       "layer (",
                       c->num_layers, "), got ", n->dump()));
    }
    for (int64_t i = 0; i < c->num_layers; ++i) {
      const json& v = (*n)[i];
      if (!v.is_number_integer() ||
          (v.get<int64_t>() != 0 && v.get<int64_t>() != 1)) {
        return Invalid(absl::StrCat(source, ": field 'no_rope_layers[", i,
                                    "]' must be 0 or 1, got ", v.dump()));
      }
      uses[i] = v.get<int64_t>();
    }
  } else {
    if (interval <= 0) {
      return Invalid(absl::StrCat(source,
                                  ": field 'no_rope_layer_interval' must be "
                                  "positive, got ",
                                  interval));
    }
    for (int64_t i = 0; i < c->num_layers; ++i)
      uses[i] = (i + 1) % interval != 0;
  }
  c->nope_layers.resize(c->num_layers);
  for (int64_t i = 0; i < c->num_layers; ++i) c->nope_layers[i] = uses[i] == 0;
  return absl::OkStatus();
}

// The `lrkv_kv` object our exporter writes for converted (LRKV / MLA)
// checkpoints.
absl::Status ReadConvertedKv(const json& kv_json, const std::string& source,
                             KvCompression* kv_out) {
  if (!kv_json.is_object())
    return Invalid(absl::StrCat(source, ": 'lrkv_kv' is not an object"));
  const std::string layout = kv_json.value("layout", std::string("dense"));
  if (layout == "lrkv") {
    kv_out->layout = KvLayout::kLrkv;
  } else if (layout == "mla") {
    kv_out->layout = KvLayout::kMla;
  } else if (layout != "dense") {
    return Invalid(absl::StrCat(source, ": field 'lrkv_kv.layout' is '", layout,
                                "'; valid: dense, lrkv, mla"));
  }
  ASSIGN_OR_RETURN(kv_out->rank, IntField(kv_json, "rank", source, 0));
  ASSIGN_OR_RETURN(kv_out->latent, IntField(kv_json, "latent", source, 0));
  ASSIGN_OR_RETURN(kv_out->rope_planes_kept,
                   IntField(kv_json, "rope_planes_kept", source, 0));
  ASSIGN_OR_RETURN(kv_out->latent_norm,
                   BoolField(kv_json, "latent_norm", source, false));
  if (auto sizes = kv_json.find("layer_sizes"); sizes != kv_json.end()) {
    if (!sizes->is_array()) {
      return Invalid(absl::StrCat(
          source, ": field 'lrkv_kv.layer_sizes' is not an array"));
    }
    for (const auto& x : *sizes) {
      if (!x.is_number_integer()) {
        return Invalid(absl::StrCat(source,
                                    ": field 'lrkv_kv.layer_sizes' holds ",
                                    x.dump(), ", not an integer"));
      }
      kv_out->layer_sizes.push_back(x.get<int64_t>());
    }
  }
  auto mode =
      ParseRopeMode(kv_json.value("rope_mode", std::string("reconstruct")));
  if (!mode.ok())
    return Invalid(absl::StrCat(source, ": ", mode.status().message()));
  kv_out->rope_mode = *mode;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ConfigFromHfJson(const std::string& json_text,
                                             const std::string& source) {
  ASSIGN_OR_RETURN(json j,
                   ParseJsonBounded(json_text, kFileJsonLimits, source));
  if (!j.is_object())
    return Invalid(absl::StrCat(source, ": not a JSON object"));
  ModelConfig c;
  std::string arch;
  if (auto a = j.find("architectures");
      a != j.end() && a->is_array() && !a->empty() && (*a)[0].is_string()) {
    arch = (*a)[0].get<std::string>();
  }
  std::string model_type = j.value("model_type", std::string());
  if (IsDeepseekConfig(arch, model_type))
    return ConfigFromDeepseekJson(j, source);
  ASSIGN_OR_RETURN(c.model_type, KnownModelType(arch, model_type, source));
  ASSIGN_OR_RETURN(c.hidden_size, IntField(j, "hidden_size", source));
  ASSIGN_OR_RETURN(c.intermediate_size,
                   IntField(j, "intermediate_size", source));
  ASSIGN_OR_RETURN(c.num_layers, IntField(j, "num_hidden_layers", source));
  ASSIGN_OR_RETURN(c.num_heads, IntField(j, "num_attention_heads", source));
  ASSIGN_OR_RETURN(c.num_kv_heads,
                   IntField(j, "num_key_value_heads", source, c.num_heads));
  ASSIGN_OR_RETURN(c.vocab_size, IntField(j, "vocab_size", source));
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   IntField(j, "max_position_embeddings", source, 2048));
  if (c.num_heads <= 0) {
    return Invalid(
        absl::StrCat(source, ": num_attention_heads must be positive"));
  }
  ASSIGN_OR_RETURN(
      c.head_dim, IntField(j, "head_dim", source, c.hidden_size / c.num_heads));
  ASSIGN_OR_RETURN(c.rms_norm_eps,
                   NumberField(j, "rms_norm_eps", source, 1e-6));
  ASSIGN_OR_RETURN(c.rope_theta, NumberField(j, "rope_theta", source, 10000.0));
  ASSIGN_OR_RETURN(c.tie_word_embeddings,
                   BoolField(j, "tie_word_embeddings", source, false));
  ASSIGN_OR_RETURN(c.qkv_bias, BoolField(j, "attention_bias", source,
                                         c.model_type == "qwen2"));
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "olmo2";
  c.qk_norm_over_heads = c.post_norm = c.model_type == "olmo2";
  c.rope_dim = c.head_dim;
  c.rope_layout = RopeLayout::kHalfSplit;
  RETURN_IF_ERROR(ReadSpecialTokenIds(j, source, &c));
  if (auto r = j.find("rope_scaling"); r != j.end() && !r->is_null()) {
    ASSIGN_OR_RETURN(c.rope_scaling,
                     ParseRopeScaling(*r, c.max_position_embeddings, source));
  }
  // Settings the runtime does not implement are refused rather than ignored.
  if (auto act = j.value("hidden_act", std::string("silu")); act != "silu") {
    return Invalid(absl::StrCat(source, ": field 'hidden_act' is '", act,
                                "'; only 'silu' (SwiGLU) is supported"));
  }
  if (c.model_type == "mistral") {
    ASSIGN_OR_RETURN(c.sliding_window,
                     IntField(j, "sliding_window", source, 0));
  }
  if (j.value("use_sliding_window", false)) {
    return Invalid(absl::StrCat(
        source, ": field 'use_sliding_window' = true is not supported"));
  }
  if (c.model_type == "smollm3") RETURN_IF_ERROR(ReadNopeLayers(j, source, &c));
  if (auto pr = j.find("partial_rotary_factor");
      pr != j.end() && pr->is_number()) {
    c.rope_dim = static_cast<int64_t>(pr->get<double>() * c.head_dim) / 2 * 2;
  }
  if (auto kv = j.find("lrkv_kv"); kv != j.end()) {
    RETURN_IF_ERROR(ReadConvertedKv(*kv, source, &c.kv));
  }
  auto status = c.Validate();
  if (!status.ok())
    return Invalid(absl::StrCat(source, ": ", status.message()));
  return c;
}

double Llama3InverseFrequency(const RopeScaling& s, double inv_freq) {
  const double old_len =
      static_cast<double>(s.original_max_position_embeddings);
  const double wavelen = 2.0 * M_PI / inv_freq;
  if (wavelen < old_len / s.high_freq_factor) return inv_freq;
  if (wavelen > old_len / s.low_freq_factor) return inv_freq / s.factor;
  const double smooth = (old_len / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

// llama.cpp stores Llama-3.1's RoPE scaling as rope_freqs.weight: per plane,
// the divisor f_i of the base frequency (1 above the high-frequency edge,
// `factor` below the low one, 1/((1-s)/factor + s) between, s linear in
// 1/wavelength). Recovers the HF parameters from the curve (low_freq_factor
// taken as 1, as every Llama-3.x sets it; only the ratios original/low and
// original/high are determined) and checks that they reproduce every divisor,
// so that one representation (kLlama3) serves both formats.
absl::Status Llama3ScalingFromFactors(const TensorView& t, ModelConfig* c) {
  const int64_t half = c->rope_dim / 2;
  if (t.dtype != DType::kF32 || t.shape != std::vector<int64_t>{half} ||
      t.data == nullptr) {
    return Invalid(absl::StrCat("tensor 'rope_freqs.weight' must be F32 [",
                                half, "] (rope.dimension_count / 2), got ",
                                ShapeString(t.shape)));
  }
  std::vector<double> f(half);
  for (int64_t i = 0; i < half; ++i) {
    float v;
    std::memcpy(&v, t.data + 4 * i, 4);
    f[i] = v;
  }
  const double factor = *std::max_element(f.begin(), f.end());
  auto fail = [&](const std::string& why) {
    return Invalid(absl::StrCat(
        "tensor 'rope_freqs.weight' is not Llama-3's RoPE scaling curve (", why,
        "); lrkv reads llama3-style frequency factors only"));
  };
  if (!(factor >= 1.0) || !std::isfinite(factor))
    return fail("divisors must be finite and >= 1");
  // s_i = a / wavelength_i + b over the planes between the edges (least
  // squares).
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int64_t i = 0; i < half; ++i) {
    const double rel = std::abs(f[i] - 1.0),
                 rel_low = std::abs(f[i] / factor - 1.0);
    if (rel < 1e-6 || rel_low < 1e-6) continue;
    const double x =
        std::pow(c->rope_theta, -2.0 * i / c->rope_dim) / (2.0 * M_PI);
    const double y = (1.0 / f[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  RopeScaling& r = c->rope_scaling;
  r.type = RopeScalingType::kLlama3;
  r.factor = factor;
  r.low_freq_factor = 1.0;
  if (factor == 1.0) {
    r.type = RopeScalingType::kNone;
  } else if (n >= 2 && n * sxx - sx * sx > 0) {
    const double a = (n * sxy - sx * sy) / (n * sxx - sx * sx),
                 b = (sy - a * sx) / n;
    // s = (L/wavelength - lo) / (hi - lo) with lo = 1: L = a (hi - lo), b = -lo
    // / (hi - lo).
    if (!(b < 0))
      return fail("the interpolated band does not fall with the wavelength");
    const double span = -1.0 / b;
    r.high_freq_factor = 1.0 + span;
    r.original_max_position_embeddings = std::llround(a * span);
  } else {
    // Too few planes inside the band to fit it: Meta's published values,
    // checked below.
    r.high_freq_factor = 4.0;
    r.original_max_position_embeddings = 8192;
  }
  for (int64_t i = 0; i < half; ++i) {
    const double base = std::pow(c->rope_theta, -2.0 * i / c->rope_dim);
    const double want = base / Llama3InverseFrequency(r, base);
    if (std::abs(want - f[i]) > 1e-5 * want) {
      return fail(absl::StrCat("plane ", i, ": ", f[i],
                               ", the fitted curve gives ", want));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufContents& g) {
  ASSIGN_OR_RETURN(std::string arch, GgufString(g, "general.architecture"));
  if (arch == "deepseek2") return ConfigFromDeepseekGguf(g);
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3") {
    return Invalid(
        absl::StrCat("unsupported architecture (metadata "
                     "'general.architecture' = '",
                     arch, "'); supported: llama, qwen2, qwen3, deepseek2"));
  }
  ModelConfig c;
  // Every architecture's hyperparameters sit under its own name:
  // "qwen3.block_count".
  auto key = [&](const char* k) { return absl::StrCat(arch, ".", k); };
  auto get_int = [&](const char* k, int64_t* out,
                     bool required) -> absl::Status {
    auto v = GgufUint(g, key(k));
    if (!v.ok() && !required && absl::IsNotFound(v.status()))
      return absl::OkStatus();
    if (!v.ok()) return Invalid(std::string(v.status().message()));
    *out = static_cast<int64_t>(*v);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(get_int("embedding_length", &c.hidden_size, true));
  RETURN_IF_ERROR(get_int("feed_forward_length", &c.intermediate_size, true));
  RETURN_IF_ERROR(get_int("block_count", &c.num_layers, true));
  RETURN_IF_ERROR(get_int("attention.head_count", &c.num_heads, true));
  c.num_kv_heads = c.num_heads;
  RETURN_IF_ERROR(get_int("attention.head_count_kv", &c.num_kv_heads, false));
  RETURN_IF_ERROR(get_int("context_length", &c.max_position_embeddings, false));
  if (c.num_heads <= 0)
    return Invalid(
        absl::StrCat(key("attention.head_count"), " must be positive"));
  c.head_dim = c.hidden_size / c.num_heads;
  RETURN_IF_ERROR(get_int("attention.key_length", &c.head_dim, false));
  c.rope_dim = c.head_dim;
  RETURN_IF_ERROR(get_int("rope.dimension_count", &c.rope_dim, false));
  if (auto eps = GgufFloat(g, key("attention.layer_norm_rms_epsilon"));
      eps.ok()) {
    c.rms_norm_eps = *eps;
  }
  if (auto theta = GgufFloat(g, key("rope.freq_base")); theta.ok())
    c.rope_theta = *theta;
  if (auto type = GgufString(g, key("rope.scaling.type"));
      type.ok() && *type != "none") {
    // llama.cpp's own names; llama3 scaling comes as a rope_freqs tensor
    // instead.
    if (*type != "linear" && *type != "yarn") {
      return Invalid(
          absl::StrCat("metadata '", key("rope.scaling.type"), "' = '", *type,
                       "' is not supported (supported: none, linear, yarn)"));
    }
    auto factor = GgufFloat(g, key("rope.scaling.factor"));
    if (!factor.ok() || !(*factor >= 1.0)) {
      return Invalid(absl::StrCat("metadata '", key("rope.scaling.factor"),
                                  "' must be a number >= 1 with rope scaling"));
    }
    c.rope_scaling.type =
        *type == "linear" ? RopeScalingType::kLinear : RopeScalingType::kYarn;
    c.rope_scaling.factor = *factor;
    if (c.rope_scaling.type == RopeScalingType::kYarn) {
      auto orig = GgufUint(g, key("rope.scaling.original_context_length"));
      c.rope_scaling.original_max_position_embeddings =
          orig.ok() ? static_cast<int64_t>(*orig) : c.max_position_embeddings;
      // llama.cpp multiplies its attn_factor (default 1) by yarn's 1 + 0.1
      // ln(factor).
      c.rope_scaling.attention_factor = YarnMscale(*factor, 1.0);
      if (auto af = GgufFloat(g, key("rope.scaling.attn_factor")); af.ok()) {
        c.rope_scaling.attention_factor *= *af;
        c.rope_scaling.attention_factor_given = true;
      }
    }
  }
  for (const auto& t : g.tensors) {
    if (t.name == "rope_freqs.weight")
      RETURN_IF_ERROR(Llama3ScalingFromFactors(t, &c));
  }
  // llama.cpp permutes Q/K rows of `llama` models into adjacent pairs; Qwen
  // models keep the Hugging Face (NeoX) half-split layout.
  c.rope_layout =
      arch == "llama" ? RopeLayout::kAdjacent : RopeLayout::kHalfSplit;
  c.model_type = arch;
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  bool has_output = false;
  for (const auto& t : g.tensors) {
    if (t.name == "token_embd.weight" && t.shape.size() == 2)
      c.vocab_size = t.shape[0];
    has_output = has_output || t.name == "output.weight";
  }
  c.tie_word_embeddings = !g.tensors.empty() && !has_output;
  if (c.vocab_size == 0) {
    if (auto it = g.metadata.find("tokenizer.ggml.tokens");
        it != g.metadata.end()) {
      c.vocab_size = static_cast<int64_t>(it->second.array.size());
    }
  }
  if (auto v = GgufUint(g, key("vocab_size")); v.ok()) c.vocab_size = *v;
  if (auto v = GgufUint(g, "tokenizer.ggml.bos_token_id"); v.ok())
    c.bos_token_id = *v;
  if (auto v = GgufUint(g, "tokenizer.ggml.eos_token_id"); v.ok())
    c.eos_token_ids = {static_cast<int64_t>(*v)};
  RETURN_IF_ERROR(c.Validate());
  return c;
}

std::string ConfigToHfJson(const ModelConfig& c,
                           const std::string& torch_dtype) {
  // The architecture follows the features: only Qwen3 has QK-norm, and Qwen2
  // always has q/k/v biases; Llama takes biases through attention_bias.
  const ArchInfo& info = c.post_norm ? kArchitectures[5]
                         : c.qk_norm ? kArchitectures[2]
                         : (c.model_type == "qwen2" && c.qkv_bias)
                             ? kArchitectures[1]
                         : c.sliding_window > 0   ? kArchitectures[3]
                         : !c.nope_layers.empty() ? kArchitectures[4]
                                                  : kArchitectures[0];
  const char* arch = info.architecture;
  json j = {
      {"architectures", {arch}},
      {"model_type", info.model_type},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.qkv_bias},
      {"bos_token_id", c.bos_token_id >= 0 ? json(c.bos_token_id) : json()},
      {"eos_token_id", c.eos_token_ids.empty()       ? json()
                       : c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0])
                                                     : json(c.eos_token_ids)},
      {"torch_dtype", torch_dtype},
  };
  if (c.kv.layout != KvLayout::kDense || c.kv.rope_mode == RopeMode::kPartial) {
    j["lrkv_kv"] = {{"layout", KvLayoutName(c.kv.layout)},
                    {"rank", c.kv.rank},
                    {"latent", c.kv.latent},
                    {"rope_mode", RopeModeName(c.kv.rope_mode)},
                    {"rope_planes_kept", c.kv.rope_planes_kept}};
    if (!c.kv.layer_sizes.empty())
      j["lrkv_kv"]["layer_sizes"] = c.kv.layer_sizes;
    if (c.kv.latent_norm) j["lrkv_kv"]["latent_norm"] = true;
  }
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (!c.nope_layers.empty()) {
    json uses = json::array();
    for (bool nope : c.nope_layers) uses.push_back(nope ? 0 : 1);
    j["no_rope_layers"] = uses;
    j["use_sliding_window"] = false;
  }
  if (c.rope_scaling.type != RopeScalingType::kNone) {
    j["rope_scaling"] =
        RopeScalingToJson(c.rope_scaling, c.max_position_embeddings);
  }
  if (c.rope_dim != c.head_dim) {
    j["partial_rotary_factor"] = static_cast<double>(c.rope_dim) / c.head_dim;
  }
  return j.dump(2) + "\n";
}

}  // namespace lrkv
