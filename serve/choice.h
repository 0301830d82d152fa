// One choice of an OpenAI response: a sequence submitted to the batcher, read
// back as text deltas (whole characters, stop sequences cut,
// serve/text_stream.h) with the log-probabilities of their tokens.
#ifndef LRKV_SERVE_CHOICE_H_
#define LRKV_SERVE_CHOICE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "runtime/continuous_batcher.h"
#include "serve/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

struct TokenLogprob {
  std::string token;  // the token's bytes (TokenToPiece)
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;
};

struct ChoiceDelta {
  std::string text;
  /// The generated tokens this delta covers.
  std::vector<TokenLogprob> logprobs;
  /// Prompt tokens 1..n-1, scored (SequenceRequest::prompt_logprobs).
  std::vector<TokenLogprob> prompt_logprobs;
  /// "stop" (end of sequence or a stop sequence), "length", "shutdown" (the
  /// server ended it while shutting down), or "" while running.
  std::string finish_reason;
  absl::Status error;  // the sequence failed (or was cancelled by the server)
};

class Choice {
 public:
  // `tokenizer` must outlive the choice.
  Choice(const Tokenizer& tokenizer, std::shared_ptr<Sequence> sequence,
         std::vector<std::string> stops, int64_t prompt_tokens);
  // Cancels the sequence if it is still running (a client gone, a response
  // abandoned).
  ~Choice();

  // What the sequence produced next, waiting up to `timeout` for it.
  ChoiceDelta Poll(std::chrono::milliseconds timeout);
  bool finished() const { return finished_; }
  // The batcher's handle (to cancel it from another thread).
  const std::shared_ptr<Sequence>& sequence() const { return sequence_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }

 private:
  TokenLogprob LogprobOf(const GeneratedToken& t) const;

  const Tokenizer& tokenizer_;
  std::shared_ptr<Sequence> sequence_;
  TextStream text_;
  int64_t prompt_tokens_;
  int64_t completion_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace lrkv

#endif  // LRKV_SERVE_CHOICE_H_
