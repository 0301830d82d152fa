// A read-only memory map of a whole file, released on destruction.
#ifndef LRKV_FORMATS_MAPPED_FILE_H_
#define LRKV_FORMATS_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace lrkv {

class MappedFile {
 public:
  // Maps `path` read-only. NotFound / InvalidArgument (a directory, say) on
  // failure.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace lrkv

#endif  // LRKV_FORMATS_MAPPED_FILE_H_
