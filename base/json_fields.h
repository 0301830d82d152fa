// Typed readers of config.json fields with messages that name the file and the
// field.
#ifndef LRKV_BASE_JSON_FIELDS_H_
#define LRKV_BASE_JSON_FIELDS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace lrkv::json_fields {

using nlohmann::json;

// Reads an integer field; `fallback` < 0 means required.
inline absl::StatusOr<int64_t> IntField(const json& j, const char* field,
                                        const std::string& source,
                                        int64_t fallback = -1) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (fallback >= 0) return fallback;
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": missing required field '", field, "'"));
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": field '", field, "' must be an integer, got ", it->dump()));
  }
  return it->get<int64_t>();
}

inline absl::StatusOr<double> NumberField(const json& j, const char* field,
                                          const std::string& source,
                                          double fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": field '", field, "' must be a number, got ", it->dump()));
  }
  return it->get<double>();
}

inline absl::StatusOr<bool> BoolField(const json& j, const char* field,
                                      const std::string& source,
                                      bool fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field '", field, "' must be true or false"));
  }
  return it->get<bool>();
}

}  // namespace lrkv::json_fields

#endif  // LRKV_BASE_JSON_FIELDS_H_
