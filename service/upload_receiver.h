// Staging for chunked, resumable checkpoint uploads. Each upload id owns a data
// file (written at each chunk's offset, synced before the chunk counts) and a
// small state file with the byte ranges received, both under the staging
// folder, so an upload interrupted by a dropped connection or a server restart
// resumes where it stopped. Completed uploads are checked against the client's
// sha256; the caller then validates the checkpoint and keeps or discards it.
#ifndef LRKV_SERVICE_UPLOAD_RECEIVER_H_
#define LRKV_SERVICE_UPLOAD_RECEIVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lrkv::service {

struct UploadOptions {
  /// Where partial uploads live (created if missing).
  std::string staging_dir;
  /// Largest file accepted; larger uploads are RESOURCE_EXHAUSTED.
  int64_t max_bytes = int64_t{16} << 30;
  /// Largest chunk accepted (the API promises 1 MiB).
  int64_t max_chunk_bytes = int64_t{1} << 20;
  /// An upload no chunk has reached for this long is abandoned: its staged bytes are
  /// removed (at start-up and whenever an upload begins) and its id is forgotten.
  int64_t abandoned_after_seconds = 7 * 24 * 3600;
};

struct UploadHeaderInfo {
  std::string upload_id;
  std::string
      file_name;  // its extension picks the format: .gguf or .safetensors
  int64_t total_bytes = 0;
  std::string config_json;     // safetensors: the model's config.json
  std::string tokenizer_json;  // safetensors, optional: tokenizer.lrkv.json
};

struct UploadProgress {
  int64_t committed_bytes = 0;  // contiguous from offset 0
  int64_t received_bytes = 0;   // in all ranges
  int64_t total_bytes = 0;
};

class UploadReceiver {
 public:
  static absl::StatusOr<std::unique_ptr<UploadReceiver>> Create(
      const UploadOptions& options);
  ~UploadReceiver();

  // Starts an upload, or resumes one with the same id and the same header
  // (FailedPrecondition if the header differs).
  absl::StatusOr<UploadProgress> Begin(const UploadHeaderInfo& header);
  // Writes `data` at `offset` (InvalidArgument outside the file or over the
  // chunk size).
  absl::Status Write(const std::string& upload_id, int64_t offset,
                     const std::string& data);
  absl::StatusOr<UploadProgress> Progress(
      const std::string& upload_id);  // NotFound
  // Checks that every byte arrived and that the sha256 matches; returns the
  // staged checkpoint path (a .gguf file, or a folder holding model.safetensors
  // and config.json). A sha256 mismatch discards the upload.
  absl::StatusOr<std::string> Complete(const std::string& upload_id,
                                       const std::string& sha256);
  // Removes the upload's files.
  void Discard(const std::string& upload_id);

 private:
  explicit UploadReceiver(UploadOptions options);
  struct Upload;
  absl::StatusOr<Upload*> Find(const std::string& upload_id);
  // Removes the uploads untouched for options_.abandoned_after_seconds (mu_ held, or
  // before the receiver is shared).
  void ExpireAbandoned();
  absl::Status SaveState(const Upload& u);
  std::string Base(const std::string& upload_id) const;

  UploadOptions options_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Upload>> uploads_;
};

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_UPLOAD_RECEIVER_H_
