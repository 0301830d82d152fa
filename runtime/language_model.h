// A loaded checkpoint with its tokenizer, for the jobs users run (perplexity,
// generation). The header keeps LibTorch out of the CLI and the service.
#ifndef LRKV_RUNTIME_LANGUAGE_MODEL_H_
#define LRKV_RUNTIME_LANGUAGE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "formats/config.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

class Transformer;

struct LanguageModelOptions {
  /// Products of activations with bf16-stored weights over many rows (a document, a
  /// prompt): true rounds the activations to bf16 and sums in fp32 (llama.cpp's
  /// arithmetic for a bf16 model; 2.2x faster where the CPU has AVX512-BF16 or AMX),
  /// false widens the weight to fp32 (the exact products of the stored weights). Decode
  /// steps are exact either way; float32 checkpoints are unaffected.
  bool bf16_activations = true;
};

struct PerplexityResult {
  int64_t documents = 0;
  // Predicted tokens: every document token after BOS (no EOS).
  int64_t tokens = 0;
  double total_nll = 0;
  double mean_nll = 0;
  double perplexity = 0;
  double seconds = 0;
  // How weights met activations: "bf16" (activations rounded to bf16 for bf16
  // weights, fp32 sums) or "fp32".
  std::string products;
  // Scored through a decode engine's cache: its storage ("q8") and engine
  // ("expanded"); empty for one forward pass per window.
  std::string cache_dtype, decode_mode;
};

struct GenerationResult {
  std::vector<int32_t> prompt_ids;  // BOS included
  std::vector<int32_t> new_ids;
  std::string continuation;         // text of new_ids only
  double seconds = 0;
};

class LanguageModel {
 public:
  // Opens the checkpoint, loads weights and tokenizer. The checkpoint must store a
  // tokenizer (GGUF metadata or tokenizer.lrkv.json).
  static absl::StatusOr<std::unique_ptr<LanguageModel>> Load(
      const std::string& path, const LanguageModelOptions& options = {});
  ~LanguageModel();

  // Perplexity over documents: each is [BOS] + encode(doc); NLL is summed over
  // all document tokens; ppl = exp(total / tokens). CancelledError once `stop`
  // returns true (polled per window). With a cache dtype
  // (runtime/cache_dtype.h), scored through the serving engine's cache in that
  // storage (CacheScoring); InvalidArgument where that engine cannot store it
  // (its reason); q8_query as EngineOptions::q8_query.
  absl::StatusOr<PerplexityResult> Perplexity(
      const std::vector<std::string>& docs, const StopCheck& stop = {},
      const std::string& cache_dtype = "", bool q8_query = false) const;
  // Greedy continuation of [BOS] + encode(prompt), at most max_tokens new tokens.
  absl::StatusOr<GenerationResult> Generate(const std::string& prompt,
                                            int64_t max_tokens) const;

  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const Transformer& transformer() const { return *transformer_; }
  // "bf16" when the bf16 products of LanguageModelOptions apply to this model here
  // (bf16 weights, the option on, a CPU that runs them), else "fp32".
  const std::string& products() const { return products_; }

 private:
  LanguageModel(std::unique_ptr<Transformer> t, Tokenizer tok, std::string products);
  std::unique_ptr<Transformer> transformer_;
  Tokenizer tokenizer_;
  std::string products_;
};

}  // namespace lrkv

#endif  // LRKV_RUNTIME_LANGUAGE_MODEL_H_
