// Content addresses of checkpoints (see content_hash.h).
#include "service/content_hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "formats/mapped_file.h"

namespace lrkv::service {

namespace fs = std::filesystem;

namespace {

std::string Hex(const unsigned char* digest, unsigned int len) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 15]);
  }
  return out;
}

}  // namespace

std::string Sha256OfBytes(const std::string& bytes) {
  unsigned char digest[32];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  return Hex(digest, len);
}

bool IsModelFile(const std::string& name) {
  static const std::set<std::string> kNames = {
      "config.json",          "model.safetensors.index.json", "tokenizer.json",
      "tokenizer_config.json", "tokenizer.lrkv.json",         "special_tokens_map.json",
      "generation_config.json", "tokenizer.model"};
  return kNames.count(name) > 0 || fs::path(name).extension() == ".safetensors" ||
         fs::path(name).extension() == ".gguf";
}

absl::StatusOr<std::string> Sha256OfPath(const std::string& path) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.is_regular_file() && IsModelFile(e.path().filename().string())) {
        files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  for (const auto& f : files) {
    auto mapped = MappedFile::Open(f.string());
    if (!mapped.ok()) {
      EVP_MD_CTX_free(ctx);
      return mapped.status();
    }
    if (files.size() > 1) {
      const std::string name = f.filename().string();
      EVP_DigestUpdate(ctx, name.data(), name.size());
    }
    EVP_DigestUpdate(ctx, (*mapped)->bytes().data(), (*mapped)->bytes().size());
  }
  unsigned char digest[32];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  return Hex(digest, len);
}

}  // namespace lrkv::service
