// POST /v1/completions and /v1/chat/completions: requests parsed and checked,
// their prompts tokenized and submitted to the batcher (every choice admitted
// or none), then answered whole or streamed as server-sent events ending in
// `data: [DONE]`. A client that leaves has its sequences cancelled at once (the
// batcher frees them at its next step, or their queue slots now); a sequence
// the server ends while shutting down is answered 503, or in a stream ends
// with finish_reason "shutdown".
#ifndef LRKV_SERVE_COMPLETION_ENDPOINTS_H_
#define LRKV_SERVE_COMPLETION_ENDPOINTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/continuous_batcher.h"
#include "serve/choice.h"
#include "serve/http/http_server.h"
#include "serve/openai_request.h"
#include "tokenizer/tokenizer.h"

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

  // Each answers the exchange completely (a body, a stream or an error body)
  // unless its client left first; returns the HTTP status answered (0: none).
  int Completions(HttpExchange& ex);
  int ChatCompletions(HttpExchange& ex);

 private:
  // One sequence per prompt, all submitted or none (the first refusal is
  // returned).
  absl::StatusOr<std::vector<std::unique_ptr<Choice>>> Submit(
      const std::vector<std::vector<int32_t>>& prompts,
      const GenerationParams& params, bool prompt_logprobs);
  // Token ids of a completion prompt (text: the document start token, then its
  // ids).
  std::vector<int32_t> PromptIds(const CompletionPrompt& prompt) const;
  // The fields every response and chunk starts with: a fresh id, the object
  // kind, the time, the model.
  nlohmann::json Head(const char* id_prefix, const char* object);

  const Tokenizer& tokenizer_;
  ContinuousBatcher& batcher_;
  const ChatTemplate* template_;
  std::string model_id_;
  std::atomic<int64_t> next_id_{0};
};

// Answers `status` as the OpenAI error body with its HTTP status (and
// Retry-After for 429 and 503); returns that status.
int RespondError(HttpExchange& ex, const absl::Status& status);
// Answers `body` as application/json; returns `http_status`.
int RespondJson(HttpExchange& ex, int http_status, std::string body);

}  // namespace lrkv

#endif  // LRKV_SERVE_COMPLETION_ENDPOINTS_H_
