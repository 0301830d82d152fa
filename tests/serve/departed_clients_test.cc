// `lrkv serve` does no work for clients that left and shuts down within its
// drain time: a non-streaming client gone mid-generation stops its sequence
// (no tokens after, /metrics), dropped requests free their running and queued
// slots at once, streams gone while queued leave the queue, and SIGTERM (in
// process, and to the `lrkv serve` binary) ends every stream with a last chunk
// whose finish_reason is "shutdown" and [DONE], answers waiting requests 503,
// and returns within the drain time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/language_model.h"
#include "serve/http/http_client.h"
#include "serve/openai_server.h"
#include "tests/serve/http_test_client.h"
#include "tests/serve/running_server.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// stories260K served as "stories".
class Served : public testing::RunningServer {
 public:
  Served(const LanguageModel& model, ServeOptions o)
      : RunningServer(model, WithId(std::move(o))) {}

 private:
  static ServeOptions WithId(ServeOptions o) {
    o.model_id = "stories";
    return o;
  }
};

std::unique_ptr<LanguageModel> Stories() {
  auto m = LanguageModel::Load(testing::StoriesModelPath());
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

ServeOptions Options(int64_t max_seqs, int64_t max_queue) {
  ServeOptions o;
  o.batcher.context = 4096;
  o.batcher.max_seqs = max_seqs;
  o.batcher.max_queue = max_queue;
  return o;
}

std::string CompletionRequest(int max_tokens, bool stream) {
  const std::string body =
      json{{"model", "stories"},       {"prompt", "Once upon a time"},
           {"max_tokens", max_tokens}, {"temperature", 0},
           {"ignore_eos", true},       {"stream", stream}}
          .dump();
  return absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\n",
      "Content-Length: ", body.size(), "\r\n\r\n", body);
}

// A counter of /metrics, read over HTTP as a monitor would.
int64_t Metric(int port, const std::string& name) {
  HttpClientRequest req;
  req.target = "/metrics";
  auto r = HttpFetch("127.0.0.1", port, req, std::chrono::seconds(10));
  if (!r.ok()) return -1;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0)
      return std::stoll(line.substr(name.size() + 1));
  }
  return -1;
}

template <class Pred>
bool WaitFor(Pred pred, milliseconds limit = milliseconds(20000)) {
  const auto end = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

TEST(DepartedClients, ANonStreamingClientGoneGetsNoMoreTokens) {
  auto model = Stories();
  ASSERT_TRUE(model);
  Served s(*model, Options(8, 8));
  testing::RawConnection c(s.port());
  c.Send(CompletionRequest(4000, false));
  ASSERT_TRUE(WaitFor(
      [&] { return s.server().batcher().Stats().generated_tokens > 0; }));
  std::this_thread::sleep_for(milliseconds(100));
  const int64_t at_close = s.server().batcher().Stats().generated_tokens;
  const auto t0 = Clock::now();
  c.Close();
  ASSERT_TRUE(
      WaitFor([&] { return s.server().batcher().Stats().running == 0; }));
  const double ms = Ms(t0, Clock::now());
  const int64_t at_end = Metric(s.port(), "lrkv_generated_tokens_total");
  std::this_thread::sleep_for(milliseconds(300));
  const int64_t later = Metric(s.port(), "lrkv_generated_tokens_total");
  std::cout << "tokens when the client closed " << at_close
            << ", when its sequence ended " << at_end << " (" << ms
            << " ms later), 300 ms after " << later << "\n";
  EXPECT_EQ(later, at_end);  // nothing generated for no one
  EXPECT_LT(at_end, 4000);   // the sequence did not run to max_tokens
  EXPECT_EQ(Metric(s.port(), "lrkv_http_clients_gone_total"), 1);
  EXPECT_EQ(Metric(s.port(), "lrkv_cancelled_sequences_total"), 1);
}

TEST(DepartedClients, DroppedRequestsFreeTheirRunningAndQueuedSlotsAtOnce) {
  auto model = Stories();
  ASSERT_TRUE(model);
  Served s(*model, Options(8, 8));
  // 16 non-streaming 4,000-token requests: 8 run, 8 wait; each dropped.
  std::vector<std::unique_ptr<testing::RawConnection>> dropped;
  for (int i = 0; i < 16; ++i) {
    dropped.push_back(std::make_unique<testing::RawConnection>(s.port()));
    dropped.back()->Send(CompletionRequest(4000, false));
  }
  ASSERT_TRUE(WaitFor([&] {
    const BatcherStats st = s.server().batcher().Stats();
    return st.running == 8 && st.queued == 8;
  }));
  dropped.clear();
  ASSERT_TRUE(
      WaitFor([&] { return s.server().http_stats().clients_gone == 16; }));
  // The next live request is served, not refused as overload.
  auto live =
      HttpFetch("127.0.0.1", s.port(),
                {"POST",
                 "/v1/completions",
                 {{"Content-Type", "application/json"}},
                 R"({"model":"stories","prompt":"Once","max_tokens":8})"},
                std::chrono::seconds(60));
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(live->status, 200) << live->body;
  const BatcherStats st = s.server().batcher().Stats();
  std::cout << "16 dropped requests: " << st.generated_tokens
            << " tokens generated in all, " << st.cancelled
            << " sequences cancelled\n";
  EXPECT_EQ(st.cancelled, 16);
  EXPECT_LT(st.generated_tokens, 8 * 4000);
}

TEST(DepartedClients, StreamsGoneWhileQueuedLeaveTheQueueAtOnce) {
  auto model = Stories();
  ASSERT_TRUE(model);
  Served s(*model, Options(2, 2));
  // Two running streams whose clients stay; two queued streams whose clients
  // leave before they reach the front.
  std::vector<std::unique_ptr<testing::RawConnection>> running, queued;
  for (int i = 0; i < 2; ++i) {
    running.push_back(std::make_unique<testing::RawConnection>(s.port()));
    running.back()->Send(CompletionRequest(4000, true));
  }
  ASSERT_TRUE(
      WaitFor([&] { return s.server().batcher().Stats().running == 2; }));
  for (int i = 0; i < 2; ++i) {
    queued.push_back(std::make_unique<testing::RawConnection>(s.port()));
    queued.back()->Send(CompletionRequest(4000, true));
  }
  ASSERT_TRUE(
      WaitFor([&] { return s.server().batcher().Stats().queued == 2; }));
  queued.clear();
  const auto t0 = Clock::now();
  ASSERT_TRUE(
      WaitFor([&] { return s.server().batcher().Stats().queued == 0; }));
  std::cout << "queued streams gone: the queue emptied " << Ms(t0, Clock::now())
            << " ms after they closed\n";
  EXPECT_EQ(s.server().batcher().Stats().running, 2);
  // Their slots are free: two more are queued rather than refused.
  std::vector<std::unique_ptr<testing::RawConnection>> more;
  for (int i = 0; i < 2; ++i) {
    more.push_back(std::make_unique<testing::RawConnection>(s.port()));
    more.back()->Send(CompletionRequest(4000, true));
    const std::string head = more.back()->ReadUntil(
        [](const std::string& got) {
          return got.find("\r\n\r\n") != std::string::npos;
        },
        milliseconds(10000));
    EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  }
}

// The events of an SSE body: each `data:` payload.
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  }
  return out;
}

// A stream's events end with a chunk whose finish_reason is "shutdown", then
// [DONE].
void ExpectShutdownEnd(const std::string& body, const std::string& what) {
  const std::vector<std::string> events =
      Events(testing::ParseResponses(body).empty()
                 ? body
                 : testing::ParseResponses(body)[0].body);
  ASSERT_GE(events.size(), 2u) << what << ": " << body.substr(0, 400);
  EXPECT_EQ(events.back(), "[DONE]") << what;
  const json last = json::parse(events[events.size() - 2], nullptr, false);
  ASSERT_TRUE(last.is_object()) << what << ": " << events[events.size() - 2];
  EXPECT_EQ(last["choices"][0]["finish_reason"], "shutdown") << what;
}

TEST(Shutdown,
     EndsStreamsAnswersWaitingRequests503AndReturnsWithinTheDrainTime) {
  auto model = Stories();
  ASSERT_TRUE(model);
  ServeOptions o = Options(2, 4);
  o.shutdown_timeout = milliseconds(500);
  Served s(*model, o);
  std::vector<std::unique_ptr<testing::RawConnection>> streams, waiting;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(std::make_unique<testing::RawConnection>(s.port()));
    streams.back()->Send(CompletionRequest(4000, true));
  }
  ASSERT_TRUE(
      WaitFor([&] { return s.server().batcher().Stats().running == 2; }));
  auto queued_stream = std::make_unique<testing::RawConnection>(s.port());
  queued_stream->Send(CompletionRequest(4000, true));
  auto queued_plain = std::make_unique<testing::RawConnection>(s.port());
  queued_plain->Send(CompletionRequest(4000, false));
  ASSERT_TRUE(
      WaitFor([&] { return s.server().batcher().Stats().queued == 2; }));

  const auto t0 = Clock::now();
  std::thread drain([&] { s.server().Shutdown(); });
  auto read_all = [](testing::RawConnection& c) {
    return c.ReadAll(milliseconds(10000));
  };
  const std::string plain = read_all(*queued_plain);
  const std::string queued = read_all(*queued_stream);
  const double waiting_ms = Ms(t0, Clock::now());
  std::vector<std::string> ran;
  for (auto& c : streams) ran.push_back(read_all(*c));
  drain.join();
  s.JoinRun();
  const double total_ms = Ms(t0, Clock::now());
  std::cout << "shutdown: waiting requests answered within " << waiting_ms
            << " ms, the server returned after " << total_ms
            << " ms (drain time 500 ms)\n";
  EXPECT_EQ(testing::Statuses(plain), std::vector<int>{503});
  ExpectShutdownEnd(queued, "the queued stream");
  for (const std::string& r : ran) ExpectShutdownEnd(r, "a running stream");
  EXPECT_LT(total_ms, 500 + 1000);
}

TEST(Shutdown, SigtermToTheBinaryEndsItsStreamsWithinTheDrainTime) {
  int err[2];
  ASSERT_EQ(pipe(err), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], 2);
    close(err[0]);
    execl(LRKV_BIN, LRKV_BIN, "serve", "--checkpoint",
          testing::StoriesModelPath().c_str(), "--port", "0", "--model-id",
          "stories", "--ctx", "4096", "--max-seqs", "2", "--shutdown-timeout",
          "1", "--threads", "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(err[1]);
  FILE* log = fdopen(err[0], "r");
  int port = 0;
  std::string lines;
  char buf[1024];
  const std::regex listening("on http://[0-9.]+:([0-9]+)");
  while (port == 0 && fgets(buf, sizeof buf, log) != nullptr) {
    lines += buf;
    std::cmatch m;
    if (std::regex_search(buf, m, listening)) port = std::stoi(m[1]);
  }
  ASSERT_GT(port, 0) << lines;
  testing::RawConnection stream(port);
  stream.Send(CompletionRequest(4000, true));
  const std::string first = stream.ReadUntil(
      [](const std::string& got) {
        return got.find("data: {") != std::string::npos;
      },
      milliseconds(20000));
  ASSERT_NE(first.find("data: {"), std::string::npos) << first;
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const std::string rest = first + stream.ReadAll(milliseconds(10000));
  int status = 0;
  waitpid(pid, &status, 0);
  const double ms = Ms(t0, Clock::now());
  while (fgets(buf, sizeof buf, log) != nullptr) lines += buf;
  fclose(log);
  std::cout << "SIGTERM: lrkv serve exited " << ms
            << " ms later (drain time 1 s)\n";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << lines;
  ExpectShutdownEnd(rest, "the binary's stream");
  EXPECT_LT(ms, 1000 + 1000);
  EXPECT_NE(lines.find("draining"), std::string::npos) << lines;
}

}  // namespace
}  // namespace lrkv
