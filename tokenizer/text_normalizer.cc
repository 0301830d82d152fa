// tokenizer.json normalizers (see text_normalizer.h).
#include "tokenizer/text_normalizer.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/tokenizer_json.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

const Regex& Whitespace() {
  static const Regex* re = new Regex(*Regex::Create("\\s+"));
  return *re;
}

}  // namespace

absl::Status TextNormalizer::Add(const json& j, const std::string& where,
                                 std::vector<Step>* steps) {
  if (j.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, ComponentType(j, where));
  const std::string here = absl::StrCat(where, " (", type, ")");
  Step step{Step::kForm};
  if (type == "Sequence") {
    return ForEachListed(j, "normalizers", where, [&](const json& item, const std::string& at) {
      return Add(item, at, steps);
    });
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.form = type == "NFC"    ? NormalizationForm::kNfc
                : type == "NFD"  ? NormalizationForm::kNfd
                : type == "NFKC" ? NormalizationForm::kNfkc
                                 : NormalizationForm::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Step::kLowercase;
  } else if (type == "StripAccents") {
    step.kind = Step::kStripAccents;
  } else if (type == "Strip") {
    step.kind = Step::kStrip;
    step.left = j.value("strip_left", true);
    step.right = j.value("strip_right", true);
  } else if (type == "Replace") {
    step.kind = Step::kReplace;
    ASSIGN_OR_RETURN(step.pattern, PatternFromJson(j.value("pattern", json()), here));
    if (!j.contains("content") || !j["content"].is_string()) {
      return Invalid(absl::StrCat(here, ": 'content' must be a string"));
    }
    step.content = j["content"].get<std::string>();
  } else if (type == "Prepend") {
    step.kind = Step::kPrepend;
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return Invalid(absl::StrCat(here, ": 'prepend' must be a string"));
    }
    step.content = j["prepend"].get<std::string>();
  } else {
    return Invalid(absl::StrCat(
        where, ": normalizer type '", type,
        "' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
        "StripAccents, Replace, Prepend, Sequence)"));
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<TextNormalizer> TextNormalizer::FromJson(const json& j,
                                                        const std::string& where) {
  TextNormalizer n;
  RETURN_IF_ERROR(Add(j, where, &n.steps_));
  return n;
}

std::string TextNormalizer::Apply(std::string_view input) const {
  std::string text(input);
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::kForm:
        text = NormalizeUnicode(text, s.form);
        break;
      case Step::kLowercase:
        text = LowercaseUnicode(text);
        break;
      case Step::kStripAccents:
        text = RemoveMarks(text);
        break;
      case Step::kStrip: {
        const auto ws = Whitespace().FindAll(text);
        size_t b = 0, e = text.size();
        if (s.left && !ws.empty() && ws.front().first == 0) b = ws.front().second;
        if (s.right && !ws.empty() && ws.back().second == text.size()) {
          e = std::max(b, ws.back().first);
        }
        text = text.substr(b, e - b);
        break;
      }
      case Step::kReplace:
        text = ReplaceAll(text, s.pattern, s.content);
        break;
      case Step::kPrepend:
        if (!text.empty()) text = s.content + text;
        break;
    }
  }
  return text;
}

}  // namespace lrkv
