// Content addresses of checkpoints: the sha256 (OpenSSL EVP) of a file, or of the
// names and contents, in name order, of the files of a folder that make the model
// (IsModelFile: weights, config, tokenizer) — not reports or logs beside them, so that a
// converted folder registered (report.json and all) and the same model uploaded (its
// weights, config and tokenizer) are one checkpoint id.
#ifndef LRKV_SERVICE_CONTENT_HASH_H_
#define LRKV_SERVICE_CONTENT_HASH_H_

#include <string>

#include "absl/status/statusor.h"

namespace lrkv::service {

// Whether a folder's file `name` is part of the model it holds.
bool IsModelFile(const std::string& name);

// Lowercase hex.
absl::StatusOr<std::string> Sha256OfPath(const std::string& path);
std::string Sha256OfBytes(const std::string& bytes);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_CONTENT_HASH_H_
