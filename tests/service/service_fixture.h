// The in-process service fixture of the service tests: a server on an ephemeral
// loopback port over a fresh data folder, a stub, and the helpers the tests share.
#ifndef LRKV_TESTS_SERVICE_SERVICE_FIXTURE_H_
#define LRKV_TESTS_SERVICE_SERVICE_FIXTURE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "service/content_hash.h"
#include "service/server.h"
#include "tests/test_paths.h"

namespace lrkv::service {

// GetJob of `id` (an EXPECT failure when the call fails).
inline v1::Job GetJob(v1::Lrkv::Stub& stub, const std::string& id) {
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::Job job;
  EXPECT_TRUE(stub.GetJob(&ctx, req, &job).ok());
  return job;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lrkv::testing::FreshTempDir("service");
    StartServer();
  }
  void StartServer(const std::string& token = "", int64_t max_queued_jobs = 1024) {
    ServerOptions o;
    o.auth_token = token;
    o.max_queued_jobs = max_queued_jobs;
    o.listen = "127.0.0.1:0";
    o.data_dir = (dir_ / "data").string();
    o.allowed_dirs = {lrkv::testing::SharedPath("models"),
                      lrkv::testing::SharedPath("data"),
                      lrkv::testing::FixturePath("malformed"), o.data_dir};
    auto server = LrkvServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials());
    stub_ = v1::Lrkv::NewStub(channel);
  }

  v1::Job WaitDone(const std::string& id) {
    v1::Job job;
    for (int i = 0; i < 600; ++i) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_job_id(id);
      EXPECT_TRUE(stub_->GetJob(&ctx, req, &job).ok());
      if (job.state() != v1::QUEUED && job.state() != v1::RUNNING) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return job;
  }

  grpc::Status GetReport(const std::string& job_id, v1::Report* out) {
    grpc::ClientContext ctx;
    v1::GetReportRequest req;
    req.set_job_id(job_id);
    return stub_->GetReport(&ctx, req, out);
  }

  grpc::Status Cancel(const std::string& job_id) {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    v1::Job out;
    return stub_->CancelJob(&ctx, req, &out);
  }

  grpc::Status Register(const std::string& path, v1::Checkpoint* out) {
    grpc::ClientContext ctx;
    v1::RegisterCheckpointRequest req;
    req.set_path(path);
    return stub_->RegisterCheckpoint(&ctx, req, out);
  }

  // Uploads a file in 1 MiB chunks (header, chunks, sha256 trailer), with `config_json`
  // for a safetensors file.
  grpc::Status Upload(const std::string& path, v1::Checkpoint* out,
                      const std::string& config_json = "") {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    grpc::ClientContext ctx;
    auto writer = stub_->UploadCheckpoint(&ctx, out);
    v1::UploadCheckpointRequest msg;
    msg.mutable_header()->set_upload_id("test-upload-" + Sha256OfBytes(path).substr(0, 16));
    msg.mutable_header()->set_file_name(std::filesystem::path(path).filename().string());
    msg.mutable_header()->set_total_bytes(static_cast<int64_t>(data.size()));
    msg.mutable_header()->set_config_json(config_json);
    writer->Write(msg);
    for (size_t off = 0; off < data.size(); off += 1 << 20) {
      v1::UploadCheckpointRequest c;
      c.mutable_chunk()->set_offset(static_cast<int64_t>(off));
      c.mutable_chunk()->set_data(data.substr(off, 1 << 20));
      writer->Write(c);
    }
    v1::UploadCheckpointRequest t;
    t.mutable_trailer()->set_sha256(Sha256OfBytes(data));
    writer->Write(t);
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Submit(v1::JobKind kind, const std::string& ckpt,
                      const std::string& params, v1::Job* out) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_kind(kind);
    req.set_checkpoint_id(ckpt);
    req.set_params_json(params);
    return stub_->SubmitJob(&ctx, req, out);
  }

  // Registers stories260K, converts it to LRKV r = 2 and registers the result.
  void ConvertStories(v1::Checkpoint* source, v1::Checkpoint* converted) {
    ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), source).ok());
    v1::Job convert;
    ASSERT_TRUE(Submit(v1::CONVERT, source->id(),
                       R"({"variant": "lrkv", "rank": 2})", &convert)
                    .ok());
    ASSERT_EQ(WaitDone(convert.id()).state(), v1::SUCCEEDED);
    ASSERT_TRUE(Register((dir_ / "data" / "artifacts" / convert.id()).string(),
                         converted)
                    .ok());
  }

  std::filesystem::path dir_;
  std::unique_ptr<LrkvServer> server_;
  std::unique_ptr<v1::Lrkv::Stub> stub_;
};

}  // namespace lrkv::service

#endif  // LRKV_TESTS_SERVICE_SERVICE_FIXTURE_H_
