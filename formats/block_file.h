// A file written whole or not at all, in whole blocks at block offsets, so that
// readers never see part of it and the page cache holds it as huge folios.
#ifndef LRKV_FORMATS_BLOCK_FILE_H_
#define LRKV_FORMATS_BLOCK_FILE_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lrkv {

// Every file lrkv writes goes through here: `<path>.tmp` in the same folder,
// renamed to `path` by Commit(), removed when the BlockFile goes without one.
//
// Writes go through a stdio buffer of kBlockBytes: glibc writes a full buffer,
// or a whole number of buffers, at once, so every write() but the last is whole
// blocks at a multiple of kBlockBytes (with setvbuf's null buffer it ignores
// the size and uses 4 KB). The page cache then holds the file just written as
// 2 MiB folios and a map of it reads through 2 MiB pages: a Qwen3-0.6B-shape
// conversion, 1,084 MiB, was 742 MiB so mapped when each tensor was its own
// write(), and its decode step ~4 % slower than the same bytes mapped whole
// (docs/formats.md). A source's untouched tensors are written from its map
// too, not copied file to file: copy_file_range (until e11b7e5) left the copy
// in 4 KB folios, none of it mapped whole, and its decode step 3-7 % slower
// than its source's.
class BlockFile {
 public:
  static constexpr size_t kBlockBytes = size_t{4} << 20;

  // Creates or truncates `<path>.tmp`. PermissionDenied where it cannot.
  static absl::StatusOr<std::unique_ptr<BlockFile>> Create(
      const std::string& path);
  // Without a Commit(), closes and removes `<path>.tmp`.
  ~BlockFile();
  BlockFile(const BlockFile&) = delete;
  BlockFile& operator=(const BlockFile&) = delete;

  // Appends `nbytes` at `data`. Internal, naming the file, on failure;
  // FailedPrecondition after Commit().
  absl::Status Write(const void* data, uint64_t nbytes);
  // Flushes, closes and renames `<path>.tmp` to `path`. Internal, naming the
  // file, on failure (the temporary file removed); FailedPrecondition when
  // already committed.
  absl::Status Commit();

 private:
  BlockFile(std::string path, std::FILE* file, std::unique_ptr<char[]> buffer)
      : path_(std::move(path)), file_(file), buffer_(std::move(buffer)) {}
  std::string TmpPath() const { return path_ + ".tmp"; }
  std::string path_;
  std::FILE* file_;                 // null once committed
  std::unique_ptr<char[]> buffer_;  // file_'s buffer: outlives it
};

}  // namespace lrkv

#endif  // LRKV_FORMATS_BLOCK_FILE_H_
