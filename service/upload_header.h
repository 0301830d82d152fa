// The header an upload starts with, and what it must satisfy before a byte is staged.
// No LibTorch and no gRPC, so that the fuzz targets build it in the sanitizer scope.
#ifndef LRKV_SERVICE_UPLOAD_HEADER_H_
#define LRKV_SERVICE_UPLOAD_HEADER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace lrkv::service {

struct UploadHeaderInfo {
  std::string upload_id;
  std::string file_name;  // its extension picks the format: .gguf or .safetensors
  int64_t total_bytes = 0;
  std::string config_json;     // safetensors: the model's config.json
  std::string tokenizer_json;  // safetensors, optional: tokenizer.lrkv.json
};

// Limits on a header's fields (docs/reliability.md).
inline constexpr size_t kMaxUploadIdBytes = 128;
inline constexpr size_t kMaxUploadFileNameBytes = 255;
inline constexpr size_t kMaxUploadConfigJsonBytes = size_t{1} << 20;
inline constexpr size_t kMaxUploadTokenizerJsonBytes = size_t{2} << 20;

// Whether `id` is 1-128 ASCII letters, digits, '-' or '_'.
bool ValidUploadId(const std::string& id);

// InvalidArgument naming the field when the header is malformed: the id, a file name
// that is not a plain UTF-8 name ending in .gguf or .safetensors (or holds a NUL), a
// size below 1, a config_json that is not one JSON object within the request limits, a
// tokenizer_json that is not JSON within them; ResourceExhausted when total_bytes
// exceeds `max_bytes`.
absl::Status ValidateUploadHeader(const UploadHeaderInfo& header, int64_t max_bytes);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_UPLOAD_HEADER_H_
