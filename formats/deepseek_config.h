// Reading a DeepSeek-V2/V3 config.json (HF DeepseekV3ForCausalLM) of MLA with
// decoupled RoPE, as lrkv exports it (runtime/deepseek_layout.h has the layout's
// rules). No LibTorch.
#ifndef LRKV_FORMATS_DEEPSEEK_CONFIG_H_
#define LRKV_FORMATS_DEEPSEEK_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "formats/config.h"
#include "formats/gguf.h"
#include "nlohmann/json.hpp"

namespace lrkv {

// Whether config.json's architecture / model_type names a DeepSeek-V2/V3 model.
bool IsDeepseekConfig(const std::string& architecture,
                      const std::string& model_type);

// The model a DeepSeek config.json describes (kv layout MLA, decoupled RoPE,
// deepseek_layout set; H_kv = H, since kv_b_proj up-projects per query head).
// InvalidArgument naming the field for what the layout's rules exclude.
absl::StatusOr<ModelConfig> ConfigFromDeepseekJson(const nlohmann::json& j,
                                                   const std::string& source);

// The model a llama.cpp `deepseek2` GGUF describes (as lrkv's deepseek2 export
// writes it, exports/deepseek_gguf_export.h): its metadata read as the
// DeepSeek config.json fields they stand for, then ConfigFromDeepseekJson's
// rules. The latent norm is always on (deepseek2 always applies it).
absl::StatusOr<ModelConfig> ConfigFromDeepseekGguf(const GgufContents& gguf);

}  // namespace lrkv

#endif  // LRKV_FORMATS_DEEPSEEK_CONFIG_H_
