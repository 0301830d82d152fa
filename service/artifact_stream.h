// GetArtifact's sending side: a job's artifact folder as a stream of
// ArtifactChunks, file by file in name order, each file read once and hashed as
// it is sent, so that the client can check every file it writes.
#ifndef LRKV_SERVICE_ARTIFACT_STREAM_H_
#define LRKV_SERVICE_ARTIFACT_STREAM_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "lrkv/v1/lrkv.pb.h"

namespace lrkv::service {

inline constexpr int64_t kArtifactChunkBytes = int64_t{1} << 20;

// Sends every regular file under `dir` (recursively, paths relative to it)
// through `write`, which returns false when the client went away (then
// Cancelled). NotFound when `dir` does not exist; Internal for a file that
// cannot be read.
absl::Status StreamArtifact(
    const std::string& dir,
    const std::function<bool(const v1::ArtifactChunk&)>& write);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_ARTIFACT_STREAM_H_
