// A freshly initialised checkpoint for training from scratch (see
// model_init.h).
#include "train/model_init.h"

#include <c10/util/Exception.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/llama_weights.h"
#include "model/safetensors.h"
#include "model/status_macros.h"

namespace lrkv {

absl::Status WriteInitialCheckpoint(const ModelInitOptions& o) {
  if (o.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  std::error_code ec;
  if (std::filesystem::exists(o.out_dir, ec) &&
      !std::filesystem::is_empty(o.out_dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.out_dir, ": output folder exists and is not empty"));
  }
  if (o.heads < 1 || o.hidden % o.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heads ", o.heads, " must be >= 1 and divide --hidden ", o.hidden));
  }
  ASSIGN_OR_RETURN(auto like, Checkpoint::Open(o.tokenizer_from));
  RETURN_IF_ERROR(like->RequireTokenizer().status());
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = o.hidden;
  c.intermediate_size = o.ffn;
  c.num_layers = o.layers;
  c.num_heads = o.heads;
  c.num_kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  c.head_dim = o.hidden / o.heads;
  c.rope_dim = c.head_dim;
  c.vocab_size = like->config().vocab_size;
  c.max_position_embeddings = o.context;
  c.rms_norm_eps = like->config().rms_norm_eps;
  c.rope_theta = like->config().rope_theta;
  c.bos_token_id = like->config().bos_token_id;
  c.eos_token_ids = like->config().eos_token_ids;
  // Validate names the offending field (--layers etc. map onto these).
  RETURN_IF_ERROR(c.Validate());
  try {
    const LlamaWeights weights = RandomLlamaWeights(c, o.seed);
    return WriteDirectoryAtomically(o.out_dir, [&](const std::string& dir) {
      return SaveSafetensorsCheckpoint(dir, c, weights, like->tokenizer());
    });
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("init: ", e.what_without_backtrace()));
  }
}

}  // namespace lrkv
