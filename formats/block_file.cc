// Block-aligned file writes (see block_file.h).
#include "formats/block_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lrkv {
namespace {

absl::Status IoError(const std::string& path, const char* what) {
  return absl::InternalError(
      absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

// Maps the pages of [data, data + nbytes) in one call where they are a file's
// map not yet touched (a source's untouched tensors): write() from them would
// otherwise fault them in a few at a time. Advice only; failures are ignored.
void PopulateForReading(const void* data, uint64_t nbytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + nbytes;
  ::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BlockFile>> BlockFile::Create(
    const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  }
  // Not make_unique: it would zero 4 MiB for every small file.
  std::unique_ptr<char[]> buffer(new char[kBlockBytes]);
  std::setvbuf(file, buffer.get(), _IOFBF, kBlockBytes);
  return std::unique_ptr<BlockFile>(
      new BlockFile(path, file, std::move(buffer)));
}

BlockFile::~BlockFile() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  std::remove(TmpPath().c_str());
}

absl::Status BlockFile::Write(const void* data, uint64_t nbytes) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": written after Commit()"));
  }
  if (nbytes == 0) return absl::OkStatus();
  PopulateForReading(data, nbytes);
  if (std::fwrite(data, 1, nbytes, file_) != nbytes) {
    return IoError(TmpPath(), "write failed");
  }
  return absl::OkStatus();
}

absl::Status BlockFile::Commit() {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": committed twice"));
  }
  const bool flushed = std::fflush(file_) == 0;
  const int rc = std::fclose(file_);
  file_ = nullptr;
  absl::Status st;
  if (!flushed || rc != 0) {
    st = IoError(TmpPath(), "write failed");
  } else if (std::rename(TmpPath().c_str(), path_.c_str()) != 0) {
    st = IoError(path_, "rename failed");
  }
  if (!st.ok()) std::remove(TmpPath().c_str());
  return st;
}

}  // namespace lrkv
