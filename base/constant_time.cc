#include "base/constant_time.h"

#include <openssl/crypto.h>

namespace lrkv {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace lrkv
