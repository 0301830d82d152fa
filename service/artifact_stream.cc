// A job's artifact folder as ArtifactChunks (see artifact_stream.h).
#include "service/artifact_stream.h"

#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lrkv::service {

namespace fs = std::filesystem;

namespace {

struct OpenedFile {
  std::string relative;
  std::unique_ptr<std::ifstream> in;
  int64_t size = 0;
};

// The artifact's gone (DeleteJob raced the stream): NotFound, not a server fault.
absl::Status Deleted() {
  return absl::NotFoundError("the job's artifact was deleted while it was being sent");
}

// Every regular file under `dir`, opened now: a file deleted afterwards (DeleteJob
// racing the stream) stays readable through its open handle, so the stream sends
// either the whole artifact or, when it vanished before it was opened, NotFound.
absl::StatusOr<std::vector<OpenedFile>> OpenAll(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> paths;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec)) paths.push_back(it->path());
  }
  if (ec) {
    return ec == std::errc::no_such_file_or_directory
               ? Deleted()
               : absl::InternalError(absl::StrCat("the job's artifact cannot be listed: ",
                                                  ec.message()));
  }
  std::sort(paths.begin(), paths.end());
  std::vector<OpenedFile> files;
  for (const fs::path& p : paths) {
    OpenedFile f;
    f.relative = fs::relative(p, dir, ec).generic_string();
    f.in = std::make_unique<std::ifstream>(p, std::ios::binary);
    if (!*f.in) return fs::exists(dir, ec) ? absl::InternalError(absl::StrCat(
                                                 f.relative, ": cannot be read"))
                                           : Deleted();
    f.in->seekg(0, std::ios::end);
    f.size = static_cast<int64_t>(f.in->tellg());
    f.in->seekg(0);
    files.push_back(std::move(f));
  }
  return files;
}

}  // namespace

absl::Status StreamArtifact(
    const std::string& dir,
    const std::function<bool(const v1::ArtifactChunk&)>& write) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError("the job left no artifact");
  }
  absl::StatusOr<std::vector<OpenedFile>> files = OpenAll(dir);
  if (!files.ok()) return files.status();
  std::string buffer(kArtifactChunkBytes, '\0');
  for (OpenedFile& file : *files) {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> sha(
        EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    EVP_DigestInit_ex(sha.get(), EVP_sha256(), nullptr);
    int64_t offset = 0;
    do {
      const int64_t n = std::min<int64_t>(kArtifactChunkBytes, file.size - offset);
      file.in->read(buffer.data(), n);
      if (file.in->gcount() != n) {
        return absl::InternalError(
            absl::StrCat(file.relative, ": changed while it was sent"));
      }
      EVP_DigestUpdate(sha.get(), buffer.data(), static_cast<size_t>(n));
      v1::ArtifactChunk chunk;
      chunk.set_path(file.relative);
      chunk.set_file_bytes(file.size);
      chunk.set_offset(offset);
      chunk.set_data(buffer.data(), static_cast<size_t>(n));
      offset += n;
      if (offset == file.size) {
        unsigned char digest[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        EVP_DigestFinal_ex(sha.get(), digest, &len);
        std::string hex;
        for (unsigned i = 0; i < len; ++i)
          absl::StrAppendFormat(&hex, "%02x", digest[i]);
        chunk.set_sha256(hex);
      }
      if (!write(chunk))
        return absl::CancelledError("the client stopped reading");
    } while (offset < file.size);
  }
  return absl::OkStatus();
}

}  // namespace lrkv::service
