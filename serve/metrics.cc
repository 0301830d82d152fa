#include "serve/metrics.h"

#include "absl/strings/str_cat.h"

namespace lrkv {

void ServerMetrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void ServerMetrics::ObserveStep(const BatcherOptions::StepReport& step) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t bucket = 0;
  while (bucket < kStepBuckets.size() && step.seconds > kStepBuckets[bucket])
    ++bucket;
  ++step_buckets_[bucket];
  step_seconds_sum_ += step.seconds;
  ++steps_;
  last_batch_sequences_ = step.sequences;
  last_batch_rows_ = step.rows;
  if (step.rows == step.sequences) {
    auto& [sum, count] = decode_steps_[step.sequences];
    sum += step.seconds;
    ++count;
  }
}

double ServerMetrics::MeanDecodeStepSeconds(int64_t batch) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = decode_steps_.find(batch);
  return it == decode_steps_.end() ? 0 : it->second.first / it->second.second;
}

namespace {

void Metric(std::string& out, const char* name, const char* type,
            const char* help) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                  type, "\n");
}

}  // namespace

std::string ServerMetrics::Render(const BatcherStats& b,
                                  const HttpServerStats& h) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  Metric(out, "lrkv_requests_total", "counter",
         "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, count] : requests_) {
    absl::StrAppend(&out, "lrkv_requests_total{endpoint=\"", key.first,
                    "\",status=\"", key.second, "\"} ", count, "\n");
  }
  Metric(out, "lrkv_prompt_tokens_total", "counter",
         "Prompt tokens prefilled.");
  absl::StrAppend(&out, "lrkv_prompt_tokens_total ", b.prompt_tokens, "\n");
  Metric(out, "lrkv_generated_tokens_total", "counter", "Tokens sampled.");
  absl::StrAppend(&out, "lrkv_generated_tokens_total ", b.generated_tokens,
                  "\n");
  Metric(out, "lrkv_cancelled_sequences_total", "counter",
         "Sequences cancelled (their client left, or a stop sequence ended "
         "them), running or queued.");
  absl::StrAppend(&out, "lrkv_cancelled_sequences_total ", b.cancelled, "\n");
  Metric(out, "lrkv_queue_length", "gauge", "Requests waiting for admission.");
  absl::StrAppend(&out, "lrkv_queue_length ", b.queued, "\n");
  Metric(out, "lrkv_running_sequences", "gauge",
         "Sequences admitted and decoding.");
  absl::StrAppend(&out, "lrkv_running_sequences ", b.running, "\n");
  Metric(out, "lrkv_peak_running_sequences", "gauge",
         "Most sequences admitted at once.");
  absl::StrAppend(&out, "lrkv_peak_running_sequences ", b.peak_running, "\n");
  Metric(
      out, "lrkv_kv_cache_bytes_in_use", "gauge",
      "Bytes the running sequences' KV caches hold (the scheme's own layout).");
  absl::StrAppend(&out, "lrkv_kv_cache_bytes_in_use ", b.kv_bytes_in_use, "\n");
  Metric(out, "lrkv_kv_cache_bytes_budget", "gauge",
         "The KV memory (--kv-memory).");
  absl::StrAppend(&out, "lrkv_kv_cache_bytes_budget ", b.kv_bytes_budget, "\n");
  Metric(out, "lrkv_batch_sequences", "gauge", "Sequences in the last step.");
  absl::StrAppend(&out, "lrkv_batch_sequences ", last_batch_sequences_, "\n");
  Metric(out, "lrkv_batch_tokens", "gauge",
         "Tokens through the model in the last step.");
  absl::StrAppend(&out, "lrkv_batch_tokens ", last_batch_rows_, "\n");
  Metric(out, "lrkv_http_connections_open", "gauge",
         "Client connections open.");
  absl::StrAppend(&out, "lrkv_http_connections_open ", h.open_connections,
                  "\n");
  Metric(out, "lrkv_http_connections_total", "counter",
         "Client connections accepted.");
  absl::StrAppend(&out, "lrkv_http_connections_total ", h.accepted, "\n");
  Metric(out, "lrkv_http_refused_total", "counter",
         "Requests and connections the HTTP layer refused, by reason.");
  for (const auto& [reason, n] :
       {std::pair{"header", h.refused_header},
        std::pair{"body", h.refused_body}, std::pair{"timeout", h.timed_out},
        std::pair{"connections", h.over_capacity}}) {
    absl::StrAppend(&out, "lrkv_http_refused_total{reason=\"", reason, "\"} ",
                    n, "\n");
  }
  Metric(out, "lrkv_http_clients_gone_total", "counter",
         "Clients that left while their request was handled.");
  absl::StrAppend(&out, "lrkv_http_clients_gone_total ", h.clients_gone, "\n");
  Metric(out, "lrkv_step_seconds", "histogram", "Time of one batched step.");
  int64_t cumulative = 0;
  for (size_t i = 0; i <= kStepBuckets.size(); ++i) {
    cumulative += step_buckets_[i];
    const std::string le =
        i < kStepBuckets.size() ? absl::StrCat(kStepBuckets[i]) : "+Inf";
    absl::StrAppend(&out, "lrkv_step_seconds_bucket{le=\"", le, "\"} ",
                    cumulative, "\n");
  }
  absl::StrAppend(&out, "lrkv_step_seconds_sum ", step_seconds_sum_, "\n");
  absl::StrAppend(&out, "lrkv_step_seconds_count ", steps_, "\n");
  Metric(out, "lrkv_decode_step_seconds_mean", "gauge",
         "Mean time of the decode-only steps, by the sequences in them.");
  for (const auto& [batch, sum_count] : decode_steps_) {
    absl::StrAppend(&out, "lrkv_decode_step_seconds_mean{batch=\"", batch,
                    "\"} ", sum_count.first / sum_count.second, "\n");
  }
  return out;
}

}  // namespace lrkv
