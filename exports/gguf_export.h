// Exports a plain (dense K/V) model as the GGUF file llama.cpp loads (MLA with
// decoupled RoPE goes to deepseek_gguf_export.h's deepseek2): architecture
// `llama` (Q/K rows in llama.cpp's adjacent-pair RoPE layout), `qwen2` or
// `qwen3` (half-split, as llama.cpp keeps them), float32 tensors under GGUF
// names, and the tokenizer's vocabulary as tokenizer.ggml.* metadata.
#ifndef LRKV_EXPORTS_GGUF_EXPORT_H_
#define LRKV_EXPORTS_GGUF_EXPORT_H_

#include <string>

#include "absl/status/status.h"
#include "formats/config.h"
#include "formats/gguf_writer.h"
#include "runtime/llama_weights.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

// InvalidArgument for what GGUF cannot hold: LRKV and exact-RoPE MLA layouts
// (export them with --expand), partial-RoPE LRKV, rope scaling other than
// linear/yarn. `matrices`: the storage of every 2-D tensor (kF32, kF16, kBF16);
// norms and other vectors are float32, as llama.cpp requires.
absl::Status SaveGgufCheckpoint(const std::string& path, const ModelConfig& config,
                                const LlamaWeights& weights, const Tokenizer& tokenizer,
                                DType matrices = DType::kF32);

// InvalidArgument naming what of `config` (the model as it will be written) llama.cpp
// cannot run: a factored K/V layout, partial RoPE, post-norm blocks, NoPE layers, a
// sliding window, dynamic RoPE scaling. Checked before a conversion starts.
absl::Status CheckGgufExportable(const ModelConfig& config);

// The tokenizer's vocabulary as tokenizer.ggml.* metadata, padded to `rows`
// tokens (one per embedding row, as llama.cpp wants).
absl::Status AddGgufTokenizer(const Tokenizer& tokenizer, int64_t rows,
                              GgufBuilder* g);

// The same file as a builder not yet written (float32 tensors whose data `keep` owns),
// for callers that store some tensors differently.
absl::StatusOr<GgufBuilder> GgufExportBuilder(const ModelConfig& config,
                                              const LlamaWeights& weights,
                                              const Tokenizer& tokenizer,
                                              std::vector<at::Tensor>* keep,
                                              DType matrices = DType::kF32);

}  // namespace lrkv

#endif  // LRKV_EXPORTS_GGUF_EXPORT_H_
