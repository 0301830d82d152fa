// A job's artifact folder as ArtifactChunks (see artifact_stream.h).
#include "service/artifact_stream.h"

#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lrkv::service {

namespace fs = std::filesystem;

absl::Status StreamArtifact(
    const std::string& dir,
    const std::function<bool(const v1::ArtifactChunk&)>& write) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": the job left no artifact"));
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::end(it); it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path());
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  std::string buffer(kArtifactChunkBytes, '\0');
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const auto size = static_cast<int64_t>(fs::file_size(file, ec));
    if (!in || ec)
      return absl::InternalError(absl::StrCat(file.string(), ": cannot read"));
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> sha(
        EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    EVP_DigestInit_ex(sha.get(), EVP_sha256(), nullptr);
    const std::string relative = fs::relative(file, dir, ec).generic_string();
    int64_t offset = 0;
    do {
      const int64_t n = std::min<int64_t>(kArtifactChunkBytes, size - offset);
      in.read(buffer.data(), n);
      if (in.gcount() != n) {
        return absl::InternalError(
            absl::StrCat(file.string(), ": changed while it was sent"));
      }
      EVP_DigestUpdate(sha.get(), buffer.data(), static_cast<size_t>(n));
      v1::ArtifactChunk chunk;
      chunk.set_path(relative);
      chunk.set_file_bytes(size);
      chunk.set_offset(offset);
      chunk.set_data(buffer.data(), static_cast<size_t>(n));
      offset += n;
      if (offset == size) {
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
    } while (offset < size);
  }
  return absl::OkStatus();
}

}  // namespace lrkv::service
