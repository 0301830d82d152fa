// An upload's header (see upload_header.h).
#include "service/upload_header.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/json_limits.h"
#include "base/utf8.h"

namespace lrkv::service {

bool ValidUploadId(const std::string& id) {
  if (id.empty() || id.size() > kMaxUploadIdBytes) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

absl::Status ValidateUploadHeader(const UploadHeaderInfo& h, int64_t max_bytes) {
  if (!ValidUploadId(h.upload_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.upload_id must be 1-128 letters, digits, '-' or '_' (got ",
                     h.upload_id.size(), " bytes)"));
  }
  const std::string ext = std::filesystem::path(h.file_name).extension().string();
  // Echoed only when it is printable text of a sane length.
  const bool text = h.file_name.size() <= kMaxUploadFileNameBytes &&
                    IsValidUtf8(h.file_name) && h.file_name.find('\0') == std::string::npos;
  if (!text || h.file_name.find('/') != std::string::npos ||
      (ext != ".gguf" && ext != ".safetensors")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.file_name must be a plain UTF-8 name of at most ", kMaxUploadFileNameBytes,
        " bytes ending in .gguf or .safetensors",
        text ? absl::StrCat(" (got '", h.file_name, "')") : ""));
  }
  if (h.total_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.total_bytes ", h.total_bytes, " must be at least 1"));
  }
  if (h.total_bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("header.total_bytes ", h.total_bytes,
                                                     " exceeds this server's upload limit of ",
                                                     max_bytes, " bytes"));
  }
  if (!h.config_json.empty()) {
    JsonLimits limits = kRequestJsonLimits;
    limits.max_bytes = kMaxUploadConfigJsonBytes;
    limits.refuse_nul_escapes = false;
    auto config = ParseJsonBounded(h.config_json, limits, "header.config_json");
    if (!config.ok()) return config.status();
    if (!config->is_object()) {
      return absl::InvalidArgumentError("header.config_json must be a JSON object");
    }
  }
  if (!h.tokenizer_json.empty()) {
    JsonLimits limits = kFileJsonLimits;
    limits.max_bytes = kMaxUploadTokenizerJsonBytes;
    if (absl::Status st = CheckJsonText(h.tokenizer_json, limits, "header.tokenizer_json");
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace lrkv::service
