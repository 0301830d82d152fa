// The OpenAI request bodies `lrkv serve` parses (serve/openai_request.h): wrong
// types and values refused naming their field. In formats_test, so that it also
// runs under ASan + UBSan.
#include "serve/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace lrkv {
namespace {

TEST(OpenAiRequest, WrongTypesAndValuesNameTheirField) {
  struct Case {
    const char* body;
    const char* named;
  };
  for (const Case& c :
       {Case{R"({"prompt":"a"})", "model"},
        Case{R"({"model":"m","prompt":"a","max_tokens":"7"})", "max_tokens"},
        Case{R"({"model":"m","prompt":"a","temperature":3})", "temperature"},
        Case{R"({"model":"m","prompt":"a","n":2})", "'n'"},
        Case{R"({"model":"m","prompt":[1,"x"]})", "prompt"},
        Case{R"({"model":"m","prompt":"a","stop":[1]})", "stop"},
        Case{R"({"model":"m","prompt":"a","logprobs":9})", "logprobs"},
        Case{R"({"model":"m","prompt":"a","presence_penalty":0.5})",
             "presence_penalty"},
        Case{R"([1,2])", "object"}}) {
    auto r = ParseCompletionRequest(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.named), std::string::npos)
        << r.status();
  }
  auto chat =
      ParseChatRequest(R"({"model":"m","messages":[{"role":"user","content":[
      {"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":3})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->messages[0].content, "ab");
  EXPECT_EQ(chat->params.max_tokens, 3);
  EXPECT_EQ(ParseChatRequest(R"({"model":"m","messages":[]})").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string deep(100, '[');
  EXPECT_EQ(ParseCompletionRequest(deep).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lrkv
