// Shared tokenizer.json component helpers (see tokenizer_json.h).
#include "tokenizer/tokenizer_json.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace lrkv {

using nlohmann::json;

absl::StatusOr<std::string> ComponentType(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected an object with a 'type', got ", j.dump()));
  }
  return j["type"].get<std::string>();
}

absl::Status ForEachListed(
    const json& j, const char* field, const std::string& where,
    const std::function<absl::Status(const json&, const std::string&)>& add) {
  const auto it = j.find(field);
  if (it == j.end() || !it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " (Sequence): '", field, "' must be a list"));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    RETURN_IF_ERROR(add((*it)[i], absl::StrCat(where, ".", field, "[", i, "]")));
  }
  return absl::OkStatus();
}

absl::StatusOr<Regex> PatternFromJson(const json& j, const std::string& where) {
  if (j.is_object() && j.size() == 1) {
    if (auto s = j.find("String"); s != j.end() && s->is_string()) {
      return Regex::Literal(s->get<std::string>());
    }
    if (auto r = j.find("Regex"); r != j.end() && r->is_string()) {
      auto re = Regex::Create(r->get<std::string>());
      if (!re.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", re.status().message()));
      }
      return re;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": pattern must be {\"String\": ...} or {\"Regex\": ...}, got ", j.dump()));
}

std::vector<TextSpan> SpansOf(std::string_view text,
                              const std::vector<std::pair<size_t, size_t>>& matches) {
  std::vector<TextSpan> spans;
  size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) spans.push_back({pos, b, false});
    spans.push_back({b, e, true});
    pos = e;
  }
  if (pos < text.size()) spans.push_back({pos, text.size(), false});
  return spans;
}

std::string ReplaceAll(std::string_view text, const Regex& pattern, const std::string& content) {
  std::string out;
  for (const TextSpan& span : SpansOf(text, pattern.FindAll(text))) {
    if (span.is_match) {
      out += content;
    } else {
      out.append(text.substr(span.begin, span.end - span.begin));
    }
  }
  return out;
}

}  // namespace lrkv
