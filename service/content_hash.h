// Content addresses of checkpoints: the sha256 (OpenSSL EVP) of a file, or of a
// directory's regular files' names and contents in name order.
#ifndef LRKV_SERVICE_CONTENT_HASH_H_
#define LRKV_SERVICE_CONTENT_HASH_H_

#include <string>

#include "absl/status/statusor.h"

namespace lrkv::service {

// Lowercase hex.
absl::StatusOr<std::string> Sha256OfPath(const std::string& path);
std::string Sha256OfBytes(const std::string& bytes);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_CONTENT_HASH_H_
