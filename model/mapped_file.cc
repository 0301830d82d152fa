// A read-only memory map of a whole file, released on destruction.
#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lrkv {
namespace {

// The live maps by start address (their size and descriptor), and the lock
// that guards them. Never destroyed: a map may outlive static destruction.
struct LiveMap {
  size_t size;
  int fd;
};
struct LiveMaps {
  std::mutex mutex;
  std::map<uintptr_t, LiveMap> by_start;
};
LiveMaps& Live() {
  static auto* live = new LiveMaps;
  return *live;
}

}  // namespace

std::optional<MappedSource> FindMappedSource(const void* data, size_t size) {
  const auto start = reinterpret_cast<uintptr_t>(data);
  LiveMaps& live = Live();
  const std::lock_guard<std::mutex> lock(live.mutex);
  auto it = live.by_start.upper_bound(start);
  if (it == live.by_start.begin()) return std::nullopt;
  --it;
  const uintptr_t offset = start - it->first;
  if (offset > it->second.size || size > it->second.size - offset) {
    return std::nullopt;
  }
  return MappedSource{it->second.fd, offset};
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg)
                         : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    data = static_cast<const uint8_t*>(p);
    LiveMaps& live = Live();
    const std::lock_guard<std::mutex> lock(live.mutex);
    live.by_start[reinterpret_cast<uintptr_t>(data)] = {size, fd};
  }
  return std::unique_ptr<MappedFile>(new MappedFile(path, fd, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) {
    {
      LiveMaps& live = Live();
      const std::lock_guard<std::mutex> lock(live.mutex);
      live.by_start.erase(reinterpret_cast<uintptr_t>(data_));
    }
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  ::close(fd_);
}

}  // namespace lrkv
