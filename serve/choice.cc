#include "serve/choice.h"

namespace lrkv {

Choice::Choice(const Tokenizer& tokenizer, std::shared_ptr<Sequence> sequence,
               std::vector<std::string> stops, int64_t prompt_tokens)
    : tokenizer_(tokenizer),
      sequence_(std::move(sequence)),
      text_(tokenizer, std::move(stops)),
      prompt_tokens_(prompt_tokens) {}

Choice::~Choice() {
  if (!finished_) sequence_->Cancel();
}

TokenLogprob Choice::LogprobOf(const GeneratedToken& t) const {
  TokenLogprob out{tokenizer_.TokenToPiece(t.id), t.logprob, {}};
  for (const auto& [id, logprob] : t.top)
    out.top.emplace_back(tokenizer_.TokenToPiece(id), logprob);
  return out;
}

ChoiceDelta Choice::Poll(std::chrono::milliseconds timeout) {
  ChoiceDelta delta;
  if (finished_) return delta;
  SequenceUpdate update = sequence_->Take(timeout);
  for (const GeneratedToken& t : update.prompt)
    delta.prompt_logprobs.push_back(LogprobOf(t));
  for (const GeneratedToken& t : update.tokens) {
    delta.text += text_.Push(t.id);
    ++completion_tokens_;
    delta.logprobs.push_back(LogprobOf(t));
    if (text_.stopped()) {
      // The stop sequence ends the choice here; the batcher frees the sequence
      // at its next step.
      sequence_->Cancel();
      delta.finish_reason = "stop";
      finished_ = true;
      return delta;
    }
  }
  switch (update.finish) {
    case FinishReason::kNone:
      return delta;
    case FinishReason::kLength:
    case FinishReason::kEos:
    case FinishReason::kShutdown:
      delta.text += text_.Finish();
      delta.finish_reason = FinishReasonName(update.finish);
      break;
    case FinishReason::kCancelled:
      delta.error = absl::CancelledError("the sequence was cancelled");
      break;
    case FinishReason::kFailed:
      delta.error = update.error;
      break;
  }
  finished_ = true;
  return delta;
}

}  // namespace lrkv
