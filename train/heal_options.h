// Options and progress events of healing (no LibTorch; the CLI and the service
// use them).
#ifndef LRKV_TRAIN_HEAL_OPTIONS_H_
#define LRKV_TRAIN_HEAL_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lrkv {

enum class TrainableSet { kKv, kAttn, kAll };
enum class HealLoss { kKd, kLm, kKdLm };
absl::StatusOr<TrainableSet> ParseTrainableSet(const std::string& name);
absl::StatusOr<HealLoss> ParseHealLoss(const std::string& name);
// The names ParseTrainableSet and ParseHealLoss take.
const char* TrainableSetName(TrainableSet t);
const char* HealLossName(HealLoss l);

struct HealOptions {
  /// Optimiser steps.
  int64_t steps = 100;
  /// Rows (of seq_len tokens) per micro-batch, and micro-batches per step.
  int64_t batch = 8;
  int64_t grad_accum = 1;
  /// Peak learning rate, reached after `warmup` steps, then cosine decay to
  /// lr · min_lr_ratio at the last step.
  double lr = 1e-3;
  /// Warmup steps; kAutoWarmup: a tenth of `steps` (so that any step count works with
  /// the default: 4 steps used to fail on a fixed 10).
  static constexpr int64_t kAutoWarmup = -1;
  int64_t warmup = kAutoWarmup;
  double min_lr_ratio = 0.1;
  double weight_decay = 0.0;
  /// Global gradient-norm clip (0: none).
  double clip = 1.0;
  HealLoss loss = HealLoss::kKd;
  /// Distillation temperature and the weights of the two losses in kd+lm.
  double temperature = 1.0;
  double kd_weight = 1.0;
  double lm_weight = 1.0;
  /// kv: converted K/V parameters only; attn: every attention parameter; all.
  TrainableSet trainable = TrainableSet::kKv;
  /// Evaluate every N steps (0: only at the end), on at most eval_rows rows.
  int64_t eval_every = 50;
  int64_t eval_rows = 64;
  /// Healing that never hurts: evaluate the unhealed model too, and end with the
  /// parameters of the lowest evaluation loss among the unhealed model and every
  /// evaluation (the report says which step). The heal job then evaluates on rows held
  /// out from the training data, not on the --eval text the final perplexity uses.
  bool keep_best = true;
  /// Keep only each layer's input for the backward pass and recompute the layer there
  /// (runtime/layer_checkpoint.h): one layer's activations in memory instead of all of
  /// them, for about a third more compute. CPU only for now.
  bool activation_checkpointing = false;
  /// Write a checkpoint to checkpoint_dir every N steps (0: never).
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  /// Seeds the order in which rows are visited (the only randomness).
  uint64_t seed = 1;
  /// "auto" (CUDA when LibTorch has a device, else CPU), "cpu" or "cuda". On
  /// CUDA the forward passes run under bf16 autocast.
  std::string device = "auto";
  /// Asked before every step; true ends the run with kCancelled (a service job
  /// being cancelled or its server shutting down). Empty: never.
  std::function<bool()> should_stop;

  // InvalidArgument naming the option and its valid range.
  absl::Status Validate() const;
  // The warmup steps the run uses (kAutoWarmup resolved).
  int64_t WarmupSteps() const { return warmup == kAutoWarmup ? steps / 10 : warmup; }
};

// Data-parallel training across processes (c10d ProcessGroupGloo with a
// TCPStore rendezvous): each rank computes its share of every global batch and
// gradients are all-reduced, so the run follows the one-process run with the
// same global batch.
struct DistributedOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  absl::Status Validate(int64_t batch) const;
};

// One step or evaluation, as the service stores loss curves.
struct HealEvent {
  std::string kind;  // "step" | "eval"
  int64_t step = 0;
  int64_t tokens_seen = 0;
  double loss = 0, kd_loss = 0, lm_loss = 0;
  double lr = 0, grad_norm = 0;
  double eval_loss = 0, eval_perplexity = 0;
  /// "eval" events under keep_best: the lowest evaluation loss so far is this one.
  bool best = false;
  double wall_seconds = 0;
  nlohmann::json ToJson() const;
};

}  // namespace lrkv

#endif  // LRKV_TRAIN_HEAL_OPTIONS_H_
