// Healing: continued training of a converted model by distillation from its source
// (KL of temperature-softened next-token distributions) and/or next-token loss, with
// AdamW, linear warmup + cosine decay, gradient clipping and accumulation, periodic
// evaluation, and checkpoints (parameters, optimiser state, step, data position) that
// resume to the same losses. Deterministic on CPU for a given seed.
#ifndef LRKV_TRAIN_HEALER_H_
#define LRKV_TRAIN_HEALER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "formats/config.h"
#include "runtime/llama_weights.h"
#include "train/heal_options.h"
#include "train/token_data.h"

namespace lrkv {

class Healer {
 public:
  // `teacher` is required for the kd losses. Checks the options and that the teacher
  // matches the student (vocabulary, layers), and marks the trainable set.
  static absl::StatusOr<std::unique_ptr<Healer>> Create(
      const ModelConfig& student_config, LlamaWeights student,
      std::optional<std::pair<ModelConfig, LlamaWeights>> teacher, TokenDataset train,
      std::optional<TokenDataset> eval, HealOptions options,
      DistributedOptions distributed = DistributedOptions());
  ~Healer();

  // Trains until `options.steps` (or `stop_at` when smaller), reporting every step and
  // evaluation; writes checkpoints every `checkpoint_every` steps.
  absl::Status Run(const std::function<void(const HealEvent&)>& on_event,
                   int64_t stop_at = -1);
  // Writes / restores parameters, optimiser state, step and data position. Loading a
  // checkpoint at or past `steps` is InvalidArgument; one written by a run planned for
  // another step count loads, and returns a note saying the schedule was recomputed.
  absl::Status SaveCheckpoint(const std::string& dir) const;
  absl::StatusOr<std::string> LoadCheckpoint(const std::string& dir);
  // Mean next-token loss on the evaluation data (or `data`).
  absl::StatusOr<double> EvalLoss(const TokenDataset& data) const;

  // keep_best: the step whose parameters the model holds after Run reached the last
  // step (0: the unhealed model), and its evaluation loss; -1 / NaN before any
  // evaluation or without keep_best.
  int64_t kept_step() const;
  double kept_eval_loss() const;
  // keep_best: the evaluation loss of the unhealed model (NaN if not measured, e.g. a
  // run resumed from a checkpoint written without it).
  double unhealed_eval_loss() const;

  int64_t step() const;
  const LlamaWeights& weights() const;
  const ModelConfig& config() const;
  int64_t trainable_parameters() const;

 private:
  struct State;
  explicit Healer(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace lrkv

#endif  // LRKV_TRAIN_HEALER_H_
