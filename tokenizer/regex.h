// Regular expressions with Unicode properties for tokenizer pre-tokenization and
// normalization: a thin owner of an Oniguruma pattern, the engine the Hugging Face
// Rust tokenizers use, so that tokenizer.json patterns mean what they mean there.
#ifndef LRKV_TOKENIZER_REGEX_H_
#define LRKV_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv {

class Regex {
 public:
  // Compiles `pattern` (Oniguruma's Ruby syntax, UTF-8). InvalidArgument with the
  // engine's message when it does not compile.
  static absl::StatusOr<Regex> Create(const std::string& pattern);
  // A pattern matching `literal` exactly (tokenizer.json's {"String": ...}).
  static Regex Literal(std::string literal);

  // Non-overlapping matches of `text`, left to right, as [begin, end) byte offsets.
  // Empty matches are skipped. `text` must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

 private:
  struct Compiled;
  Regex(std::string pattern, std::shared_ptr<const Compiled> compiled)
      : pattern_(std::move(pattern)), compiled_(std::move(compiled)) {}

  std::string pattern_;
  // nullptr for a literal: `pattern_` is then searched for as it is.
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_REGEX_H_
