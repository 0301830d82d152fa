// lrkvd integrity, probed as an attacker and as a faulty disk would: request bodies
// nested deep enough to overflow a stack, a second stream rewriting an upload between
// its hash and its move into the store, a poisoned store entry, a pipeline whose later
// stages carry bad values, bytes after the params object, NULs in paths, invalid UTF-8,
// binary text inputs, and an artifact stream racing its job's deletion. Each answers
// with the right code and leaves nothing behind; the server stays up.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/content_hash.h"
#include "service/job_runner.h"
#include "service/store.h"
#include "tests/service/faulty_sqlite_vfs.h"
#include "tests/service/service_fixture.h"
#include "tests/service/service_probe_util.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

class IntegrityTest : public ServiceTest {
 protected:
  // Jobs the server lists.
  int JobCount() {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    EXPECT_TRUE(stub_->ListJobs(&ctx, req, &resp).ok());
    return resp.jobs_size();
  }

  // The server still answers: a registration of the shared model succeeds.
  void ExpectServerAlive() {
    v1::Checkpoint ck;
    const grpc::Status st = Register(lrkv::testing::StoriesModelPath(), &ck);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
};

// Item 1: 30,000 nested objects and 100,000 nested arrays in params_json (the bodies
// that killed lrkvd with SIGSEGV) are INVALID_ARGUMENT naming the depth limit; so is a
// deep config_json in an upload header and an oversized body. The server stays up.
TEST_F(IntegrityTest, DeepOrHugeBodiesAreRefusedNamingTheLimit) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  const std::vector<std::string> bodies = {
      Repeat("{\"x\":", 30000) + "1" + Repeat("}", 30000),
      "{\"rank\": " + Repeat("[", 100000) + Repeat("]", 100000) + "}",
      "{\"convert\": " + Repeat("{\"x\":", 30000) + "1" + Repeat("}", 30001),
  };
  for (const std::string& body : bodies) {
    for (v1::JobKind kind : {v1::CONVERT, v1::PIPELINE, v1::VERIFY}) {
      v1::Job job;
      const grpc::Status st = Submit(kind, source.id(), body, &job);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
      EXPECT_THAT(st.error_message(), HasSubstr("nested deeper than the limit of 64 levels"));
    }
  }
  // Over the 1 MiB limit (below the 2 MiB message limit, so it reaches the parser).
  v1::Job job;
  const std::string huge = "{\"label\": \"" + std::string(1536 << 10, 'a') + "\"}";
  grpc::Status st = Submit(v1::COMPARE, source.id(), huge, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("exceed the limit of 1048576 bytes"));
  // An upload header's config_json, parsed before a byte is staged.
  {
    grpc::ClientContext ctx;
    v1::Checkpoint out;
    auto writer = stub_->UploadCheckpoint(&ctx, &out);
    writer->Write(Header("deep-config", 100, Repeat("[", 100000) + Repeat("]", 100000)));
    writer->WritesDone();
    st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("header.config_json: nested deeper"));
  }
  EXPECT_EQ(FilesUnder(dir_ / "data" / "uploads"), 0);
  ExpectServerAlive();
  EXPECT_EQ(JobCount(), 0);
}

// Item 2: while one stream sends an upload, a second stream on another connection with
// the same upload_id is refused (ABORTED) and cannot rewrite a byte; the trailer's
// sha256 then names the bytes stored. 20 attempts, as the probe made them.
TEST_F(IntegrityTest, ASecondStreamCannotRewriteAnUploadInFlight) {
  const std::string data = ReadAll(lrkv::testing::StoriesModelPath());
  const std::string sha = Sha256OfBytes(data);
  const int64_t n = static_cast<int64_t>(data.size());
  auto other = v1::Lrkv::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  for (int attempt = 0; attempt < 20; ++attempt) {
    const std::string id = absl::StrCat("race-", attempt);
    grpc::ClientContext ctx_a;
    v1::Checkpoint out_a;
    auto a = stub_->UploadCheckpoint(&ctx_a, &out_a);
    ASSERT_TRUE(a->Write(Header(id, n)));
    for (int64_t off = 0; off < n; off += 1 << 20) {
      ASSERT_TRUE(a->Write(Chunk(off, data.substr(off, 1 << 20))));
    }
    // Wait until A's header and chunks are in (GetUploadStatus sees them all).
    for (int i = 0; i < 200; ++i) {
      grpc::ClientContext c;
      v1::GetUploadStatusRequest req;
      req.set_upload_id(id);
      v1::UploadStatus status;
      if (stub_->GetUploadStatus(&c, req, &status).ok() && status.committed_bytes() == n) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int tries = 0; tries < 3; ++tries) {
      grpc::ClientContext ctx_b;
      v1::Checkpoint out_b;
      auto b = other->UploadCheckpoint(&ctx_b, &out_b);
      b->Write(Header(id, n));
      b->Write(Chunk(n - 4096, std::string(4096, static_cast<char>(0xA5 + tries))));
      b->WritesDone();
      const grpc::Status refused = b->Finish();
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::ABORTED) << refused.error_message();
      EXPECT_THAT(refused.error_message(), HasSubstr("another stream"));
    }
    v1::UploadCheckpointRequest trailer;
    trailer.mutable_trailer()->set_sha256(sha);
    ASSERT_TRUE(a->Write(trailer));
    a->WritesDone();
    const grpc::Status st = a->Finish();
    ASSERT_TRUE(st.ok()) << attempt << ": " << st.error_message();
    EXPECT_EQ(out_a.id(), sha);
    // The entry's bytes are the genuine ones.
    EXPECT_EQ(Sha256OfBytes(ReadAll(dir_ / "data" / "checkpoints" / (sha + ".gguf"))), sha);
  }
  EXPECT_EQ(FilesUnder(dir_ / "data" / "uploads"), 0);
}

// Item 2: a store entry whose bytes no longer match its id (tampered with on disk) is
// never trusted: the next registration or upload of the genuine model re-verifies it,
// moves it to quarantine/ and stores the verified bytes.
TEST_F(IntegrityTest, APoisonedStoreEntryIsQuarantinedAndReplaced) {
  v1::Checkpoint ck;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  const fs::path entry = dir_ / "data" / "checkpoints" / (ck.id() + ".gguf");
  for (int round = 0; round < 2; ++round) {
    // A registered entry is a hard link to the registered file: it is first made a
    // file of its own, so that the damage reaches the entry and never the shared model.
    {
      const std::string bytes = ReadAll(entry);
      fs::remove(entry);
      std::ofstream(entry, std::ios::binary) << bytes;
      ASSERT_EQ(fs::hard_link_count(entry), 1u);
    }
    {
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-4096, std::ios::end);
      f.write(std::string(64, static_cast<char>(0x5A + round)).data(), 64);
    }
    ASSERT_NE(Sha256OfBytes(ReadAll(entry)), ck.id());
    v1::Checkpoint again;
    const grpc::Status st = round == 0 ? Register(lrkv::testing::StoriesModelPath(), &again)
                                       : Upload(lrkv::testing::StoriesModelPath(), &again);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(again.id(), ck.id());
    EXPECT_EQ(Sha256OfBytes(ReadAll(entry)), ck.id());
    EXPECT_EQ(FilesUnder(dir_ / "data" / "quarantine"), round + 1);
  }
}

// Item 3: a job's end the database cannot take (every write refused, as on a full disk)
// is what every reader sees at once — Cancel answers "already finished", the job is not
// moved on — and the runner writes it once writes succeed again; a clean stop leaves no
// job running. (store_test covers the store's side, disk_full_test a real full tmpfs.)
TEST(RunnerJobEnd, AnEndTheDiskRefusedIsShownThenStoredAndStopLeavesNoneRunning) {
  lrkv::testing::FaultySqliteVfs::Install();
  const fs::path dir = lrkv::testing::FreshTempDir("runner_job_end");
  const std::string db = (dir / "lrkv.db").string();
  auto store = Store::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const char* id : {"a", "b"}) {
    JobRecord j;
    j.id = id;
    j.kind = "convert";
    j.checkpoint_id = "ck";
    j.params_json = "{}";
    j.created_at = 1;
    ASSERT_TRUE((*store)->CreateJob(j).ok());
    ASSERT_TRUE((*store)->TransitionJob(id, JobState::kRunning, 2).ok());
  }
  RunnerOptions o;
  o.data_dir = dir.string();
  {
    JobRunner runner(store->get(), o);
    ASSERT_TRUE(runner.Start().ok());
    lrkv::testing::FaultySqliteVfs::fail_writes() = true;
    EXPECT_FALSE((*store)->FinishJob("a", JobState::kFailed, 3, "No space left on device").ok());
    EXPECT_EQ((*store)->GetJob("a")->state, JobState::kFailed);
    EXPECT_EQ(runner.Cancel("a").code(), absl::StatusCode::kFailedPrecondition);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // flushes fail meanwhile
    EXPECT_EQ((*store)->PendingEnds(), 1u);
    lrkv::testing::FaultySqliteVfs::fail_writes() = false;
    for (int i = 0; i < 50 && (*store)->PendingEnds() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ((*store)->PendingEnds(), 0u);  // the flusher wrote it
    // A second end refused, then space back: the stop writes it at the latest.
    lrkv::testing::FaultySqliteVfs::fail_writes() = true;
    EXPECT_FALSE((*store)->FinishJob("b", JobState::kCancelled, 4, "cancelled").ok());
    lrkv::testing::FaultySqliteVfs::fail_writes() = false;
    runner.Stop();
  }
  store->reset();
  auto reopened = Store::Open(db);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->GetJob("a")->state, JobState::kFailed);
  EXPECT_EQ((*reopened)->GetJob("b")->state, JobState::kCancelled);
  JobFilter running;
  running.state = JobState::kRunning;
  EXPECT_TRUE((*reopened)->ListJobs(running, 10, "")->jobs.empty());
}

// Item 4: every stage of a pipeline is checked at submission, the bench stage too.
TEST_F(IntegrityTest, EveryPipelineStageIsValidatedAtSubmission) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  struct Case {
    std::string params, phrase;
  };
  const std::vector<Case> cases = {
      {R"({"convert": {"rank": 2}, "bench": {"context": -5}})",
       "bench: 'context' -5 must lie in"},
      {R"({"convert": {"rank": 2}, "bench": {"tokens": -1}})",
       "bench: 'tokens' -1 must lie in"},
      {R"({"convert": {"rank": 2}, "bench": {"context": 1e9}})", "wrong type"},
      {R"({"convert": {"rank": 2}, "bench": {"context": 1000000000}})",
       "[1, 1048576]"},
      {R"({"convert": {"rank": 2}, "bench": {"contxt": 64}})",
       "unknown parameter 'contxt'"},
      {R"({"convert": {"rank": 2}, "bench": []})", "'bench' must be an object"},
      {R"({"convert": {"rank": 2}, "verify": {"prompt_tokens": 0}})",
       "[1, 4096]"},
      {R"({"convert": {"rank": 99}})", "rank"},
      {R"({"convert": {"rank": 2}, "heal": {"steps": 1}})", "'data'"},
  };
  for (const Case& c : cases) {
    v1::Job job;
    const grpc::Status st = Submit(v1::PIPELINE, source.id(), c.params, &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.params << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.phrase)) << c.params;
  }
  EXPECT_EQ(JobCount(), 0);
}

// Items 5 and 6: bytes after the params object (nlohmann stopped at a NUL as if the
// text ended), NULs that would cut a path short, invalid UTF-8, and a binary text input
// are INVALID_ARGUMENT, and the binary input is not kept under inputs/.
TEST_F(IntegrityTest, TrailingBytesNulsAndBinaryInputsAreRefused) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  const std::string text = lrkv::testing::StoriesTextPath();
  struct Case {
    std::string params, phrase;
  };
  const std::vector<Case> cases = {
      {std::string("{\"rank\":2}\0garbage", 18), "NUL byte at byte 10"},
      {std::string("{\"rank\":2}\0", 11), "NUL byte"},
      {"{\"rank\": 2, \"eval\": \"" + text + "\\u0000.gguf\"}", "\\u0000"},
      {"{\"rank\": 2, \"eval\": \"" + lrkv::testing::StoriesModelPath() + "\"}", "binary file"},
  };
  for (const Case& c : cases) {
    v1::Job job;
    const grpc::Status st = Submit(v1::CONVERT, source.id(), c.params, &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.params << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.phrase)) << c.params;
  }
  EXPECT_EQ(FilesUnder(dir_ / "data" / "inputs"), 0);
  // A path holding a NUL names another (allowed) file once the system cuts it short.
  v1::Checkpoint ck;
  const grpc::Status st =
      Register(lrkv::testing::StoriesModelPath() + std::string("\0.evil", 6), &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("NUL"));
  ExpectServerAlive();
}

// Item 6: invalid UTF-8 in a request's text field (a name, a path, params_json) is
// INVALID_ARGUMENT naming the field — gRPC's own answer was INTERNAL with no message.
TEST_F(IntegrityTest, InvalidUtf8InARequestIsInvalidArgumentNamingTheField) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  v1::Job job;
  grpc::Status st = Submit(v1::CONVERT, source.id(), "{\"label\": \"\xff\xfe\"}", &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("'params_json' is not valid UTF-8"));
  v1::Checkpoint ck;
  st = Register("/models/\xc3\x28.gguf", &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("'path' is not valid UTF-8"));
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("job-\x80");
    st = stub_->GetJob(&ctx, req, &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("'job_id'"));
  }
  {
    grpc::ClientContext ctx;
    v1::Checkpoint out;
    auto writer = stub_->UploadCheckpoint(&ctx, &out);
    v1::UploadCheckpointRequest header = Header("utf8", 100);
    header.mutable_header()->set_file_name("\xfe.gguf");
    writer->Write(header);
    writer->WritesDone();
    st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  }
  EXPECT_EQ(FilesUnder(dir_ / "data" / "uploads"), 0);
  ExpectServerAlive();
}

// Item 6: errors of an upload name the client's file, never the server's staging path.
TEST_F(IntegrityTest, UploadErrorsNameNoServerPath) {
  const std::string data = ReadAll(lrkv::testing::FixturePath("malformed/gguf_bad_magic.gguf"));
  grpc::ClientContext ctx;
  v1::Checkpoint out;
  auto writer = stub_->UploadCheckpoint(&ctx, &out);
  v1::UploadCheckpointRequest header = Header("named", static_cast<int64_t>(data.size()));
  header.mutable_header()->set_file_name("mine.gguf");
  writer->Write(header);
  writer->Write(Chunk(0, data));
  v1::UploadCheckpointRequest trailer;
  trailer.mutable_trailer()->set_sha256(Sha256OfBytes(data));
  writer->Write(trailer);
  writer->WritesDone();
  const grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("mine.gguf"));
  EXPECT_THAT(st.error_message(), Not(HasSubstr(dir_.string())));
  EXPECT_THAT(st.error_message(), Not(HasSubstr("uploads/")));
}

// Item 6: GetArtifact racing DeleteJob sends the whole artifact (its files were opened
// before the first chunk) or answers NOT_FOUND; never INTERNAL.
TEST_F(IntegrityTest, AnArtifactStreamRacingItsDeletionEndsCleanly) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  v1::Job job;
  ASSERT_TRUE(Submit(v1::CONVERT, source.id(), R"({"variant": "lrkv", "rank": 2})", &job).ok());
  ASSERT_EQ(WaitDone(job.id()).state(), v1::SUCCEEDED);
  grpc::ClientContext ctx;
  v1::GetArtifactRequest req;
  req.set_job_id(job.id());
  auto reader = stub_->GetArtifact(&ctx, req);
  v1::ArtifactChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));  // the stream has begun: its files are open
  {
    grpc::ClientContext del_ctx;
    v1::DeleteJobRequest del;
    del.set_job_id(job.id());
    v1::DeleteJobResponse resp;
    ASSERT_TRUE(stub_->DeleteJob(&del_ctx, del, &resp).ok());
  }
  ASSERT_FALSE(fs::exists(dir_ / "data" / "artifacts" / job.id()));
  int64_t chunks = 1;
  while (reader->Read(&chunk)) ++chunks;
  const grpc::Status st = reader->Finish();
  EXPECT_THAT(st.error_code(), AnyOf(grpc::StatusCode::OK, grpc::StatusCode::NOT_FOUND))
      << st.error_message();
  EXPECT_TRUE(st.ok()) << "the files were open before the deletion: " << st.error_message();
  EXPECT_GT(chunks, 1);
  // After the deletion: NOT_FOUND.
  grpc::ClientContext after_ctx;
  auto after = stub_->GetArtifact(&after_ctx, req);
  while (after->Read(&chunk)) {
  }
  EXPECT_EQ(after->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace lrkv::service
