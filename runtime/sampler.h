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
#include "runtime/sampling_options.h"

namespace lrkv {

// A token and its log-probability under the model's distribution (the softmax
// of the logits, before temperature and truncation: what the OpenAI API's
// logprobs report).
struct SampledToken {
  int32_t id = 0;
  double logprob = 0;
  // The most likely tokens with their log-probabilities, most likely first,
  // when asked for (Sample's top_logprobs).
  std::vector<std::pair<int32_t, double>> top;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);

  // The next token from logits [V] or [1, V] (any float dtype), computed in
  // float64; its log-probability is LogSoftmax's, to the bit, and so are those
  // of the `top_logprobs` most likely tokens it lists (Top of LogSoftmax, from
  // the same pass over the logits).
  SampledToken Sample(const at::Tensor& logits, int64_t top_logprobs = 0);

  // The log-softmax of logits [V] in float64, and the `k` most likely tokens
  // of it.
  static std::vector<double> LogSoftmax(const at::Tensor& logits);
  static std::vector<std::pair<int32_t, double>> Top(
      const std::vector<double>& logprobs, int64_t k);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace lrkv

#endif  // LRKV_RUNTIME_SAMPLER_H_
