// The sampler (runtime/sampler.h) against a plain reference written here: a
// scalar float64 log-softmax, every candidate sorted, a linear draw. For one
// seed both must draw the same tokens for every option combination, and the
// reported log-probabilities must agree within float64 summation error.
#include "runtime/sampler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace lrkv {
namespace {

// The plain reference: what the sampler computes, one scalar step at a time.
class ReferenceSampler {
 public:
  explicit ReferenceSampler(const SamplingOptions& o) : o_(o), rng_(o.seed) {}

  SampledToken Sample(const std::vector<float>& logits) {
    const int64_t n = static_cast<int64_t>(logits.size());
    double max = -std::numeric_limits<double>::infinity();
    for (float l : logits) max = std::max(max, static_cast<double>(l));
    double z = 0;
    for (float l : logits) z += std::exp(l - max);
    std::vector<double> lp(n);
    for (int64_t i = 0; i < n; ++i) lp[i] = logits[i] - max - std::log(z);
    // Every token, most likely first (ties: the lower id), where needed.
    const bool truncated = (o_.top_k > 0 && o_.top_k < n) || o_.top_p < 1;
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    if (o_.temperature == 0 || truncated) {
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return lp[a] > lp[b]; });
    }
    if (o_.temperature == 0) return {order[0], lp[order[0]]};
    const double top = *std::max_element(lp.begin(), lp.end());
    std::vector<int32_t> ids = order;
    if (o_.top_k > 0 && o_.top_k < n) ids.resize(o_.top_k);
    std::vector<double> w;
    for (int32_t id : ids)
      w.push_back(std::exp((lp[id] - top) / o_.temperature));
    if (o_.top_p < 1) {
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      double mass = 0;
      size_t keep = 0;
      while (keep < w.size() && mass < o_.top_p * total) mass += w[keep++];
      w.resize(std::max<size_t>(keep, 1));
    }
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
    double cumulative = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      cumulative += w[i];
      if (u < cumulative) return {ids[i], lp[ids[i]]};
    }
    return {ids[w.size() - 1], lp[ids[w.size() - 1]]};
  }

 private:
  SamplingOptions o_;
  std::mt19937_64 rng_;
};

TEST(Sampler, DrawsWhatThePlainReferenceDrawsForEveryOption) {
  // A Llama-2-sized vocabulary; logits spread like a language model's, with
  // a tie.
  constexpr int64_t kVocab = 32768;
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> steps(8, std::vector<float>(kVocab));
  for (auto& step : steps) {
    for (float& l : step) l = normal(gen);
    step[kVocab / 3] = step[kVocab / 2] = 14.0f;  // a tie at the top
  }
  // A float64 sum of kVocab terms and a log: the two implementations sum in
  // different orders, each within kVocab·eps of the exact sum.
  const double bound = 4 * kVocab * std::numeric_limits<double>::epsilon();
  int draws = 0, distinct_draws = 0;
  for (double temperature : {0.0, 0.7, 1.0, 1.6}) {
    for (int64_t top_k : {0, 1, 40}) {
      for (double top_p : {1.0, 0.9, 0.3}) {
        const SamplingOptions o{temperature, top_p, top_k, 1234};
        Sampler sampler(o);
        ReferenceSampler reference(o);
        std::vector<int32_t> seen;
        for (const auto& step : steps) {
          const at::Tensor logits = at::from_blob(
              const_cast<float*>(step.data()), {1, kVocab}, at::kFloat);
          const SampledToken got = sampler.Sample(logits, /*top_logprobs=*/5);
          const SampledToken want = reference.Sample(step);
          ASSERT_EQ(got.id, want.id)
              << "T=" << temperature << " top_k=" << top_k << " top_p=" << top_p
              << " draw " << seen.size();
          EXPECT_NEAR(got.logprob, want.logprob, bound);
          // The alternatives come from the same pass: LogSoftmax's values, to
          // the bit, the tie in id order.
          const std::vector<double> lp = Sampler::LogSoftmax(logits);
          EXPECT_EQ(got.logprob, lp[got.id]);
          EXPECT_EQ(got.top, Sampler::Top(lp, 5));
          ASSERT_EQ(got.top.size(), 5u);
          EXPECT_EQ(got.top[0].first, kVocab / 3);
          EXPECT_EQ(got.top[1].first, kVocab / 2);
          seen.push_back(got.id);
          ++draws;
        }
        std::sort(seen.begin(), seen.end());
        distinct_draws +=
            std::unique(seen.begin(), seen.end()) != seen.begin() + 1;
      }
    }
  }
  EXPECT_EQ(draws, 4 * 3 * 3 * 8);
  // Sampling did sample: most unrestricted combinations drew several tokens.
  EXPECT_GT(distinct_draws, 10);
}

TEST(Sampler, GreedyTakesTheLowerIdOfATieAndTopKOneIsGreedy) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  const at::Tensor t = at::from_blob(logits.data(), {5}, at::kFloat);
  Sampler greedy(SamplingOptions{0.0, 1.0, 0, 1});
  EXPECT_EQ(greedy.Sample(t).id, 1);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Sampler top1(SamplingOptions{1.5, 1.0, 1, seed});
    EXPECT_EQ(top1.Sample(t).id, 1);
  }
}

}  // namespace
}  // namespace lrkv
