// UTF-8 validation and character splitting, used by parsers and the tokenizer.
#ifndef LRKV_BASE_UTF8_H_
#define LRKV_BASE_UTF8_H_

#include <cstddef>
#include <string_view>

namespace lrkv {

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
// On failure, *bad_offset (when given) is the offset of the first bad byte.
bool IsValidUtf8(std::string_view s, size_t* bad_offset = nullptr);

// Length in bytes of the UTF-8 sequence starting with lead byte `c`; 1 for
// invalid lead bytes so that callers always make progress.
size_t Utf8SequenceLength(unsigned char c);

}  // namespace lrkv

#endif  // LRKV_BASE_UTF8_H_
