// Perplexity of a model on documents (see perplexity.h).
#include "model/perplexity.h"

#include <cmath>

namespace lrkv {

double PerplexityStats::perplexity() const { return std::exp(mean_nll()); }

absl::StatusOr<PerplexityStats> MeasurePerplexity(const Transformer& model,
                                                  const Tokenizer& tokenizer,
                                                  const std::vector<std::string>& docs) {
  PerplexityStats r;
  at::NoGradGuard no_grad;
  for (const auto& doc : docs) {
    std::vector<int64_t> ids = {tokenizer.document_start_id()};
    for (int32_t id : tokenizer.Encode(doc)) ids.push_back(id);
    if (ids.size() < 2) continue;
    const auto t = at::tensor(ids, at::kLong).unsqueeze(0);
    const auto logits = model.Forward(t.narrow(1, 0, t.size(1) - 1))[0];
    r.total_nll += at::cross_entropy_loss(logits, t[0].narrow(0, 1, t.size(1) - 1), {},
                                          at::Reduction::Sum)
                       .item<double>();
    r.tokens += t.size(1) - 1;
    ++r.documents;
  }
  if (r.tokens == 0) return absl::InvalidArgumentError("the text holds no tokens to predict");
  return r;
}

}  // namespace lrkv
