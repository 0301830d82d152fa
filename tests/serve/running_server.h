// `lrkv serve` in the test's process: an OpenAiServer on a free loopback port,
// answering on a thread of its own until the object goes.
#ifndef LRKV_TESTS_SERVE_RUNNING_SERVER_H_
#define LRKV_TESTS_SERVE_RUNNING_SERVER_H_

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <utility>

#include "runtime/language_model.h"
#include "serve/openai_server.h"
#include "tests/serve/server_thread.h"

namespace lrkv::testing {

class RunningServer {
 public:
  // `model` must outlive the server; `o.port` is replaced by a free one.
  RunningServer(const LanguageModel& model, ServeOptions o) {
    o.port = 0;
    auto s = OpenAiServer::Create(model, std::move(o));
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return;
    server_ = std::move(*s);
    port_ = BindAndRun(*server_, &thread_);
  }
  ~RunningServer() {
    if (server_) server_->Stop();
    JoinRun();
  }
  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;

  bool ok() const { return server_ != nullptr && port_ > 0; }
  int port() const { return port_; }
  OpenAiServer& server() { return *server_; }
  // Waits until Run has returned (after a Stop or a Shutdown).
  void JoinRun() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::unique_ptr<OpenAiServer> server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_SERVE_RUNNING_SERVER_H_
