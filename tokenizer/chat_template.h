// A chat template (the `chat_template` of tokenizer_config.json, or a GGUF's
// `tokenizer.chat_template`) rendered by a small interpreter of the Jinja
// subset that real templates use (Qwen3, Llama-3, Gemma-3; docs/serving.md
// lists the subset): no Debian package renders Jinja from C++. A template that
// uses anything outside the subset is refused when it is parsed, naming the
// construct and its line, never at the first request.
#ifndef LRKV_TOKENIZER_CHAT_TEMPLATE_H_
#define LRKV_TOKENIZER_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

struct ChatTurn {
  std::string role;
  std::string content;
};

namespace jinja {
struct Root;
}  // namespace jinja

class ChatTemplate {
 public:
  // Parses `source`; `bos_token` and `eos_token` are the texts templates may
  // print.
  static absl::StatusOr<ChatTemplate> Parse(const std::string& source,
                                            std::string bos_token,
                                            std::string eos_token);

  // The prompt text of `messages`; with `add_generation_prompt`, ending where
  // the assistant's reply begins. InvalidArgument when the template raises an
  // exception (raise_exception) or meets a value it cannot use, with the
  // template's message.
  absl::StatusOr<std::string> Render(const std::vector<ChatTurn>& messages,
                                     bool add_generation_prompt) const;

 private:
  ChatTemplate() = default;
  std::shared_ptr<const jinja::Root> root_;
  std::string bos_token_, eos_token_;
};

// The chat template `tokenizer` carries: tokenizer_config.json's
// `chat_template` (its "default" entry when it lists several), or a GGUF's
// tokenizer.chat_template; empty when none.
std::string ChatTemplateSource(const Tokenizer& tokenizer);

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_CHAT_TEMPLATE_H_
