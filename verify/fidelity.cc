// Fidelity of a converted model to its source (see fidelity.h).
#include "verify/fidelity.h"

#include <cmath>

namespace lrkv {

absl::StatusOr<FidelityResult> MeasureFidelity(const Transformer& source,
                                               const Transformer& converted,
                                               const Tokenizer& tokenizer,
                                               const std::vector<std::string>& docs,
                                               int64_t max_tokens) {
  if (source.config().vocab_size != converted.config().vocab_size) {
    return absl::InvalidArgumentError("source and converted vocabularies differ");
  }
  FidelityResult r;
  double kl_sum = 0, nll_src = 0, nll_conv = 0;
  int64_t agree = 0;
  at::NoGradGuard no_grad;
  for (const auto& doc : docs) {
    if (r.tokens >= max_tokens) break;
    std::vector<int64_t> ids = {tokenizer.document_start_id()};
    for (int32_t id : tokenizer.Encode(doc)) ids.push_back(id);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()) - 1,
                                        max_tokens - r.tokens);
    if (n <= 0) continue;
    const auto t = at::tensor(ids, at::kLong).narrow(0, 0, n + 1).unsqueeze(0);
    const auto inputs = t.narrow(1, 0, n), targets = t[0].narrow(0, 1, n);
    const auto lp = at::log_softmax(source.Forward(inputs)[0].to(at::kDouble), -1);
    const auto lq = at::log_softmax(converted.Forward(inputs)[0].to(at::kDouble), -1);
    const auto kl = (lp.exp() * (lp - lq)).sum(-1);  // [n]
    kl_sum += kl.sum().item<double>();
    r.kl_max = std::max(r.kl_max, kl.max().item<double>());
    agree += lp.argmax(-1).eq(lq.argmax(-1)).sum().item<int64_t>();
    nll_src -= lp.gather(1, targets.unsqueeze(1)).sum().item<double>();
    nll_conv -= lq.gather(1, targets.unsqueeze(1)).sum().item<double>();
    r.tokens += n;
    ++r.documents;
  }
  if (r.tokens == 0) return absl::InvalidArgumentError("fidelity text holds no tokens");
  const auto n = static_cast<double>(r.tokens);
  r.kl_mean = kl_sum / n;
  r.top1_agreement = static_cast<double>(agree) / n;
  r.source_perplexity = std::exp(nll_src / n);
  r.converted_perplexity = std::exp(nll_conv / n);
  return r;
}

}  // namespace lrkv
