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
#include "base/status_macros.h"
#include "formats/safetensors.h"
#include "nlohmann/json.hpp"
#include "service/content_hash.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;

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
  uint64_t holder = 0;  // the stream that may write it; 0: none
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
    const std::string id = name.substr(0, name.size() - kSuffix.size());
    if (auto it = uploads_.find(id); it != uploads_.end() && it->second->holder != 0) continue;
    if (fs::last_write_time(e.path(), ec) < cutoff && !ec) {
      expired.push_back(id);
    }
  }
  for (const std::string& id : expired) {
    RemoveFiles(id);
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
  if (!ValidUploadId(id)) {
    return absl::InvalidArgumentError("upload_id must be 1-128 letters, digits, '-' or '_'");
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

uint64_t UploadReceiver::NewStream() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_stream_++;
}

absl::StatusOr<UploadReceiver::Upload*> UploadReceiver::Held(const std::string& id,
                                                             uint64_t stream) {
  ASSIGN_OR_RETURN(Upload * u, Find(id));
  if (u->holder != stream) {
    return absl::FailedPreconditionError(
        absl::StrCat("upload '", id, "' is not held by this stream"));
  }
  return u;
}

absl::StatusOr<UploadProgress> UploadReceiver::Begin(const UploadHeaderInfo& h,
                                                     uint64_t stream) {
  RETURN_IF_ERROR(ValidateUploadHeader(h, options_.max_bytes));
  std::lock_guard<std::mutex> lock(mu_);
  ExpireAbandoned();
  auto existing = Find(h.upload_id);
  if (existing.ok()) {
    Upload& e = **existing;
    if (e.holder != 0 && e.holder != stream) {
      return absl::AbortedError(absl::StrCat(
          "upload '", h.upload_id, "' is being received on another stream; one stream "
          "at a time sends an upload (resume once that stream has ended)"));
    }
    if (e.header.file_name != h.file_name || e.header.total_bytes != h.total_bytes ||
        e.header.config_json != h.config_json || e.header.tokenizer_json != h.tokenizer_json) {
      return absl::FailedPreconditionError(absl::StrCat(
          "upload '", h.upload_id, "' already exists with another header (",
          e.header.file_name, ", ", e.header.total_bytes, " bytes); pick a new upload_id"));
    }
    e.holder = stream;
    return Measure(e.ranges, e.header.total_bytes);
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();
  auto u = std::make_unique<Upload>();
  u->header = h;
  u->holder = stream;
  u->gguf = fs::path(h.file_name).extension() == ".gguf";
  u->dir = Base(h.upload_id) + ".d";
  u->data_path = u->dir + (u->gguf ? "/model.gguf" : "/model.safetensors");
  // Messages name the upload, never the server's staging path.
  auto failed = [&](const std::string& what, const std::string& why) {
    RemoveFiles(h.upload_id);
    return absl::StrCat("upload '", h.upload_id, "': ", what, ": ", why);
  };
  std::error_code ec;
  fs::remove_all(u->dir, ec);
  fs::create_directories(u->dir, ec);
  if (ec) return absl::InternalError(failed("cannot create its staging folder", ec.message()));
  {
    std::ofstream create(u->data_path, std::ios::binary);
    if (!create) return absl::InternalError(failed("cannot create its data file", "open failed"));
  }
  fs::resize_file(u->data_path, static_cast<uintmax_t>(h.total_bytes), ec);
  if (ec) return absl::ResourceExhaustedError(failed("cannot reserve its size", ec.message()));
  absl::Status st = absl::OkStatus();
  if (!u->gguf && !h.config_json.empty()) {
    st = WriteFileAtomically(u->dir + "/config.json", h.config_json);
  }
  if (st.ok() && !u->gguf && !h.tokenizer_json.empty()) {
    st = WriteFileAtomically(u->dir + "/tokenizer.lrkv.json", h.tokenizer_json);
  }
  if (st.ok()) st = SaveState(*u);
  if (!st.ok()) {
    return absl::Status(st.code(), failed("cannot stage its header", std::string(st.message())));
  }
  uploads_[h.upload_id] = std::move(u);
  return Measure({}, h.total_bytes);
}

absl::Status UploadReceiver::Write(const std::string& id, uint64_t stream, int64_t offset,
                                   const std::string& data) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Upload * u, Held(id, stream));
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
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("upload '", id, "': cannot open its data file: ", std::strerror(errno)));
  }
  int64_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pwrite(fd, data.data() + done, size - done, offset + done);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      const std::string msg =
          absl::StrCat("upload '", id, "': write failed: ", std::strerror(err));
      return err == ENOSPC || err == EDQUOT ? absl::ResourceExhaustedError(msg)
                                            : absl::InternalError(msg);
    }
    done += n;
  }
  // The chunk counts as committed only once it is on disk.
  const bool synced = ::fdatasync(fd) == 0;
  ::close(fd);
  if (!synced) {
    return absl::InternalError(absl::StrCat("upload '", id, "': fdatasync failed"));
  }
  AddRange(u->ranges, offset, offset + size);
  return SaveState(*u);
}

absl::StatusOr<UploadProgress> UploadReceiver::Progress(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Upload * u, Find(id));
  return Measure(u->ranges, u->header.total_bytes);
}

absl::StatusOr<std::string> UploadReceiver::Complete(const std::string& id, uint64_t stream,
                                                     const std::string& sha256) {
  std::unique_lock<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Upload * u, Held(id, stream));
  const UploadProgress p = Measure(u->ranges, u->header.total_bytes);
  if (p.committed_bytes != p.total_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "upload '", id, "' is incomplete: ", p.committed_bytes, " of ",
        p.total_bytes, " bytes committed; send the rest, then the trailer"));
  }
  // Hashed without the lock (other uploads go on): this stream holds the upload, so no
  // write reaches its file until Release, and the bytes hashed are the bytes kept.
  const std::string data_path = u->data_path;
  lock.unlock();
  absl::StatusOr<std::string> actual = Sha256OfPath(data_path);
  if (!actual.ok()) {
    return absl::Status(actual.status().code(),
                        absl::StrCat("upload '", id, "': cannot read its data file"));
  }
  if (*actual != sha256) {
    Discard(id, stream);
    return absl::InvalidArgumentError(absl::StrCat(
        "trailer.sha256 ", sha256, " does not match the received file's ",
        *actual, "; the upload was discarded"));
  }
  return u->gguf ? u->data_path : u->dir;
}

void UploadReceiver::RemoveFiles(const std::string& id) {
  std::error_code ec;
  fs::remove_all(Base(id) + ".d", ec);
  fs::remove(Base(id) + ".state.json", ec);
}

void UploadReceiver::Discard(const std::string& id, uint64_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Held(id, stream).ok()) return;
  uploads_.erase(id);
  RemoveFiles(id);
}

void UploadReceiver::Release(const std::string& id, uint64_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = uploads_.find(id); it != uploads_.end() && it->second->holder == stream) {
    it->second->holder = 0;
  }
}

}  // namespace lrkv::service
