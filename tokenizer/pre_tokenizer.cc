// tokenizer.json pre-tokenizers (see pre_tokenizer.h).
#include "tokenizer/pre_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode_text.h"
#include "nlohmann/json.hpp"

namespace lrkv {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

Regex MustCompile(const char* pattern) {
  auto re = Regex::Create(pattern);
  return *re;  // fixed patterns of this file; a failure is a programming error
}

absl::StatusOr<bool> Flag(const json& j, const char* field, bool fallback,
                          const std::string& where) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Invalid(absl::StrCat(where, ": '", field, "' must be a bool"));
  return it->get<bool>();
}

}  // namespace

absl::StatusOr<PreTokenizer::Behavior> PreTokenizer::ParseBehavior(const json& j,
                                                                   const std::string& where) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return Invalid(absl::StrCat(where, ": unknown split behavior ", j.dump(),
                              " (Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                              "Contiguous)"));
}

absl::Status PreTokenizer::Add(const json& j, const std::string& where,
                               std::vector<Step>* steps) {
  if (j.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, ComponentType(j, where));
  const std::string here = absl::StrCat(where, " (", type, ")");
  Step s;
  if (type == "Sequence") {
    return ForEachListed(j, "pretokenizers", where, [&](const json& item, const std::string& at) {
      return Add(item, at, steps);
    });
  } else if (type == "Split") {
    ASSIGN_OR_RETURN(s.pattern, PatternFromJson(j.value("pattern", json()), here));
    ASSIGN_OR_RETURN(s.behavior, ParseBehavior(j.value("behavior", json()), here));
    ASSIGN_OR_RETURN(s.invert, Flag(j, "invert", false, here));
  } else if (type == "ByteLevel") {
    s.kind = Step::kByteLevel;
    ASSIGN_OR_RETURN(s.add_prefix_space, Flag(j, "add_prefix_space", true, here));
    ASSIGN_OR_RETURN(s.use_regex, Flag(j, "use_regex", true, here));
    if (s.use_regex) s.pattern = MustCompile(kGpt2SplitRegex);
  } else if (type == "Metaspace") {
    s.kind = Step::kMetaspace;
    s.replacement = j.value("replacement", std::string("\xe2\x96\x81"));
    if (s.replacement.empty()) return Invalid(absl::StrCat(here, ": empty 'replacement'"));
    ASSIGN_OR_RETURN(s.split, Flag(j, "split", true, here));
    if (auto p = j.find("prepend_scheme"); p != j.end() && !p->is_null()) {
      const std::string scheme = p->is_string() ? p->get<std::string>() : "";
      if (scheme == "always") {
        s.prepend = Prepend::kAlways;
      } else if (scheme == "first") {
        s.prepend = Prepend::kFirst;
      } else if (scheme == "never") {
        s.prepend = Prepend::kNever;
      } else {
        return Invalid(absl::StrCat(here, ": unknown prepend_scheme ", p->dump(),
                                    " (always, first, never)"));
      }
    } else {
      ASSIGN_OR_RETURN(bool add, Flag(j, "add_prefix_space", true, here));
      s.prepend = add ? Prepend::kAlways : Prepend::kNever;
    }
    s.pattern = Regex::Literal(s.replacement);
    s.behavior = Behavior::kMergedWithNext;
  } else if (type == "Digits") {
    ASSIGN_OR_RETURN(bool individual, Flag(j, "individual_digits", false, here));
    s.pattern = MustCompile(individual ? "\\p{N}" : "\\p{N}+");
  } else if (type == "Whitespace") {
    s.pattern = MustCompile("\\w+|[^\\w\\s]+");
    s.behavior = Behavior::kRemoved;
    s.invert = true;
  } else if (type == "WhitespaceSplit") {
    s.pattern = MustCompile("\\s+");
    s.behavior = Behavior::kRemoved;
  } else if (type == "Punctuation") {
    s.pattern = MustCompile("[\\p{P}!-/:-@\\[-`{-~]");
    if (j.contains("behavior")) {
      ASSIGN_OR_RETURN(s.behavior, ParseBehavior(j["behavior"], here));
    }
  } else {
    return Invalid(absl::StrCat(where, ": pre-tokenizer type '", type,
                                "' is not supported (supported: Split, ByteLevel, Metaspace, "
                                "Digits, Whitespace, WhitespaceSplit, Punctuation, Sequence)"));
  }
  steps->push_back(std::move(s));
  return absl::OkStatus();
}

absl::StatusOr<PreTokenizer> PreTokenizer::FromJson(const json& j, const std::string& where) {
  PreTokenizer p;
  RETURN_IF_ERROR(Add(j, where, &p.steps_));
  return p;
}

void PreTokenizer::SplitPiece(const Piece& piece, const Regex& pattern, Behavior behavior,
                              bool invert, std::vector<Piece>* out) {
  std::vector<TextSpan> spans = SpansOf(piece.text, pattern.FindAll(piece.text));
  if (invert) {
    for (auto& s : spans) s.is_match = !s.is_match;
  }
  // The Rust crate's SplitDelimiterBehavior, span for span.
  std::vector<std::pair<size_t, size_t>> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& s : spans) {
        if (!s.is_match) kept.emplace_back(s.begin, s.end);
      }
      break;
    case Behavior::kIsolated:
      for (const auto& s : spans) kept.emplace_back(s.begin, s.end);
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().second = s.end;
        } else {
          kept.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().first = it->begin;
        } else {
          kept.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Behavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().second = s.end;
        } else {
          kept.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
  }
  for (const auto& [b, e] : kept) {
    if (e > b) out->push_back({piece.text.substr(b, e - b), piece.at_start && b == 0});
  }
}

void PreTokenizer::Apply(const Step& step, std::vector<Piece>* pieces) const {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (Piece& piece : *pieces) {
    switch (step.kind) {
      case Step::kSplit:
        SplitPiece(piece, step.pattern, step.behavior, step.invert, &out);
        break;
      case Step::kByteLevel: {
        if (step.add_prefix_space && piece.text.rfind(' ', 0) != 0) {
          piece.text.insert(0, " ");
        }
        const size_t first = out.size();
        if (step.use_regex) {
          SplitPiece(piece, step.pattern, Behavior::kIsolated, false, &out);
        } else {
          out.push_back(std::move(piece));
        }
        for (size_t i = first; i < out.size(); ++i) out[i].text = ToByteLevel(out[i].text);
        break;
      }
      case Step::kMetaspace: {
        std::string text;
        text.reserve(piece.text.size() + step.replacement.size());
        for (char c : piece.text) {
          if (c == ' ') {
            text += step.replacement;
          } else {
            text.push_back(c);
          }
        }
        const bool starts = text.rfind(step.replacement, 0) == 0;
        if (!starts && (step.prepend == Prepend::kAlways ||
                        (step.prepend == Prepend::kFirst && piece.at_start))) {
          text.insert(0, step.replacement);
        }
        piece.text = std::move(text);
        if (step.split) {
          SplitPiece(piece, step.pattern, Behavior::kMergedWithNext, false, &out);
        } else {
          out.push_back(std::move(piece));
        }
        break;
      }
    }
  }
  *pieces = std::move(out);
}

std::vector<std::string> PreTokenizer::Split(std::string_view section,
                                             bool at_text_start) const {
  std::vector<Piece> pieces = {{std::string(section), at_text_start}};
  for (const Step& step : steps_) Apply(step, &pieces);
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (auto& p : pieces) out.push_back(std::move(p.text));
  return out;
}

}  // namespace lrkv
