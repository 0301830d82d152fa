// Unicode operations the tokenizers need, on UTF-8 strings: normalization forms,
// case and mark removal through utf8proc (no hand-written Unicode tables), and the
// GPT-2 byte-to-character map of byte-level BPE.
#ifndef LRKV_TOKENIZER_UNICODE_TEXT_H_
#define LRKV_TOKENIZER_UNICODE_TEXT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace lrkv {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` with every ill-formed UTF-8 sequence replaced by U+FFFD.
std::string ToValidUtf8(std::string_view text);

// `text` (valid UTF-8) in normalization form `form`.
std::string NormalizeUnicode(std::string_view text, NormalizationForm form);
// Simple (one-to-one) lowercase mapping of every character.
std::string LowercaseUnicode(std::string_view text);
// `text` without its combining marks (general category M).
std::string RemoveMarks(std::string_view text);

// Byte-level BPE: each byte is written as one printable character (GPT-2's
// bytes_to_unicode). `text`'s bytes written so:
std::string ToByteLevel(std::string_view text);
// The inverse: the byte a character stands for, or -1 when it stands for none.
int ByteLevelByte(int32_t codepoint);

// Decodes the character at `text[*pos]` (valid UTF-8) and advances *pos past it.
int32_t NextCodepoint(std::string_view text, size_t* pos);
void AppendCodepoint(int32_t codepoint, std::string* out);

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_UNICODE_TEXT_H_
