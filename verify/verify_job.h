// `lrkv verify` as a job: load a (converted) checkpoint, run every requested
// decode mode against the expanded reference, measure every engine's cache
// against the formula, and — given the source — fidelity and head diversity. No
// LibTorch here.
#ifndef LRKV_VERIFY_VERIFY_JOB_H_
#define LRKV_VERIFY_VERIFY_JOB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "formats/config.h"
#include "verify/verify_report.h"

namespace lrkv {

struct VerifyJobOptions {
  /// The checkpoint to verify (usually a converted one).
  std::string checkpoint;
  /// The model it was converted from (fidelity and head diversity); optional.
  std::string source;
  /// Decode modes: reconstruct, plane, partial, naive, or "all" (every mode;
  /// those that do not apply to the model are reported as n/a).
  std::vector<std::string> modes = {"all"};
  /// Teacher-forced prompt tokens (BOS included) and greedy steps after them.
  int64_t prompt_tokens = 32;
  int64_t decode_tokens = 16;
  /// Cache storage: fp32, bf16 or both.
  std::string dtype = "fp32";
  /// Text for the prompt and for fidelity; without it a built-in English prompt
  /// is used and fidelity is skipped.
  std::string text;
  /// Predicted positions at most for fidelity.
  int64_t fidelity_tokens = 8192;
  /// Quality gates on fidelity to `source` (measured on `text`, so both are
  /// needed): the verdict fails when the converted perplexity exceeds the
  /// source's by more than this fraction (0.05: 5%), when top-1 agreement falls
  /// below `min_top1`, or when the mean KL(source ‖ converted) exceeds `max_kl`
  /// nats. Unset: not gated.
  std::optional<double> max_ppl_increase;
  std::optional<double> min_top1;
  std::optional<double> max_kl;
  /// Polled between decode steps and before the fidelity pass: the job stops
  /// with CancelledError once it returns true.
  StopCheck should_stop;
  /// Told as each check (every mode of a dtype, the cache, fidelity, head
  /// diversity) starts.
  ProgressSink on_progress;
  /// Told after each decode step of the mode checks: steps done of prompt +
  /// decode tokens.
  UnitProgress on_step;
};

// InvalidArgument naming the option when one is out of range (checked by
// RunVerifyJob too; the service checks at submission).
absl::Status ValidateVerifyJobOptions(const VerifyJobOptions& options);

// InvalidArgument when the checkpoint (of `config`) gives the options nothing
// to check: a dense K/V cache has no factored decoding to compare with its
// expansion, so without a source there is neither an equivalence nor a fidelity
// to measure.
absl::Status CheckSomethingToVerify(const VerifyJobOptions& options,
                                    const ModelConfig& config);

absl::StatusOr<VerifyReport> RunVerifyJob(const VerifyJobOptions& options);

}  // namespace lrkv

#endif  // LRKV_VERIFY_VERIFY_JOB_H_
