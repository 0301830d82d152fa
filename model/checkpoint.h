// A checkpoint on disk, whatever its format: GGUF file, or safetensors (single or
// sharded) with config.json. Gives the validated config, the tokenizer when one is
// stored, and tensor views under canonical (Hugging Face) names.
#ifndef LRKV_MODEL_CHECKPOINT_H_
#define LRKV_MODEL_CHECKPOINT_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/checkpoint_files.h"
#include "formats/config.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "formats/tensor_view.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

enum class CheckpointFormat { kGguf, kSafetensors };


class Checkpoint {
 public:
  // `path`: a .gguf file; a directory with config.json and model.safetensors or
  // model.safetensors.index.json; or a .safetensors file next to a config.json.
  // Malformed files are InvalidArgument with the path and the problem.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& path);

  CheckpointFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  const ModelConfig& config() const { return config_; }
  // nullptr when the checkpoint stores no tokenizer.
  const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  // The tokenizer, or InvalidArgument naming the files looked for.
  absl::StatusOr<const Tokenizer*> RequireTokenizer() const;
  // All tensors, under canonical names ("model.layers.0.self_attn.q_proj.weight").
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* Find(const std::string& canonical_name) const;

 private:
  Checkpoint() = default;
  void Index();

  CheckpointFormat format_ = CheckpointFormat::kSafetensors;
  std::string path_;
  ModelConfig config_;
  std::optional<Tokenizer> tokenizer_;
  std::unique_ptr<GgufReader> gguf_;
  std::unique_ptr<SafetensorsReader> safetensors_;
  std::vector<TensorView> tensors_;
  // Tensors assembled on opening rather than mapped (a deepseek2 GGUF's
  // kv_b_proj, which the file stores split per head).
  std::vector<std::vector<uint8_t>> assembled_;
  std::map<std::string, size_t> index_;
  friend absl::Status FuseDeepseekGgufKvB(Checkpoint* ckpt);
};

// The tokenizer of a checkpoint path without reading its weights: a GGUF file's
// tokenizer.ggml.* metadata, or the files of a folder (or of a .safetensors file's
// folder): tokenizer.json with tokenizer_config.json, else tokenizer.lrkv.json.
// NotFound naming what was looked for when there is none.
absl::StatusOr<Tokenizer> LoadTokenizer(const std::string& path);

// Refuses a tokenizer that is not the model's: more tokens than embedding rows, far
// fewer (under 90 % of them: padding is a few hundred rows, not a different
// vocabulary), BOS/EOS ids that config.json contradicts (both numbers are named), or
// neither a BOS nor an EOS to start documents with.
// Ids the config leaves unstated are taken from the tokenizer.
absl::Status ReconcileTokenizer(const Tokenizer& tokenizer, const std::string& path,
                                ModelConfig* config);

// The canonical name of a GGUF `llama` tensor ("blk.3.attn_k.weight" ->
// "model.layers.3.self_attn.k_proj.weight"); the input unchanged when unknown.
std::string CanonicalNameFromGguf(const std::string& gguf_name);
// The inverse ("model.layers.3.self_attn.k_proj.weight" -> "blk.3.attn_k.weight");
// empty when the tensor has no GGUF name.
std::string GgufNameFromCanonical(const std::string& canonical_name);

}  // namespace lrkv

#endif  // LRKV_MODEL_CHECKPOINT_H_
