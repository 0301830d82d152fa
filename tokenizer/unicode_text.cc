// Unicode operations for the tokenizers (see unicode_text.h).
#include "tokenizer/unicode_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <vector>

#include "base/utf8.h"

namespace lrkv {
namespace {

constexpr char kReplacementChar[] = "\xef\xbf\xbd";

struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::array<int32_t, 256> codepoints;
  ByteLevelTables() {
    // GPT-2: printable Latin-1 bytes stand for themselves; the others are moved to
    // U+0100 and up, in byte order.
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
                             (b >= 0xae && b <= 0xff);
      codepoints[b] = printable ? b : next++;
      AppendCodepoint(codepoints[b], &chars[b]);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables tables;
  return tables;
}

std::string MapWith(std::string_view text, utf8proc_option_t options) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out, options);
  if (n < 0) {
    std::free(out);
    return std::string(text);  // only on invalid UTF-8, which callers rule out
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

std::string ToValidUtf8(std::string_view text) {
  size_t bad = 0;
  if (IsValidUtf8(text, &bad)) return std::string(text);
  std::string out(text.substr(0, bad));
  size_t pos = bad;
  while (pos < text.size()) {
    size_t bad_rel = 0;
    const std::string_view rest = text.substr(pos);
    if (IsValidUtf8(rest, &bad_rel)) {
      out.append(rest);
      break;
    }
    out.append(rest.substr(0, bad_rel));
    out += kReplacementChar;
    pos += bad_rel + 1;
    // Skip the continuation bytes of the broken sequence.
    while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xc0) == 0x80) {
      ++pos;
    }
  }
  return out;
}

std::string NormalizeUnicode(std::string_view text, NormalizationForm form) {
  // ASCII is the same in every normalization form; most text is mostly ASCII.
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; })) {
    return std::string(text);
  }
  switch (form) {
    case NormalizationForm::kNfc:
      return MapWith(text, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    case NormalizationForm::kNfd:
      return MapWith(text,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
    case NormalizationForm::kNfkc:
      return MapWith(text, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE |
                                                          UTF8PROC_COMPAT));
    case NormalizationForm::kNfkd:
      return MapWith(text, static_cast<utf8proc_option_t>(
                               UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  }
  return std::string(text);
}

std::string LowercaseUnicode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    AppendCodepoint(utf8proc_tolower(NextCodepoint(text, &pos)), &out);
  }
  return out;
}

std::string RemoveMarks(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const int32_t cp = NextCodepoint(text, &pos);
    const auto cat = utf8proc_category(cp);
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
        cat == UTF8PROC_CATEGORY_ME) {
      continue;
    }
    out.append(text.substr(start, pos - start));
  }
  return out;
}

std::string ToByteLevel(std::string_view text) {
  const auto& chars = Tables().chars;
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += chars[static_cast<unsigned char>(c)];
  return out;
}

int ByteLevelByte(int32_t codepoint) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    for (int b = 0; b < 256; ++b) inv[Tables().codepoints[b]] = b;
    return inv;
  }();
  if (codepoint < 0 || codepoint >= static_cast<int32_t>(inverse.size())) return -1;
  return inverse[codepoint];
}

int32_t NextCodepoint(std::string_view text, size_t* pos) {
  utf8proc_int32_t cp = -1;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()) + *pos,
                                  static_cast<utf8proc_ssize_t>(text.size() - *pos), &cp);
  *pos += n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? cp : 0xfffd;
}

void AppendCodepoint(int32_t codepoint, std::string* out) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(codepoint, buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace lrkv
