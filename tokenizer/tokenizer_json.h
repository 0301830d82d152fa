// Pieces shared by the readers of tokenizer.json components (normalizer,
// pre_tokenizer, decoder): {"type": ...} objects, Sequence lists, and
// {"String"|"Regex": ...} patterns with the spans they cut a text into.
#ifndef LRKV_TOKENIZER_TOKENIZER_JSON_H_
#define LRKV_TOKENIZER_TOKENIZER_JSON_H_

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/regex.h"
#include "nlohmann/json_fwd.hpp"

namespace lrkv {

// The "type" of a component; InvalidArgument naming `where` unless `j` is an object
// with a string "type".
absl::StatusOr<std::string> ComponentType(const nlohmann::json& j, const std::string& where);

// Calls `add(item, place)` for each item of the Sequence list `j[field]`, with its
// place ("where.field[i]") for messages.
absl::Status ForEachListed(
    const nlohmann::json& j, const char* field, const std::string& where,
    const std::function<absl::Status(const nlohmann::json&, const std::string&)>& add);

// A pattern object: {"String": s} or {"Regex": r}.
absl::StatusOr<Regex> PatternFromJson(const nlohmann::json& j, const std::string& where);

// The [begin, end) ranges of `text` that are not matched by `matches` (sorted,
// non-overlapping), and the matches, in order; `is_match` tells which is which.
struct TextSpan {
  size_t begin, end;
  bool is_match;
};
std::vector<TextSpan> SpansOf(std::string_view text,
                              const std::vector<std::pair<size_t, size_t>>& matches);

// `text` with every match of `pattern` replaced by `content`.
std::string ReplaceAll(std::string_view text, const Regex& pattern, const std::string& content);

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_TOKENIZER_JSON_H_
