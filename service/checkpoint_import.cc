// Staging a registered checkpoint from one opening of each file (see
// checkpoint_import.h).
#include "service/checkpoint_import.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "formats/text_corpus.h"
#include "service/content_hash.h"
#include "service/store_integrity.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;

// An open descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status Denied(const std::string& path, const std::string& why) {
  return absl::PermissionDeniedError(
      absl::StrCat(path, ": ", why, " (start lrkvd with --allow-dir)"));
}

// Opens `path` read-only, beneath the allowed root that lexically contains its canonical
// form, one component at a time with O_NOFOLLOW: a component turned into a symlink
// since the path was resolved (or a ".." that escapes) fails instead of being followed.
absl::StatusOr<Fd> OpenChecked(const std::string& path, const std::vector<std::string>& roots) {
  // The system reads a path up to its first NUL: "/allowed/a.txt\0x" would open
  // another file than the one named.
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "path '", path.substr(0, path.find('\0')), "\\0...' holds a NUL byte"));
  }
  if (!IsValidUtf8(path)) {
    return absl::InvalidArgumentError("path is not valid UTF-8");
  }
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(path, ec);
  if (ec) return Denied(path, "cannot be resolved");
  for (const auto& root : roots) {
    const fs::path r = fs::weakly_canonical(root, ec);
    if (ec) continue;
    const fs::path rel = real.lexically_relative(r);
    if (rel.empty() || *rel.begin() == "..") continue;
    Fd dir(::open(r.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.get() < 0) continue;
    const std::vector<std::string> parts = absl::StrSplit(rel.string(), '/', absl::SkipEmpty());
    Fd cur = std::move(dir);
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i] == "..") return Denied(path, "outside the allowed folders");
      if (parts[i] == ".") continue;
      const bool last = i + 1 == parts.size();
      Fd next(::openat(cur.get(), parts[i].c_str(),
                       O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? 0 : O_DIRECTORY)));
      if (next.get() < 0) {
        const int err = errno;
        if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": not found"));
        if (err == ELOOP || err == ENOTDIR) {
          return Denied(path, "a symlink appeared on the way while it was opened");
        }
        return absl::PermissionDeniedError(
            absl::StrCat(path, ": cannot open: ", std::strerror(err)));
      }
      cur = std::move(next);
    }
    return cur;
  }
  return Denied(path, "outside the allowed folders");
}

// Puts a copy of the opened file `fd` at `dest`, owned by lrkvd and read-only:
// a reflink where the file system shares extents (FICLONE: instant, and a later
// write to either file copies the block it touches), else the bytes in whole 4
// MiB blocks (so that the page cache holds the copy as large folios for the
// jobs that map it, formats/block_file.h). Never a hard link: the client's
// inode would be the store's, and a rewrite of their file a rewrite of every
// job's input under its id.
absl::Status Stage(int fd, const std::string& dest) {
  Fd out(::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
  if (out.get() < 0) {
    // Messages never name the server's staging path: the caller names the client's.
    return absl::InternalError(absl::StrCat("cannot stage a copy: ", std::strerror(errno)));
  }
  if (::ioctl(out.get(), FICLONE, fd) == 0) return absl::OkStatus();
  std::vector<char> buf(size_t{4} << 20);
  for (off_t off = 0;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), off);
    if (n < 0) return absl::InternalError(absl::StrCat("read failed: ", std::strerror(errno)));
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out.get(), buf.data() + done, n - done);
      if (w <= 0) {
        const int err = errno;
        const std::string msg = absl::StrCat("staging a copy failed: ", std::strerror(err));
        return err == ENOSPC ? absl::ResourceExhaustedError(msg) : absl::InternalError(msg);
      }
      done += w;
    }
    off += n;
  }
  if (::fdatasync(out.get()) != 0) {
    return absl::InternalError("staging a copy failed: fdatasync failed");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImportedCheckpoint> ImportCheckpoint(const std::string& path,
                                                    const std::vector<std::string>& roots,
                                                    const std::string& staging_root) {
  ASSIGN_OR_RETURN(Fd fd, OpenChecked(path, roots));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::InternalError(absl::StrCat(path, ": fstat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": neither a file nor a folder"));
  }
  std::error_code ec;
  ImportedCheckpoint out;
  std::random_device rd;
  out.staging_dir =
      (fs::path(staging_root) / absl::StrCat(".import-", rd(), "-", rd())).string();
  fs::create_directories(out.staging_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": cannot stage a copy: ", ec.message()));
  auto fail = [&](absl::Status s) {
    fs::remove_all(out.staging_dir, ec);
    return s;
  };
  if (S_ISREG(st.st_mode)) {
    out.staged = (fs::path(out.staging_dir) / fs::path(path).filename()).string();
    if (auto s = Stage(fd.get(), out.staged); !s.ok()) {
      return fail(absl::Status(s.code(), absl::StrCat(path, ": ", s.message())));
    }
    return out;
  }
  // A folder: its regular files, each opened once; a symlinked entry (a Hugging Face
  // cache snapshot links its files into ../../blobs) only when its target lies beneath
  // an allowed folder too. Subfolders are not part of a checkpoint.
  out.staged = (fs::path(out.staging_dir) / "checkpoint").string();
  fs::create_directories(out.staged, ec);
  DIR* dir = ::fdopendir(::dup(fd.get()));
  if (dir == nullptr) return fail(absl::InternalError(absl::StrCat(path, ": cannot list")));
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  const fs::path real_dir = fs::weakly_canonical(path, ec);
  for (const std::string& name : names) {
    Fd entry(::openat(fd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (entry.get() < 0 && errno == ELOOP) {
      auto target = OpenChecked((real_dir / name).string(), roots);
      if (!target.ok()) return fail(target.status());
      entry = std::move(*target);
    }
    if (entry.get() < 0) continue;
    struct stat es;
    if (::fstat(entry.get(), &es) != 0 || !S_ISREG(es.st_mode)) continue;
    if (auto s = Stage(entry.get(), (fs::path(out.staged) / name).string()); !s.ok()) {
      return fail(absl::Status(s.code(), absl::StrCat(path, "/", name, ": ", s.message())));
    }
  }
  return out;
}

absl::Status CheckBeneathAllowedRoots(const std::string& path,
                                      const std::vector<std::string>& roots) {
  return OpenChecked(path, roots).status();
}

absl::StatusOr<std::string> ImportTextInput(const std::string& path,
                                            const std::vector<std::string>& roots,
                                            const std::string& inputs_dir) {
  ASSIGN_OR_RETURN(Fd fd, OpenChecked(path, roots));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (a text file is needed)"));
  }
  std::error_code ec;
  fs::create_directories(inputs_dir, ec);
  std::random_device rd;
  const std::string staged =
      (fs::path(inputs_dir) / absl::StrCat(".import-", rd(), "-", rd())).string();
  if (absl::Status s = Stage(fd.get(), staged); !s.ok()) {
    fs::remove(staged, ec);
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  // A file no job could read as text (a binary, a folder) is refused here,
  // before it is kept, by the rule the job's own check applies
  // (formats/text_corpus.h); the message names the client's path, not the
  // staged copy.
  if (absl::Status text = CheckTextFile(staged, ""); !text.ok()) {
    fs::remove(staged, ec);
    return absl::Status(text.code(),
                        absl::StripLeadingAsciiWhitespace(
                            absl::StrReplaceAll(text.message(), {{staged, path}})));
  }
  auto sha = Sha256OfPath(staged);
  if (!sha.ok()) {
    fs::remove(staged, ec);
    return sha.status();
  }
  const std::string dest = (fs::path(inputs_dir) / (*sha + ".txt")).string();
  if (fs::exists(dest, ec)) {
    // The entry is kept only while its bytes still hash to its name; one that does not
    // is quarantined and replaced by the bytes just read.
    if (absl::StatusOr<std::string> kept = Sha256OfPath(dest); kept.ok() && *kept == *sha) {
      fs::remove(staged, ec);
      return dest;
    }
    if (auto moved = Quarantine(fs::path(inputs_dir).parent_path().string(), dest);
        !moved.ok()) {
      fs::remove(staged, ec);
      return absl::InternalError(absl::StrCat(
          path, ": its stored copy does not match its hash and ", moved.status().message()));
    }
  }
  fs::rename(staged, dest, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot keep the staged copy: ", ec.message()));
  }
  return dest;
}

}  // namespace lrkv::service
