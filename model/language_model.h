// A loaded checkpoint with its tokenizer, for the jobs users run (perplexity,
// generation). The header keeps LibTorch out of the CLI and the service.
#ifndef LRKV_MODEL_LANGUAGE_MODEL_H_
#define LRKV_MODEL_LANGUAGE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/tokenizer.h"

namespace lrkv {

class Transformer;

struct PerplexityResult {
  int64_t documents = 0;
  // Predicted tokens: every document token after BOS (no EOS).
  int64_t tokens = 0;
  double total_nll = 0;
  double mean_nll = 0;
  double perplexity = 0;
  double seconds = 0;
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
  static absl::StatusOr<std::unique_ptr<LanguageModel>> Load(const std::string& path);
  ~LanguageModel();

  // Perplexity over documents: each is [BOS] + encode(doc); NLL is summed over all
  // document tokens; ppl = exp(total / tokens).
  absl::StatusOr<PerplexityResult> Perplexity(const std::vector<std::string>& docs) const;
  // Greedy continuation of [BOS] + encode(prompt), at most max_tokens new tokens.
  absl::StatusOr<GenerationResult> Generate(const std::string& prompt,
                                            int64_t max_tokens) const;

  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const Transformer& transformer() const { return *transformer_; }

 private:
  LanguageModel(std::unique_ptr<Transformer> t, Tokenizer tok);
  std::unique_ptr<Transformer> transformer_;
  Tokenizer tokenizer_;
};

}  // namespace lrkv

#endif  // LRKV_MODEL_LANGUAGE_MODEL_H_
