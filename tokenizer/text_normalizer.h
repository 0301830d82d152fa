// The "normalizer" of a tokenizer.json: Unicode forms, Lowercase, Strip,
// StripAccents, Replace, Prepend and Sequences of them, applied in order.
#ifndef LRKV_TOKENIZER_TEXT_NORMALIZER_H_
#define LRKV_TOKENIZER_TEXT_NORMALIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_text.h"
#include "nlohmann/json_fwd.hpp"

namespace lrkv {

class TextNormalizer {
 public:
  // From the normalizer value (null: the identity). `where` names the field in
  // messages ("tokenizer.json: normalizer"); unknown types are refused by name.
  static absl::StatusOr<TextNormalizer> FromJson(const nlohmann::json& j,
                                                 const std::string& where);
  std::string Apply(std::string_view text) const;

 private:
  struct Step {
    enum Kind { kForm, kLowercase, kStrip, kStripAccents, kReplace, kPrepend } kind;
    NormalizationForm form = NormalizationForm::kNfc;
    bool left = false, right = false;   // kStrip
    Regex pattern = Regex::Literal("");  // kReplace
    std::string content;                // kReplace, kPrepend
  };
  static absl::Status Add(const nlohmann::json& j, const std::string& where,
                          std::vector<Step>* steps);
  std::vector<Step> steps_;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_TEXT_NORMALIZER_H_
