// UploadCheckpoint and GetUploadStatus in process on an ephemeral port:
// stories260K uploaded in 1 MiB-or-smaller chunks (in order, out of order, and
// resumed after a dropped stream) becomes a usable checkpoint; a wrong sha256,
// an oversized file, an oversized chunk and every file of the malformed corpus
// are refused with the right code and leave nothing behind.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "service/content_hash.h"
#include "service/server.h"
#include "service/upload_receiver.h"
#include "tests/test_paths.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Sha256Hex(const std::string& data) { return Sha256OfBytes(data); }

class UploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lrkv::testing::FreshTempDir("upload");
    Start(int64_t{64} << 20);
  }
  void Start(int64_t max_bytes) {
    server_.reset();
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.data_dir = (dir_ / "data").string();
    o.max_upload_bytes = max_bytes;
    auto server = LrkvServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::Lrkv::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }

  // Sends the header, then [begin, end) in chunks of `chunk` bytes (in reverse
  // order when `reverse`), then the trailer when `sha` is non-empty.
  grpc::Status Send(const std::string& id, const std::string& name,
                    const std::string& data, int64_t begin, int64_t end,
                    int64_t chunk, const std::string& sha, v1::Checkpoint* out,
                    bool reverse = false, const std::string& config_json = "") {
    grpc::ClientContext ctx;
    auto writer = stub_->UploadCheckpoint(&ctx, out);
    v1::UploadCheckpointRequest msg;
    msg.mutable_header()->set_upload_id(id);
    msg.mutable_header()->set_file_name(name);
    msg.mutable_header()->set_total_bytes(static_cast<int64_t>(data.size()));
    msg.mutable_header()->set_config_json(config_json);
    writer->Write(msg);
    std::vector<int64_t> offsets;
    for (int64_t o = begin; o < end; o += chunk) offsets.push_back(o);
    if (reverse) std::reverse(offsets.begin(), offsets.end());
    for (int64_t o : offsets) {
      v1::UploadCheckpointRequest c;
      c.mutable_chunk()->set_offset(o);
      c.mutable_chunk()->set_data(data.substr(o, std::min(chunk, end - o)));
      if (!writer->Write(c)) break;
    }
    if (!sha.empty()) {
      v1::UploadCheckpointRequest t;
      t.mutable_trailer()->set_sha256(sha);
      writer->Write(t);
    }
    writer->WritesDone();
    return writer->Finish();
  }

  int64_t Committed(const std::string& id, grpc::StatusCode* code = nullptr) {
    grpc::ClientContext ctx;
    v1::GetUploadStatusRequest req;
    req.set_upload_id(id);
    v1::UploadStatus st;
    const auto s = stub_->GetUploadStatus(&ctx, req, &st);
    if (code != nullptr) *code = s.error_code();
    return st.committed_bytes();
  }

  // Files left under the data folder's checkpoints/ and uploads/.
  int64_t Leftovers() {
    int64_t n = 0;
    for (const char* sub : {"checkpoints", "uploads"}) {
      std::error_code ec;
      for (auto it = fs::recursive_directory_iterator(dir_ / "data" / sub, ec);
           it != fs::recursive_directory_iterator(); ++it) {
        n += it->is_regular_file();
      }
    }
    return n;
  }

  fs::path dir_;
  std::unique_ptr<LrkvServer> server_;
  std::unique_ptr<v1::Lrkv::Stub> stub_;
};

TEST_F(UploadTest, ChunkedUploadBecomesAUsableCheckpoint) {
  const std::string data = ReadFile(lrkv::testing::StoriesModelPath());
  const std::string sha = Sha256Hex(data);
  v1::Checkpoint ck;
  const auto st = Send("stories-1", "stories260K.gguf", data, 0, data.size(),
                       100000, sha, &ck,
                       /*reverse=*/true);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ck.id(), sha);
  EXPECT_EQ(ck.format(), "gguf");
  EXPECT_EQ(ck.layers(), 5);
  EXPECT_EQ(ck.bytes(), static_cast<int64_t>(data.size()));
  // Stored content-addressed, staging emptied; the checkpoint runs a job.
  EXPECT_TRUE(fs::exists(dir_ / "data" / "checkpoints" / (sha + ".gguf")));
  EXPECT_EQ(Leftovers(), 1);
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  req.set_kind(v1::CONVERT);
  req.set_checkpoint_id(ck.id());
  req.set_params_json(R"({"variant": "lrkv", "rank": 2})");
  v1::Job job;
  EXPECT_TRUE(stub_->SubmitJob(&ctx, req, &job).ok());
}

TEST_F(UploadTest, DroppedUploadResumesFromTheCommittedSize) {
  const std::string data = ReadFile(lrkv::testing::StoriesModelPath());
  const int64_t half = 400000;
  v1::Checkpoint ck;
  // The stream ends without a trailer: ABORTED, and the first part stays
  // committed.
  auto st = Send("resume-1", "m.gguf", data, 0, half, 1 << 20, "", &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(st.error_message(), HasSubstr("resume"));
  EXPECT_EQ(Committed("resume-1"), half);
  // Even across a server restart.
  Start(int64_t{64} << 20);
  EXPECT_EQ(Committed("resume-1"), half);
  st = Send("resume-1", "m.gguf", data, Committed("resume-1"), data.size(),
            1 << 20, Sha256Hex(data), &ck);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ck.id(), Sha256Hex(data));
  grpc::StatusCode code;
  Committed("resume-1", &code);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);  // finished uploads are gone
}

TEST_F(UploadTest, BadUploadsGetClearCodesAndLeaveNothing) {
  const std::string data = ReadFile(lrkv::testing::StoriesModelPath());
  v1::Checkpoint ck;
  auto st = Send("sha-1", "m.gguf", data, 0, data.size(), 1 << 20,
                 std::string(64, '0'), &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("does not match"));
  st = Send("big-1", "m.gguf", std::string((1 << 20) + 1, 'x'), 0,
            (1 << 20) + 1, (1 << 20) + 1, "", &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("at most 1048576"));
  st = Send("name-1", "m.bin", data, 0, 0, 1, "", &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("header.file_name"));
  st = Send("bad id!", "m.gguf", data, 0, 0, 1, "", &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("header.upload_id"));
  st = Send("early-1", "m.gguf", data, 0, 1000, 1000, Sha256Hex(data), &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("incomplete"));
  grpc::StatusCode code;
  Committed("never-started", &code);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
  {
    grpc::ClientContext ctx;
    auto writer = stub_->UploadCheckpoint(&ctx, &ck);
    v1::UploadCheckpointRequest c;
    c.mutable_chunk()->set_data("x");
    writer->Write(c);
    writer->WritesDone();
    st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("header"));
  }
  Start(500000);
  st = Send("limit-1", "m.gguf", data, 0, data.size(), 1 << 20, Sha256Hex(data),
            &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("upload limit of 500000"));
}

// Every file of the foundation's malformed corpus, uploaded, is refused with
// INVALID_ARGUMENT and the phrase its MANIFEST names, and leaves no file
// behind.
TEST_F(UploadTest, MalformedCorpusUploadsAreRejected) {
  std::ifstream manifest(lrkv::testing::FixturePath("malformed/MANIFEST.tsv"));
  std::string line;
  int checked = 0;
  const std::string config = R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 5,
      "intermediate_size": 172, "vocab_size": 512, "max_position_embeddings": 512})";
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string file = line.substr(0, line.find('\t'));
    const std::string phrase = line.substr(line.find('\t') + 1);
    const std::string data =
        ReadFile(lrkv::testing::FixturePath("malformed/" + file));
    v1::Checkpoint ck;
    const auto st =
        Send("bad-" + std::to_string(checked), file, data, 0, data.size(), 4096,
             Sha256Hex(data), &ck, false, config);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << file;
    EXPECT_THAT(st.error_message(), HasSubstr(phrase)) << file;
    EXPECT_THAT(st.error_message(), HasSubstr("not a valid checkpoint"))
        << file;
    EXPECT_EQ(Leftovers(), 0) << file;
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

// Uploads abandoned for longer than abandoned_after_seconds (no chunk since) lose their
// staged bytes and their id, when the next upload begins and when a server starts; a
// live one stays.
TEST(UploadReceiverExpiry, AbandonedUploadsAreRemoved) {
  const fs::path dir = lrkv::testing::FreshTempDir("upload_expiry") / "uploads";
  UploadOptions o;
  o.staging_dir = dir.string();
  o.abandoned_after_seconds = 3600;
  auto r = UploadReceiver::Create(o);
  ASSERT_TRUE(r.ok()) << r.status();
  UploadHeaderInfo h;
  h.file_name = "m.gguf";
  h.total_bytes = 100;
  for (const char* id : {"old", "fresh"}) {
    h.upload_id = id;
    const uint64_t stream = (*r)->NewStream();
    ASSERT_TRUE((*r)->Begin(h, stream).ok());
    ASSERT_TRUE((*r)->Write(id, stream, 0, std::string(10, 'x')).ok());
    (*r)->Release(id, stream);  // the stream ended; the upload waits for a resume
  }
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(dir / "old.state.json", two_hours_ago);
  h.upload_id = "third";
  ASSERT_TRUE((*r)->Begin(h, (*r)->NewStream()).ok());
  EXPECT_EQ((*r)->Progress("old").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir / "old.d"));
  EXPECT_FALSE(fs::exists(dir / "old.state.json"));
  ASSERT_TRUE((*r)->Progress("fresh").ok());
  EXPECT_EQ((*r)->Progress("fresh")->committed_bytes, 10);
  // A restart expires what aged meanwhile.
  fs::last_write_time(dir / "fresh.state.json", two_hours_ago);
  r->reset();
  auto again = UploadReceiver::Create(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Progress("fresh").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE((*again)->Progress("third").ok());
}

}  // namespace
}  // namespace lrkv::service
