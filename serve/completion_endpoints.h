// POST /v1/completions and /v1/chat/completions: requests parsed and checked,
// their prompts tokenized and submitted to the batcher (every choice admitted
// or none), then answered whole or streamed as server-sent events ending in
// `data: [DONE]`.
#ifndef LRKV_SERVE_COMPLETION_ENDPOINTS_H_
#define LRKV_SERVE_COMPLETION_ENDPOINTS_H_

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"
#include "runtime/continuous_batcher.h"
#include "serve/choice.h"
#include "serve/openai_request.h"

namespace lrkv {

class ChatTemplate;

class CompletionEndpoints {
 public:
  // Everything must outlive the endpoints; `chat_template` may be null (no
  // chat).
  CompletionEndpoints(const Tokenizer& tokenizer, ContinuousBatcher& batcher,
                      const ChatTemplate* chat_template, std::string model_id)
      : tokenizer_(tokenizer),
        batcher_(batcher),
        template_(chat_template),
        model_id_(std::move(model_id)) {}

  // Each answers `res` completely: a body, or a stream, or an error body.
  void Completions(const httplib::Request& req, httplib::Response& res);
  void ChatCompletions(const httplib::Request& req, httplib::Response& res);

 private:
  // One sequence per prompt, all submitted or none (the first refusal is
  // returned).
  absl::StatusOr<std::vector<std::unique_ptr<Choice>>> Submit(
      const std::vector<std::vector<int32_t>>& prompts,
      const GenerationParams& params, bool prompt_logprobs);
  // Token ids of a completion prompt (text: the document start token, then its
  // ids).
  std::vector<int32_t> PromptIds(const CompletionPrompt& prompt) const;
  // The fields every response and chunk starts with: a fresh id, the object kind, the
  // time, the model.
  nlohmann::json Head(const char* id_prefix, const char* object);

  const Tokenizer& tokenizer_;
  ContinuousBatcher& batcher_;
  const ChatTemplate* template_;
  std::string model_id_;
  std::atomic<int64_t> next_id_{0};
};

// Writes `status` as the OpenAI error body with its HTTP status (and
// Retry-After for 429).
void SetError(httplib::Response& res, const absl::Status& status);

}  // namespace lrkv

#endif  // LRKV_SERVE_COMPLETION_ENDPOINTS_H_
