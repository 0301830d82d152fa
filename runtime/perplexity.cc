// Perplexity of a model on documents (see perplexity.h).
#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

namespace lrkv {

double PerplexityStats::perplexity() const { return std::exp(mean_nll()); }

int64_t EvalWindow(const ModelConfig& config) {
  const int64_t context = config.max_position_embeddings;
  return context > 0 ? std::min(context, kMaxEvalWindow) : kMaxEvalWindow;
}

absl::StatusOr<PerplexityStats> MeasurePerplexity(const Transformer& model,
                                                  const Tokenizer& tokenizer,
                                                  const std::vector<std::string>& docs,
                                                  const StopCheck& stop) {
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
      const auto logits = model.Forward(t.slice(0, begin, end - 1).unsqueeze(0))[0];
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
