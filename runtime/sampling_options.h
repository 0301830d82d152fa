// How the next token is drawn (runtime/sampler.h), without LibTorch: the HTTP
// request parser (serve/openai_request.h) fills it in the sanitizer and fuzz
// builds.
#ifndef LRKV_RUNTIME_SAMPLING_OPTIONS_H_
#define LRKV_RUNTIME_SAMPLING_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lrkv {

struct SamplingOptions {
  /// 0 picks the most likely token (greedy); otherwise the logits are divided
  /// by it before the softmax. At most 2, as in the OpenAI API.
  double temperature = 1.0;
  /// Nucleus sampling: draw from the most likely tokens whose probabilities sum
  /// to at least top_p (after top_k and temperature). In (0, 1]; 1 keeps every
  /// token.
  double top_p = 1.0;
  /// Draw from the top_k most likely tokens only; 0 keeps every token.
  int64_t top_k = 0;
  /// Seeds the sequence's generator (std::mt19937_64).
  uint64_t seed = 0;

  absl::Status Validate() const {
    if (!(temperature >= 0 && temperature <= 2)) {
      return absl::InvalidArgumentError(
          absl::StrCat("temperature must be in [0, 2], got ", temperature));
    }
    if (!(top_p > 0 && top_p <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("top_p must be in (0, 1], got ", top_p));
    }
    if (top_k < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("top_k must be >= 0, got ", top_k));
    }
    return absl::OkStatus();
  }
};

}  // namespace lrkv

#endif  // LRKV_RUNTIME_SAMPLING_OPTIONS_H_
