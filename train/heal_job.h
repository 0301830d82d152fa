// `lrkv heal` as a job: load the converted model and its teacher, build the training
// and evaluation data, heal, and write the healed checkpoint with its report and loss
// curve. No LibTorch here.
#ifndef LRKV_TRAIN_HEAL_JOB_H_
#define LRKV_TRAIN_HEAL_JOB_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "surgery/convert_job.h"
#include "train/heal_options.h"

namespace lrkv {

struct HealJobOptions {
  std::string checkpoint;  // the converted model
  std::string teacher;     // its source (needed for kd losses)
  /// Training data: a text file (documents split on <|endoftext|> lines, `data_range`
  /// of them) or a pre-tokenized .u16 / .u32 token file.
  std::string data;
  DocumentRange data_range;
  /// Held-out text for periodic evaluation and the before/after perplexity.
  std::string eval;
  DocumentRange eval_range;
  int64_t seq_len = 256;
  HealOptions heal;
  /// Resume from this trainer checkpoint folder (see checkpoint_every).
  std::string resume;
  /// This process's place in a data-parallel run; only rank 0 evaluates and writes.
  DistributedOptions distributed;
  std::string out_dir;
};

struct HealReport {
  std::string checkpoint, teacher;
  int64_t steps = 0, tokens_seen = 0, trainable_parameters = 0;
  double wall_seconds = 0;
  std::optional<double> perplexity_before, perplexity_after, teacher_perplexity;
  int64_t eval_tokens = 0;
  std::vector<HealEvent> events;
  nlohmann::json ToJson() const;
};

absl::StatusOr<HealReport> RunHealJob(const HealJobOptions& options,
                                      const std::function<void(const HealEvent&)>& on_event);

}  // namespace lrkv

#endif  // LRKV_TRAIN_HEAL_JOB_H_
