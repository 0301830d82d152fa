// One variant at one cache budget in a comparison study: the row the study measures,
// the store keeps (SQLite comparison_rows) and the API returns (lrkv.v1.ComparisonRow).
// Plain types only, so that the torch-free store and clients use it as it is.
#ifndef LRKV_STUDY_COMPARE_ROW_H_
#define LRKV_STUDY_COMPARE_ROW_H_

#include <cstdint>
#include <optional>
#include <string>

namespace lrkv {

struct CompareRow {
  std::string model;  // the checkpoint's label
  double budget = 0;  // requested cache budget (fraction of the source's cache)
  // gqa, mqa, mla or lrkv; the RoPE mode measured; e.g. "lrkv r=2".
  std::string variant, rope_mode, config;
  double cache_ratio = 0;  // cache elements per token over the source's
  int64_t kv_params = 0;   // K/V projection parameters per layer
  // Held-out perplexity after conversion, after healing (when healed), and the mean
  // KL(source || variant) per position on the held-out text.
  double ppl_before = 0;
  std::optional<double> ppl_after, kl_mean;
  // The healing step whose parameters were kept (0: the unhealed model), of heal_steps.
  std::optional<int64_t> heal_kept_step;
  std::string verdict;  // EQUIVALENT | NOT EQUIVALENT | n/a (...)
  // The verdict's numbers: the fp32 factored engine's error against the float64
  // reference, and the error model's bound for it (0 when not applicable).
  double verify_error = 0, verify_bound = 0;
  // Median decode step at `step_context` tokens (the last --context), and its ratio to
  // the source's at the same context.
  double step_ms = 0, step_ratio_to_mha = 0;
  int64_t step_context = 0;
  int64_t madds_per_step = 0;  // attention multiply-adds per decode step per layer
};

}  // namespace lrkv

#endif  // LRKV_STUDY_COMPARE_ROW_H_
