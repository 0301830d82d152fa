#include "serve/openai_request.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/json_limits.h"
#include "base/status_macros.h"

namespace lrkv {
namespace {

using json_fields::BoolField;
using json_fields::NumberField;
using nlohmann::json;

constexpr char kSource[] = "request";
// The most prompts one /v1/completions request may batch.
constexpr size_t kMaxPrompts = 64;
// The most stop sequences (the OpenAI API's limit) and their longest length.
constexpr size_t kMaxStops = 4;
constexpr size_t kMaxStopBytes = 256;

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "' ", what));
}

// An optional integer field in [lo, hi]; `fallback` when absent or null.
absl::StatusOr<int64_t> IntIn(const json& j, const char* field, int64_t lo,
                              int64_t hi, int64_t fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return Invalid(field, "must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return Invalid(field,
                   absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
  }
  return v;
}

absl::Status RefuseUnsupported(const json& j) {
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    auto it = j.find(penalty);
    if (it != j.end() && !it->is_null() &&
        !(it->is_number() && it->get<double>() == 0)) {
      return Invalid(penalty, "is not supported (only 0)");
    }
  }
  auto bias = j.find("logit_bias");
  if (bias != j.end() && !bias->is_null() &&
      !(bias->is_object() && bias->empty())) {
    return Invalid("logit_bias", "is not supported");
  }
  ASSIGN_OR_RETURN(int64_t n, IntIn(j, "n", 1, 1, 1));
  (void)n;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> StopField(const json& j) {
  std::vector<std::string> stops;
  auto it = j.find("stop");
  if (it == j.end() || it->is_null()) return stops;
  if (it->is_string()) {
    stops.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > kMaxStops) {
      return Invalid("stop",
                     absl::StrCat("takes at most ", kMaxStops, " sequences"));
    }
    for (const json& s : *it) {
      if (!s.is_string())
        return Invalid("stop", "must be a string or a list of strings");
      stops.push_back(s.get<std::string>());
    }
  } else {
    return Invalid("stop", "must be a string or a list of strings");
  }
  for (const std::string& s : stops) {
    if (s.size() > kMaxStopBytes) {
      return Invalid("stop", absl::StrCat("sequences are at most ",
                                          kMaxStopBytes, " bytes"));
    }
  }
  return stops;
}

// The fields both endpoints share; `max_tokens_fallback` when none is given.
absl::StatusOr<GenerationParams> ParamsOf(const json& j,
                                          int64_t max_tokens_fallback) {
  GenerationParams p;
  auto model = j.find("model");
  if (model == j.end() || model->is_null())
    return Invalid("model", "is required");
  if (!model->is_string()) return Invalid("model", "must be a string");
  p.model = model->get<std::string>();
  RETURN_IF_ERROR(RefuseUnsupported(j));
  const char* max_field = j.contains("max_completion_tokens")
                              ? "max_completion_tokens"
                              : "max_tokens";
  ASSIGN_OR_RETURN(p.max_tokens, IntIn(j, max_field, 0, int64_t{1} << 30,
                                       max_tokens_fallback));
  ASSIGN_OR_RETURN(p.sampling.temperature,
                   NumberField(j, "temperature", kSource, 1.0));
  ASSIGN_OR_RETURN(p.sampling.top_p, NumberField(j, "top_p", kSource, 1.0));
  ASSIGN_OR_RETURN(p.sampling.top_k, IntIn(j, "top_k", 0, int64_t{1} << 30, 0));
  if (auto s = p.sampling.Validate(); !s.ok())
    return absl::InvalidArgumentError(s.message());
  auto seed = j.find("seed");
  if (seed != j.end() && !seed->is_null()) {
    if (!seed->is_number_integer())
      return Invalid("seed", "must be an integer");
    p.sampling.seed = seed->is_number_unsigned()
                          ? seed->get<uint64_t>()
                          : static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    p.sampling.seed = std::random_device{}();
  }
  ASSIGN_OR_RETURN(p.stop, StopField(j));
  ASSIGN_OR_RETURN(p.stream, BoolField(j, "stream", kSource, false));
  ASSIGN_OR_RETURN(p.ignore_eos, BoolField(j, "ignore_eos", kSource, false));
  auto options = j.find("stream_options");
  if (options != j.end() && !options->is_null()) {
    if (!options->is_object())
      return Invalid("stream_options", "must be an object");
    ASSIGN_OR_RETURN(p.include_usage,
                     BoolField(*options, "include_usage", kSource, false));
  }
  return p;
}

absl::StatusOr<std::vector<int32_t>> TokenIds(const json& list) {
  std::vector<int32_t> ids;
  for (const json& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > INT32_MAX) {
      return Invalid("prompt", "token ids must be non-negative integers");
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

// prompt: a string, a list of strings, a list of token ids, or a list of such
// lists.
absl::StatusOr<std::vector<CompletionPrompt>> PromptsOf(const json& j) {
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) return Invalid("prompt", "is required");
  const char* kinds = "must be a string, a list of strings, or token ids";
  std::vector<CompletionPrompt> prompts;
  if (it->is_string()) {
    prompts.push_back({it->get<std::string>(), {}, false});
    return prompts;
  }
  if (!it->is_array() || it->empty()) return Invalid("prompt", kinds);
  if ((*it)[0].is_number()) {
    ASSIGN_OR_RETURN(auto ids, TokenIds(*it));
    prompts.push_back({"", std::move(ids), true});
    return prompts;
  }
  if (it->size() > kMaxPrompts) {
    return Invalid("prompt",
                   absl::StrCat("takes at most ", kMaxPrompts, " prompts"));
  }
  for (const json& p : *it) {
    if (p.is_string()) {
      prompts.push_back({p.get<std::string>(), {}, false});
    } else if (p.is_array() && !p.empty()) {
      ASSIGN_OR_RETURN(auto ids, TokenIds(p));
      prompts.push_back({"", std::move(ids), true});
    } else {
      return Invalid("prompt", kinds);
    }
  }
  return prompts;
}

absl::StatusOr<json> BodyObject(std::string_view body) {
  ASSIGN_OR_RETURN(
      json j, ParseJsonBounded(body, kRequestJsonLimits, "the request body"));
  if (!j.is_object())
    return absl::InvalidArgumentError("the request body must be a JSON object");
  return j;
}

// Text of a chat message's content: a string, or a list of {"type": "text"}
// parts.
absl::StatusOr<std::string> ContentOf(const json& m, size_t index) {
  const std::string field = absl::StrCat("messages[", index, "].content");
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    return Invalid(field, "must be a string or a list of text parts");
  std::string text;
  for (const json& part : *it) {
    if (!part.is_object() || part.value("type", "") != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      return Invalid(
          field,
          "parts must be {\"type\": \"text\", \"text\": ...} (text only)");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(
    std::string_view body) {
  ASSIGN_OR_RETURN(json j, BodyObject(body));
  CompletionRequest r;
  ASSIGN_OR_RETURN(r.params, ParamsOf(j, 16));
  ASSIGN_OR_RETURN(r.prompts, PromptsOf(j));
  ASSIGN_OR_RETURN(r.echo, BoolField(j, "echo", kSource, false));
  // Completions: logprobs is the number of alternatives (0-5), null for none.
  ASSIGN_OR_RETURN(int64_t logprobs, IntIn(j, "logprobs", 0, 5, -1));
  r.params.logprobs = logprobs >= 0;
  r.params.top_logprobs = std::max<int64_t>(logprobs, 0);
  return r;
}

absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body) {
  ASSIGN_OR_RETURN(json j, BodyObject(body));
  ChatRequest r;
  ASSIGN_OR_RETURN(r.params, ParamsOf(j, -1));
  ASSIGN_OR_RETURN(r.params.logprobs, BoolField(j, "logprobs", kSource, false));
  ASSIGN_OR_RETURN(r.params.top_logprobs, IntIn(j, "top_logprobs", 0, 20, 0));
  auto messages = j.find("messages");
  if (messages == j.end() || !messages->is_array() || messages->empty()) {
    return Invalid("messages", "must be a non-empty list");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return Invalid(absl::StrCat("messages[", i, "]"),
                     "must be an object with a string 'role'");
    }
    ASSIGN_OR_RETURN(std::string content, ContentOf(m, i));
    r.messages.push_back({m["role"].get<std::string>(), std::move(content)});
  }
  return r;
}

}  // namespace lrkv
