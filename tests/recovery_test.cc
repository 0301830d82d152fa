// Crash recovery: lrkvd is SIGKILLed while a heal job runs; restarted on the same data
// folder it re-queues the job (attempts + 1), runs it to completion, keeps every record,
// and the database passes PRAGMA integrity_check.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "service/store.h"
#include "tests/service_fixture.h"
#include "tests/test_paths.h"

namespace lrkv::service {
namespace {

struct Daemon {
  pid_t pid = -1;
  int port = 0;
};

// Starts lrkvd (with `token_file` as --auth-token-file when set) and reads the port it
// prints.
Daemon StartDaemon(const std::string& data_dir, const std::string& token_file = "") {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  Daemon d;
  d.pid = fork();
  if (d.pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    const std::string models = lrkv::testing::SharedPath("models");
    const std::string data = lrkv::testing::SharedPath("data");
    if (!token_file.empty()) {
      execl(LRKVD_BIN, "lrkvd", "--listen", "127.0.0.1:0", "--data-dir", data_dir.c_str(),
            "--auth-token-file", token_file.c_str(), static_cast<char*>(nullptr));
    }
    execl(LRKVD_BIN, "lrkvd", "--listen", "127.0.0.1:0", "--data-dir", data_dir.c_str(),
          "--allow-dir", models.c_str(), "--allow-dir", data.c_str(), "--allow-dir",
          data_dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  FILE* out = fdopen(fds[0], "r");
  char line[256] = {};
  if (std::fgets(line, sizeof line, out) != nullptr) {
    std::sscanf(line, "lrkvd listening on port %d", &d.port);
  }
  std::fclose(out);
  return d;
}

std::unique_ptr<v1::Lrkv::Stub> Connect(int port) {
  return v1::Lrkv::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                               grpc::InsecureChannelCredentials()));
}

v1::Job WaitFor(v1::Lrkv::Stub& stub, const std::string& id, bool (*done)(const v1::Job&)) {
  v1::Job job;
  for (int i = 0; i < 6000; ++i) {
    job = GetJob(stub, id);
    if (done(job)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return job;
}

TEST(Recovery, KilledServerResumesItsJobs) {
  const auto dir = lrkv::testing::FreshTempDir("recovery");
  const std::string data_dir = (dir / "data").string();
  Daemon d = StartDaemon(data_dir);
  ASSERT_GT(d.port, 0);
  auto stub = Connect(d.port);
  v1::Checkpoint source, converted;
  {
    grpc::ClientContext ctx;
    v1::RegisterCheckpointRequest req;
    req.set_path(lrkv::testing::StoriesModelPath());
    ASSERT_TRUE(stub->RegisterCheckpoint(&ctx, req, &source).ok());
  }
  v1::Job convert;
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_kind(v1::CONVERT);
    req.set_checkpoint_id(source.id());
    req.set_params_json(R"({"variant": "lrkv", "rank": 2})");
    ASSERT_TRUE(stub->SubmitJob(&ctx, req, &convert).ok());
  }
  ASSERT_EQ(WaitFor(*stub, convert.id(), [](const v1::Job& j) { return j.state() == v1::SUCCEEDED; })
                .state(),
            v1::SUCCEEDED);
  {
    grpc::ClientContext ctx;
    v1::RegisterCheckpointRequest req;
    req.set_path(data_dir + "/artifacts/" + convert.id());
    ASSERT_TRUE(stub->RegisterCheckpoint(&ctx, req, &converted).ok());
  }
  v1::Job heal;
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_kind(v1::HEAL);
    req.set_checkpoint_id(converted.id());
    req.set_params_json(std::string(R"({"teacher": ")") + source.id() + R"(", "data": ")" +
                        lrkv::testing::StoriesTextPath() +
                        R"(", "data_range": "0:0.3", "steps": 60, "batch": 4, "seq_len": 128,
                            "warmup": 1, "eval_every": 0})");
    ASSERT_TRUE(stub->SubmitJob(&ctx, req, &heal).ok());
  }
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
  auto curve = (*store)->LossCurve(heal.id());
  ASSERT_TRUE(curve.ok());
  EXPECT_EQ(curve->size(), 60u);  // the completed attempt's curve
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
