// Perplexity of a model on documents (see perplexity.h).
#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include "base/status_macros.h"

namespace lrkv {

double PerplexityStats::perplexity() const { return std::exp(mean_nll()); }

int64_t EvalWindow(const ModelConfig& config) {
  const int64_t context = config.max_position_embeddings;
  return context > 0 ? std::min(context, kMaxEvalWindow) : kMaxEvalWindow;
}

namespace {

// Logits [n, V] of every position of tokens [n] through a fresh engine's cache:
// prefill chunks of kPrefillChunk, each chunk's rows attending over the cache
// as written so far.
absl::StatusOr<at::Tensor> LogitsThroughCache(const Transformer& model,
                                              const CacheScoring& cache,
                                              const at::Tensor& tokens) {
  EngineOptions o = cache.engine;
  o.batch = 1;
  o.capacity = tokens.size(0);
  ASSIGN_OR_RETURN(
      auto engine,
      CreateDecodeEngine(model.config(), model.weights(), cache.mode, o));
  std::vector<at::Tensor> parts;
  for (int64_t p = 0; p < tokens.size(0); p += kPrefillChunk) {
    const auto chunk =
        tokens.slice(0, p, std::min(p + kPrefillChunk, tokens.size(0)));
    DecodeEngine::BatchEntry e;
    e.engine = engine.get();
    e.tokens.assign(chunk.data_ptr<int64_t>(),
                    chunk.data_ptr<int64_t>() + chunk.numel());
    e.all_logits = true;
    parts.push_back(DecodeEngine::StepBatch({e})[0]);
  }
  return at::cat(parts, 0);
}

}  // namespace

absl::StatusOr<PerplexityStats> MeasurePerplexity(
    const Transformer& model, const Tokenizer& tokenizer,
    const std::vector<std::string>& docs, const StopCheck& stop,
    const CacheScoring* cache) {
  PerplexityStats r;
  at::NoGradGuard no_grad;
  const int64_t window = EvalWindow(model.config());
  for (const auto& doc : docs) {
    std::vector<int64_t> ids = {tokenizer.document_start_id()};
    for (int32_t id : tokenizer.Encode(doc)) ids.push_back(id);
    const auto n = static_cast<int64_t>(ids.size());
    if (n < 2) continue;
    const auto t = at::tensor(ids, at::kLong);
    // Targets [p, end); the input ends just before the last target, at most `window` long.
    for (int64_t p = 1; p < n; p += window) {
      if (auto st = CheckStop(stop, "evaluation"); !st.ok()) return st;
      const int64_t end = std::min(p + window, n), begin = std::max<int64_t>(0, end - 1 - window);
      const auto input = t.slice(0, begin, end - 1);
      at::Tensor logits;
      if (cache != nullptr) {
        ASSIGN_OR_RETURN(logits,
                         LogitsThroughCache(model, *cache, input.contiguous()));
      } else {
        logits = model.Forward(input.unsqueeze(0))[0];
      }
      r.total_nll += at::cross_entropy_loss(logits.narrow(0, logits.size(0) - (end - p), end - p),
                                            t.slice(0, p, end), {}, at::Reduction::Sum)
                         .item<double>();
    }
    r.tokens += n - 1;
    ++r.documents;
  }
  if (r.tokens == 0) return absl::InvalidArgumentError("the text holds no tokens to predict");
  return r;
}

}  // namespace lrkv
