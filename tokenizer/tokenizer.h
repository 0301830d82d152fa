// The tokenizers lrkv reads, behind one interface: SentencePiece BPE over a GGUF
// `llama` vocabulary or our tokenizer.lrkv.json (spm_tokenizer.h), and the Hugging
// Face pipeline of tokenizer.json / tokenizer_config.json or a GGUF `gpt2`
// vocabulary (hf_tokenizer.h). Copies share the loaded tables.
#ifndef LRKV_TOKENIZER_TOKENIZER_H_
#define LRKV_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/gguf.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer_backend.h"

namespace lrkv {

class Tokenizer {
 public:
  // The SentencePiece BPE tokenizer of `vocab` (validated).
  static absl::StatusOr<Tokenizer> Create(Vocabulary vocab);
  // From tokenizer.ggml.* metadata: model "llama" (SentencePiece) or "gpt2" (BPE,
  // pre-tokenizer chosen by tokenizer.ggml.pre).
  static absl::StatusOr<Tokenizer> FromGguf(const GgufContents& gguf);
  // Our tokenizer.lrkv.json (a SentencePiece vocabulary).
  static absl::StatusOr<Tokenizer> FromJson(const std::string& text,
                                            const std::string& source);
  // A Hugging Face tokenizer.json and (optional, may be empty) tokenizer_config.json;
  // `source` names the folder in messages.
  static absl::StatusOr<Tokenizer> FromHfFiles(const std::string& tokenizer_json,
                                               const std::string& tokenizer_config,
                                               const std::string& source);

  // Ids of `text`. With `add_special`, BOS / EOS as the tokenizer's configuration
  // says (add_bos_token / add_eos_token).
  std::vector<int32_t> Encode(std::string_view text, bool add_special = false) const;
  // Text of `ids` from the start of a text (invalid UTF-8 is replaced by U+FFFD).
  std::string Decode(const std::vector<int32_t>& ids) const;
  // The bytes one token contributes in the middle of a sequence (may be part of a
  // UTF-8 character: concatenating pieces gives the text).
  std::string TokenToPiece(int32_t id) const;

  int64_t size() const { return backend_->size(); }
  const SpecialTokens& specials() const { return backend_->specials(); }
  // The token every evaluated or generated document starts with: BOS, or EOS for
  // tokenizers without one (Qwen), as lm-eval's prefix token.
  int32_t document_start_id() const;
  std::string_view kind() const { return backend_->kind(); }
  // What an exporter writes beside safetensors weights.
  std::vector<TokenizerFile> Files() const { return backend_->Files(); }
  // What a GGUF export writes as tokenizer.ggml.* (see GgufVocabulary).
  absl::StatusOr<GgufVocabulary> ToGgufVocabulary() const {
    return backend_->ToGgufVocabulary();
  }
  // The SentencePiece implementation, or nullptr for BPE tokenizers.
  const SpmTokenizer* spm() const { return dynamic_cast<const SpmTokenizer*>(backend_.get()); }

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerBackend> b) : backend_(std::move(b)) {}
  std::shared_ptr<const TokenizerBackend> backend_;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_TOKENIZER_H_
