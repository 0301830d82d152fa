// Crash recovery: lrkvd is SIGKILLed while a heal job runs, and while a pipeline is in
// each of its stages; restarted on the same data folder it re-queues the job (attempts
// + 1), runs it to completion, keeps every record, and the database passes PRAGMA
// integrity_check.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "service/store.h"
#include "tests/service/daemon_process.h"
#include "tests/service/service_fixture.h"
#include "tests/test_paths.h"

namespace lrkv::service {
namespace {

TEST(Recovery, KilledServerResumesItsJobs) {
  const auto dir = lrkv::testing::FreshTempDir("recovery");
  const std::string data_dir = (dir / "data").string();
  Daemon d = StartDaemon(data_dir);
  ASSERT_GT(d.port, 0);
  auto stub = Connect(d.port);
  const v1::Checkpoint source = RegisterPath(*stub, lrkv::testing::StoriesModelPath());
  const v1::Job convert =
      SubmitTo(*stub, v1::CONVERT, source.id(), R"({"variant": "lrkv", "rank": 2})");
  ASSERT_EQ(WaitFor(*stub, convert.id(), [](const v1::Job& j) { return j.state() == v1::SUCCEEDED; })
                .state(),
            v1::SUCCEEDED);
  const v1::Checkpoint converted = RegisterPath(*stub, data_dir + "/artifacts/" + convert.id());
  const v1::Job heal = SubmitTo(
      *stub, v1::HEAL, converted.id(),
      std::string(R"({"teacher": ")") + source.id() + R"(", "data": ")" +
          lrkv::testing::StoriesTextPath() +
          R"(", "data_range": "0:0.3", "steps": 60, "batch": 4, "seq_len": 128,
              "warmup": 1, "eval_every": 0})");
  // Kill it once training is under way.
  const v1::Job running = WaitFor(*stub, heal.id(), [](const v1::Job& j) {
    return j.state() == v1::RUNNING && j.progress().message() == "step";
  });
  ASSERT_EQ(running.state(), v1::RUNNING);
  ASSERT_EQ(kill(d.pid, SIGKILL), 0);
  waitpid(d.pid, nullptr, 0);

  Daemon again = StartDaemon(data_dir);
  ASSERT_GT(again.port, 0);
  auto stub2 = Connect(again.port);
  const v1::Job healed = WaitFor(*stub2, heal.id(), [](const v1::Job& j) {
    return j.state() != v1::QUEUED && j.state() != v1::RUNNING;
  });
  EXPECT_EQ(healed.state(), v1::SUCCEEDED) << healed.error();
  EXPECT_EQ(healed.attempts(), 2);
  EXPECT_EQ(GetJob(*stub2, convert.id()).state(), v1::SUCCEEDED);  // nothing lost
  kill(again.pid, SIGTERM);
  waitpid(again.pid, nullptr, 0);
  auto store = Store::Open(data_dir + "/lrkv.db");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->IntegrityCheck(), "ok");
  auto curve = (*store)->Rows<v1::LossPoint>(heal.id());
  ASSERT_TRUE(curve.ok());
  // The completed attempt's curve: 60 steps and keep-best's two evaluations (the
  // unhealed model and the last step).
  EXPECT_EQ(curve->size(), 62u);
}

// A pipeline whose server is SIGKILLed in each of its stages in turn: restarted, it runs
// the job again (attempt 2) to success, and the database holds exactly the result rows
// of an uninterrupted run of the same job — one attempt's, not two — and passes
// integrity_check.
TEST(Recovery, APipelineKilledInEachStageEndsAsAnUninterruptedOne) {
  const std::vector<std::string> tables = {"conversions",       "conversion_layers",
                                           "evaluations",       "loss_curve",
                                           "verification_checks", "cache_measurements",
                                           "latency_measurements"};
  const std::string text = lrkv::testing::StoriesTextPath();
  // Each stage long enough (a few hundred ms at least) to be caught in.
  const std::string params = absl::StrCat(
      R"({"convert": {"variant": "lrkv", "rank": 2, "metric": "activation", "calib": ")",
      text, R"(", "calib_tokens": 2048, "eval": ")", text,
      R"(", "eval_range": "0.97:1"},
          "heal": {"data": ")",
      text,
      R"(", "data_range": "0:0.3", "steps": 20, "batch": 2, "seq_len": 64, "warmup": 1,
                   "eval_every": 0},
          "verify": {"prompt_tokens": 32, "decode_tokens": 40, "rope_modes": ["reconstruct"]},
          "bench": {"context": 256, "tokens": 128}})");
  // Runs the pipeline, SIGKILLing the server once `kill_in` is the running stage ("" =
  // never); returns the job's rows per table.
  auto run = [&](const std::string& kill_in) {
    const auto dir = lrkv::testing::FreshTempDir("pipeline_kill_" + kill_in);
    const std::string data_dir = (dir / "data").string();
    Daemon d = StartDaemon(data_dir);
    EXPECT_GT(d.port, 0);
    auto stub = Connect(d.port);
    const v1::Checkpoint source = RegisterPath(*stub, lrkv::testing::StoriesModelPath());
    const v1::Job job = SubmitTo(*stub, v1::PIPELINE, source.id(), params);
    if (!kill_in.empty()) {
      // Polled every 5 ms for up to 10 minutes: under a loaded machine (ctest -j2) the
      // stages before it take several times their idle time.
      v1::Job seen;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
      while (std::chrono::steady_clock::now() < deadline) {
        seen = GetJob(*stub, job.id());
        if (seen.state() == v1::RUNNING && seen.progress().stage() == kill_in) break;
        if (Ended(seen)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      EXPECT_EQ(seen.progress().stage(), kill_in) << "the stage was never seen running";
      EXPECT_EQ(seen.state(), v1::RUNNING);
      StopDaemon(d, SIGKILL);
      d = StartDaemon(data_dir);
      EXPECT_GT(d.port, 0);
      stub = Connect(d.port);
    }
    const v1::Job done = WaitFor(*stub, job.id(), Ended);
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.error();
    EXPECT_EQ(done.attempts(), kill_in.empty() ? 1 : 2);
    StopDaemon(d);
    std::map<std::string, int64_t> rows;
    auto store = Store::Open(data_dir + "/lrkv.db");
    EXPECT_TRUE(store.ok());
    if (!store.ok()) return rows;
    EXPECT_EQ(*(*store)->IntegrityCheck(), "ok");
    for (const auto& t : tables) rows[t] = *(*store)->CountRows(t, job.id());
    return rows;
  };
  const auto uninterrupted = run("");
  for (const auto& t : tables) {
    if (t != "cache_measurements" && t != "evaluations") {
      EXPECT_GT(uninterrupted.at(t), 0) << t;  // every stage stored its rows
    }
  }
  for (const std::string stage : {"convert", "heal", "verify", "bench"}) {
    SCOPED_TRACE("killed in " + stage);
    EXPECT_EQ(run(stage), uninterrupted);
  }
}

// A token file saved with CRLF line ends: lrkvd trims it, so the token the client sends
// authenticates (it used to keep the CR, which no HTTP/2 header can carry).
TEST(Daemon, ATokenFileWithCrlfStillAuthenticates) {
  const auto dir = lrkv::testing::FreshTempDir("crlf_token");
  const std::string token = "0123456789abcdef0123";
  const std::string file = (dir / "token").string();
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f, "%s\r\n", token.c_str());
  std::fclose(f);
  Daemon d = StartDaemon((dir / "data").string(), file);
  ASSERT_GT(d.port, 0);
  auto stub = Connect(d.port);
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    const grpc::Status st = stub->ListJobs(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->ListJobs(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  kill(d.pid, SIGTERM);
  waitpid(d.pid, nullptr, 0);
}

}  // namespace
}  // namespace lrkv::service
