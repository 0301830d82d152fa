// The service's job lifecycle under the probe's defects (each failed before its fix):
// enums from the wire, one server per folder and port, cancel inside a running job,
// an interrupted pipeline run again cleanly. Loopback only, bounded in time.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "formats/config.h"
#include "formats/safetensors.h"
#include "formats/text_corpus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "runtime/llama_weights.h"
#include "service/store.h"
#include "tests/model_test_util.h"
#include "tests/service/service_fixture.h"
#include "tests/service/service_probe_util.h"

namespace lrkv::service {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using HardeningTest = ServiceTest;

// Enums arrive as integers: outside the enum is INVALID_ARGUMENT, never a crash
// (state 127 used to index the state-name table out of bounds and kill lrkvd).
TEST_F(HardeningTest, EnumsOutsideTheirRangeAreInvalidArguments) {
  v1::Checkpoint ck;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &ck).ok());
  v1::Job job;
  ASSERT_TRUE(Submit(v1::BENCH, ck.id(), R"({"context": [16], "batch": 1, "iterations": 1})",
                     &job)
                  .ok());
  for (int state : {6, 7, 8, 127, -1, 1 << 30}) {
    v1::ListJobsResponse resp;
    const grpc::Status st = ListJobs(*stub_, state, 0, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << state;
    EXPECT_THAT(st.error_message(), HasSubstr("is not a JobState")) << state;
  }
  for (int kind : {7, 99, -3}) {
    v1::ListJobsResponse resp;
    const grpc::Status st = ListJobs(*stub_, 0, kind, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << kind;
    EXPECT_THAT(st.error_message(), HasSubstr("is not a JobKind")) << kind;
  }
  for (int kind : {7, 99}) {
    const grpc::Status st = Submit(static_cast<v1::JobKind>(kind), ck.id(), "{}", &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << kind;
  }
  // The server is still up and answers a valid filter.
  v1::ListJobsResponse resp;
  ASSERT_TRUE(ListJobs(*stub_, 0, v1::BENCH, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 1);
}

// One server per data folder (a second re-queued the first's running job and ran it
// twice), and none on a port another holds (SO_REUSEPORT split the requests).
TEST_F(HardeningTest, ASecondServerOnTheSameFolderOrPortIsRefused) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = (dir_ / "data").string();
  auto second = LrkvServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use by another lrkvd"));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("pid "));

  o.data_dir = (dir_ / "other").string();
  o.listen = absl::StrCat("127.0.0.1:", server_->port());
  auto same_port = LrkvServer::Start(o);
  ASSERT_FALSE(same_port.ok());
  EXPECT_EQ(same_port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(same_port.status().message()), HasSubstr("cannot listen"));
  // The refused server released its folder: a third one on a free port starts there.
  o.listen = "127.0.0.1:0";
  auto third = LrkvServer::Start(o);
  ASSERT_TRUE(third.ok()) << third.status();
  (*third)->Shutdown();

  // Once the first stops, its folder is free again.
  server_->Shutdown();
  server_.reset();
  o.data_dir = (dir_ / "data").string();
  auto again = LrkvServer::Start(o);
  EXPECT_TRUE(again.ok()) << again.status();
}

// Cancel reaches inside a running job's loops (a verify of 400 decode steps; a convert
// in its activation calibration over the whole text, ~10 s uninterrupted, which used to
// run on for 86 s after a cancel): it stops within 2 s and leaves no artifacts, report
// or result rows. A shutdown stops a running convert as fast (it used to wait 36 s)
// and puts it back in the queue.
TEST_F(HardeningTest, CancelStopsARunningJobWithinTwoSecondsAndLeavesNothing) {
  v1::Checkpoint source, converted;
  ConvertStories(&source, &converted);
  const std::string text = lrkv::testing::StoriesTextPath();
  const std::string convert_params =
      absl::StrCat(R"({"rank": 2, "metric": "activation", "calib": ")", text,
                   R"(", "calib_tokens": 1000000, "eval": ")", text, R"("})");
  struct Case {
    v1::JobKind kind;
    std::string checkpoint, params;
  };
  for (const Case& c :
       {Case{v1::VERIFY, converted.id(),
             R"({"prompt_tokens": 200, "decode_tokens": 400, "dtype": "both"})"},
        Case{v1::CONVERT, source.id(), convert_params}}) {
    SCOPED_TRACE(v1::JobKind_Name(c.kind));
    v1::Job job;
    ASSERT_TRUE(Submit(c.kind, c.checkpoint, c.params, &job).ok());
    const v1::Job running = WaitUntil(*stub_, job.id(), 60, [](const v1::Job& j) {
      return j.state() == v1::RUNNING;
    });
    ASSERT_EQ(running.state(), v1::RUNNING);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // well inside its loops
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(Cancel(job.id()).ok());
    const v1::Job done = WaitUntil(*stub_, job.id(), 10, [](const v1::Job& j) {
      return j.state() != v1::RUNNING && j.state() != v1::QUEUED;
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(done.state(), v1::CANCELLED);
    EXPECT_LT(seconds, 2.0);
    std::printf("cancelled a running %s in %.3f s\n", v1::JobKind_Name(c.kind).c_str(),
                seconds);
    EXPECT_FALSE(fs::exists(dir_ / "data" / "artifacts" / job.id()));
    EXPECT_FALSE(fs::exists(dir_ / "data" / "reports" / (job.id() + ".json")));
    server_.reset();
    for (const char* table : {"verification_checks", "cache_measurements", "conversions",
                              "conversion_layers", "evaluations"}) {
      EXPECT_EQ(RowsOf(dir_ / "data" / "lrkv.db", table, job.id()), 0) << table;
    }
    StartServer();
  }
  v1::Job job;
  ASSERT_TRUE(Submit(v1::CONVERT, source.id(), convert_params, &job).ok());
  ASSERT_EQ(WaitUntil(*stub_, job.id(), 60, [](const v1::Job& j) {
              return j.state() == v1::RUNNING;
            }).state(),
            v1::RUNNING);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = std::chrono::steady_clock::now();
  server_.reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0);
  std::printf("shut down with a running convert in %.3f s\n", seconds);
  StartServer();
  // Back in the queue, so the new server runs it again (this test then cancels it).
  EXPECT_THAT(GetJob(*stub_, job.id()).state(), ::testing::AnyOf(v1::QUEUED, v1::RUNNING));
  ASSERT_TRUE(Cancel(job.id()).ok());
  EXPECT_EQ(WaitUntil(*stub_, job.id(), 10, [](const v1::Job& j) {
              return j.state() != v1::RUNNING && j.state() != v1::QUEUED;
            }).state(),
            v1::CANCELLED);
}

// A pipeline interrupted in its heal stage (a shutdown re-queues it, as a SIGKILL's
// restart does) runs again from a clean slate: attempt 2 succeeds (it used to fail on
// the converted folder attempt 1 left) and holds one attempt's rows, not two.
TEST_F(HardeningTest, AnInterruptedPipelineRunsAgainCleanly) {
  v1::Checkpoint source;
  ASSERT_TRUE(Register(lrkv::testing::StoriesModelPath(), &source).ok());
  const std::string params = absl::StrCat(
      R"({"convert": {"variant": "lrkv", "rank": 2},
          "heal": {"data": ")", lrkv::testing::StoriesTextPath(),
      R"(", "data_range": "0:0.3", "steps": 120, "batch": 2, "seq_len": 64, "warmup": 1,
                   "eval_every": 0},
          "verify": {"prompt_tokens": 8, "decode_tokens": 4},
          "bench": {"context": 16, "tokens": 2}})");
  v1::Job job;
  ASSERT_TRUE(Submit(v1::PIPELINE, source.id(), params, &job).ok());
  const v1::Job healing = WaitUntil(*stub_, job.id(), 60, [](const v1::Job& j) {
    return j.state() == v1::RUNNING && j.progress().stage() == "heal" &&
           j.progress().message() == "step";
  });
  ASSERT_EQ(healing.progress().stage(), "heal");
  ASSERT_TRUE(fs::exists(dir_ / "data" / "artifacts" / job.id() / "converted"));
  server_->Shutdown();
  server_.reset();
  StartServer();
  const v1::Job done = WaitUntil(*stub_, job.id(), 300, [](const v1::Job& j) {
    return j.state() != v1::RUNNING && j.state() != v1::QUEUED;
  });
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.error();
  EXPECT_EQ(done.attempts(), 2);
  server_.reset();
  EXPECT_EQ(RowsOf(dir_ / "data" / "lrkv.db", "conversions", job.id()), 1);
  // One attempt's: 120 steps and keep-best's two evaluations.
  EXPECT_EQ(RowsOf(dir_ / "data" / "lrkv.db", "loss_curve", job.id()), 122);
}

}  // namespace
}  // namespace lrkv::service
