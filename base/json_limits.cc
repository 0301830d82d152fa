// Bounded JSON parsing (see json_limits.h).
#include "base/json_limits.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/utf8.h"

namespace lrkv {

absl::Status CheckJsonText(std::string_view text, const JsonLimits& limits,
                           const std::string& what) {
  if (text.size() > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", text.size(),
                                                   " bytes exceed the limit of ",
                                                   limits.max_bytes, " bytes"));
  }
  size_t bad = 0;
  if (!IsValidUtf8(text, &bad)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": invalid UTF-8 at byte ", bad, " (JSON text is UTF-8)"));
  }
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a NUL byte at byte ", i, " (JSON text holds none)"));
    }
    if (in_string) {
      if (c == '"') {
        in_string = false;
      } else if (c == '\\' && i + 1 < text.size()) {
        if (limits.refuse_nul_escapes && text.compare(i + 1, 5, "u0000") == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": a string holds \\u0000 at byte ", i,
              " (a NUL would cut a path or name short and name another file)"));
        }
        ++i;  // the escaped character cannot end the string
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > limits.max_depth) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": nested deeper than the limit of ",
                                                       limits.max_depth, " levels (at byte ",
                                                       i, ")"));
      }
    } else if (c == '}' || c == ']') {
      --depth;  // unbalanced text is the parser's to refuse
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ParseJsonBounded(std::string_view text, const JsonLimits& limits,
                                                const std::string& what) {
  using nlohmann::json;
  if (absl::Status st = CheckJsonText(text, limits, what); !st.ok()) return st;
  // Keys seen per open object; only kept when duplicates are refused.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const json::parser_callback_t on_event = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end && !keys.empty()) {
      keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty() && duplicate.empty() &&
               !keys.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j;
  try {
    j = limits.refuse_duplicate_keys ? json::parse(text.begin(), text.end(), on_event)
                                     : json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has duplicate entry '", duplicate,
                     "': a key is given twice in one object"));
  }
  return j;
}

}  // namespace lrkv
