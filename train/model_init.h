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
  /// An HF config.json (of a real model, say): when set, the model has its shape and
  /// every setting (RoPE scaling, QK-norm, biases, tied embeddings), the file is
  /// written as the checkpoint's config.json with only torch_dtype made to match, and
  /// the --layers/--hidden/... options are not used. `tokenizer_from` may then be any
  /// tokenizer folder (tokenizer.json) or checkpoint. Weights are written a tensor at
  /// a time, so checkpoints far larger than memory can be made.
  std::string config_json;
  /// Storage of the matrices: "f32", "f16" or "bf16" (empty: the config's torch_dtype,
  /// else f32).
  std::string weight_dtype;
  /// Largest safetensors shard (HF-style shards with an index above it).
  uint64_t max_shard_bytes = 5'000'000'000;
  /// Output folder (written atomically; must not exist or be empty).
  std::string out_dir;
};

absl::Status WriteInitialCheckpoint(const ModelInitOptions& options);

}  // namespace lrkv

#endif  // LRKV_TRAIN_MODEL_INIT_H_
