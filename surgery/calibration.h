// Calibration statistics for activation-aware surgery: the Gram matrix XᵀX of each
// layer's attention input (the normalised hidden state the K/V projections see), and
// the whitening factor L with XᵀX/n + λI = LLᵀ (SVD-LLM style).
#ifndef LRKV_SURGERY_CALIBRATION_H_
#define LRKV_SURGERY_CALIBRATION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "runtime/transformer.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

struct CalibrationStats {
  // Per layer: Σ xᵀx over calibration tokens, float64 [d, d].
  std::vector<at::Tensor> gram;
  // Per layer, when asked: attention inputs of tokens spread evenly over the
  // calibration text, float32 [n, d] (for fits that need each token, not only
  // second moments: the MLA latent norm's).
  std::vector<at::Tensor> samples;
  int64_t tokens = 0;
  int64_t documents = 0;
};

// Runs each document ([BOS] + encode(doc)) through `model` until `max_tokens`
// tokens have been seen (the last document is cut), accumulating every layer's
// Gram matrix. A document longer than EvalWindow(config) goes through in
// disjoint windows of that length (one forward pass's memory stays bounded).
// CancelledError when `stop` asks (polled per window). With `samples` > 0, also
// keeps that many tokens' inputs per layer at most: every ⌈max_tokens /
// samples⌉-th token.
absl::StatusOr<CalibrationStats> CollectCalibration(
    const Transformer& model, const Tokenizer& tokenizer,
    const std::vector<std::string>& docs, int64_t max_tokens,
    const StopCheck& stop = {}, int64_t samples = 0);

// The lower Cholesky factor L of XᵀX/n + λI with λ = damping · trace(XᵀX/n) / d.
// Damping grows tenfold (up to 6 times) until the factorisation succeeds.
// float64 [d, d].
absl::StatusOr<at::Tensor> WhiteningFactor(const at::Tensor& gram, int64_t tokens,
                                           double damping);

}  // namespace lrkv

#endif  // LRKV_SURGERY_CALIBRATION_H_
