// A job's params_json as the client sent it (see params_json.h).
#include "service/params_json.h"

#include <vector>

#include "base/json_limits.h"
#include "base/status_macros.h"

namespace lrkv::service {

using nlohmann::json;

absl::StatusOr<json> ParseParamsJson(const std::string& text) {
  if (text.empty()) return json::object();
  return ParseJsonBounded(text, kRequestJsonLimits, "params_json");
}

absl::StatusOr<std::string> ReplaceInputPaths(
    const std::string& text, const std::vector<std::string>& keys,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& replace) {
  ASSIGN_OR_RETURN(json j, ParseParamsJson(text));
  if (!j.is_object()) return text;  // the kind's own parser says what is wrong
  std::vector<json*> pending = {&j};
  while (!pending.empty()) {
    json& o = *pending.back();
    pending.pop_back();
    if (o.is_array()) {
      for (json& v : o) pending.push_back(&v);
      continue;
    }
    if (!o.is_object()) continue;
    for (const std::string& key : keys) {
      auto it = o.find(key);
      if (it == o.end() || !it->is_string() || it->get<std::string>().empty()) continue;
      ASSIGN_OR_RETURN(*it, replace(it->get<std::string>()));
    }
    for (auto& [k, v] : o.items()) {
      if (k != kConfigFileKey) pending.push_back(&v);  // its "text" is the file, not a path
    }
  }
  return text.empty() ? text : j.dump();
}

}  // namespace lrkv::service
