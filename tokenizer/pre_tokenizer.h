// The "pre_tokenizer" of a tokenizer.json: how normalized text is cut into the
// pieces BPE encodes one by one (Split with regex or string patterns and every
// split behaviour, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit,
// Punctuation, Sequence), with the semantics of the Hugging Face Rust crate.
#ifndef LRKV_TOKENIZER_PRE_TOKENIZER_H_
#define LRKV_TOKENIZER_PRE_TOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/regex.h"
#include "nlohmann/json_fwd.hpp"

namespace lrkv {

// The regexes of well-known pre-tokenizers, shared with GGUF's tokenizer.ggml.pre.
inline constexpr char kGpt2SplitRegex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
inline constexpr char kLlama3SplitRegex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr char kQwen2SplitRegex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

class PreTokenizer {
 public:
  // From the pre_tokenizer value (null: the whole section is one piece).
  static absl::StatusOr<PreTokenizer> FromJson(const nlohmann::json& j,
                                               const std::string& where);
  // The pieces of `section`. `at_text_start`: the section begins the whole input
  // (Metaspace's prepend_scheme "first" prepends only there).
  std::vector<std::string> Split(std::string_view section, bool at_text_start) const;

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    enum Kind { kSplit, kByteLevel, kMetaspace } kind = kSplit;
    Regex pattern = Regex::Literal("");
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    bool use_regex = false;         // kByteLevel: split with the GPT-2 regex first
    std::string replacement;        // kMetaspace
    Prepend prepend = Prepend::kAlways;
    bool split = true;              // kMetaspace: split on the replacement
  };
  struct Piece {
    std::string text;
    bool at_start;  // begins the whole input
  };
  static absl::Status Add(const nlohmann::json& j, const std::string& where,
                          std::vector<Step>* steps);
  static absl::StatusOr<Behavior> ParseBehavior(const nlohmann::json& j,
                                                const std::string& where);
  static void SplitPiece(const Piece& piece, const Regex& pattern, Behavior behavior,
                         bool invert, std::vector<Piece>* out);
  void Apply(const Step& step, std::vector<Piece>* pieces) const;

  std::vector<Step> steps_;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_PRE_TOKENIZER_H_
