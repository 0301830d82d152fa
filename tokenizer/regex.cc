// Oniguruma-backed regular expressions (see regex.h).
#include "tokenizer/regex.h"

#include <oniguruma.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace lrkv {

struct Regex::Compiled {
  OnigRegex regex = nullptr;
  ~Compiled() {
    if (regex != nullptr) onig_free(regex);
  }
};

namespace {

void InitializeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

const auto* Bytes(std::string_view s) {
  return reinterpret_cast<const OnigUChar*>(s.data());
}

}  // namespace

absl::StatusOr<Regex> Regex::Create(const std::string& pattern) {
  InitializeOnce();
  auto compiled = std::make_shared<Compiled>();
  OnigErrorInfo info;
  const int rc = onig_new(&compiled->regex, Bytes(pattern), Bytes(pattern) + pattern.size(),
                          ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    compiled->regex = nullptr;
    return absl::InvalidArgumentError(absl::StrCat(
        "regular expression '", pattern, "' does not compile: ",
        reinterpret_cast<const char*>(message)));
  }
  return Regex(pattern, std::move(compiled));
}

Regex Regex::Literal(std::string literal) { return Regex(std::move(literal), nullptr); }

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  if (compiled_ == nullptr) {
    if (pattern_.empty()) return matches;
    for (size_t at = text.find(pattern_); at != std::string_view::npos;
         at = text.find(pattern_, at + pattern_.size())) {
      matches.emplace_back(at, at + pattern_.size());
    }
    return matches;
  }
  OnigRegion* region = onig_region_new();
  const OnigUChar* begin = Bytes(text);
  const OnigUChar* end = begin + text.size();
  size_t pos = 0;
  while (pos <= text.size()) {
    const int at = onig_search(compiled_->regex, begin, end, begin + pos, end, region,
                               ONIG_OPTION_NONE);
    if (at < 0) break;
    const auto b = static_cast<size_t>(region->beg[0]);
    const auto e = static_cast<size_t>(region->end[0]);
    if (e > b) {
      matches.emplace_back(b, e);
      pos = e;
    } else {
      // An empty match: step over one whole character and search again.
      if (b >= text.size()) break;
      size_t next = b + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xc0) == 0x80) {
        ++next;
      }
      pos = next;
    }
  }
  onig_region_free(region, 1);
  return matches;
}

}  // namespace lrkv
