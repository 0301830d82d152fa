#include "tokenizer/chat_template.h"

#include "base/json_limits.h"
#include "base/status_macros.h"
#include "formats/checkpoint_files.h"
#include "tokenizer/jinja_ast.h"
#include "nlohmann/json.hpp"

namespace lrkv {

namespace jinja {
// The parsed template (ChatTemplate keeps it behind a forward declaration).
struct Node;
struct Root {
  std::vector<Node> nodes;
};
}  // namespace jinja

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(const std::string& source,
                                                 std::string bos_token,
                                                 std::string eos_token) {
  ASSIGN_OR_RETURN(std::vector<jinja::Node> nodes,
                   jinja::ParseTemplate(source));
  ChatTemplate t;
  t.root_ = std::make_shared<const jinja::Root>(jinja::Root{std::move(nodes)});
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const std::vector<ChatTurn>& messages, bool add_generation_prompt) const {
  using jinja::Value;
  jinja::List list;
  for (const ChatTurn& m : messages) {
    list.push_back(Value::NewDict(
        {{"role", Value::Str(m.role)}, {"content", Value::Str(m.content)}}));
  }
  // What transformers' apply_chat_template passes (tools none when not given).
  const Value context = Value::NewDict(
      {{"messages", Value::NewList(std::move(list))},
       {"add_generation_prompt", Value::Bool(add_generation_prompt)},
       {"bos_token", Value::Str(bos_token_)},
       {"eos_token", Value::Str(eos_token_)},
       {"tools", Value::None()}});
  return jinja::RenderTemplate(root_->nodes, context);
}

std::string ChatTemplateSource(const Tokenizer& tokenizer) {
  for (const TokenizerFile& f : tokenizer.Files()) {
    if (f.name != kHfTokenizerConfigFileName) continue;
    // The tokenizer read this file already; a malformed one has no template.
    const auto parsed = ParseJsonBounded(f.contents, kFileJsonLimits, f.name);
    if (!parsed.ok() || !parsed->is_object()) return "";
    const nlohmann::json& j = *parsed;
    auto t = j.find("chat_template");
    if (t == j.end()) return "";
    if (t->is_string()) return t->get<std::string>();
    if (t->is_array()) {
      for (const auto& e : *t) {
        if (e.is_object() && e.value("name", "") == "default" &&
            e.contains("template") && e["template"].is_string()) {
          return e["template"].get<std::string>();
        }
      }
    }
    return "";
  }
  return "";
}

}  // namespace lrkv
