// Calibration statistics for activation-aware surgery (see calibration.h).
#include "surgery/calibration.h"

#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"
#include "runtime/perplexity.h"
#include "base/status_macros.h"

namespace lrkv {

absl::StatusOr<CalibrationStats> CollectCalibration(const Transformer& model,
                                                    const Tokenizer& tokenizer,
                                                    const std::vector<std::string>& docs,
                                                    int64_t max_tokens,
                                                    const StopCheck& stop) {
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration tokens must be positive, got ", max_tokens));
  }
  const ModelConfig& c = model.config();
  CalibrationStats stats;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    stats.gram.push_back(at::zeros({c.hidden_size, c.hidden_size}, at::kDouble));
  }
  at::NoGradGuard no_grad;
  const int64_t window = EvalWindow(c);
  for (const auto& doc : docs) {
    if (stats.tokens >= max_tokens) break;
    std::vector<int64_t> ids = {tokenizer.document_start_id()};
    for (int32_t id : tokenizer.Encode(doc)) ids.push_back(id);
    const int64_t take = std::min<int64_t>(ids.size(), max_tokens - stats.tokens);
    ids.resize(take);
    const auto all = at::tensor(ids, at::kLong);
    for (int64_t p = 0; p < take; p += window) {
      RETURN_IF_ERROR(CheckStop(stop, "calibration"));
      const auto tokens = all.slice(0, p, std::min(p + window, take)).unsqueeze(0);
      model.Forward(tokens, [&](int64_t layer, const at::Tensor& x) {
        auto flat = x.reshape({-1, x.size(-1)}).to(at::kDouble);
        stats.gram[layer].addmm_(flat.t(), flat);
      });
    }
    stats.tokens += take;
    ++stats.documents;
  }
  if (stats.tokens == 0) {
    return absl::InvalidArgumentError("calibration text holds no tokens");
  }
  return stats;
}

absl::StatusOr<at::Tensor> WhiteningFactor(const at::Tensor& gram, int64_t tokens,
                                           double damping) {
  const int64_t d = gram.size(0);
  auto c = gram / static_cast<double>(tokens);
  const double scale = c.diagonal().sum().item<double>() / static_cast<double>(d);
  double lambda = damping * std::max(scale, 1e-12);
  for (int attempt = 0; attempt < 7; ++attempt) {
    auto damped = c + lambda * at::eye(d, at::kDouble);
    auto [factor, info] = at::linalg_cholesky_ex(damped);
    if (info.item<int64_t>() == 0) return factor;
    lambda *= 10;
  }
  return absl::InvalidArgumentError(
      "calibration Gram matrix is not positive definite even with damping");
}

}  // namespace lrkv
