// The bodies of the OpenAI API requests `lrkv serve` answers, parsed and
// checked before any work: every wrong type or value is InvalidArgument naming
// the field. Fields the server does not know are ignored (as vLLM and
// llama.cpp's server do); options it cannot honour (n > 1, penalties,
// logit_bias) are refused rather than ignored.
#ifndef LRKV_SERVE_OPENAI_REQUEST_H_
#define LRKV_SERVE_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/sampling_options.h"
#include "tokenizer/chat_template.h"

namespace lrkv {

// What /v1/completions and /v1/chat/completions share.
struct GenerationParams {
  std::string model;
  /// New tokens at most; -1: until the context is full (chat's default).
  int64_t max_tokens = 16;
  SamplingOptions sampling;
  std::vector<std::string> stop;
  bool stream = false;
  /// stream_options.include_usage: a last chunk with the token counts.
  bool include_usage = false;
  /// Alternatives reported per token (completions' logprobs, chat's
  /// top_logprobs).
  int64_t top_logprobs = 0;
  /// Whether log-probabilities are reported at all.
  bool logprobs = false;
  /// Generate max_tokens tokens even past an end-of-sequence token (vLLM's and
  /// llama.cpp's extension, for benchmarks).
  bool ignore_eos = false;
};

struct CompletionPrompt {
  std::string text;
  std::vector<int32_t> ids;  // a prompt given as token ids
  bool is_ids = false;
};

struct CompletionRequest {
  GenerationParams params;
  /// One choice per prompt (a list of prompts is a batch).
  std::vector<CompletionPrompt> prompts;
  /// The prompt's tokens come back in front of the completion (with their
  /// logprobs).
  bool echo = false;
};

struct ChatRequest {
  GenerationParams params;
  std::vector<ChatTurn> messages;
};

// Parses a /v1/completions body (bounded JSON, base/json_limits.h).
absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body);
// Parses a /v1/chat/completions body.
absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body);

}  // namespace lrkv

#endif  // LRKV_SERVE_OPENAI_REQUEST_H_
