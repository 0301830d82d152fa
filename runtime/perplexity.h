// Perplexity of a model on documents, as evaluation defines it: each document is
// [BOS] + encode(doc); the NLL is summed over predicting every document token. A
// document longer than the evaluation window (EvalWindow) is scored in rolling windows,
// as lm-eval's loglikelihood_rolling does with context_len 1: consecutive disjoint spans
// of at most W predicted tokens, each span's input the W tokens before its last target
// (so a full span sees one token before it, the last span as much as fits).
#ifndef LRKV_RUNTIME_PERPLEXITY_H_
#define LRKV_RUNTIME_PERPLEXITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "runtime/decode_engine.h"
#include "runtime/transformer.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

struct PerplexityStats {
  int64_t documents = 0;
  int64_t tokens = 0;  // predicted tokens
  double total_nll = 0;
  double mean_nll() const { return tokens > 0 ? total_nll / tokens : 0; }
  double perplexity() const;
};

// Most tokens one forward pass evaluates: the model's context (max_position_embeddings),
// at most kMaxEvalWindow so that a pass's attention scores (heads·W²) and logits
// (W·vocab) stay within a few GB at 1-8B shapes.
inline constexpr int64_t kMaxEvalWindow = 2048;
int64_t EvalWindow(const ModelConfig& config);

// Scoring through a decode engine's cache (`lrkv eval --cache-dtype`): each
// window's tokens go through the engine of `mode` in prefill chunks, every
// position's K/V written to its cache and read back from it by attention (a
// quantized cache as stored), as llama.cpp's perplexity scores through its KV
// cache. Without it, a window is one forward pass that caches nothing.
struct CacheScoring {
  DecodeMode mode = DecodeMode::kExpanded;
  EngineOptions engine;
};

// InvalidArgument when no document has a token to predict, or when the engine
// does not apply to the model (its reason). CancelledError when `stop` asks
// (polled per window).
absl::StatusOr<PerplexityStats> MeasurePerplexity(
    const Transformer& model, const Tokenizer& tokenizer,
    const std::vector<std::string>& docs, const StopCheck& stop = {},
    const CacheScoring* cache = nullptr);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_PERPLEXITY_H_
