// Bounded JSON parsing for bytes that come from outside: a job's params_json, an
// upload's header, the config.json / tokenizer.json of a checkpoint a client sent.
//
// nlohmann's parser keeps its own stack, but dump(), recursive walks and error messages
// that print a value recurse once per nesting level: 30,000 nested objects overflow the
// stack of a server thread. So the text is checked before it is parsed, by a single
// iterative scan: its size, its nesting depth, no NUL byte (nlohmann stops at a NUL as if
// the text ended there, so '{"rank":2}\0garbage' would parse as the object), valid UTF-8.
// Every refusal is InvalidArgument naming what was parsed and the limit it broke.
#ifndef LRKV_BASE_JSON_LIMITS_H_
#define LRKV_BASE_JSON_LIMITS_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lrkv {

struct JsonLimits {
  /// Largest text accepted, in bytes.
  size_t max_bytes = size_t{1} << 20;
  /// Deepest nesting of arrays and objects accepted (a top-level object is depth 1).
  int max_depth = 64;
  /// Refuse the escape \u0000 inside strings: a path or name with a NUL in it would be
  /// cut short by the operating system and name another file.
  bool refuse_nul_escapes = false;
  /// Refuse an object that names one key twice (nlohmann keeps the last silently).
  bool refuse_duplicate_keys = false;
};

// A job's params_json and an upload header's config_json (docs/reliability.md).
inline constexpr JsonLimits kRequestJsonLimits{size_t{1} << 20, 64, true, true};
// A checkpoint's JSON files (config.json, tokenizer.json, a safetensors header): large
// vocabularies are tens of megabytes, but no real file nests deeper than a dozen levels.
inline constexpr JsonLimits kFileJsonLimits{size_t{512} << 20, 64, false, false};

// OK when `text` is within `limits` (size, depth, no NUL byte or, if asked, NUL escape,
// valid UTF-8). Does not check the grammar: the parser does. `what` names the text in
// messages ("params_json", "config.json").
absl::Status CheckJsonText(std::string_view text, const JsonLimits& limits,
                           const std::string& what);

// CheckJsonText, then a strict parse: one JSON value and nothing after it.
absl::StatusOr<nlohmann::json> ParseJsonBounded(std::string_view text, const JsonLimits& limits,
                                                const std::string& what);

}  // namespace lrkv

#endif  // LRKV_BASE_JSON_LIMITS_H_
