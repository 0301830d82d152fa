// Parsing a job's params_json (see job_params.h).
#include "service/job_params.h"

#include <functional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "kernels/decode_bench_options_schema.h"
#include "nlohmann/json.hpp"
#include "runtime/generate_bench_options_schema.h"
#include "study/compare_options_schema.h"
#include "surgery/cache_accounting.h"
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
    auto bench = GenerateBenchOptionSchema().Parse(*b, p.bench,
                                                   OptionSource::kParamsJson);
    if (!bench.ok()) {
      absl::string_view message = bench.status().message();
      absl::ConsumePrefix(&message, "params_json: ");
      return Invalid(absl::StrCat("params_json: bench: ", message));
    }
    p.bench = *std::move(bench);
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
  ASSIGN_OR_RETURN(json j, ParseObject(text));
  ASSIGN_OR_RETURN(kernels::DecodeBenchJobOptions o,
                   kernels::DecodeBenchOptionSchema().Parse(
                       j, {}, OptionSource::kParamsJson));
  o.bench.heads = config.num_heads;
  o.bench.kv_heads = config.num_kv_heads;
  o.bench.head_dim = config.head_dim;
  absl::StatusOr<int64_t> rank = LrkvRankFor(ShapeOf(config), o.rank, o.budget);
  if (!rank.ok()) {
    return Invalid(absl::StrCat("params_json: ", rank.status().message()));
  }
  o.bench.rank = *rank;
  return o.bench;
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
