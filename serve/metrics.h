// The counters of `lrkv serve`, rendered as Prometheus text at GET /metrics:
// requests by endpoint and status, tokens in and out, cancelled sequences, the
// queue, KV bytes in use against the budget, connections and the HTTP layer's
// refusals, the batch of the last step and a histogram of step times.
#ifndef LRKV_SERVE_METRICS_H_
#define LRKV_SERVE_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/continuous_batcher.h"
#include "serve/http/http_server.h"

namespace lrkv {

class ServerMetrics {
 public:
  // Upper bounds (seconds) of the step-time histogram's buckets (+Inf after
  // them).
  static constexpr std::array<double, 10> kStepBuckets = {
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0};

  void CountRequest(const std::string& endpoint, int status);
  void ObserveStep(const BatcherOptions::StepReport& step);
  // The mean time of the decode-only steps (one token per sequence, no prefill)
  // of `batch` sequences; 0 when there was none.
  double MeanDecodeStepSeconds(int64_t batch) const;
  // The Prometheus text exposition of everything, with the batcher's and the
  // HTTP layer's gauges and counters.
  std::string Render(const BatcherStats& batcher,
                     const HttpServerStats& http) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::array<int64_t, kStepBuckets.size() + 1> step_buckets_{};
  double step_seconds_sum_ = 0;
  int64_t steps_ = 0;
  int64_t last_batch_sequences_ = 0;
  int64_t last_batch_rows_ = 0;
  // Decode-only steps by batch size: the sum of their seconds and their count.
  std::map<int64_t, std::pair<double, int64_t>> decode_steps_;
};

}  // namespace lrkv

#endif  // LRKV_SERVE_METRICS_H_
