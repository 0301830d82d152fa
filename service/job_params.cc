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

namespace lrkv::service {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

// The names a heal job's params_json may use (the `lrkv heal` options).
const std::set<std::string> kHealParams = {
    "teacher",   "data",  "data_range",  "eval",       "eval_range", "steps",
    "batch",     "accum", "seq_len",     "lr",         "warmup",     "clip",
    "trainable", "loss",  "temperature", "eval_every", "seed",      "activation_checkpointing",
    "keep_best"};

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

absl::StatusOr<json> ParseObject(const std::string& text,
                                 const std::set<std::string>& known) {
  ASSIGN_OR_RETURN(json j, ParseParamsJson(text));
  if (!j.is_object()) return Invalid("params_json must be a JSON object");
  // The configuration file the parameters came from (`lrkv compare -f study.yaml`), kept
  // with the job as submitted: {"name": ..., "text": ...}; no parameter of its own.
  if (auto it = j.find(kConfigFileKey); it != j.end()) {
    if (!it->is_object() || !it->contains("text") || !(*it)["text"].is_string()) {
      return Invalid(absl::StrCat("params_json: '", kConfigFileKey,
                                  "' must be {\"name\": ..., \"text\": ...}"));
    }
    j.erase(it);
  }
  RETURN_IF_ERROR(CheckKnownKeys(j, known, "params_json: "));
  return j;
}

// Whether `v` is a T exactly: an integer parameter given 2.7 or -1 for an unsigned one
// is refused, not truncated or wrapped.
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
    return Invalid(absl::StrCat("params_json: '", key, "' has the wrong type (", shown, ")"));
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ConvertJobOptions> ParseConvertParams(
    const std::string& text, const std::string& checkpoint,
    const std::string& out_dir) {
  ASSIGN_OR_RETURN(
      json j,
      ParseObject(text, {"variant", "rank", "kv_heads", "latent", "budget",
                         "metric", "rope_mode", "rope_planes", "iters",
                         "tol", "damping", "allocation", "allocation_objective",
                         "allocation_tokens", "calib", "calib_range", "calib_tokens",
                         "eval", "eval_range", "expand", "weight_dtype", "max_shard_size"}));
  ConvertJobOptions o;
  o.checkpoint = checkpoint;
  o.out_dir = out_dir;
  std::string variant = "lrkv", metric = "weight", mode = "reconstruct";
  std::string calib_range = "0:1", eval_range = "0:1";
  ConversionOptions& c = o.conversion;
  RETURN_IF_ERROR(Read(j, "variant", &variant));
  RETURN_IF_ERROR(Read(j, "rank", &c.rank));
  RETURN_IF_ERROR(Read(j, "kv_heads", &c.kv_heads));
  RETURN_IF_ERROR(Read(j, "latent", &c.latent));
  RETURN_IF_ERROR(Read(j, "budget", &c.budget));
  RETURN_IF_ERROR(Read(j, "metric", &metric));
  RETURN_IF_ERROR(Read(j, "rope_mode", &mode));
  RETURN_IF_ERROR(Read(j, "rope_planes", &c.rope_planes_kept));
  RETURN_IF_ERROR(Read(j, "iters", &c.max_iters));
  RETURN_IF_ERROR(Read(j, "tol", &c.tol));
  std::string allocation = "uniform";
  RETURN_IF_ERROR(Read(j, "allocation", &allocation));
  ASSIGN_OR_RETURN(c.allocation, ParseSizeAllocation(allocation));
  std::string objective = "auto";
  RETURN_IF_ERROR(Read(j, "allocation_objective", &objective));
  ASSIGN_OR_RETURN(c.allocation_objective, ParseAllocationObjective(objective));
  RETURN_IF_ERROR(Read(j, "allocation_tokens", &o.allocation_tokens));
  RETURN_IF_ERROR(Read(j, "damping", &c.damping));
  RETURN_IF_ERROR(Read(j, "calib", &o.calib_path));
  RETURN_IF_ERROR(Read(j, "calib_range", &calib_range));
  RETURN_IF_ERROR(Read(j, "calib_tokens", &o.calib_tokens));
  RETURN_IF_ERROR(Read(j, "eval", &o.eval_path));
  RETURN_IF_ERROR(Read(j, "eval_range", &eval_range));
  RETURN_IF_ERROR(Read(j, "expand", &o.expand));
  RETURN_IF_ERROR(Read(j, "weight_dtype", &o.weight_dtype));
  RETURN_IF_ERROR(Read(j, "max_shard_size", &o.max_shard_bytes));
  ASSIGN_OR_RETURN(c.variant, ParseKvVariant(variant));
  ASSIGN_OR_RETURN(c.metric, ParseSurgeryMetric(metric));
  ASSIGN_OR_RETURN(c.rope_mode, ParseRopeMode(mode));
  ASSIGN_OR_RETURN(o.calib_range, ParseDocumentRange(calib_range));
  ASSIGN_OR_RETURN(o.eval_range, ParseDocumentRange(eval_range));
  return o;
}

absl::StatusOr<VerifyJobOptions> ParseVerifyParams(
    const std::string& text, const std::string& checkpoint) {
  ASSIGN_OR_RETURN(
      json j,
      ParseObject(text, {"source", "rope_modes", "prompt_tokens",
                         "decode_tokens", "dtype", "text", "fidelity_tokens"}));
  VerifyJobOptions o;
  o.checkpoint = checkpoint;
  RETURN_IF_ERROR(Read(j, "source", &o.source));
  RETURN_IF_ERROR(Read(j, "rope_modes", &o.modes));
  RETURN_IF_ERROR(Read(j, "prompt_tokens", &o.prompt_tokens));
  RETURN_IF_ERROR(Read(j, "decode_tokens", &o.decode_tokens));
  RETURN_IF_ERROR(Read(j, "dtype", &o.dtype));
  RETURN_IF_ERROR(Read(j, "text", &o.text));
  RETURN_IF_ERROR(Read(j, "fidelity_tokens", &o.fidelity_tokens));
  return o;
}

absl::StatusOr<HealJobOptions> ParseHealParams(const std::string& text,
                                               const std::string& checkpoint,
                                               const std::string& out_dir) {
  ASSIGN_OR_RETURN(json j, ParseObject(text, kHealParams));
  HealJobOptions o;
  o.checkpoint = checkpoint;
  o.out_dir = out_dir;
  std::string data_range = "0:1", eval_range = "0:1", trainable = "kv",
              loss = "kd";
  HealOptions& h = o.heal;
  RETURN_IF_ERROR(Read(j, "data", &o.data));
  RETURN_IF_ERROR(Read(j, "data_range", &data_range));
  RETURN_IF_ERROR(Read(j, "eval", &o.eval));
  RETURN_IF_ERROR(Read(j, "eval_range", &eval_range));
  RETURN_IF_ERROR(Read(j, "steps", &h.steps));
  RETURN_IF_ERROR(Read(j, "batch", &h.batch));
  RETURN_IF_ERROR(Read(j, "accum", &h.grad_accum));
  RETURN_IF_ERROR(Read(j, "seq_len", &o.seq_len));
  RETURN_IF_ERROR(Read(j, "lr", &h.lr));
  RETURN_IF_ERROR(Read(j, "warmup", &h.warmup));
  RETURN_IF_ERROR(Read(j, "clip", &h.clip));
  RETURN_IF_ERROR(Read(j, "trainable", &trainable));
  RETURN_IF_ERROR(Read(j, "loss", &loss));
  RETURN_IF_ERROR(Read(j, "temperature", &h.temperature));
  RETURN_IF_ERROR(Read(j, "eval_every", &h.eval_every));
  RETURN_IF_ERROR(Read(j, "keep_best", &h.keep_best));
  RETURN_IF_ERROR(Read(j, "activation_checkpointing", &h.activation_checkpointing));
  RETURN_IF_ERROR(Read(j, "seed", &h.seed));
  if (o.data.empty())
    return Invalid("params_json: 'data' (training text) is required");
  ASSIGN_OR_RETURN(o.data_range, ParseDocumentRange(data_range));
  ASSIGN_OR_RETURN(o.eval_range, ParseDocumentRange(eval_range));
  ASSIGN_OR_RETURN(h.trainable, ParseTrainableSet(trainable));
  ASSIGN_OR_RETURN(h.loss, ParseHealLoss(loss));
  RETURN_IF_ERROR(h.Validate());
  return o;
}

absl::StatusOr<std::string> HealTeacherId(const std::string& text) {
  ASSIGN_OR_RETURN(json j, ParseObject(text, kHealParams));
  std::string id;
  RETURN_IF_ERROR(Read(j, "teacher", &id));
  return id;
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
    RETURN_IF_ERROR(CheckKnownKeys(*b, {"context", "tokens"}, "params_json: bench: "));
    RETURN_IF_ERROR(Read(*b, "context", &p.bench_context));
    RETURN_IF_ERROR(Read(*b, "tokens", &p.bench_tokens));
    // Their ranges are `lrkv bench generate`'s, checked by ValidateGenerateBenchOptions
    // against the model at submission.
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
  ASSIGN_OR_RETURN(
      json j, ParseObject(text, {"label", "budget", "variants", "rope_mode",
                                 "calib", "calib_range", "heal_steps", "data",
                                 "data_range", "heal_batch", "heal_seq_len",
                                 "heal_lr", "heal_warmup", "eval", "eval_range",
                                 "kl_tokens", "context", "timed_tokens", "allocation"}));
  CompareJobOptions o;
  o.checkpoint = checkpoint;
  o.work_dir = work_dir;
  std::string calib_range = "0:1", data_range = "0:1", eval_range = "0:1";
  RETURN_IF_ERROR(Read(j, "label", &o.label));
  RETURN_IF_ERROR(Read(j, "budget", &o.budgets));
  RETURN_IF_ERROR(Read(j, "variants", &o.variants));
  RETURN_IF_ERROR(Read(j, "rope_mode", &o.rope_modes));
  RETURN_IF_ERROR(Read(j, "calib", &o.calib));
  RETURN_IF_ERROR(Read(j, "calib_range", &calib_range));
  RETURN_IF_ERROR(Read(j, "heal_steps", &o.heal_steps));
  RETURN_IF_ERROR(Read(j, "data", &o.data));
  RETURN_IF_ERROR(Read(j, "data_range", &data_range));
  RETURN_IF_ERROR(Read(j, "heal_batch", &o.heal_batch));
  RETURN_IF_ERROR(Read(j, "heal_seq_len", &o.heal_seq_len));
  RETURN_IF_ERROR(Read(j, "heal_lr", &o.heal_lr));
  RETURN_IF_ERROR(Read(j, "heal_warmup", &o.heal_warmup));
  RETURN_IF_ERROR(Read(j, "eval", &o.eval));
  RETURN_IF_ERROR(Read(j, "eval_range", &eval_range));
  RETURN_IF_ERROR(Read(j, "kl_tokens", &o.kl_tokens));
  RETURN_IF_ERROR(Read(j, "context", &o.contexts));
  RETURN_IF_ERROR(Read(j, "timed_tokens", &o.timed_tokens));
  std::string allocation = "uniform";
  RETURN_IF_ERROR(Read(j, "allocation", &allocation));
  ASSIGN_OR_RETURN(o.allocation, ParseSizeAllocation(allocation));
  ASSIGN_OR_RETURN(o.calib_range, ParseDocumentRange(calib_range));
  ASSIGN_OR_RETURN(o.data_range, ParseDocumentRange(data_range));
  ASSIGN_OR_RETURN(o.eval_range, ParseDocumentRange(eval_range));
  if (o.eval.empty())
    return Invalid("params_json: 'eval' (held-out text) is required");
  if (o.budgets.empty()) return Invalid("params_json: 'budget' lists no budget");
  for (double b : o.budgets) {
    if (!(b > 0 && b <= 1)) {
      return Invalid(absl::StrCat("params_json: 'budget' ", b, " must lie in (0, 1]"));
    }
  }
  if (o.variants.empty()) return Invalid("params_json: 'variants' lists no variant");
  for (const auto& v : o.variants) {
    if (v != "gqa" && v != "mqa" && v != "mla" && v != "lrkv") {
      return Invalid(absl::StrCat("params_json: variant '", v, "' must be gqa, mqa, mla or lrkv"));
    }
  }
  for (const auto& m : o.rope_modes) {
    if (m != "plane" && m != "reconstruct" && m != "partial" && m != "shared-plane") {
      return Invalid(absl::StrCat("params_json: rope_mode '", m,
                                  "' must be plane, reconstruct, partial or shared-plane"));
    }
  }
  auto in_range = [](const char* key, int64_t v, int64_t lo, int64_t hi) {
    return v < lo || v > hi ? Invalid(absl::StrCat("params_json: '", key, "' ", v,
                                                   " must lie in [", lo, ", ", hi, "]"))
                            : absl::OkStatus();
  };
  RETURN_IF_ERROR(in_range("heal_steps", o.heal_steps, 0, 1'000'000));
  RETURN_IF_ERROR(in_range("heal_batch", o.heal_batch, 1, 65536));
  RETURN_IF_ERROR(in_range("heal_seq_len", o.heal_seq_len, 2, 1 << 20));
  RETURN_IF_ERROR(in_range("heal_warmup", o.heal_warmup, 0, 1'000'000));
  RETURN_IF_ERROR(in_range("kl_tokens", o.kl_tokens, 1, 1 << 24));
  RETURN_IF_ERROR(in_range("timed_tokens", o.timed_tokens, 1, 100'000));
  for (int64_t c : o.contexts) RETURN_IF_ERROR(in_range("context", c, 1, 1 << 20));
  if (o.heal_steps > 0 && o.data.empty()) {
    return Invalid("params_json: 'heal_steps' > 0 needs 'data' (training text)");
  }
  if (!(o.heal_lr > 0 && o.heal_lr <= 1)) {
    return Invalid(absl::StrCat("params_json: 'heal_lr' ", o.heal_lr, " must lie in (0, 1]"));
  }
  return o;
}

}  // namespace lrkv::service
