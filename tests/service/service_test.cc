// The gRPC service end to end, in process on an ephemeral port: register
// stories260K, convert it, register the converted checkpoint, verify it, read
// the reports; bad requests get the right codes; jobs survive a restart of the
// server.
#include <grpcpp/grpcpp.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "service/content_hash.h"
#include "service/server.h"
#include "tests/service/service_fixture.h"
#include "tests/test_paths.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST_F(ServiceTest, ConvertThenVerifyThroughTheService) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  EXPECT_EQ(source.format(), "gguf");
  EXPECT_EQ(source.kv_heads(), 4);
  EXPECT_EQ(source.id().size(), 64u);  // sha256 hex
  v1::Job convert;
  ASSERT_TRUE(Submit(v1::CONVERT, source.id(), R"({"variant": "lrkv", "rank": 2,
                     "rope_mode": "plane"})",
                     &convert)
                  .ok());
  EXPECT_EQ(convert.state(), v1::QUEUED);
  const v1::Job done = WaitDone(convert.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  EXPECT_EQ(done.attempts(), 1);
  grpc::ClientContext rctx;
  v1::GetReportRequest rreq;
  rreq.set_job_id(convert.id());
  v1::Report report;
  ASSERT_TRUE(stub_->GetReport(&rctx, rreq, &report).ok());
  const auto json = nlohmann::json::parse(report.json());
  EXPECT_EQ(json["config"], "lrkv r=2");
  EXPECT_DOUBLE_EQ(json["cache_ratio_to_source"].get<double>(), 0.5);

  v1::Checkpoint converted;
  ASSERT_TRUE(Register((dir_ / "data" / "artifacts" / convert.id()).string(),
                       &converted)
                  .ok());
  v1::Job verify;
  ASSERT_TRUE(
      Submit(v1::VERIFY, converted.id(),
             R"({"prompt_tokens": 12, "decode_tokens": 6, "dtype": "both"})",
             &verify)
          .ok());
  ASSERT_EQ(WaitDone(verify.id()).state(), v1::SUCCEEDED);
  grpc::ClientContext vctx;
  rreq.set_job_id(verify.id());
  ASSERT_TRUE(stub_->GetReport(&vctx, rreq, &report).ok());
  EXPECT_TRUE(report.verification().passed());
  EXPECT_GE(report.verification().checks_size(), 8);

  // WatchJob replays the finished job's events and ends.
  grpc::ClientContext wctx;
  v1::WatchJobRequest wreq;
  wreq.set_job_id(verify.id());
  auto reader = stub_->WatchJob(&wctx, wreq);
  v1::JobProgress p;
  std::vector<v1::JobProgress> events;
  while (reader->Read(&p)) events.push_back(p);
  EXPECT_TRUE(reader->Finish().ok());
  // started, each of the verifier's stages (step i of n, in order), done.
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.front().message(), "started");
  EXPECT_EQ(events.back().message(), "done");
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i].stage(), "verify");
    EXPECT_EQ(events[i].step(), static_cast<int64_t>(i));
    EXPECT_EQ(events[i].total(), static_cast<int64_t>(events.size() - 2));
  }
  EXPECT_THAT(events[1].message(), ::testing::HasSubstr("decoding vs the f64 reference"));

  grpc::ClientContext lctx;
  v1::ListJobsRequest lreq;
  lreq.set_page_size(1);
  v1::ListJobsResponse page;
  ASSERT_TRUE(stub_->ListJobs(&lctx, lreq, &page).ok());
  ASSERT_EQ(page.jobs_size(), 1);
  EXPECT_EQ(page.jobs(0).id(), convert.id());
  EXPECT_FALSE(page.next_page_token().empty());
}

// A long heal job: cancelled while it trains, it stops at its next step;
// interrupted by a shutdown, it goes back to the queue and completes after the
// restart.
// GetArtifact streams a convert job's checkpoint folder file by file: reassembled, each
// file equals the job's, and its sha256 is the file's; jobs without a checkpoint and
// unknown ids are refused with their codes.
TEST_F(ServiceTest, ArtifactsStreamEveryFileWithItsSha256) {
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  v1::ListJobsResponse jobs;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  }
  ASSERT_EQ(jobs.jobs_size(), 1);
  const std::string job = jobs.jobs(0).id();
  const std::filesystem::path dir = dir_ / "data" / "artifacts" / job;
  std::map<std::string, std::string> files, shas;
  {
    grpc::ClientContext ctx;
    v1::GetArtifactRequest req;
    req.set_job_id(job);
    auto reader = stub_->GetArtifact(&ctx, req);
    v1::ArtifactChunk c;
    while (reader->Read(&c)) {
      std::string& data = files[c.path()];
      EXPECT_EQ(c.offset(), static_cast<int64_t>(data.size())) << c.path();
      data += c.data();
      EXPECT_LE(c.data().size(), size_t{1} << 20);
      if (!c.sha256().empty()) shas[c.path()] = c.sha256();
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  size_t on_disk = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++on_disk;
    const std::string name = e.path().filename().string();
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(files[name], ss.str()) << name;
    EXPECT_EQ(shas[name], Sha256OfBytes(ss.str())) << name;
  }
  EXPECT_EQ(files.size(), on_disk);
  EXPECT_GT(files.count("model.safetensors"), 0u);
  auto code_of = [&](const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetArtifactRequest req;
    req.set_job_id(id);
    auto reader = stub_->GetArtifact(&ctx, req);
    v1::ArtifactChunk c;
    while (reader->Read(&c)) {
    }
    return reader->Finish().error_code();
  };
  EXPECT_EQ(code_of("job-nope"), grpc::StatusCode::NOT_FOUND);
  v1::Job verify;
  ASSERT_TRUE(Submit(v1::VERIFY, converted.id(), R"({"prompt_tokens": 4, "decode_tokens": 2})",
                     &verify)
                  .ok());
  ASSERT_EQ(WaitDone(verify.id()).state(), v1::SUCCEEDED);
  EXPECT_EQ(code_of(verify.id()), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServiceTest, RunningJobsStopBetweenStepsOnCancelAndShutdown) {
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  if (HasFatalFailure()) return;
  auto heal_params = [&](int steps) {
    return absl::StrCat(
        R"({"loss": "lm", "data": ")", lrkv::testing::StoriesTextPath(),
        R"(", "data_range": "0:0.3", "steps": )", steps,
        R"(, "batch": 2, "seq_len": 64, "warmup": 1, "eval_every": 0})");
  };
  // Waits until the job has logged `n` training steps.
  auto wait_steps = [&](const std::string& id, int n) {
    for (int i = 0; i < 600; ++i) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_job_id(id);
      v1::Job job;
      EXPECT_TRUE(stub_->GetJob(&ctx, req, &job).ok());
      if (job.progress().stage() == "heal" &&
          job.progress().message() == "step" && job.progress().seq() > n) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "no training progress";
  };
  v1::Job heal;
  ASSERT_TRUE(
      Submit(v1::HEAL, converted.id(), heal_params(100000), &heal).ok());
  wait_steps(heal.id(), 3);
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(heal.id());
    v1::Job j;
    ASSERT_TRUE(stub_->CancelJob(&ctx, req, &j).ok());
  }
  const v1::Job cancelled = WaitDone(heal.id());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_TRUE(fs::exists(dir_ / "data" / "logs" / (heal.id() + ".log")));

  v1::Job second;
  ASSERT_TRUE(Submit(v1::HEAL, converted.id(), heal_params(40), &second).ok());
  wait_steps(second.id(), 3);
  server_.reset();  // shutdown while it trains
  StartServer();
  const v1::Job done = WaitDone(second.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  EXPECT_EQ(done.attempts(), 2);
}

TEST_F(ServiceTest, HealJobStoresItsLossCurveAndStreamsProgress) {
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  if (HasFatalFailure()) return;
  v1::Job heal;
  const std::string params = absl::StrCat(
      R"({"teacher": ")", source.id(), R"(", "data": ")",
      lrkv::testing::StoriesTextPath(),
      R"(", "data_range": "0:0.3", "steps": 6, "batch": 4, "seq_len": 128, "warmup": 1,
          "eval_every": 0})");
  ASSERT_TRUE(Submit(v1::HEAL, converted.id(), params, &heal).ok());
  grpc::ClientContext wctx;
  v1::WatchJobRequest wreq;
  wreq.set_job_id(heal.id());
  auto reader = stub_->WatchJob(&wctx, wreq);
  v1::JobProgress p;
  int steps = 0, evals = 0;
  while (reader->Read(&p)) {
    steps += p.has_loss() && p.message() == "step";
    evals += p.has_loss() && p.message() == "eval";
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(steps, 6);  // one event per step, streamed while it trains
  EXPECT_EQ(evals, 2);  // keep-best's: the unhealed model and the last step
  EXPECT_EQ(WaitDone(heal.id()).state(), v1::SUCCEEDED);
  // A data file outside the allowed folders is refused at submission.
  v1::Job bad;
  auto st = Submit(v1::HEAL, converted.id(),
                   R"({"data": "/etc/passwd", "steps": 2})", &bad);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ServiceTest, PipelineConvertsHealsVerifiesAndBenchmarks) {
  v1::Checkpoint source;
  ASSERT_TRUE(Upload(lrkv::testing::StoriesModelPath(), &source).ok());
  const std::string params = absl::StrCat(
      R"({"convert": {"variant": "lrkv", "budget": 0.5, "rope_mode": "plane"},
          "heal": {"data": ")",
      lrkv::testing::StoriesTextPath(),
      R"(", "data_range": "0:0.3", "steps": 4, "batch": 4, "seq_len": 128, "warmup": 1,
                   "eval_every": 0},
          "verify": {"prompt_tokens": 8, "decode_tokens": 4, "text": ")",
      lrkv::testing::StoriesTextPath(), R"(", "fidelity_tokens": 500},
          "bench": {"context": 64, "tokens": 4}})");
  v1::Job job;
  ASSERT_TRUE(Submit(v1::PIPELINE, source.id(), params, &job).ok());
  const v1::Job done = WaitDone(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  grpc::ClientContext ctx;
  v1::GetReportRequest req;
  req.set_job_id(job.id());
  v1::Report report;
  ASSERT_TRUE(stub_->GetReport(&ctx, req, &report).ok());
  EXPECT_TRUE(report.verification().passed());
  const auto json = nlohmann::json::parse(report.json());
  EXPECT_EQ(json["convert"]["config"], "lrkv r=2");
  EXPECT_EQ(json["heal"]["steps"], 4);
  EXPECT_TRUE(json["verify"]["passed"].get<bool>());
  EXPECT_TRUE(json["verify"].contains("fidelity"));
  EXPECT_EQ(json["bench"].size(), 3u);  // expanded, plane, source
  // Typed sections, read back from SQLite.
  EXPECT_EQ(report.conversion().config(), "lrkv r=2");
  EXPECT_EQ(report.conversion().layers_size(), 5);
  EXPECT_GT(report.conversion().layers(0).k_rel_error(), 0);
  EXPECT_GT(report.cache_size(), 0);
  for (const auto& c : report.cache())
    EXPECT_EQ(c.used_bytes(), c.formula_bytes()) << c.engine();
  EXPECT_EQ(report.latency_size(), 3);
  for (const auto& l : report.latency())
    EXPECT_GT(l.tokens_per_second(), 0) << l.engine();
  EXPECT_EQ(report.loss_curve_size(), 6);  // 4 steps, keep-best's 2 evaluations
  // The same rows are in the database file, which passes an integrity check.
  server_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((dir_ / "data" / "lrkv.db").c_str(), &db,
                            SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  for (const char* table :
       {"conversions", "conversion_layers", "verification_checks",
        "cache_measurements", "latency_measurements", "loss_curve"}) {
    const std::string sql =
        absl::StrCat("SELECT COUNT(*) FROM ", table, " WHERE job_id = ?");
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr),
              SQLITE_OK);
    sqlite3_bind_text(stmt, 1, job.id().c_str(), -1, SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
    EXPECT_GT(sqlite3_column_int64(stmt, 0), 0) << table;
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  StartServer();
  // A pipeline whose heal stage has no data is refused at submission.
  v1::Job bad;
  auto st =
      Submit(v1::PIPELINE, source.id(), R"({"heal": {"steps": 2}})", &bad);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("'data'"));
}

TEST_F(ServiceTest, BearerTokenGuardsEveryRpc) {
  server_.reset();
  StartServer("0123456789abcdef-secret");
  auto call = [&](const std::string& header) {
    grpc::ClientContext ctx;
    if (!header.empty()) ctx.AddMetadata("authorization", header);
    v1::GetJobRequest req;
    req.set_job_id("job-x");
    v1::Job job;
    return stub_->GetJob(&ctx, req, &job).error_code();
  };
  EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer wrong"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer 0123456789abcdef-secreT"),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer 0123456789abcdef-secret"),
            grpc::StatusCode::NOT_FOUND);
}

// Bounded loopback load: 32 clients x 250 RPCs (8,000, the probe's count)
// mixing submit, get, list and watch; no unexpected error and no lost job;
// GetJob latency percentiles are printed.
TEST_F(ServiceTest, ConcurrentClientsLoseNothing) {
  v1::Checkpoint ck;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  constexpr int kClients = 32, kCalls = 250;
  std::mutex mu;
  std::vector<std::string> submitted;
  std::vector<double> get_ms;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto stub = v1::Lrkv::NewStub(
          grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                              grpc::InsecureChannelCredentials()));
      std::string mine;
      for (int i = 0; i < kCalls; ++i) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
        const int op = (c + i) % 10;
        grpc::Status st;
        if (op == 0 || mine.empty()) {
          v1::SubmitJobRequest req;
          req.set_kind(v1::CONVERT);
          req.set_checkpoint_id(ck.id());
          req.set_params_json(R"({"variant": "mqa"})");
          v1::Job job;
          st = stub->SubmitJob(&ctx, req, &job);
          if (st.ok()) {
            mine = job.id();
            std::lock_guard<std::mutex> lock(mu);
            submitted.push_back(job.id());
          }
        } else if (op < 6) {
          v1::GetJobRequest req;
          req.set_job_id(mine);
          v1::Job job;
          const auto t0 = std::chrono::steady_clock::now();
          st = stub->GetJob(&ctx, req, &job);
          const double ms = std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - t0)
                                .count();
          std::lock_guard<std::mutex> lock(mu);
          get_ms.push_back(ms);
        } else if (op < 9) {
          v1::ListJobsRequest req;
          req.set_page_size(20);
          v1::ListJobsResponse resp;
          st = stub->ListJobs(&ctx, req, &resp);
        } else {
          ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(300));
          v1::WatchJobRequest req;
          req.set_job_id(mine);
          auto reader = stub->WatchJob(&ctx, req);
          v1::JobProgress p;
          while (reader->Read(&p)) {
          }
          st = reader->Finish();
          if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
            st = grpc::Status::OK;
        }
        if (!st.ok()) {
          ++errors;
          ADD_FAILURE() << st.error_code() << ": " << st.error_message();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  // Every submitted job is listed.
  std::set<std::string> listed;
  std::string token;
  do {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(100);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    ASSERT_TRUE(stub_->ListJobs(&ctx, req, &resp).ok());
    for (const auto& j : resp.jobs()) listed.insert(j.id());
    token = resp.next_page_token();
  } while (!token.empty());
  for (const auto& id : submitted) EXPECT_EQ(listed.count(id), 1u) << id;
  std::sort(get_ms.begin(), get_ms.end());
  ASSERT_FALSE(get_ms.empty());
  std::printf(
      "load: %d clients x %d RPCs, %zu jobs submitted, GetJob p50 %.2f ms, p99 "
      "%.2f ms\n",
      kClients, kCalls, submitted.size(), get_ms[get_ms.size() / 2],
      get_ms[get_ms.size() * 99 / 100]);
}

TEST_F(ServiceTest, BadRequestsGetClearCodes) {
  v1::Checkpoint ck;
  auto st =
      Register(lrkv::testing::FixturePath("malformed/st_gap.safetensors"), &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("gap in tensor data"));
  st = Register("/etc/passwd", &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  st = Register(lrkv::testing::SharedPath(
                    "models/../reference/lrkv-paper-study-notes.zh.md"),
                &ck);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  v1::Job job;
  st = Submit(v1::CONVERT, ck.id(), R"({"variant": "lrkv", "rank": 9})", &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("[0, 8]"));
  st = Submit(v1::CONVERT, ck.id(), R"({"rnak": 2})", &job);
  EXPECT_THAT(st.error_message(), HasSubstr("unknown parameter 'rnak'"));
  st = Submit(v1::CONVERT, "nope", "{}", &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_job_id("job-unknown");
  EXPECT_EQ(stub_->GetJob(&ctx, req, &job).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// One bad request per RPC (uploads are covered in upload_test.cc): each gets
// its code and a message that names what was wrong.
TEST_F(ServiceTest, EveryRpcRefusesBadInputClearly) {
  auto expect = [](const grpc::Status& st, grpc::StatusCode code,
                   const std::string& phrase) {
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(phrase));
  };
  v1::Checkpoint ck;
  expect(Register("", &ck), grpc::StatusCode::INVALID_ARGUMENT,
         "path is required");
  expect(Register(lrkv::testing::SharedPath("models/none.gguf"), &ck),
         grpc::StatusCode::NOT_FOUND, "none.gguf");
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  v1::Job job;
  expect(Submit(v1::JOB_KIND_UNSPECIFIED, ck.id(), "{}", &job),
         grpc::StatusCode::INVALID_ARGUMENT, "valid: CONVERT");
  expect(Submit(v1::CONVERT, ck.id(), "[1]", &job),
         grpc::StatusCode::INVALID_ARGUMENT, "JSON object");
  expect(Submit(v1::CONVERT, ck.id(), R"({"budget": 0.01})", &job),
         grpc::StatusCode::INVALID_ARGUMENT, "budget");
  expect(Submit(v1::VERIFY, ck.id(), R"({"dtype": 3})", &job),
         grpc::StatusCode::INVALID_ARGUMENT, "'dtype' has the wrong type");
  expect(Submit(v1::HEAL, ck.id(), R"({"steps": 3})", &job),
         grpc::StatusCode::INVALID_ARGUMENT, "'data'");
  expect(Submit(v1::BENCH, ck.id(), R"({"rank": 9})", &job),
         grpc::StatusCode::INVALID_ARGUMENT,
         "rank 9 must lie in [0, 8] (the head dimension)");
  expect(Submit(v1::BENCH, ck.id(), R"({"context": [0]})", &job),
         grpc::StatusCode::INVALID_ARGUMENT, "'context' 0");
  expect(Submit(v1::CONVERT, ck.id(),
                R"({"calib": "/etc/passwd", "metric": "activation"})", &job),
         grpc::StatusCode::PERMISSION_DENIED, "outside the allowed folders");
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(5000);
    v1::ListJobsResponse resp;
    expect(stub_->ListJobs(&ctx, req, &resp),
           grpc::StatusCode::INVALID_ARGUMENT, "page_size");
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_token("not-a-token");
    v1::ListJobsResponse resp;
    expect(stub_->ListJobs(&ctx, req, &resp),
           grpc::StatusCode::INVALID_ARGUMENT, "page_token 'not-a-token'");
  }
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_job_id("job-unknown");
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobProgress p;
    while (reader->Read(&p)) {
    }
    expect(reader->Finish(), grpc::StatusCode::NOT_FOUND, "job-unknown");
  }
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id("job-unknown");
    expect(stub_->CancelJob(&ctx, req, &job), grpc::StatusCode::NOT_FOUND,
           "job-unknown");
  }
  {
    grpc::ClientContext ctx;
    v1::DeleteJobRequest req;
    req.set_job_id("job-unknown");
    v1::DeleteJobResponse resp;
    expect(stub_->DeleteJob(&ctx, req, &resp), grpc::StatusCode::NOT_FOUND,
           "job-unknown");
  }
  {
    grpc::ClientContext ctx;
    v1::GetReportRequest req;
    req.set_job_id("job-unknown");
    v1::Report r;
    expect(stub_->GetReport(&ctx, req, &r), grpc::StatusCode::NOT_FOUND,
           "job-unknown");
  }
  {
    grpc::ClientContext ctx;
    v1::GetUploadStatusRequest req;
    req.set_upload_id("../x");
    v1::UploadStatus s;
    expect(stub_->GetUploadStatus(&ctx, req, &s),
           grpc::StatusCode::INVALID_ARGUMENT, "upload_id");
  }
  // A finished job cannot be cancelled; a bench job's report holds its latency
  // rows.
  ASSERT_TRUE(Submit(v1::BENCH, ck.id(),
                     R"({"context": [16], "batch": 1, "iterations": 1})", &job)
                  .ok());
  const v1::Job done = WaitDone(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(job.id());
    expect(stub_->CancelJob(&ctx, req, &job),
           grpc::StatusCode::FAILED_PRECONDITION, "already finished");
  }
  {
    grpc::ClientContext ctx;
    v1::GetReportRequest req;
    req.set_job_id(done.id());
    v1::Report r;
    ASSERT_TRUE(stub_->GetReport(&ctx, req, &r).ok());
    EXPECT_GE(r.latency_size(), 4);  // mha, gqa, mla, lrkv modes at one context
  }
}

}  // namespace
}  // namespace lrkv::service
