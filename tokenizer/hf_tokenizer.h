// The Hugging Face tokenizer pipeline read from tokenizer.json (+ tokenizer_config.json):
// added tokens, normalizer, pre-tokenizer, BPE model and decoder, with BOS/EOS and
// add_bos_token/add_eos_token. Byte-level BPE (Llama-3, Qwen2/2.5/3, SmolLM, GPT-2,
// OLMo-2) and SentencePiece-style BPE with byte fallback (Llama-2, Mistral, Gemma)
// both come through here; so does a GGUF `gpt2` vocabulary, converted to the same
// tokenizer.json form first (gguf_tokenizer.h).
#ifndef LRKV_TOKENIZER_HF_TOKENIZER_H_
#define LRKV_TOKENIZER_HF_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/text_normalizer.h"
#include "tokenizer/token_decoder.h"
#include "tokenizer/tokenizer_backend.h"
#include "nlohmann/json.hpp"

namespace lrkv {

class HfTokenizer : public TokenizerBackend {
 public:
  // `tokenizer_config` may be empty (no tokenizer_config.json). Every field the
  // pipeline does not support is refused with its place in the file named.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Create(std::string tokenizer_json,
                                                             std::string tokenizer_config,
                                                             const std::string& source);

  std::vector<int32_t> Encode(std::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids, bool continuation) const override;
  int64_t size() const override { return size_; }
  const SpecialTokens& specials() const override { return specials_; }
  std::string_view kind() const override { return "bpe"; }
  std::vector<TokenizerFile> Files() const override;
  // gpt2 vocabularies for byte-level BPE whose pre-tokenizer llama.cpp knows by name
  // (gguf_tokenizer.h's list, the inverse conversion).
  absl::StatusOr<GgufVocabulary> ToGgufVocabulary() const override;

 private:
  HfTokenizer() = default;
  // Create's steps: `added_tokens` of tokenizer.json `j` (named `tj` in
  // messages), then BOS / EOS and whether they are added, from
  // tokenizer_config.json `config` (`tc`) or the post-processor.
  absl::Status ReadAddedTokens(const nlohmann::json& j, const std::string& tj);
  absl::Status ReadSpecialTokens(const nlohmann::json& j,
                                 const nlohmann::json& config,
                                 const std::string& tj, const std::string& tc);
  void EncodeNormalized(std::string_view text, bool at_text_start,
                        std::vector<int32_t>* out) const;

  std::string tokenizer_json_, tokenizer_config_;
  TextNormalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  TokenDecoder decoder_;
  AddedTokenMatcher raw_tokens_, normalized_tokens_;
  std::vector<std::string> added_content_;  // by id; empty for model tokens
  std::vector<bool> added_special_;         // by id
  // The llama.cpp pre-tokenizer name of this pipeline ("" when it has none) and why.
  std::string gguf_pre_, gguf_refusal_;
  SpecialTokens specials_;
  int64_t size_ = 0;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_HF_TOKENIZER_H_
