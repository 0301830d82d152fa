// Staging for chunked, resumable checkpoint uploads (see upload_receiver.h).
#include "service/upload_receiver.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"
#include "model/status_macros.h"
#include "nlohmann/json.hpp"
#include "service/content_hash.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      return false;
  }
  return true;
}

// Bytes covered by `ranges` (merged, begin → end) contiguously from 0, and in
// all.
UploadProgress Measure(const std::map<int64_t, int64_t>& ranges,
                       int64_t total) {
  UploadProgress p;
  p.total_bytes = total;
  for (const auto& [b, e] : ranges) {
    p.received_bytes += e - b;
    if (b == p.committed_bytes) p.committed_bytes = e;
  }
  return p;
}

void AddRange(std::map<int64_t, int64_t>& ranges, int64_t begin, int64_t end) {
  auto it = ranges.upper_bound(begin);
  if (it != ranges.begin() && std::prev(it)->second >= begin) {
    --it;
    begin = it->first;
    end = std::max(end, it->second);
    it = ranges.erase(it);
  }
  while (it != ranges.end() && it->first <= end) {
    end = std::max(end, it->second);
    it = ranges.erase(it);
  }
  ranges[begin] = end;
}

}  // namespace

struct UploadReceiver::Upload {
  UploadHeaderInfo header;
  std::map<int64_t, int64_t> ranges;
  std::string dir;        // <staging>/<id>.d
  std::string data_path;  // dir/model.gguf or dir/model.safetensors
  bool gguf = false;
};

absl::StatusOr<std::unique_ptr<UploadReceiver>> UploadReceiver::Create(
    const UploadOptions& o) {
  if (o.staging_dir.empty())
    return absl::InvalidArgumentError("upload staging folder is required");
  if (o.max_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-upload-bytes ", o.max_bytes, " must be at least 1"));
  }
  std::error_code ec;
  fs::create_directories(o.staging_dir, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat(o.staging_dir, ": ", ec.message()));
  std::unique_ptr<UploadReceiver> r(new UploadReceiver(o));
  r->ExpireAbandoned();
  return r;
}

void UploadReceiver::ExpireAbandoned() {
  std::error_code ec;
  const auto cutoff = fs::file_time_type::clock::now() -
                      std::chrono::seconds(options_.abandoned_after_seconds);
  constexpr std::string_view kSuffix = ".state.json";
  std::vector<std::string> expired;
  for (const auto& e : fs::directory_iterator(options_.staging_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= kSuffix.size() ||
        name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
      continue;
    }
    // The state file is rewritten by every chunk: its time is the upload's last sign of life.
    if (fs::last_write_time(e.path(), ec) < cutoff && !ec) {
      expired.push_back(name.substr(0, name.size() - kSuffix.size()));
    }
  }
  for (const std::string& id : expired) {
    fs::remove(Base(id) + ".state.json", ec);
    fs::remove_all(Base(id) + ".d", ec);
    uploads_.erase(id);
  }
}

UploadReceiver::UploadReceiver(UploadOptions options)
    : options_(std::move(options)) {}
UploadReceiver::~UploadReceiver() = default;

std::string UploadReceiver::Base(const std::string& id) const {
  return (fs::path(options_.staging_dir) / id).string();
}

absl::Status UploadReceiver::SaveState(const Upload& u) {
  nlohmann::json ranges = nlohmann::json::array();
  for (const auto& [b, e] : u.ranges) ranges.push_back({b, e});
  const nlohmann::json state = {{"file_name", u.header.file_name},
                                {"total_bytes", u.header.total_bytes},
                                {"config_json", u.header.config_json},
                                {"tokenizer_json", u.header.tokenizer_json},
                                {"ranges", ranges}};
  return WriteFileAtomically(Base(u.header.upload_id) + ".state.json",
                             state.dump());
}

absl::StatusOr<UploadReceiver::Upload*> UploadReceiver::Find(
    const std::string& id) {
  if (!ValidId(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "upload_id '", id, "' must be 1-128 letters, digits, '-' or '_'"));
  }
  if (auto it = uploads_.find(id); it != uploads_.end())
    return it->second.get();
  // An upload a previous server process started.
  std::ifstream in(Base(id) + ".state.json");
  if (!in)
    return absl::NotFoundError(absl::StrCat("no upload with id '", id, "'"));
  auto u = std::make_unique<Upload>();
  try {
    const nlohmann::json s = nlohmann::json::parse(in);
    u->header.upload_id = id;
    u->header.file_name = s.at("file_name").get<std::string>();
    u->header.total_bytes = s.at("total_bytes").get<int64_t>();
    u->header.config_json = s.at("config_json").get<std::string>();
    u->header.tokenizer_json = s.at("tokenizer_json").get<std::string>();
    for (const auto& r : s.at("ranges"))
      u->ranges[r.at(0).get<int64_t>()] = r.at(1).get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("upload '", id, "': state file unreadable: ", e.what()));
  }
  u->gguf = fs::path(u->header.file_name).extension() == ".gguf";
  u->dir = Base(id) + ".d";
  u->data_path = u->dir + (u->gguf ? "/model.gguf" : "/model.safetensors");
  return (uploads_[id] = std::move(u)).get();
}

absl::StatusOr<UploadProgress> UploadReceiver::Begin(
    const UploadHeaderInfo& h) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ValidId(h.upload_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.upload_id '", h.upload_id,
                     "' must be 1-128 letters, digits, '-' or '_'"));
  }
  const std::string ext = fs::path(h.file_name).extension().string();
  if (h.file_name.find('/') != std::string::npos ||
      (ext != ".gguf" && ext != ".safetensors")) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.file_name '", h.file_name,
                     "' must be a plain name ending in .gguf or .safetensors"));
  }
  if (h.total_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.total_bytes ", h.total_bytes, " must be at least 1"));
  }
  if (h.total_bytes > options_.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("header.total_bytes ", h.total_bytes,
                     " exceeds this server's upload limit of ",
                     options_.max_bytes, " bytes"));
  }
  ExpireAbandoned();
  auto existing = Find(h.upload_id);
  if (existing.ok()) {
    const UploadHeaderInfo& e = (*existing)->header;
    if (e.file_name != h.file_name || e.total_bytes != h.total_bytes ||
        e.config_json != h.config_json ||
        e.tokenizer_json != h.tokenizer_json) {
      return absl::FailedPreconditionError(absl::StrCat(
          "upload '", h.upload_id, "' already exists with another header (",
          e.file_name, ", ", e.total_bytes, " bytes); pick a new upload_id"));
    }
    return Measure((*existing)->ranges, e.total_bytes);
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();
  auto u = std::make_unique<Upload>();
  u->header = h;
  u->gguf = ext == ".gguf";
  u->dir = Base(h.upload_id) + ".d";
  u->data_path = u->dir + (u->gguf ? "/model.gguf" : "/model.safetensors");
  std::error_code ec;
  fs::remove_all(u->dir, ec);
  fs::create_directories(u->dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(u->dir, ": ", ec.message()));
  {
    std::ofstream create(u->data_path, std::ios::binary);
    if (!create)
      return absl::InternalError(absl::StrCat(u->data_path, ": cannot create"));
  }
  fs::resize_file(u->data_path, static_cast<uintmax_t>(h.total_bytes), ec);
  if (ec)
    return absl::ResourceExhaustedError(
        absl::StrCat(u->data_path, ": ", ec.message()));
  if (!u->gguf && !h.config_json.empty()) {
    RETURN_IF_ERROR(
        WriteFileAtomically(u->dir + "/config.json", h.config_json));
  }
  if (!u->gguf && !h.tokenizer_json.empty()) {
    RETURN_IF_ERROR(
        WriteFileAtomically(u->dir + "/tokenizer.lrkv.json", h.tokenizer_json));
  }
  RETURN_IF_ERROR(SaveState(*u));
  uploads_[h.upload_id] = std::move(u);
  return Measure({}, h.total_bytes);
}

absl::Status UploadReceiver::Write(const std::string& id, int64_t offset,
                                   const std::string& data) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Upload * u, Find(id));
  const int64_t size = static_cast<int64_t>(data.size());
  if (size > options_.max_chunk_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk at offset ", offset, " holds ", size,
                     " bytes; chunks hold at most ", options_.max_chunk_bytes));
  }
  // Compared without forming offset + size, which overflows for offsets near 2^63.
  if (offset < 0 || offset > u->header.total_bytes - size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk at offset ", offset, " (", size, " bytes) lies outside the file's ",
        u->header.total_bytes, " bytes"));
  }
  if (size == 0) return absl::OkStatus();
  const int fd = ::open(u->data_path.c_str(), O_WRONLY);
  if (fd < 0)
    return absl::InternalError(absl::StrCat(u->data_path, ": cannot open"));
  int64_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pwrite(fd, data.data() + done, size - done, offset + done);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      const std::string msg = absl::StrCat(u->data_path, ": write failed: ", std::strerror(err));
      return err == ENOSPC || err == EDQUOT ? absl::ResourceExhaustedError(msg)
                                            : absl::InternalError(msg);
    }
    done += n;
  }
  // The chunk counts as committed only once it is on disk.
  const bool synced = ::fdatasync(fd) == 0;
  ::close(fd);
  if (!synced)
    return absl::InternalError(
        absl::StrCat(u->data_path, ": fdatasync failed"));
  AddRange(u->ranges, offset, offset + size);
  return SaveState(*u);
}

absl::StatusOr<UploadProgress> UploadReceiver::Progress(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Upload * u, Find(id));
  return Measure(u->ranges, u->header.total_bytes);
}

absl::StatusOr<std::string> UploadReceiver::Complete(
    const std::string& id, const std::string& sha256) {
  std::unique_lock<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Upload * u, Find(id));
  const UploadProgress p = Measure(u->ranges, u->header.total_bytes);
  if (p.committed_bytes != p.total_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "upload '", id, "' is incomplete: ", p.committed_bytes, " of ",
        p.total_bytes, " bytes committed; send the rest, then the trailer"));
  }
  ASSIGN_OR_RETURN(const std::string actual, Sha256OfPath(u->data_path));
  if (actual != sha256) {
    lock.unlock();
    Discard(id);
    return absl::InvalidArgumentError(absl::StrCat(
        "trailer.sha256 ", sha256, " does not match the received file's ",
        actual, "; the upload was discarded"));
  }
  return u->gguf ? u->data_path : u->dir;
}

void UploadReceiver::Discard(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ValidId(id)) return;
  uploads_.erase(id);
  std::error_code ec;
  fs::remove_all(Base(id) + ".d", ec);
  fs::remove(Base(id) + ".state.json", ec);
}

}  // namespace lrkv::service
