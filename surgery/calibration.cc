// Calibration statistics for activation-aware surgery (see calibration.h).
#include "surgery/calibration.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/perplexity.h"

namespace lrkv {

absl::StatusOr<CalibrationStats> CollectCalibration(
    const Transformer& model, const Tokenizer& tokenizer,
    const std::vector<std::string>& docs, int64_t max_tokens,
    const StopCheck& stop, int64_t samples) {
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
  const int64_t stride =
      samples > 0 ? std::max<int64_t>(1, (max_tokens + samples - 1) / samples)
                  : 0;
  std::vector<std::vector<at::Tensor>> kept(samples > 0 ? c.num_layers : 0);
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
      // Tokens of this window at positions stats.tokens + p + i with i ≡ first
      // (mod stride).
      const int64_t at = stats.tokens + p;
      const int64_t first = stride > 0 ? (stride - at % stride) % stride : 0;
      model.Forward(tokens, [&](int64_t layer, const at::Tensor& x) {
        const auto flat = x.reshape({-1, x.size(-1)});
        const auto wide = flat.to(at::kDouble);
        stats.gram[layer].addmm_(wide.t(), wide);
        if (stride > 0 && first < flat.size(0)) {
          kept[layer].push_back(flat.slice(0, first, flat.size(0), stride)
                                    .to(at::kFloat)
                                    .clone());
        }
      });
    }
    stats.tokens += take;
    ++stats.documents;
  }
  if (stats.tokens == 0) {
    return absl::InvalidArgumentError("calibration text holds no tokens");
  }
  for (auto& layer : kept) {
    auto all = at::cat(layer, 0);
    stats.samples.push_back(all.size(0) > samples ? all.slice(0, 0, samples)
                                                  : all);
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
