// A freshly initialised Llama checkpoint for training from scratch with the
// project's own trainer (`lrkv init`, then `lrkv heal --loss lm --trainable
// all`): the shape asked for, random weights, and the tokenizer (and
// vocabulary) of an existing model.
#ifndef LRKV_TRAIN_MODEL_INIT_H_
#define LRKV_TRAIN_MODEL_INIT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace lrkv {

struct ModelInitOptions {
  /// Checkpoint whose tokenizer, vocabulary and special tokens the new model
  /// uses.
  std::string tokenizer_from;
  int64_t layers = 6;
  /// Model width d; the head dimension is hidden / heads.
  int64_t hidden = 256;
  int64_t heads = 4;
  /// 0: as many as heads (MHA).
  int64_t kv_heads = 0;
  /// SwiGLU width.
  int64_t ffn = 768;
  /// Longest context (max_position_embeddings).
  int64_t context = 512;
  uint64_t seed = 1;
  /// Output folder (written atomically; must not exist or be empty).
  std::string out_dir;
};

absl::Status WriteInitialCheckpoint(const ModelInitOptions& options);

}  // namespace lrkv

#endif  // LRKV_TRAIN_MODEL_INIT_H_
