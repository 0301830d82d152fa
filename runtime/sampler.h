// Drawing the next token from a step's logits: greedy, or temperature / top-k /
// top-p sampling from a generator seeded per sequence, so that one seed, prompt
// and set of options give the same tokens on every run (the OpenAI API's
// `seed`).
#ifndef LRKV_RUNTIME_SAMPLER_H_
#define LRKV_RUNTIME_SAMPLER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"

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

  absl::Status Validate() const;
};

// A token and its log-probability under the model's distribution (the softmax
// of the logits, before temperature and truncation: what the OpenAI API's
// logprobs report).
struct SampledToken {
  int32_t id = 0;
  double logprob = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);

  // The next token from logits [V] or [1, V] (any float dtype).
  SampledToken Sample(const at::Tensor& logits);

  // The log-softmax of logits [V] in float64, and the `k` most likely tokens of
  // it.
  static std::vector<double> LogSoftmax(const at::Tensor& logits);
  static std::vector<std::pair<int32_t, double>> Top(
      const std::vector<double>& logprobs, int64_t k);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace lrkv

#endif  // LRKV_RUNTIME_SAMPLER_H_
