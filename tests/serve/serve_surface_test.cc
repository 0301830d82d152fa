// The documented surface of `lrkv serve` (docs/serving.md), one test per
// behaviour, on stories260K in-process: echo with logprobs (the completions
// shape, text_offset), token-id and multi-prompt requests, top_k, ignore_eos,
// refused options (logit_bias, penalties), /v1/models/{id}, chat logprobs with
// top_logprobs, a template's raise_exception as 400, HTTPS, and the keep-alive
// comment a queued stream receives while it waits.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "nlohmann/json.hpp"
#include "runtime/language_model.h"
#include "serve/http/http_client.h"
#include "serve/openai_server.h"
#include "tests/model_test_util.h"
#include "tests/serve/http_test_client.h"
#include "tests/serve/running_server.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// stories260K served on a free port; a chat template that joins the turns and
// refuses the role "bad" with raise_exception.
class SurfaceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = LanguageModel::Load(testing::StoriesModelPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void Start(ServeOptions o = {}) {
    o.model_id = "stories";
    o.chat_template =
        "{% for m in messages %}{% if m.role == 'bad' %}"
        "{{ raise_exception('the role bad is not allowed') }}{% endif %}"
        "{{ m.content }} {% endfor %}";
    server_ = std::make_unique<testing::RunningServer>(*model_, std::move(o));
    ASSERT_TRUE(server_->ok());
    port_ = server_->port();
  }
  void TearDown() override { server_.reset(); }
  // POSTs `body` to `route`; the status and the parsed body.
  std::pair<int, json> Post(const std::string& route, const json& body) {
    HttpClientRequest r{
        "POST", route, {{"Content-Type", "application/json"}}, body.dump()};
    auto res = HttpFetch("127.0.0.1", port_, r, std::chrono::seconds(60));
    EXPECT_TRUE(res.ok()) << res.status();
    if (!res.ok()) return {0, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }
  std::pair<int, json> Get(const std::string& route) {
    HttpClientRequest r;
    r.target = route;
    auto res = HttpFetch("127.0.0.1", port_, r, std::chrono::seconds(60));
    EXPECT_TRUE(res.ok()) << res.status();
    if (!res.ok()) return {0, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }

  static LanguageModel* model_;
  std::unique_ptr<testing::RunningServer> server_;
  int port_ = 0;
};
LanguageModel* SurfaceTest::model_ = nullptr;

TEST_F(SurfaceTest, EchoWithLogprobsReturnsThePromptScoredAndTextOffsets) {
  Start();
  auto [status, r] = Post("/v1/completions", {{"model", "stories"},
                                              {"prompt", "Once upon a time"},
                                              {"echo", true},
                                              {"logprobs", 2},
                                              {"max_tokens", 3},
                                              {"temperature", 0}});
  ASSERT_EQ(status, 200) << r.dump();
  const json& c = r["choices"][0];
  const std::string text = c["text"];
  EXPECT_EQ(text.rfind("Once upon a time", 0), 0u) << text;
  const json& lp = c["logprobs"];
  const size_t n = lp["tokens"].size();
  const int64_t prompt_tokens = r["usage"]["prompt_tokens"];
  EXPECT_EQ(static_cast<int64_t>(n), prompt_tokens + 3);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  EXPECT_TRUE(
      lp["token_logprobs"][0].is_null());  // the first token has no context
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), offset) << i;
    offset += lp["tokens"][i].get<std::string>().size();
    if (i == 0) continue;
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
  }
}

TEST_F(SurfaceTest, TokenIdAndMultiPromptRequestsGetAChoicePerPrompt) {
  Start();
  const std::vector<int32_t> ids =
      model_->tokenizer().Encode("Once upon a time");
  auto [s1, ids_r] = Post("/v1/completions", {{"model", "stories"},
                                              {"prompt", ids},
                                              {"max_tokens", 4},
                                              {"temperature", 0}});
  ASSERT_EQ(s1, 200) << ids_r.dump();
  EXPECT_EQ(ids_r["choices"].size(), 1u);
  EXPECT_EQ(ids_r["usage"]["prompt_tokens"].get<size_t>(), ids.size());
  auto [s2, texts] =
      Post("/v1/completions", {{"model", "stories"},
                               {"prompt", {"Once upon a time", "The cat"}},
                               {"max_tokens", 4},
                               {"temperature", 0}});
  ASSERT_EQ(s2, 200) << texts.dump();
  ASSERT_EQ(texts["choices"].size(), 2u);
  EXPECT_EQ(texts["choices"][0]["index"], 0);
  EXPECT_EQ(texts["choices"][1]["index"], 1);
  auto [s3, lists] = Post("/v1/completions", {{"model", "stories"},
                                              {"prompt", {ids, ids}},
                                              {"max_tokens", 4},
                                              {"temperature", 0}});
  ASSERT_EQ(s3, 200) << lists.dump();
  ASSERT_EQ(lists["choices"].size(), 2u);
  // Greedy decoding of the same ids: the same text in both choices and in the
  // single-prompt request.
  EXPECT_EQ(lists["choices"][0]["text"], lists["choices"][1]["text"]);
  EXPECT_EQ(lists["choices"][0]["text"], ids_r["choices"][0]["text"]);
}

TEST_F(SurfaceTest, TopKOneIsGreedyAndIgnoreEosRunsToMaxTokens) {
  Start();
  auto [s1, greedy] = Post("/v1/completions", {{"model", "stories"},
                                               {"prompt", "Once upon a time"},
                                               {"max_tokens", 24},
                                               {"temperature", 0}});
  auto [s2, top1] = Post("/v1/completions", {{"model", "stories"},
                                             {"prompt", "Once upon a time"},
                                             {"max_tokens", 24},
                                             {"temperature", 1.5},
                                             {"top_k", 1},
                                             {"seed", 7}});
  ASSERT_EQ(s1, 200);
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(top1["choices"][0]["text"], greedy["choices"][0]["text"]);
  auto [s3, long_r] = Post("/v1/completions", {{"model", "stories"},
                                               {"prompt", "The end."},
                                               {"max_tokens", 300},
                                               {"temperature", 0},
                                               {"ignore_eos", true}});
  ASSERT_EQ(s3, 200);
  EXPECT_EQ(long_r["usage"]["completion_tokens"], 300);
  EXPECT_EQ(long_r["choices"][0]["finish_reason"], "length");
}

TEST_F(SurfaceTest, OptionsTheServerCannotHonourAreRefusedNamingThem) {
  Start();
  for (const auto& [field, value] :
       {std::pair{"logit_bias", json{{"50", 10}}},
        std::pair{"presence_penalty", json(0.5)},
        std::pair{"frequency_penalty", json(0.5)}, std::pair{"n", json(2)}}) {
    json body = {{"model", "stories"}, {"prompt", "Once"}, {"max_tokens", 2}};
    body[field] = value;
    auto [status, r] = Post("/v1/completions", body);
    EXPECT_EQ(status, 400) << field;
    EXPECT_NE(r["error"]["message"].get<std::string>().find(field),
              std::string::npos)
        << r.dump();
  }
}

TEST_F(SurfaceTest, ModelsByIdAndUnknownIds) {
  Start();
  auto [ok, model] = Get("/v1/models/stories");
  EXPECT_EQ(ok, 200);
  EXPECT_EQ(model["id"], "stories");
  EXPECT_EQ(model["object"], "model");
  auto [missing, err] = Get("/v1/models/other");
  EXPECT_EQ(missing, 404);
  EXPECT_EQ(err["error"]["code"], "not_found");
}

TEST_F(SurfaceTest, ChatLogprobsAndATemplatesRaiseExceptionAs400) {
  Start();
  auto [status, r] =
      Post("/v1/chat/completions",
           {{"model", "stories"},
            {"messages", {{{"role", "user"}, {"content", "Once upon"}}}},
            {"max_tokens", 4},
            {"temperature", 0},
            {"logprobs", true},
            {"top_logprobs", 2}});
  ASSERT_EQ(status, 200) << r.dump();
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_GE(content.size(), 1u);
  for (const json& t : content) {
    EXPECT_TRUE(t["token"].is_string());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_EQ(t["bytes"].size(), t["token"].get<std::string>().size());
    EXPECT_GE(t["top_logprobs"].size(), 1u);
    EXPECT_LE(t["top_logprobs"].size(), 2u);
  }
  auto [bad, err] = Post("/v1/chat/completions",
                         {{"model", "stories"},
                          {"messages", {{{"role", "bad"}, {"content", "x"}}}},
                          {"max_tokens", 2}});
  EXPECT_EQ(bad, 400);
  EXPECT_NE(err["error"]["message"].get<std::string>().find(
                "the role bad is not allowed"),
            std::string::npos)
      << err.dump();
}

TEST_F(SurfaceTest, HttpsServesTheSameApi) {
  const fs::path dir = testing::FreshTempDir("serve_tls");
  const std::string cert = (dir / "cert.pem").string(),
                    key = (dir / "key.pem").string();
  const std::string gen =
      "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost "
      "-days 1 -keyout '" +
      key + "' -out '" + cert + "' 2>/dev/null";
  ASSERT_EQ(std::system(gen.c_str()), 0);
  ServeOptions o;
  o.tls_cert = cert;
  o.tls_key = key;
  Start(o);
  // Node's https client (TLS 1.3), the certificate self-signed.
  const std::string out = (dir / "out.json").string();
  const std::string script =
      "const https=require('https');const "
      "body=JSON.stringify({model:'stories',prompt:'Once',"
      "max_tokens:3,temperature:0});const "
      "r=https.request({host:'127.0.0.1',port:" +
      std::to_string(port_) +
      ",path:'/v1/"
      "completions',method:'POST',rejectUnauthorized:false,headers:{'Content-"
      "Type':"
      "'application/json','Content-Length':body.length}},res=>{"
      "const p=res.socket.getProtocol();let d='';res.on('data',c=>d+=c);"
      "res.on('end',()=>{require('fs').writeFileSync('" +
      out +
      "',JSON.stringify({status:res.statusCode,protocol:p,body:d}));});});"
      "r.end(body);";
  const std::string cmd = "node -e \"" + script + "\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  const json result = json::parse(in);
  EXPECT_EQ(result["status"], 200);
  EXPECT_EQ(result["protocol"], "TLSv1.3");
  EXPECT_EQ(json::parse(result["body"].get<std::string>())["choices"].size(),
            1u);
  // Plain HTTP on the TLS port is no request.
  testing::RawConnection plain(port_);
  plain.Send("GET /health HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(testing::Statuses(plain.ReadAll(std::chrono::milliseconds(3000)))
                  .empty());
}

TEST_F(SurfaceTest, AQueuedStreamReceivesKeepAliveCommentsWhileItWaits) {
  ServeOptions o;
  o.batcher.max_seqs = 1;
  o.batcher.max_queue = 1;
  o.batcher.context = 20000;
  Start(o);
  auto request = [](int max_tokens) {
    const std::string body =
        json{{"model", "stories"},       {"prompt", "Once"},
             {"max_tokens", max_tokens}, {"temperature", 0},
             {"ignore_eos", true},       {"stream", true}}
            .dump();
    return "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  // The first stream holds the one sequence slot for seconds (19,000 tokens).
  testing::RawConnection running(port_);
  running.Send(request(19000));
  const auto first_event = [](const std::string& got) {
    return got.find("data: {") != std::string::npos;
  };
  ASSERT_TRUE(
      first_event(running.ReadUntil(first_event, std::chrono::seconds(20))));
  testing::RawConnection queued(port_);
  queued.Send(request(8));
  const std::string got = queued.ReadUntil(
      [](const std::string& got) {
        return got.find(": keep-alive") != std::string::npos;
      },
      std::chrono::seconds(10));
  EXPECT_NE(got.find(": keep-alive"), std::string::npos) << got;
  EXPECT_FALSE(first_event(got)) << "the queued stream ran before its turn";
  EXPECT_EQ(server_->server().batcher().Stats().queued, 1);
}

}  // namespace
}  // namespace lrkv
