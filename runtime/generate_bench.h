// `lrkv bench generate`: end-to-end decode throughput of a whole model at long context
// through the decode engines with real caches: a converted checkpoint's factored engine
// beside its expanded engine, and the source model when given.
#ifndef LRKV_RUNTIME_GENERATE_BENCH_H_
#define LRKV_RUNTIME_GENERATE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "formats/config.h"
#include "kernels/decode_params.h"

namespace lrkv {

struct GenerateBenchOptions {
  std::string checkpoint;  // usually a converted checkpoint
  std::string source;      // optional: the model it came from
  // Factored decode mode for LRKV/MLA checkpoints; auto: the one the checkpoint was
  // converted for (plane for a plane conversion, reconstruct for a default one).
  std::string mode = "auto";
  int64_t context = 2048;  // tokens in the cache before timing
  int64_t tokens = 32;     // timed decode steps
  // The KV-cache storages (`--cache-dtype`): every engine is timed with each,
  // in the same rounds.
  std::vector<kernels::CacheDType> cache_dtypes = {kernels::CacheDType::kBF16};
  std::string cache_layout = "auto";  // plane mode's cache: auto | rows | tiles
  // The prefill's products with bf16 weights round the activations to bf16 (fp32 sums),
  // as llama.cpp's do (runtime/stored_linear.h); false: the exact widened products.
  bool bf16_products = true;
  // Rounds of the whole comparison: every engine is prefilled and timed once a
  // round, one engine held at a time, in the reverse order every other round,
  // so that the shared machine's drift falls on all of them alike. Rows pool
  // the steps of every round; their per-round medians give same-round ratios.
  int64_t rounds = 1;
  /// Told as each stage starts (loading, each engine's prefill and timed steps) and
  /// every ~10 s of timed steps, so that a long bench is never silent. Empty: not told.
  ProgressSink on_progress;
};

struct GenerateBenchRow {
  std::string model;   // "converted" | "source"
  std::string engine;  // expanded | plane | reconstruct | ...
  std::string cache;   // the cache storage (kernels::CacheDTypeName)
  int64_t context = 0, tokens = 0;
  // The context filled in one Prefill (its GEMMs over all tokens).
  double prefill_seconds = 0, prefill_tokens_per_second = 0;
  // The timed decode steps: total, rate, and each step's median, fastest and slowest.
  double seconds = 0, tokens_per_second = 0;
  double step_ms_median = 0, step_ms_min = 0, step_ms_max = 0;
  // The median step of each round (GenerateBenchOptions::rounds of them).
  std::vector<double> round_step_ms_median;
  int64_t cache_bytes = 0;
  std::string cache_layout;  // "rows" | "tiles"
};

absl::StatusOr<std::vector<GenerateBenchRow>> RunGenerateBench(const GenerateBenchOptions& o);
// What RunGenerateBench refuses before any work, for a model of `config` (the service
// checks a pipeline's bench stage with it at submission).
absl::Status ValidateGenerateBenchOptions(const GenerateBenchOptions& o,
                                          const ModelConfig& config);

// Fills row's decode figures (tokens, seconds, tokens/s, median/min/max) from the
// times of its steps in milliseconds (at least one).
void SetDecodeSteps(std::vector<double> step_ms, GenerateBenchRow* row);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_GENERATE_BENCH_H_
