// A freshly initialised checkpoint for training from scratch (see
// model_init.h).
#include "train/model_init.h"

#include <c10/util/Exception.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "formats/safetensors.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "runtime/llama_weights.h"

namespace lrkv {

namespace {

absl::StatusOr<DType> MatrixDType(const std::string& name) {
  if (auto d = ParseWeightDType(name)) return *d;
  return absl::InvalidArgumentError(
      absl::StrCat("--weight-dtype '", name, "' is not one of f32, f16, bf16"));
}

// `init --config`: a real model's config.json, random weights streamed to shards.
absl::Status WriteCheckpointOfConfig(const ModelInitOptions& o) {
  std::ifstream in(o.config_json);
  if (!in) return absl::NotFoundError(absl::StrCat(o.config_json, ": cannot read"));
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  ASSIGN_OR_RETURN(ModelConfig c, ConfigFromHfJson(text, o.config_json));
  ASSIGN_OR_RETURN(Tokenizer tokenizer, LoadTokenizer(o.tokenizer_from));
  RETURN_IF_ERROR(ReconcileTokenizer(tokenizer, o.tokenizer_from, &c));
  nlohmann::json j = nlohmann::json::parse(text);
  std::string dtype_name = o.weight_dtype;
  if (dtype_name.empty()) dtype_name = j.value("torch_dtype", std::string("float32"));
  ASSIGN_OR_RETURN(const DType matrices, MatrixDType(dtype_name));
  j["torch_dtype"] = TorchDTypeName(matrices);
  return WriteDirectoryAtomically(o.out_dir, [&](const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    RETURN_IF_ERROR(WriteRandomWeights(dir, c, o.seed, matrices, o.max_shard_bytes));
    RETURN_IF_ERROR(WriteFileAtomically((std::filesystem::path(dir) / kConfigFileName).string(),
                                        j.dump(2) + "\n"));
    for (const TokenizerFile& f : tokenizer.Files()) {
      RETURN_IF_ERROR(
          WriteFileAtomically((std::filesystem::path(dir) / f.name).string(), f.contents));
    }
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status WriteInitialCheckpoint(const ModelInitOptions& o) {
  if (o.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  std::error_code ec;
  if (std::filesystem::exists(o.out_dir, ec) &&
      !std::filesystem::is_empty(o.out_dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.out_dir, ": output folder exists and is not empty"));
  }
  if (!o.config_json.empty()) {
    try {
      return WriteCheckpointOfConfig(o);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("init: ", e.what_without_backtrace()));
    }
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
  ASSIGN_OR_RETURN(const DType matrices, MatrixDType(o.weight_dtype.empty() ? "f32" : o.weight_dtype));
  try {
    const LlamaWeights weights = RandomLlamaWeights(c, o.seed);
    return WriteDirectoryAtomically(o.out_dir, [&](const std::string& dir) {
      return SaveSafetensorsCheckpoint(dir, c, weights, like->tokenizer(), matrices,
                                       o.max_shard_bytes);
    });
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("init: ", e.what_without_backtrace()));
  }
}

}  // namespace lrkv
