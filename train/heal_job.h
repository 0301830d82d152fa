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
#include "formats/text_corpus.h"
#include "train/heal_options.h"

namespace lrkv {

struct HealJobOptions {
  std::string checkpoint;  // the converted model
  std::string teacher;     // its source (needed for kd losses)
  /// Training data: a text file (documents split on <|endoftext|> lines, `data_range`
  /// of them) or a pre-tokenized .u16 / .u32 token file.
  std::string data;
  DocumentRange data_range;
  /// Held-out text for the before/after perplexity (and the periodic evaluations when
  /// heal.keep_best is off; with it they run on a tenth of --data's rows, at most
  /// heal.eval_rows, held out from training).
  std::string eval;
  DocumentRange eval_range;
  int64_t seq_len = 256;
  HealOptions heal;
  /// Resume from this trainer checkpoint folder (see checkpoint_every).
  std::string resume;
  /// This process's place in a data-parallel run; only rank 0 evaluates and writes.
  DistributedOptions distributed;
  std::string out_dir;
  /// Memory the heal may use, in bytes; 0: this machine's (MemTotal). A run whose
  /// estimate (EstimateHealMemory) exceeds it is refused before anything is loaded.
  int64_t memory_limit_bytes = 0;
  /// Told, on rank 0, as each long phase begins ("perplexity before healing", "training",
  /// "writing"), so that no part of a heal runs silently. Empty: not told.
  std::function<void(const std::string& phase)> on_phase;
};

// What a heal will hold in memory, estimated from the checkpoints' tensor lists and
// the options before anything is loaded or trained: the mapped weights of the student
// and the teacher (read every step), the float32 copy, gradient and two AdamW moments
// of every trained parameter (16 bytes each; the K/V factors of plane mode's frozen
// B_hᴷ counted too, so an upper bound), the activations autograd keeps, and the
// largest weight widened for one product (forward and backward).
struct HealMemoryEstimate {
  int64_t weight_bytes = 0;
  int64_t trainable_parameters = 0;
  int64_t optimizer_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t transient_bytes = 0;
  int64_t total_bytes = 0;
  // The limit it is held to: memory_limit_bytes, else MemTotal (0: unknown).
  int64_t machine_bytes = 0;
  std::string ToString() const;
};
absl::StatusOr<HealMemoryEstimate> EstimateHealMemory(const HealJobOptions& options);

// Everything a heal can be refused for before it trains, but its output folder:
// options out of range, a kd loss without a teacher, data that is not a text file, a
// sequence longer than the model's context (InvalidArgument), and a memory estimate
// above the machine's (ResourceExhausted). RunHealJob checks it too, the service at
// submission.
absl::Status ValidateHealJobOptions(const HealJobOptions& options);

struct HealReport {
  std::string checkpoint, teacher;
  int64_t steps = 0, tokens_seen = 0, trainable_parameters = 0;
  double wall_seconds = 0;   // the training steps
  double total_seconds = 0;  // the whole heal: loading, evaluations, training, writing
  // The options the run used (lr, batch, seq-len, trainable set, loss, warmup, ...).
  nlohmann::json settings;
  std::string resume_note;  // what resuming changed (another --steps), or empty
  // keep_best: the step whose parameters were written (0: the unhealed model, when every
  // evaluation was worse), its loss on the validation rows held out from --data, and the
  // unhealed model's loss there.
  std::optional<int64_t> kept_step;
  double kept_validation_loss = 0;
  std::optional<double> unhealed_validation_loss;
  // Perplexity on whole --eval documents (rolling windows of the model's context),
  // before and after; the periodic step evaluations are the loss on the first
  // eval_rows seq-len windows, a cheaper and different measure.
  std::optional<double> perplexity_before, perplexity_after, teacher_perplexity;
  int64_t eval_tokens = 0;
  HealMemoryEstimate memory;
  std::vector<HealEvent> events;
  nlohmann::json ToJson() const;
};

absl::StatusOr<HealReport> RunHealJob(const HealJobOptions& options,
                                      const std::function<void(const HealEvent&)>& on_event);

}  // namespace lrkv

#endif  // LRKV_TRAIN_HEAL_JOB_H_
