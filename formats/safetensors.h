// safetensors checkpoints: a validating parser, a (sharded) memory-mapped reader and
// a writer. The checks follow the reference implementation (huggingface/safetensors).
#ifndef LRKV_FORMATS_SAFETENSORS_H_
#define LRKV_FORMATS_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "formats/mapped_file.h"
#include "formats/tensor_view.h"

namespace lrkv {

// The reference implementation's limit on the JSON header.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsContents {
  // The optional "__metadata__" string map.
  std::map<std::string, std::string> metadata;
  // Tensors in data-offset order; views point into the parsed buffer.
  std::vector<TensorView> tensors;
};

// Parses and validates a whole safetensors file held in `file`. Every failure is
// InvalidArgument with a message naming the problem (and the tensor, if any).
absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::Span<const uint8_t> file);

// Reads a single .safetensors file or a sharded checkpoint through its
// model.safetensors.index.json, memory-mapping every shard.
class SafetensorsReader {
 public:
  // `path`: a .safetensors file, an index .json file, or a directory holding
  // model.safetensors or model.safetensors.index.json.
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(
      const std::string& path);

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const TensorView* Find(const std::string& name) const;

 private:
  SafetensorsReader() = default;
  absl::Status AddShard(const std::string& path);

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` to `path` (through a temporary file renamed into place), with the
// header padded to 8 bytes as the reference writer does. Names must be unique and
// each view's nbytes must equal numel x dtype size.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorView>& tensors,
                              const std::map<std::string, std::string>& metadata);

// Writes `contents` to `path` via a temporary file in the same directory and a
// rename, so readers never see a partial file.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

// Fills a folder through `fill(staging_dir)` in a sibling `<out_dir>.partial` folder and
// renames it to `out_dir` (which must be absent or empty) only when `fill` succeeded;
// on failure nothing is left behind.
absl::Status WriteDirectoryAtomically(
    const std::string& out_dir, const std::function<absl::Status(const std::string&)>& fill);

}  // namespace lrkv

#endif  // LRKV_FORMATS_SAFETENSORS_H_
