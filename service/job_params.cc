// Parsing a job's params_json (see job_params.h).
#include "service/job_params.h"

#include <functional>
#include <set>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "study/compare_options_schema.h"
#include "surgery/convert_options_schema.h"
#include "train/heal_options_schema.h"
#include "verify/verify_options_schema.h"

namespace lrkv::service {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

// InvalidArgument naming the first key of object `j` that is not in `known`.
absl::Status CheckKnownKeys(const json& j, const std::set<std::string>& known,
                            const std::string& where) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (known.count(it.key()) == 0) {
      return Invalid(absl::StrCat(where, "unknown parameter '", it.key(),
                                  "'; valid: ", absl::StrJoin(known, ", ")));
    }
  }
  return absl::OkStatus();
}

// params_json as an object, without the record of the configuration file it
// came from; the names are checked by `known` when given, else by the kind's
// option schema.
absl::StatusOr<json> ParseObject(const std::string& text,
                                 const std::set<std::string>& known = {}) {
  ASSIGN_OR_RETURN(json j, ParseParamsJson(text));
  if (!j.is_object()) return Invalid("params_json must be a JSON object");
  // The configuration file the parameters came from (`lrkv compare -f
  // study.yaml`), kept with the job as submitted: {"name": ..., "text": ...};
  // no parameter of its own.
  if (auto it = j.find(kConfigFileKey); it != j.end()) {
    if (!it->is_object() || !it->contains("text") ||
        !(*it)["text"].is_string()) {
      return Invalid(absl::StrCat("params_json: '", kConfigFileKey,
                                  "' must be {\"name\": ..., \"text\": ...}"));
    }
    j.erase(it);
  }
  if (!known.empty())
    RETURN_IF_ERROR(CheckKnownKeys(j, known, "params_json: "));
  return j;
}

// Whether `v` is a T exactly: an integer parameter given 2.7 or -1 for an
// unsigned one is refused, not truncated or wrapped.
template <typename T>
bool HasType(const json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    return v.is_number_unsigned();
  } else if constexpr (std::is_integral_v<T>) {
    return v.is_number_integer();
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else {
    if (!v.is_array()) return false;
    for (const auto& e : v) {
      if (!HasType<typename T::value_type>(e)) return false;
    }
    return true;
  }
}

template <typename T>
absl::Status Read(const json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return absl::OkStatus();
  if (!HasType<T>(*it)) {
    std::string shown = it->dump();
    if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
    return Invalid(absl::StrCat("params_json: '", key, "' has the wrong type (",
                                shown, ")"));
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ConvertJobOptions> ParseConvertParams(
    const std::string& text, const std::string& checkpoint,
    const std::string& out_dir) {
  ASSIGN_OR_RETURN(json j, ParseObject(text));
  ConvertJobOptions base;
  base.checkpoint = checkpoint;
  base.out_dir = out_dir;
  return ConvertOptionSchema().Parse(j, std::move(base),
                                     OptionSource::kParamsJson);
}

absl::StatusOr<VerifyJobOptions> ParseVerifyParams(
    const std::string& text, const std::string& checkpoint) {
  ASSIGN_OR_RETURN(json j, ParseObject(text));
  VerifyJobOptions base;
  base.checkpoint = checkpoint;
  return VerifyOptionSchema().Parse(j, std::move(base),
                                    OptionSource::kParamsJson);
}

absl::StatusOr<HealJobOptions> ParseHealParams(const std::string& text,
                                               const std::string& checkpoint,
                                               const std::string& out_dir) {
  ASSIGN_OR_RETURN(json j, ParseObject(text));
  HealJobOptions base;
  base.checkpoint = checkpoint;
  base.out_dir = out_dir;
  return HealOptionSchema().Parse(j, std::move(base),
                                  OptionSource::kParamsJson);
}

absl::StatusOr<PipelineParams> ParsePipelineParams(const std::string& text) {
  ASSIGN_OR_RETURN(json j,
                   ParseObject(text, {"convert", "heal", "verify", "bench"}));
  PipelineParams p;
  for (const char* key : {"convert", "heal", "verify"}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_object())
      return Invalid(
          absl::StrCat("params_json: '", key, "' must be an object"));
    (key == std::string("convert") ? p.convert_json
     : key == std::string("heal")  ? p.heal_json
                                   : p.verify_json) = it->dump();
  }
  if (auto b = j.find("bench"); b != j.end()) {
    if (!b->is_object())
      return Invalid("params_json: 'bench' must be an object");
    RETURN_IF_ERROR(
        CheckKnownKeys(*b, {"context", "tokens"}, "params_json: bench: "));
    RETURN_IF_ERROR(Read(*b, "context", &p.bench_context));
    RETURN_IF_ERROR(Read(*b, "tokens", &p.bench_tokens));
    // Their ranges are `lrkv bench generate`'s, checked by
    // ValidateGenerateBenchOptions against the model at submission.
  }
  // Each stage's parameters are checked the way a single job of that kind is.
  RETURN_IF_ERROR(ParseConvertParams(p.convert_json, "", "").status());
  if (!p.heal_json.empty())
    RETURN_IF_ERROR(ParseHealParams(p.heal_json, "", "").status());
  RETURN_IF_ERROR(ParseVerifyParams(p.verify_json, "").status());
  return p;
}

absl::StatusOr<kernels::DecodeBenchOptions> ParseBenchParams(
    const std::string& text, const ModelConfig& config) {
  ASSIGN_OR_RETURN(
      json j, ParseObject(text, {"rank", "budget", "batch", "context", "dtype",
                                 "threads", "iterations"}));
  kernels::DecodeBenchOptions o;
  o.heads = config.num_heads;
  o.kv_heads = config.num_kv_heads;
  o.head_dim = config.head_dim;
  o.rank = -1;
  o.iterations = 9;
  double budget = 0.5;
  std::string dtype = "bf16";
  RETURN_IF_ERROR(Read(j, "rank", &o.rank));
  RETURN_IF_ERROR(Read(j, "budget", &budget));
  RETURN_IF_ERROR(Read(j, "batch", &o.batch));
  RETURN_IF_ERROR(Read(j, "context", &o.contexts));
  RETURN_IF_ERROR(Read(j, "dtype", &dtype));
  RETURN_IF_ERROR(Read(j, "threads", &o.threads));
  RETURN_IF_ERROR(Read(j, "iterations", &o.iterations));
  if (dtype != "bf16" && dtype != "fp32") {
    return Invalid(absl::StrCat("params_json: 'dtype' '", dtype,
                                "' must be bf16 or fp32"));
  }
  o.dtype =
      dtype == "bf16" ? kernels::CacheDType::kBF16 : kernels::CacheDType::kF32;
  if (o.batch < 1 || o.batch > 256) {
    return Invalid(absl::StrCat("params_json: 'batch' ", o.batch,
                                " must lie in [1, 256]"));
  }
  if (o.iterations < 1 || o.iterations > 1000) {
    return Invalid(absl::StrCat("params_json: 'iterations' ", o.iterations,
                                " must lie in [1, 1000]"));
  }
  if (o.threads < 0 || o.threads > 1024) {
    return Invalid(absl::StrCat("params_json: 'threads' ", o.threads,
                                " must lie in [0, 1024]"));
  }
  if (o.contexts.empty())
    return Invalid("params_json: 'context' must list at least one length");
  for (int64_t l : o.contexts) {
    if (l < 1 || l > (1 << 22)) {
      return Invalid(absl::StrCat("params_json: 'context' ", l,
                                  " must lie in [1, 4194304]"));
    }
  }
  if (o.rank == -1) {
    AttentionShape shape;
    shape.heads = config.num_heads;
    shape.kv_heads = config.num_kv_heads;
    shape.head_dim = config.head_dim;
    ASSIGN_OR_RETURN(KvConfig planned,
                     PlanForBudget(shape, KvVariant::kLrkv, budget));
    o.rank = planned.rank;
  } else if (o.rank < 0 || o.rank > config.head_dim) {
    return Invalid(absl::StrCat("params_json: 'rank' ", o.rank,
                                " must lie in [0, ", config.head_dim,
                                "] (the head dimension)"));
  }
  return o;
}

absl::StatusOr<CompareJobOptions> ParseCompareParams(
    const std::string& text, const std::string& checkpoint,
    const std::string& work_dir) {
  ASSIGN_OR_RETURN(json j, ParseObject(text));
  CompareJobOptions base;
  base.checkpoint = checkpoint;
  base.work_dir = work_dir;
  return CompareOptionSchema().Parse(j, std::move(base),
                                     OptionSource::kParamsJson);
}

}  // namespace lrkv::service
