// The heal options (see heal_options_schema.h).
#include "train/heal_options_schema.h"

#include "formats/text_corpus.h"

namespace lrkv {
namespace {

using Options = HealJobOptions;

// The job's own options: what to train on, and how.
void AddTrainingOptions(OptionSchema<Options>& s) {
  s.Value(
       "teacher", [](Options & o) -> auto& { return o.teacher; },
       "Source model (for kd losses)")
      .Checkpoint();
  s.Bytes(
      "max_memory", [](Options & o) -> auto& { return o.memory_limit_bytes; },
      "Memory the heal may use (8GiB, 500MB, bytes; 0: the machine's); a heal "
      "estimated above it is refused before it starts",
      "0");
  s.Value(
       "data", [](Options & o) -> auto& { return o.data; },
       "Training text, or a .u16/.u32 token file")
      .Path()
      .Required();
  s.Parsed(
      "data_range", [](Options & o) -> auto& { return o.data_range; },
      ParseDocumentRange, DocumentRangeText, "Documents of --data to use, A:B");
  s.Value(
       "eval", [](Options & o) -> auto& { return o.eval; }, "Held-out text")
      .Path();
  s.Parsed(
      "eval_range", [](Options & o) -> auto& { return o.eval_range; },
      ParseDocumentRange, DocumentRangeText, "Documents of --eval to use, A:B");
  s.Value(
      "steps", [](Options & o) -> auto& { return o.heal.steps; },
      "Optimiser steps");
  s.Value(
      "batch", [](Options & o) -> auto& { return o.heal.batch; },
      "Rows per micro-batch");
  s.Value(
      "accum", [](Options & o) -> auto& { return o.heal.grad_accum; },
      "Micro-batches per step");
  s.Value(
      "seq_len", [](Options & o) -> auto& { return o.seq_len; },
      "Tokens per row (at least 2, at most the model's context)");
  s.Value(
      "lr", [](Options & o) -> auto& { return o.heal.lr; },
      "Peak learning rate");
  s.Value(
      "warmup", [](Options & o) -> auto& { return o.heal.warmup; },
      "Warmup steps (-1: a tenth of --steps)");
  s.Value(
      "weight_decay", [](Options & o) -> auto& { return o.heal.weight_decay; },
      "AdamW weight decay");
  s.Value(
      "clip", [](Options & o) -> auto& { return o.heal.clip; },
      "Gradient-norm clip (0: none)");
  s.Choice(
      "trainable", [](Options & o) -> auto& { return o.heal.trainable; },
      {TrainableSet::kKv, TrainableSet::kAttn, TrainableSet::kAll},
      TrainableSetName, "kv | attn | all");
  s.Choice(
      "loss", [](Options & o) -> auto& { return o.heal.loss; },
      {HealLoss::kKd, HealLoss::kLm, HealLoss::kKdLm}, HealLossName,
      "kd | lm | kd+lm");
  s.Value(
      "temperature", [](Options & o) -> auto& { return o.heal.temperature; },
      "Distillation temperature");
  s.Value(
      "eval_every", [](Options & o) -> auto& { return o.heal.eval_every; },
      "Evaluate every N steps");
  s.Value(
      "keep_best", [](Options & o) -> auto& { return o.heal.keep_best; },
      "On by default: end with the parameters of the best evaluation (the "
      "unhealed "
      "model included), judged on a tenth of --data's rows held out from "
      "training; "
      "--no-keep-best ends with the last step's");
  s.Value(
      "activation_checkpointing",
      [](Options & o) -> auto& { return o.heal.activation_checkpointing; },
      "Keep one layer's activations, recompute the rest in the backward pass "
      "(less "
      "memory, ~1/3 more compute; CPU)");
  s.Value(
      "seed", [](Options & o) -> auto& { return o.heal.seed; },
      "Seed of the data order");
}

// A local run's: this machine's devices, processes and folders.
void AddLocalOptions(OptionSchema<Options>& s) {
  s.Value(
       "checkpoint_every",
       [](Options & o) -> auto& { return o.heal.checkpoint_every; },
       "Trainer checkpoint every N steps")
      .LocalOnly();
  s.Value(
       "checkpoint_dir",
       [](Options & o) -> auto& { return o.heal.checkpoint_dir; },
       "Where trainer checkpoints go")
      .LocalOnly();
  s.Value(
       "resume", [](Options & o) -> auto& { return o.resume; },
       "Resume from a trainer checkpoint folder")
      .LocalOnly();
  s.Value(
       "device", [](Options & o) -> auto& { return o.heal.device; },
       "auto | cpu | cuda (bf16 autocast on CUDA)")
      .Choices({"auto", "cpu", "cuda"})
      .LocalOnly();
  s.Value(
       "process_rank", [](Options & o) -> auto& { return o.distributed.rank; },
       "This process's rank in a multi-machine run (not convert's LRKV --rank)")
      .LocalOnly();
  s.Value(
       "world_size",
       [](Options & o) -> auto& { return o.distributed.world_size; },
       "Processes in the run")
      .LocalOnly();
  s.Value(
       "master_addr",
       [](Options & o) -> auto& { return o.distributed.master_addr; },
       "Rendezvous host")
      .LocalOnly();
  s.Value(
       "master_port",
       [](Options & o) -> auto& { return o.distributed.master_port; },
       "Rendezvous port")
      .LocalOnly();
}

OptionSchema<Options> Build() {
  OptionSchema<Options> s("heal");
  AddTrainingOptions(s);
  AddLocalOptions(s);
  s.Check([](const Options& o, OptionSource) { return o.heal.Validate(); });
  return s;
}

}  // namespace

const OptionSchema<HealJobOptions>& HealOptionSchema() {
  static const OptionSchema<HealJobOptions> schema = Build();
  return schema;
}

}  // namespace lrkv
