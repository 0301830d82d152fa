// Streams a checkpoint's tensors into safetensors files as they are produced,
// split into Hugging Face shards (model-00001-of-0000N.safetensors +
// model.safetensors.index.json) above a size limit, so that writing a model
// never holds a second copy of it in memory.
#ifndef LRKV_FORMATS_SAFETENSORS_WRITER_H_
#define LRKV_FORMATS_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "formats/block_file.h"
#include "formats/tensor_view.h"

namespace lrkv {

// A tensor to be written: everything but its bytes.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  uint64_t nbytes() const;
};

struct SafetensorsShardOptions {
  /// Largest shard in bytes (tensor data; a single larger tensor gets a shard
  /// of its own). Checkpoints that fit are one model.safetensors; Hugging
  /// Face's save_pretrained default is 5 GB.
  uint64_t max_shard_bytes = 5'000'000'000;
  /// The "__metadata__" map of every shard.
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
};

// The name of a single-file checkpoint's weights, and of a sharded one's index.
inline constexpr char kSafetensorsFileName[] = "model.safetensors";
inline constexpr char kSafetensorsIndexFileName[] =
    "model.safetensors.index.json";

// Writes the tensors of `specs`, in that order, into `dir` (which must exist).
// Each shard is written to a temporary name and renamed when complete; the
// index comes last, so a reader never sees an index naming a partial shard.
class SafetensorsCheckpointWriter {
 public:
  // InvalidArgument for duplicate names; the layout of every shard is fixed
  // here.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpointWriter>> Create(
      const std::string& dir, std::vector<TensorSpec> specs,
      SafetensorsShardOptions options = {});
  // An unfinished shard's temporary file is removed.
  ~SafetensorsCheckpointWriter() = default;

  // The next tensor's bytes; `name` must be the next spec's and `nbytes` its
  // size.
  absl::Status Write(const std::string& name, const void* data,
                     uint64_t nbytes);
  // Closes the last shard and writes the index (sharded checkpoints only).
  // FailedPrecondition when tensors are missing.
  absl::Status Finish();

  // The files written (or to be written), in order.
  const std::vector<std::string>& shard_files() const { return shard_files_; }

 private:
  SafetensorsCheckpointWriter() = default;
  absl::Status OpenShard(size_t shard);
  absl::Status CloseShard();

  std::string dir_;
  std::vector<TensorSpec> specs_;
  SafetensorsShardOptions options_;
  std::vector<size_t> shard_of_;  // per spec
  std::vector<std::string> shard_files_;
  size_t next_ = 0;  // next spec to write
  size_t open_shard_ = SIZE_MAX;
  std::unique_ptr<BlockFile> file_;  // the open shard's
};

// The safetensors header (length prefix, JSON, padding to 8 bytes) of a file
// holding `specs` in order. InvalidArgument for a duplicate name.
absl::StatusOr<std::string> SafetensorsHeader(
    const std::vector<TensorSpec>& specs,
    const std::map<std::string, std::string>& metadata);

}  // namespace lrkv

#endif  // LRKV_FORMATS_SAFETENSORS_WRITER_H_
