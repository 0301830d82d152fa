#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace lrkv {

Sampler::Sampler(const SamplingOptions& options)
    : options_(options), rng_(options.seed) {}

std::vector<double> Sampler::LogSoftmax(const at::Tensor& logits) {
  const at::Tensor l = logits.reshape({-1}).to(at::kDouble).contiguous();
  const double* p = l.data_ptr<double>();
  const int64_t n = l.numel();
  const double max = *std::max_element(p, p + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(p[i] - max);
  const double log_z = max + std::log(sum);
  std::vector<double> out(p, p + n);
  for (double& v : out) v -= log_z;
  return out;
}

std::vector<std::pair<int32_t, double>> Sampler::Top(
    const std::vector<double>& logprobs, int64_t k) {
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(ids.size()));
  // Ties go to the lower id, so that the order is the same on every machine.
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) {
                      return logprobs[a] > logprobs[b] ||
                             (logprobs[a] == logprobs[b] && a < b);
                    });
  std::vector<std::pair<int32_t, double>> top;
  for (int64_t i = 0; i < k; ++i) top.emplace_back(ids[i], logprobs[ids[i]]);
  return top;
}

SampledToken Sampler::Sample(const std::vector<double>& logprobs) {
  const auto vocab = static_cast<int64_t>(logprobs.size());
  if (options_.temperature == 0) {
    const auto best = Top(logprobs, 1)[0];
    return {best.first, best.second};
  }
  // The candidates: the top k in order of probability, every token in order of
  // probability for top-p, else every token in id order (no sort needed).
  const int64_t k =
      options_.top_k > 0 ? std::min(options_.top_k, vocab) : vocab;
  std::vector<std::pair<int32_t, double>> candidates;
  if (k < vocab || options_.top_p < 1) {
    candidates = Top(logprobs, k);
  } else {
    candidates.reserve(logprobs.size());
    for (int32_t i = 0; i < static_cast<int32_t>(vocab); ++i)
      candidates.emplace_back(i, logprobs[i]);
  }
  // Tempered probabilities, relative to the most likely token's.
  std::vector<double> weights;
  weights.reserve(candidates.size());
  const double best = *std::max_element(logprobs.begin(), logprobs.end());
  for (const auto& c : candidates) {
    weights.push_back(std::exp((c.second - best) / options_.temperature));
  }
  double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  if (options_.top_p < 1) {
    double mass = 0;
    size_t keep = 0;
    while (keep < weights.size() && mass < options_.top_p * total)
      mass += weights[keep++];
    weights.resize(std::max<size_t>(keep, 1));
    total = std::accumulate(weights.begin(), weights.end(), 0.0);
  }
  // A uniform draw in [0, total) from 53 random bits: the same on every
  // platform.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double cumulative = 0;
  size_t pick = weights.size() - 1;
  for (size_t i = 0; i < weights.size(); ++i) {
    cumulative += weights[i];
    if (u < cumulative) {
      pick = i;
      break;
    }
  }
  return {candidates[pick].first, candidates[pick].second};
}

}  // namespace lrkv
