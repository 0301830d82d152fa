// Staging for chunked, resumable checkpoint uploads. Each upload id owns a data
// file (written at each chunk's offset, synced before the chunk counts) and a
// small state file with the byte ranges received, both under the staging
// folder, so an upload interrupted by a dropped connection or a server restart
// resumes where it stopped. Completed uploads are checked against the client's
// sha256; the caller then validates the checkpoint and keeps or discards it.
//
// An upload is held by exactly one stream at a time (Begin to Release): a second stream
// naming a live upload_id is refused, and only the holder writes, completes or discards
// it. Without that, a second connection could rewrite bytes after the first had its
// sha256 checked and before the file reached the store, poisoning the content-addressed
// entry every later user of that model gets.
#ifndef LRKV_SERVICE_UPLOAD_RECEIVER_H_
#define LRKV_SERVICE_UPLOAD_RECEIVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "service/upload_header.h"

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

  // A token naming one stream (one UploadCheckpoint call); never 0.
  uint64_t NewStream();
  // Starts an upload, or resumes one with the same id and the same header
  // (FailedPrecondition if the header differs), held by `stream` until Release:
  // Aborted while another stream holds it. The header is checked first
  // (ValidateUploadHeader).
  absl::StatusOr<UploadProgress> Begin(const UploadHeaderInfo& header, uint64_t stream);
  // Writes `data` at `offset` (InvalidArgument outside the file or over the
  // chunk size; FailedPrecondition unless `stream` holds the upload).
  absl::Status Write(const std::string& upload_id, uint64_t stream, int64_t offset,
                     const std::string& data);
  absl::StatusOr<UploadProgress> Progress(
      const std::string& upload_id);  // NotFound
  // Checks that every byte arrived and that the sha256 of the bytes as stored
  // matches `sha256`; returns the staged checkpoint path (a .gguf file, or a
  // folder holding model.safetensors and config.json), which stays the
  // holder's until Release or Discard. A sha256 mismatch discards the upload.
  absl::StatusOr<std::string> Complete(const std::string& upload_id, uint64_t stream,
                                       const std::string& sha256);
  // Removes the upload's files (when `stream` holds it).
  void Discard(const std::string& upload_id, uint64_t stream);
  // Ends `stream`'s hold on the upload (the upload stays, for a later resume).
  void Release(const std::string& upload_id, uint64_t stream);

 private:
  explicit UploadReceiver(UploadOptions options);
  struct Upload;
  absl::StatusOr<Upload*> Find(const std::string& upload_id);
  // The upload when `stream` holds it (mu_ held); FailedPrecondition otherwise.
  absl::StatusOr<Upload*> Held(const std::string& upload_id, uint64_t stream);
  void RemoveFiles(const std::string& upload_id);
  // Removes the uploads untouched for options_.abandoned_after_seconds (mu_ held, or
  // before the receiver is shared).
  void ExpireAbandoned();
  absl::Status SaveState(const Upload& u);
  std::string Base(const std::string& upload_id) const;

  UploadOptions options_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Upload>> uploads_;
  uint64_t next_stream_ = 1;
};

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_UPLOAD_RECEIVER_H_
