// The chat-template interpreter's subset on its own: what it refuses when
// parsing (the construct named, with its line), Jinja's scoping, and the Python
// semantics templates rely on. tests/tokenizer/chat_template_reference_test.cc
// checks real templates against
// @huggingface/jinja.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>

namespace lrkv {
namespace {

std::string Render(const std::string& source,
                   const std::vector<ChatTurn>& messages = {},
                   bool add_generation_prompt = false) {
  auto t = ChatTemplate::Parse(source, "<s>", "</s>");
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  auto r = t->Render(messages, add_generation_prompt);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : "";
}

TEST(ChatTemplate, RefusesWhatTheSubsetLacksWhenParsedNamingItAndTheLine) {
  struct Case {
    const char* source;
    const char* named;
  };
  for (const Case& c : {Case{"a\n{% macro f() %}x{% endmacro %}", "macro"},
                        Case{"{{ messages | wordwrap }}", "wordwrap"},
                        Case{"{{ localtime('%d') }}", "localtime"},
                        Case{"{{ x is callable }}", "callable"},
                        Case{"{% include 'other' %}", "include"}}) {
    auto t = ChatTemplate::Parse(c.source, "", "");
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.named), std::string::npos)
        << t.status();
    EXPECT_NE(t.status().message().find("line "), std::string::npos)
        << t.status();
  }
  EXPECT_NE(ChatTemplate::Parse("a\n\n{% if x %}", "", "")
                .status()
                .message()
                .find("endif"),
            std::string::npos);
  EXPECT_FALSE(ChatTemplate::Parse("{{ 'open }}", "", "").ok());
}

// Llama-3.1/3.2 templates date their system prompt when strftime_now is
// defined.
TEST(ChatTemplate, StrftimeNowIsDefinedAndFormatsToday) {
  char year[8];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(year, sizeof year, "%Y", &local);
  EXPECT_EQ(Render("{% if strftime_now is defined %}{{ strftime_now('%Y') }}{% "
                   "endif %}"),
            year);
}

TEST(ChatTemplate, RaiseExceptionIsTheRenderError) {
  auto t = ChatTemplate::Parse("{{ raise_exception('roles must alternate') }}",
                               "", "");
  ASSERT_TRUE(t.ok());
  auto r = t->Render({}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "roles must alternate");
}

TEST(ChatTemplate, ForLoopsScopeTheirVariablesButNamespacesAreShared) {
  const std::vector<ChatTurn> m = {
      {"user", "a"}, {"assistant", "b"}, {"user", "c"}};
  EXPECT_EQ(
      Render(
          "{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in messages %}"
          "{% set n = n + 1 %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ "
          "ns.n }}",
          m),
      "0 3");
  EXPECT_EQ(
      Render("{% for x in messages[::-1] %}{{ loop.index0 }}{{ x.content }}"
             "{% if not loop.last %},{% endif %}{% endfor %}",
             m),
      "0c,1b,2a");
  EXPECT_EQ(Render("{% for x in messages if x.role == 'user' %}{{ loop.length "
                   "}}{{ x['content'] }}"
                   "{% endfor %}",
                   m),
            "2a2c");
}

TEST(ChatTemplate, PythonSemanticsOfStringsValuesAndWhitespace) {
  EXPECT_EQ(
      Render("{{ 'a</think>b'.split('</think>')[-1] }}|{{ '  x \\n'.strip() }}|"
             "{{ 'xxaxx'.lstrip('x') }}|{{ [1, 2] }}|{{ none }}|{{ true }}|{{ "
             "7 // 2 }}|"
             "{{ -7 % 3 }}|{{ 1 / 2 }}|{{ 'ab' * 2 }}|{{ 'b' in 'abc' }}|{{ "
             "undefined_name }}|"
             "{{ {'k': [1, 'v']} | tojson }}"),
      "b|x|axx|[1, 2]|None|True|3|2|0.5|abab|True||{\"k\": [1, \"v\"]}");
  // trim_blocks and lstrip_blocks, as Hugging Face renders templates; `-`
  // trimming.
  EXPECT_EQ(Render("  {% if true %}\nyes\n  {% endif %}\n{{- ' end' }}\n"),
            "yes\n end");
  EXPECT_EQ(Render("a  \n  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(Render("{{ bos_token }}{% if add_generation_prompt %}go{% endif %}",
                   {}, true),
            "<s>go");
}

}  // namespace
}  // namespace lrkv
