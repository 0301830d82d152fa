// lrkvd as a child process for the tests that kill it, restart it or run it on
// a file system of their own: start (reading the port it prints), connect,
// wait.
#ifndef LRKV_TESTS_SERVICE_DAEMON_PROCESS_H_
#define LRKV_TESTS_SERVICE_DAEMON_PROCESS_H_

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "lrkv/v1/lrkv.grpc.pb.h"
#include "tests/service/service_fixture.h"
#include "tests/test_paths.h"

namespace lrkv::service {

struct Daemon {
  pid_t pid = -1;
  int port = 0;  // 0: it never said it was listening
};

// lrkvd's command line on `data_dir` on any free loopback port: with
// `token_file` as
// --auth-token-file when set, else reading the shared models and data and
// `data_dir`.
inline std::vector<std::string> LrkvdArgs(const std::string& data_dir,
                                          const std::string& token_file = "") {
  std::vector<std::string> a = {LRKVD_BIN, "--listen", "127.0.0.1:0",
                                "--data-dir", data_dir};
  if (!token_file.empty()) {
    a.insert(a.end(), {"--auth-token-file", token_file});
  } else {
    a.insert(a.end(),
             {"--allow-dir", lrkv::testing::SharedPath("models"), "--allow-dir",
              lrkv::testing::SharedPath("data"), "--allow-dir", data_dir});
  }
  return a;
}

// Runs `argv` (lrkvd, or a wrapper that execs it) and reads the port lrkvd
// prints.
inline Daemon StartDaemon(const std::vector<std::string>& argv) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  Daemon d;
  d.pid = fork();
  if (d.pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    std::vector<char*> args;
    for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
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

inline Daemon StartDaemon(const std::string& data_dir,
                          const std::string& token_file = "") {
  return StartDaemon(LrkvdArgs(data_dir, token_file));
}

// Sends `sig` and reaps the process.
inline void StopDaemon(const Daemon& d, int sig = SIGTERM) {
  kill(d.pid, sig);
  waitpid(d.pid, nullptr, 0);
}

inline std::unique_ptr<v1::Lrkv::Stub> Connect(int port) {
  return v1::Lrkv::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
}

// Polls GetJob every 20 ms until `done` holds (at most ten minutes: a loaded CI
// machine runs jobs several times slower than an idle one).
inline v1::Job WaitFor(v1::Lrkv::Stub& stub, const std::string& id,
                       bool (*done)(const v1::Job&)) {
  v1::Job job;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    job = GetJob(stub, id);
    if (done(job)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return job;
}

// RegisterCheckpoint of `path`; an EXPECT failure when it fails.
inline v1::Checkpoint RegisterPath(v1::Lrkv::Stub& stub,
                                   const std::string& path) {
  grpc::ClientContext ctx;
  v1::RegisterCheckpointRequest req;
  req.set_path(path);
  v1::Checkpoint out;
  const grpc::Status st = stub.RegisterCheckpoint(&ctx, req, &out);
  EXPECT_TRUE(st.ok()) << path << ": " << st.error_message();
  return out;
}

// SubmitJob; an EXPECT failure when it is refused.
inline v1::Job SubmitTo(v1::Lrkv::Stub& stub, v1::JobKind kind,
                        const std::string& checkpoint,
                        const std::string& params) {
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  req.set_kind(kind);
  req.set_checkpoint_id(checkpoint);
  req.set_params_json(params);
  v1::Job out;
  const grpc::Status st = stub.SubmitJob(&ctx, req, &out);
  EXPECT_TRUE(st.ok()) << params << ": " << st.error_message();
  return out;
}

inline bool Ended(const v1::Job& j) {
  return j.state() != v1::QUEUED && j.state() != v1::RUNNING;
}

}  // namespace lrkv::service

#endif  // LRKV_TESTS_SERVICE_DAEMON_PROCESS_H_
