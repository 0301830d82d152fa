// Disk full: lrkvd runs with its data folder on a small tmpfs of its own (a
// user and mount namespace, `unshare -rm`, so no privilege is needed), and the
// tests fill it. Uploads and submissions that cannot be stored are
// RESOURCE_EXHAUSTED and leave nothing; a job whose output does not fit ends
// FAILED naming the cause, with no partial artifact or report; the database
// stays consistent, and once space is back the server works as before. Skipped,
// saying why, where namespaces or tmpfs mounts are refused. (The database is
// checked in a copy taken after shutdown: see SetUp.)
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/store.h"
#include "tests/service/daemon_process.h"
#include "tests/test_paths.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// Appends zeros to `path` until the file system refuses (ENOSPC), then gives
// `leave` bytes back; returns false when the refusal was anything else.
bool FillLeaving(const fs::path& path, off_t leave) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return false;
  const std::string block(64 << 10, '\0');
  int err = 0;
  while (true) {
    const ssize_t n = write(fd, block.data(), block.size());
    if (n < 0) {
      err = errno;
      break;
    }
  }
  if (err == ENOSPC) {
    const off_t size = lseek(fd, 0, SEEK_END);
    if (ftruncate(fd, size > leave ? size - leave : 0) != 0) err = errno;
  }
  close(fd);
  return err == ENOSPC;
}

class DiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lrkv::testing::FreshTempDir("disk_full");
    data_ = dir_ / "data";
    fs::create_directories(data_);
    // lrkvd runs as a child of the shell, which on SIGTERM passes it on, waits
    // for it and copies the data folder out: SQLite resolves /proc/PID/root to
    // "/", so the database can only be opened from this namespace once copied.
    fs::create_directories(dir_ / "after");
    std::string command = absl::StrCat("mount -t tmpfs -o size=6m tmpfs '",
                                       data_.string(), "' || exit 97;");
    for (const auto& a : LrkvdArgs(data_.string()))
      absl::StrAppend(&command, " '", a, "'");
    absl::StrAppend(
        &command,
        " & p=$!; trap 'kill -TERM $p' TERM; wait $p; wait $p; cp -a '",
        data_.string(), "/.' '", (dir_ / "after").string(), "/'");
    daemon_ = StartDaemon({"unshare", "-rm", "sh", "-c", command});
    if (daemon_.port == 0) {
      waitpid(daemon_.pid, nullptr, 0);
      GTEST_SKIP()
          << "no user and mount namespace here (unshare -rm; mount -t tmpfs)";
    }
    // The daemon's view of its folder: the tmpfs inside its mount namespace.
    seen_ = fs::path(absl::StrCat("/proc/", daemon_.pid, "/root")) /
            data_.relative_path();
    stub_ = Connect(daemon_.port);
  }
  void TearDown() override {
    if (daemon_.port != 0) StopDaemon(daemon_);
  }

  grpc::Status Register(const std::string& path, v1::Checkpoint* out) {
    grpc::ClientContext ctx;
    v1::RegisterCheckpointRequest req;
    req.set_path(path);
    return stub_->RegisterCheckpoint(&ctx, req, out);
  }
  grpc::Status Submit(const std::string& ckpt, const std::string& params,
                      v1::Job* out) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_kind(v1::CONVERT);
    req.set_checkpoint_id(ckpt);
    req.set_params_json(params);
    return stub_->SubmitJob(&ctx, req, out);
  }
  grpc::Status Upload(const std::string& data, v1::Checkpoint* out) {
    grpc::ClientContext ctx;
    auto writer = stub_->UploadCheckpoint(&ctx, out);
    v1::UploadCheckpointRequest msg;
    msg.mutable_header()->set_upload_id("too-big");
    msg.mutable_header()->set_file_name("m.gguf");
    msg.mutable_header()->set_total_bytes(static_cast<int64_t>(data.size()));
    writer->Write(msg);
    for (size_t off = 0; off < data.size(); off += 1 << 20) {
      v1::UploadCheckpointRequest c;
      c.mutable_chunk()->set_offset(static_cast<int64_t>(off));
      c.mutable_chunk()->set_data(data.substr(off, 1 << 20));
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }
  int64_t FilesUnder(const fs::path& p) {
    std::error_code ec;
    int64_t n = 0;
    for (auto it = fs::recursive_directory_iterator(p, ec); it != fs::end(it);
         ++it)
      ++n;
    return n;
  }

  fs::path dir_, data_, seen_;
  Daemon daemon_;
  std::unique_ptr<v1::Lrkv::Stub> stub_;
};

TEST_F(DiskFullTest, FullStorageIsResourceExhaustedAndLosesNothing) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  // 200 kB free: less than the converted model (~1.1 MB) or an upload.
  ASSERT_TRUE(FillLeaving(seen_ / "filler", 200 << 10));

  v1::Checkpoint up;
  const grpc::Status upload = Upload(std::string(3 << 20, 'x'), &up);
  EXPECT_EQ(upload.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << upload.error_message();
  EXPECT_THAT(upload.error_message(), HasSubstr("No space left on device"));
  EXPECT_EQ(FilesUnder(seen_ / "uploads"),
            0);  // the partial upload and its space are gone

  v1::Job job;
  const grpc::Status submit =
      Submit(source.id(), R"({"variant": "lrkv", "rank": 2})", &job);
  ASSERT_TRUE(submit.ok())
      << submit.error_message();  // a job row fits in 200 kB
  const v1::Job failed = WaitFor(*stub_, job.id(), Ended);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_THAT(failed.error(), HasSubstr("No space left on device"));
  EXPECT_FALSE(fs::exists(seen_ / "artifacts" / job.id()));
  EXPECT_FALSE(fs::exists(seen_ / "reports" / (job.id() + ".json")));

  // Nothing at all left: a submission is refused whole, or (when SQLite still
  // has room in its log) accepted and failed like the one above; never
  // INTERNAL, never left running.
  ASSERT_TRUE(FillLeaving(seen_ / "filler", 0));
  v1::Job second;
  const grpc::Status refused =
      Submit(source.id(), R"({"variant": "lrkv", "rank": 2})", &second);
  EXPECT_THAT(refused.error_code(),
              AnyOf(grpc::StatusCode::OK, grpc::StatusCode::RESOURCE_EXHAUSTED))
      << refused.error_message();
  if (refused.ok()) {
    EXPECT_EQ(WaitFor(*stub_, second.id(), Ended).state(), v1::FAILED);
  } else {
    EXPECT_THAT(refused.error_message(), HasSubstr("full"));
  }

  // Space back: the same server converts, and its database is whole.
  fs::remove(seen_ / "filler");
  v1::Job third;
  ASSERT_TRUE(
      Submit(source.id(), R"({"variant": "lrkv", "rank": 2})", &third).ok());
  EXPECT_EQ(WaitFor(*stub_, third.id(), Ended).state(), v1::SUCCEEDED);
  EXPECT_EQ(GetJob(*stub_, job.id()).state(), v1::FAILED);
  StopDaemon(daemon_);
  daemon_.port = 0;
  auto store = Store::Open((dir_ / "after" / "lrkv.db").string());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->IntegrityCheck(), "ok");
  EXPECT_EQ(*(*store)->CountRows("conversions", job.id()), 0);
  EXPECT_EQ(*(*store)->CountRows("conversions", third.id()), 1);
  auto failed_row = (*store)->GetJob(job.id());
  ASSERT_TRUE(failed_row.ok());
  EXPECT_EQ(failed_row->state, JobState::kFailed);
  // A clean stop after a full disk leaves no job running (the next start would count
  // a crash attempt and run it again).
  JobFilter running;
  running.state = JobState::kRunning;
  EXPECT_TRUE((*store)->ListJobs(running, 100, "")->jobs.empty());
}

}  // namespace
}  // namespace lrkv::service
