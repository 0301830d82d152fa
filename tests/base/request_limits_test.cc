// Bounded parsing of what a client sends (base/json_limits.h, service/params_json.h,
// service/upload_header.h): size, depth, NUL, UTF-8, duplicates and trailing bytes are
// refused naming the limit, before any recursion on the client's nesting. Runs in the
// sanitizer suite too.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/json_limits.h"
#include "service/params_json.h"
#include "service/upload_header.h"

namespace lrkv {
namespace {

using ::testing::HasSubstr;

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JsonLimits, DepthIsCheckedBeforeParsing) {
  JsonLimits limits;
  limits.max_depth = 4;
  EXPECT_TRUE(ParseJsonBounded("[[[[1]]]]", limits, "x").ok());
  const auto deep = ParseJsonBounded("[[[[[1]]]]]", limits, "x");
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(deep.status().message(), HasSubstr("x: nested deeper than the limit of 4 levels"));
  // Brackets inside strings (escaped quotes included) are text, not nesting.
  EXPECT_TRUE(ParseJsonBounded(R"({"a": "[[[[[[[[\"{{{{{{"})", limits, "x").ok());
  // The bodies that overflowed the server's stack: refused at once, not parsed.
  for (const std::string& body : {Repeat("{\"x\":", 30000) + "1" + Repeat("}", 30000),
                                  Repeat("[", 100000) + Repeat("]", 100000)}) {
    const auto st = service::ParseParamsJson(body);
    EXPECT_THAT(st.status().message(), HasSubstr("nested deeper than the limit of 64 levels"));
  }
}

TEST(JsonLimits, SizeNulUtf8DuplicatesAndTrailingBytes) {
  JsonLimits limits = kRequestJsonLimits;
  limits.max_bytes = 16;
  EXPECT_THAT(ParseJsonBounded(R"({"a": "0123456789"})", limits, "p").status().message(),
              HasSubstr("p: 19 bytes exceed the limit of 16 bytes"));
  struct Case {
    std::string text, phrase;
  };
  const Case cases[] = {
      {std::string("{\"rank\":2}\0garbage", 18), "a NUL byte at byte 10"},
      {"{\"rank\":2} garbage", "not valid JSON"},
      {R"({"a": "x\u0000y"})", "\\u0000"},
      {"{\"a\": \"\xc3\x28\"}", "invalid UTF-8 at byte 8"},
      {R"({"a": 1, "a": 2})", "given twice"},
      {R"({"o": {"a": 1, "a": 2}})", "duplicate entry 'a'"},
  };
  for (const Case& c : cases) {
    const auto st = ParseJsonBounded(c.text, kRequestJsonLimits, "params_json");
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(st.status().message(), HasSubstr(c.phrase)) << c.text;
  }
  // The same key in two objects is no duplicate; files may hold \u0000 (a vocabulary).
  EXPECT_TRUE(ParseJsonBounded(R"({"o": {"a": 1}, "p": {"a": 2}})", kRequestJsonLimits, "p").ok());
  EXPECT_TRUE(ParseJsonBounded(R"({"t": "\u0000"})", kFileJsonLimits, "tokenizer.json").ok());
}

TEST(ParamsJson, InputPathsAreReplacedAtAnyDepthWithoutRecursion) {
  const std::string text =
      R"({"calib": "/a.txt", "convert": {"eval": "/b.txt", "rank": 2}, "list": [{"data": "/c"}],
          "config_file": {"name": "s.yaml", "text": "eval: /not-a-path"}})";
  auto out = service::ReplaceInputPaths(text, service::kTextInputKeys,
                                        [](const std::string& p) -> absl::StatusOr<std::string> {
                                          return "/staged" + p;
                                        });
  ASSERT_TRUE(out.ok()) << out.status();
  const auto j = nlohmann::json::parse(*out);
  EXPECT_EQ(j["calib"], "/staged/a.txt");
  EXPECT_EQ(j["convert"]["eval"], "/staged/b.txt");
  EXPECT_EQ(j["list"][0]["data"], "/staged/c");
  EXPECT_EQ(j["config_file"]["text"], "eval: /not-a-path");
  auto refused = service::ReplaceInputPaths(
      R"({"eval": "/x"})", service::kTextInputKeys,
      [](const std::string&) -> absl::StatusOr<std::string> {
        return absl::PermissionDeniedError("outside");
      });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(UploadHeader, EveryFieldIsCheckedBeforeAByteIsStaged) {
  service::UploadHeaderInfo ok;
  ok.upload_id = "up-1";
  ok.file_name = "model.safetensors";
  ok.total_bytes = 100;
  ok.config_json = R"({"model_type": "llama"})";
  EXPECT_TRUE(service::ValidateUploadHeader(ok, 1000).ok());
  struct Case {
    void (*edit)(service::UploadHeaderInfo*);
    absl::StatusCode code;
    std::string phrase;
  };
  const Case cases[] = {
      {[](service::UploadHeaderInfo* h) { h->upload_id = "a/b"; },
       absl::StatusCode::kInvalidArgument, "header.upload_id"},
      {[](service::UploadHeaderInfo* h) { h->file_name = std::string("m\0.gguf", 7); },
       absl::StatusCode::kInvalidArgument, "header.file_name"},
      {[](service::UploadHeaderInfo* h) { h->file_name = "\xff.gguf"; },
       absl::StatusCode::kInvalidArgument, "plain UTF-8 name"},
      {[](service::UploadHeaderInfo* h) { h->file_name = std::string(300, 'a') + ".gguf"; },
       absl::StatusCode::kInvalidArgument, "at most 255 bytes"},
      {[](service::UploadHeaderInfo* h) { h->total_bytes = 0; },
       absl::StatusCode::kInvalidArgument, "header.total_bytes 0"},
      {[](service::UploadHeaderInfo* h) { h->total_bytes = 1001; },
       absl::StatusCode::kResourceExhausted, "upload limit of 1000"},
      {[](service::UploadHeaderInfo* h) { h->config_json = "[1]"; },
       absl::StatusCode::kInvalidArgument, "must be a JSON object"},
      {[](service::UploadHeaderInfo* h) { h->config_json = Repeat("[", 5000); },
       absl::StatusCode::kInvalidArgument, "header.config_json: nested deeper"},
      {[](service::UploadHeaderInfo* h) { h->tokenizer_json = Repeat("{\"a\":", 5000); },
       absl::StatusCode::kInvalidArgument, "header.tokenizer_json: nested deeper"},
  };
  for (const Case& c : cases) {
    service::UploadHeaderInfo h = ok;
    c.edit(&h);
    const absl::Status st = service::ValidateUploadHeader(h, 1000);
    EXPECT_EQ(st.code(), c.code) << c.phrase << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(c.phrase));
  }
}

}  // namespace
}  // namespace lrkv
