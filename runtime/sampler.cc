#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lrkv {
namespace {

// Index of the first of the largest values.
int64_t ArgMax(const double* p, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (p[i] > p[best]) best = i;
  }
  return best;
}

// The `k` largest of p[0:n], largest first; ties go to the lower id, so that
// the order is the same on every machine.
std::vector<int32_t> TopIds(const double* p, int64_t n, int64_t k) {
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min(k, n);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) {
                      return p[a] > p[b] || (p[a] == p[b] && a < b);
                    });
  ids.resize(k);
  return ids;
}

// The index i of weights[0:n] where the running sum (in order, float64) first
// exceeds u·Σ weights, u in [0, 1).
int64_t Draw(const double* weights, int64_t n, double u) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += weights[i];
  const double target = u * total;
  double cumulative = 0;
  for (int64_t i = 0; i < n; ++i) {
    cumulative += weights[i];
    if (target < cumulative) return i;
  }
  return n - 1;
}

// The logits in float64 and what LogSoftmax and Sample both derive from them,
// in float64 with ATen's vectorised exp. The tensors are scratch reused from
// token to token on this thread (fresh tensors of this size cost as much again
// in page faults): valid until the thread's next call.
struct Normalised {
  const double* logits;
  int64_t vocab, best;        // best: the first of the largest logits
  double max, log_sum;        // log Σ exp(l − max)
  const at::Tensor& shifted;  // l − max
  const at::Tensor& exps;     // exp(l − max)

  double LogProb(int64_t id) const { return logits[id] - max - log_sum; }
};

Normalised Normalise(const at::Tensor& logits) {
  thread_local at::Tensor l, shifted, exps;
  const int64_t vocab = logits.numel();
  for (at::Tensor* t : {&l, &shifted, &exps}) {
    if (!t->defined() || t->numel() != vocab)
      *t = at::empty({vocab}, at::kDouble);
  }
  l.copy_(logits.reshape({-1}));
  const double* p = l.data_ptr<double>();
  const int64_t best = ArgMax(p, vocab);
  at::sub_out(shifted, l, p[best]);
  at::exp_out(exps, shifted);
  return {p,       vocab, best, p[best], std::log(exps.sum().item<double>()),
          shifted, exps};
}

// The token drawn under `o` from `n` with `rng` (see Sampler::Sample).
int64_t Choose(const Normalised& n, const SamplingOptions& o,
               std::mt19937_64& rng) {
  thread_local at::Tensor tempered;
  const int64_t vocab = n.vocab;
  if (o.temperature == 0) return n.best;
  // Tempered weights relative to the most likely token's, over the candidates:
  // the top k (or every token for top-p) in order of probability, else every
  // token in id order (no sort needed).
  if (!tempered.defined() || tempered.numel() != vocab)
    tempered = at::empty({vocab}, at::kDouble);
  const at::Tensor& weights =
      o.temperature == 1
          ? n.exps
          : at::div_out(tempered, n.shifted, o.temperature).exp_();
  const double* w = weights.data_ptr<double>();
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  // A uniform draw in [0, 1) from 53 random bits: the same on every platform.
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  if (k == vocab && o.top_p >= 1) return Draw(w, vocab, u);
  const std::vector<int32_t> ids = TopIds(n.logits, vocab, k);
  std::vector<double> candidate(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) candidate[i] = w[ids[i]];
  if (o.top_p < 1) {
    // The shortest prefix holding top_p of the candidates' mass.
    double total = 0;
    for (double c : candidate) total += c;
    double mass = 0;
    size_t keep = 0;
    while (keep < candidate.size() && mass < o.top_p * total)
      mass += candidate[keep++];
    candidate.resize(std::max<size_t>(keep, 1));
  }
  return ids[Draw(candidate.data(), static_cast<int64_t>(candidate.size()), u)];
}

}  // namespace

Sampler::Sampler(const SamplingOptions& options)
    : options_(options), rng_(options.seed) {}

std::vector<double> Sampler::LogSoftmax(const at::Tensor& logits) {
  const Normalised n = Normalise(logits);
  std::vector<double> out(n.vocab);
  for (int64_t i = 0; i < n.vocab; ++i) out[i] = n.LogProb(i);
  return out;
}

std::vector<std::pair<int32_t, double>> Sampler::Top(
    const std::vector<double>& logprobs, int64_t k) {
  std::vector<std::pair<int32_t, double>> top;
  for (int32_t id :
       TopIds(logprobs.data(), static_cast<int64_t>(logprobs.size()), k)) {
    top.emplace_back(id, logprobs[id]);
  }
  return top;
}

SampledToken Sampler::Sample(const at::Tensor& logits, int64_t top_logprobs) {
  // One pass for the normaliser, and one for the tempered weights unless the
  // temperature is 1. At a 151,936-token vocabulary a greedy token took
  // 1.6-1.9 ms through a scalar exp and a sort, against 0.55 ms this way (timed
  // alternately): a tenth of an 8-sequence decode step was sampling.
  const Normalised n = Normalise(logits);
  const int64_t id = Choose(n, options_, rng_);
  SampledToken s{static_cast<int32_t>(id), n.LogProb(id), {}};
  if (top_logprobs > 0) {
    for (int32_t t : TopIds(n.logits, n.vocab, top_logprobs))
      s.top.emplace_back(t, n.LogProb(t));
  }
  return s;
}

}  // namespace lrkv
