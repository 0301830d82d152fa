// lrkvd's store cannot be rewritten by a user: registration copies the user's
// file (a hard link shared the inode, so rewriting the registered file rewrote
// every job's input under that id), entries written behind lrkvd's back are
// quarantined before a job reads them, text inputs alike; and the edges of the
// API: invalid UTF-8 in streamed requests, messages after an upload's trailer,
// a swapped TLS pair, job errors that name no server path.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "service/content_hash.h"
#include "tests/service/service_fixture.h"
#include "tests/service/service_probe_util.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using StoreRewriteTest = ServiceTest;

// Overwrites the last `n` bytes of `path` in place (the same inode, as an
// editor or a training run writing its output would).
void RewriteTail(const fs::path& path, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-static_cast<std::streamoff>(n), std::ios::end);
  const std::string junk(n, '\x7f');
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
}

ino_t Inode(const fs::path& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST_F(StoreRewriteTest, ARewriteOfARegisteredFileNeverReachesAJob) {
  const fs::path mine = dir_ / "data" / "mine";
  fs::create_directories(mine);
  fs::copy_file(lrkv::testing::StoriesModelPath(), mine / "stories.gguf");
  v1::Checkpoint ck;
  ASSERT_TRUE(Register((mine / "stories.gguf").string(), &ck).ok());
  const fs::path entry = dir_ / "data" / "checkpoints" / (ck.id() + ".gguf");
  ASSERT_TRUE(fs::exists(entry));
  EXPECT_NE(Inode(entry), Inode(mine / "stories.gguf"));  // a copy, not a link
  EXPECT_EQ(fs::status(entry).permissions() & fs::perms::owner_write,
            fs::perms::none);
  // The user rewrites the output projection (the file's last tensor) in place.
  RewriteTail(mine / "stories.gguf", 64 << 10);
  ASSERT_NE(*Sha256OfPath((mine / "stories.gguf").string()), ck.id());
  // The first 16 KB of the shared excerpt as held-out text.
  std::ifstream excerpt(lrkv::testing::SharedPath("data") +
                        "/tinystories-valid-excerpt.txt");
  std::string head(16 << 10, '\0');
  excerpt.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(excerpt.gcount()));
  const std::string eval = (mine / "eval.txt").string();
  std::ofstream(eval) << head.substr(0, head.rfind('\n') + 1);
  v1::Job job;
  ASSERT_TRUE(
      Submit(v1::CONVERT, ck.id(),
             nlohmann::json{{"variant", "gqa"}, {"kv_heads", 2}, {"eval", eval}}
                 .dump(),
             &job)
          .ok());
  const v1::Job done = WaitDone(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  v1::Report report;
  ASSERT_TRUE(GetReport(job.id(), &report).ok());
  const auto j = nlohmann::json::parse(report.json());
  // The registered bytes: stories260K's held-out perplexity is about 3.4; the
  // rewritten file's was 512.
  ASSERT_TRUE(j.contains("perplexity_before")) << report.json().substr(0, 400);
  EXPECT_LT(j["perplexity_before"].get<double>(), 10.0);
  EXPECT_EQ(j["provenance"]["job"]["checkpoint_sha256"], ck.id());
  EXPECT_EQ(*Sha256OfPath(entry.string()), ck.id());
}

TEST_F(StoreRewriteTest,
       AnEntryWrittenBehindLrkvdsBackIsQuarantinedBeforeAJobReadsIt) {
  v1::Checkpoint ck;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  const fs::path entry = dir_ / "data" / "checkpoints" / (ck.id() + ".gguf");
  // A job reads it once (hashing it), then the entry is changed on disk.
  v1::Job first;
  ASSERT_TRUE(
      Submit(v1::CONVERT, ck.id(), R"({"variant": "lrkv", "rank": 2})", &first)
          .ok());
  ASSERT_EQ(WaitDone(first.id()).state(), v1::SUCCEEDED);
  fs::permissions(entry, fs::perms::owner_write, fs::perm_options::add);
  RewriteTail(entry, 4096);
  v1::Job job;
  ASSERT_TRUE(
      Submit(v1::CONVERT, ck.id(), R"({"variant": "lrkv", "rank": 2})", &job)
          .ok());
  const v1::Job done = WaitDone(job.id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_THAT(done.error(), HasSubstr("checkpoint " + ck.id()));
  EXPECT_THAT(done.error(), HasSubstr("quarantined"));
  EXPECT_THAT(done.error(), Not(HasSubstr(dir_.string())));
  EXPECT_FALSE(fs::exists(entry));
  EXPECT_EQ(FilesUnder(dir_ / "data" / "quarantine"), 1);
  // Registering the file again restores the entry.
  v1::Checkpoint again;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &again).ok());
  EXPECT_EQ(again.id(), ck.id());
  EXPECT_EQ(*Sha256OfPath(entry.string()), ck.id());
}

TEST_F(StoreRewriteTest, AChangedTextInputEntryIsReplacedNotReused) {
  v1::Checkpoint ck;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  const fs::path mine = dir_ / "data" / "texts";
  fs::create_directories(mine);
  std::ofstream(mine / "calib.txt") << "Once upon a time, there was a cat.\n";
  const std::string params =
      nlohmann::json{{"variant", "lrkv"},
                     {"rank", 2},
                     {"metric", "activation"},
                     {"calib", (mine / "calib.txt").string()}}
          .dump();
  v1::Job job;
  ASSERT_TRUE(Submit(v1::CONVERT, ck.id(), params, &job).ok());
  ASSERT_EQ(WaitDone(job.id()).state(), v1::SUCCEEDED);
  const std::string sha = *Sha256OfPath((mine / "calib.txt").string());
  const fs::path entry = dir_ / "data" / "inputs" / (sha + ".txt");
  ASSERT_TRUE(fs::exists(entry));
  fs::permissions(entry, fs::perms::owner_write, fs::perm_options::add);
  std::ofstream(entry) << "something else entirely\n";
  // The same text submitted again: the stale entry is quarantined, replaced.
  ASSERT_TRUE(Submit(v1::CONVERT, ck.id(), params, &job).ok());
  ASSERT_EQ(WaitDone(job.id()).state(), v1::SUCCEEDED);
  EXPECT_EQ(*Sha256OfPath(entry.string()), sha);
  EXPECT_EQ(FilesUnder(dir_ / "data" / "quarantine"), 1);
}

TEST_F(StoreRewriteTest,
       StreamedRequestsWithInvalidUtf8OrTrailingMessagesAreInvalidArgument) {
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id("job-\xff");
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobProgress p;
    while (reader->Read(&p)) {
    }
    const grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("'job_id'"));
  }
  const std::string data = "GGUF-not-really";
  // Sends one upload of `data`: header, chunk, a trailer with `sha`, then
  // `after` (if any); the call's status.
  auto upload = [&](const std::string& id, const std::string& sha,
                    const std::vector<v1::UploadCheckpointRequest>& after) {
    grpc::ClientContext ctx;
    v1::Checkpoint out;
    auto writer = stub_->UploadCheckpoint(&ctx, &out);
    writer->Write(Header(id, static_cast<int64_t>(data.size())));
    writer->Write(Chunk(0, data));
    v1::UploadCheckpointRequest trailer;
    trailer.mutable_trailer()->set_sha256(sha);
    writer->Write(trailer);
    for (const auto& m : after) writer->Write(m);
    writer->WritesDone();
    return writer->Finish();
  };
  grpc::Status st = upload("bad-trailer", "\xc3\x28", {});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("sha256"));
  EXPECT_THAT(st.error_message(), Not(HasSubstr("without a trailer")));
  st = upload("after-trailer", Sha256OfBytes(data), {Chunk(0, data)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr("trailer must be the last message"));
  // Both failed for good: nothing of them stays staged.
  EXPECT_EQ(FilesUnder(dir_ / "data" / "uploads"), 0);
}

TEST_F(StoreRewriteTest, ASwappedTlsPairIsNamedAsSuch) {
  const fs::path tls = dir_ / "tls";
  fs::create_directories(tls);
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -days 1 "
      "-keyout '" +
      (tls / "key.pem").string() + "' -out '" + (tls / "cert.pem").string() +
      "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = (dir_ / "tls-data").string();
  o.tls_cert_file = (tls / "key.pem").string();
  o.tls_key_file = (tls / "cert.pem").string();
  auto swapped = LrkvServer::Start(o);
  ASSERT_FALSE(swapped.ok());
  EXPECT_EQ(swapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(swapped.status().message(), HasSubstr("swapped"));
  EXPECT_THAT(swapped.status().message(), Not(HasSubstr("in use")));
  o.tls_cert_file = (tls / "cert.pem").string();
  o.tls_key_file = (tls / "key.pem").string();
  EXPECT_TRUE(LrkvServer::Start(o).ok());
}

}  // namespace
}  // namespace lrkv::service
