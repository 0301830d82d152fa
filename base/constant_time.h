// Comparing secrets (API keys, bearer tokens) without a timing side channel.
#ifndef LRKV_BASE_CONSTANT_TIME_H_
#define LRKV_BASE_CONSTANT_TIME_H_

#include <string_view>

namespace lrkv {

// Whether `a` equals `b`, in time that depends on their lengths only (OpenSSL's
// CRYPTO_memcmp): a caller guessing a key learns nothing from how long a wrong
// guess took but its length.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace lrkv

#endif  // LRKV_BASE_CONSTANT_TIME_H_
