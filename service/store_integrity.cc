#include "service/store_integrity.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "service/content_hash.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;

// What changes when a file is written, replaced or re-linked: its inode, size,
// link count and times (ctime moves on every write and cannot be set back).
std::string FileStamp(const fs::path& p) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_ino, ":", st.st_size, ":", st.st_nlink, ":",
                      st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ":",
                      st.st_ctim.tv_sec, ".", st.st_ctim.tv_nsec, ";");
}

// A file's stamp, or a folder's: its model files' in name order.
std::string Stamp(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return FileStamp(path);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (e.is_regular_file() && IsModelFile(e.path().filename().string())) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  std::string out = FileStamp(path);
  for (const auto& f : files)
    absl::StrAppend(&out, f.filename().string(), "=", FileStamp(f));
  return out;
}

void CollectStrings(const nlohmann::json& j, std::vector<std::string>* out) {
  if (j.is_string()) {
    out->push_back(j.get<std::string>());
  } else if (j.is_structured()) {
    for (const auto& v : j) CollectStrings(v, out);
  }
}

}  // namespace

absl::StatusOr<std::string> Quarantine(const std::string& data_dir,
                                       const std::string& path) {
  std::error_code ec;
  const fs::path dest =
      fs::path(data_dir) / "quarantine" /
      absl::StrCat(fs::path(path).filename().string(), ".", std::time(nullptr),
                   "-", std::random_device{}());
  fs::create_directories(dest.parent_path(), ec);
  fs::rename(path, dest, ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot quarantine it: ", ec.message()));
  return dest.string();
}

absl::Status StoreIntegrity::Check(const std::string& path,
                                   const std::string& sha256,
                                   const std::string& shown) {
  const std::string stamp = Stamp(path);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = verified_.find(path);
    if (it != verified_.end() && it->second == stamp && !stamp.empty())
      return absl::OkStatus();
  }
  absl::StatusOr<std::string> now = Sha256OfPath(path);
  if (now.ok() && *now == sha256) {
    std::lock_guard<std::mutex> lock(mu_);
    verified_[path] = stamp;
    return absl::OkStatus();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    verified_.erase(path);
  }
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        shown, " is no longer in the store; register or upload it again"));
  }
  absl::StatusOr<std::string> moved = Quarantine(data_dir_, path);
  std::fprintf(stderr,
               "lrkvd: %s: stored bytes hash to %s, not to its id; %s\n",
               shown.c_str(), now.ok() ? now->c_str() : "(unreadable)",
               moved.ok() ? ("quarantined as " + *moved).c_str()
                          : std::string(moved.status().message()).c_str());
  return absl::FailedPreconditionError(absl::StrCat(
      shown, ": its stored bytes no longer hash to its id (they hash to ",
      now.ok() ? *now : std::string("nothing readable"),
      "); the entry was quarantined and this job did not read it: register or "
      "upload it "
      "again"));
}

absl::Status StoreIntegrity::CheckCheckpoint(const std::string& id,
                                             const std::string& path) {
  return Check(path, id, absl::StrCat("checkpoint ", id));
}

absl::Status StoreIntegrity::CheckParams(const std::string& params_json) {
  const nlohmann::json params =
      nlohmann::json::parse(params_json, nullptr, false);
  if (params.is_discarded())
    return absl::OkStatus();  // refused by the job's own parse
  std::vector<std::string> strings;
  CollectStrings(params, &strings);
  const std::string checkpoints =
      (fs::path(data_dir_) / "checkpoints").string() + "/";
  const std::string inputs = (fs::path(data_dir_) / "inputs").string() + "/";
  for (const std::string& s : strings) {
    if (absl::StartsWith(s, checkpoints)) {
      std::string id = fs::path(s).filename().string();
      if (absl::EndsWith(id, ".gguf")) id.resize(id.size() - 5);
      if (absl::Status st = CheckCheckpoint(id, s); !st.ok()) return st;
    } else if (absl::StartsWith(s, inputs) && absl::EndsWith(s, ".txt")) {
      const std::string name = fs::path(s).filename().string();
      const std::string sha = name.substr(0, name.size() - 4);
      if (absl::Status st = Check(s, sha, absl::StrCat("text input ", name));
          !st.ok()) {
        return st;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lrkv::service
