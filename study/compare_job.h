// The comparison study (`lrkv compare`, compare jobs): for each cache budget
// and each variant (GQA, MQA, MLA, LRKV with each RoPE handling), convert the
// source with the same calibration data, heal with the same token budget and
// settings, and measure held-out perplexity before and after healing, KL to the
// source, the verification verdict (factored vs expanded decoding), exact cache
// bytes, and decode cost (whole- model step latency with the variant's own
// decode engine, beside the source's, and attention multiply-adds per step). No
// LibTorch here.
#ifndef LRKV_STUDY_COMPARE_JOB_H_
#define LRKV_STUDY_COMPARE_JOB_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/decode_params.h"
#include "nlohmann/json.hpp"
#include "study/cache_points.h"
#include "study/compare_row.h"
#include "surgery/convert_job.h"

namespace lrkv {

struct CompareJobOptions {
  /// The source checkpoint and the label its rows carry (default: its file
  /// name).
  std::string checkpoint;
  std::string label;
  /// Cache budgets, fractions of the source's cache, each in (0, 1].
  std::vector<double> budgets = {0.25, 0.5, 0.75};
  /// gqa, mqa, mla, lrkv. MQA is one point (its own cache ratio), reported at
  /// the smallest budget it fits; a GQA plan that pools to one KV head is that
  /// same model and is not repeated.
  std::vector<std::string> variants = {"gqa", "mqa", "mla", "lrkv"};
  /// RoPE handling to convert and measure: plane, reconstruct and/or partial for
  /// LRKV. MLA is always measured with exact reconstruction, and with decoupled RoPE
  /// (the DeepSeek layout) too when partial is listed.
  std::vector<std::string> rope_modes = {"plane", "reconstruct"};
  /// LRKV and MLA sizes: one per model, or per layer within each budget (by the loss
  /// on the calibration text when given, surgery/budget_allocation.h; shared-plane LRKV
  /// keeps one rank).
  SizeAllocation allocation = SizeAllocation::kUniform;
  /// Calibration text (the activation metric when set; weight metric
  /// otherwise).
  std::string calib;
  DocumentRange calib_range;
  /// Healing: steps (0 = no healing), training text and its range; the same
  /// settings for every variant (KD from the source, K/V projections
  /// trainable).
  int64_t heal_steps = 0;
  std::string data;
  DocumentRange data_range;
  int64_t heal_batch = 8;
  int64_t heal_seq_len = 256;
  double heal_lr = 3e-3;
  int64_t heal_warmup = 10;
  /// (Warmup is capped at heal_steps.)
  /// Held-out text for perplexity and KL (required).
  std::string eval;
  DocumentRange eval_range;
  /// Predicted positions at most for the KL measurement.
  int64_t kl_tokens = 4096;
  /// Context lengths at which decode steps are timed (the last one is the
  /// table's), and timed steps at each.
  std::vector<int64_t> contexts = {128, 512, 2048};
  int64_t timed_tokens = 16;
  /// The study at equal bytes (study/cache_points.h): the source and every
  /// row's final model scored through their caches in each of these storages.
  /// Empty: not measured.
  std::vector<kernels::CacheDType> cache_dtypes;
  /// Converted and healed checkpoints go here (one folder per row).
  std::string work_dir;
  /// Asked between stages and before every healing step; true ends the study
  /// with kCancelled. Empty: never.
  std::function<bool()> should_stop;
};


// Whole-model decode step time of one row (or of the source, config "mha") at
// one context.
struct CompareLatency {
  std::string model, config, rope_mode;
  int64_t context = 0;
  double step_ms = 0, ratio_to_mha = 0;  // median step, and its ratio to the source's
  double min_ms = 0, max_ms = 0;         // fastest and slowest timed step
};

struct CompareReport {
  std::string model;
  double source_perplexity = 0;
  int64_t eval_tokens = 0;
  std::vector<CompareRow> rows;
  std::vector<CompareLatency> latency;
  // The study at equal bytes, when cache_dtypes were given: its points (Pareto
  // front marked) and one summary line per byte budget.
  std::vector<CachePoint> cache_points;
  std::vector<std::string> cache_summary;
  std::vector<std::string> notes;
  // How the study was run (budgets, variants, healing, texts, contexts), as the report
  // records it.
  nlohmann::json run_config = nlohmann::json::object();
  nlohmann::json ToJson() const;
  std::string ToTable() const;
};

// Progress: stage ("convert", "heal", ...), row index, row count, and a
// message.
using CompareProgress = std::function<void(const std::string&, int64_t, int64_t,
                                           const std::string&)>;

absl::StatusOr<CompareReport> RunCompareJob(
    const CompareJobOptions& options,
    const CompareProgress& progress = nullptr);

// Attention multiply-adds of one decode step, one layer, batch 1, at context L,
// for a variant decoded its way ("expanded" for dense caches).
int64_t DecodeMacsPerStep(const AttentionShape& shape, const KvConfig& config,
                          const std::string& rope_mode, int64_t context);

}  // namespace lrkv

#endif  // LRKV_STUDY_COMPARE_JOB_H_
