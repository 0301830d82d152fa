// `lrkv bench serve`: streaming clients against `lrkv serve` run in-process,
// for a checkpoint and (in the same run, at the same KV memory) its source. Per
// model:
//   admission  as many clients as --max-seqs, each asking for a whole --ctx
//   sequence:
//              the sequences admitted at once (what the KV memory holds in the
//              scheme's own cache layout);
//   batching   1 stream, then --clients streams of --prompt-tokens +
//   --max-tokens
//              (ignore_eos): aggregate decode tokens/s, time to first token,
//              inter-token latency p50/p99, and the mean decode step at each
//              batch;
//   engine     (--engine-steps > 0) the server's engines alone, a 1-sequence
//              and a --clients-sequence decode step alternated at --ctx;
//   soak       (--soak-seconds > 0) --clients streams of random lengths, a
//   share of
//              them abandoned mid-stream, for that long: server errors,
//              requests completed and abandoned, the process's RSS before and
//              after.
#ifndef LRKV_SERVE_SERVE_BENCH_H_
#define LRKV_SERVE_SERVE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "nlohmann/json.hpp"
#include "runtime/continuous_batcher.h"

namespace lrkv {

struct ServeBenchOptions {
  /// The checkpoint served (source or converted).
  std::string checkpoint;
  /// Its source, measured in the same run at the same KV memory; empty: none.
  std::string source;
  /// Concurrent streams of the batching and soak phases.
  int64_t clients = 8;
  /// Requests each client makes in the batching phase, one after another.
  int64_t requests = 2;
  /// Prompt and generated tokens of a batching-phase request.
  int64_t prompt_tokens = 64;
  int64_t max_tokens = 64;
  /// Decode steps of the engines alone, a 1-sequence and a --clients-sequence
  /// step alternated at --ctx, after the batching phase (0: none).
  int64_t engine_steps = 10;
  /// Seconds of the soak phase (0: none).
  double soak_seconds = 0;
  /// Share of soak requests abandoned mid-stream.
  double abort_share = 0.25;
  uint64_t seed = 1;
  /// The server: KV memory, sequences, context, cache dtype (BatcherOptions).
  BatcherOptions batcher;
  /// Products over many rows with bf16 weights (LanguageModelOptions).
  bool bf16_products = true;
  /// Told as each phase of each model begins ("source: 8 streams"); empty:
  /// nobody listens.
  ProgressSink progress;

  absl::Status Validate() const;
};

struct LatencySummary {
  double p50_ms = 0, p99_ms = 0, mean_ms = 0;
  int64_t samples = 0;
};

struct BatchingRun {
  int64_t streams = 0;
  double seconds = 0;
  int64_t completion_tokens = 0;
  double decode_tokens_per_second =
      0;  // all streams' tokens after their first / time
  LatencySummary ttft, itl;
  double mean_decode_step_ms = 0;  // decode-only steps of `streams` sequences
};

struct SoakRun {
  double seconds = 0;
  int64_t requests = 0, completed = 0, abandoned = 0, server_errors = 0,
          refused = 0;
  int64_t rss_before = 0, rss_after = 0;  // bytes
};

struct ServeBenchModel {
  std::string label;  // "converted" or "source"
  std::string checkpoint;
  std::string layout, engine;
  int64_t cache_bytes_per_sequence = 0;  // a whole --ctx sequence
  int64_t sequences_that_fit = 0;        // KV memory / that
  int64_t admitted = 0;  // measured: most sequences running at once
  std::vector<BatchingRun> batching;  // 1 stream, then --clients
  EngineStepTiming engine_steps;      // batch 0: not measured
  SoakRun soak;
};

struct ServeBenchReport {
  ServeBenchOptions options;
  std::vector<ServeBenchModel> models;
  nlohmann::json ToJson() const;
  // The tables, and the converted / source ratios when both ran.
  std::string ToText() const;
};

absl::StatusOr<ServeBenchReport> RunServeBench(
    const ServeBenchOptions& options);

}  // namespace lrkv

#endif  // LRKV_SERVE_SERVE_BENCH_H_
