// The interface every tokenizer implementation provides (see tokenizer.h), and the
// small types it speaks in.
#ifndef LRKV_TOKENIZER_TOKENIZER_BACKEND_H_
#define LRKV_TOKENIZER_TOKENIZER_BACKEND_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv {

// A file a tokenizer writes beside an exported safetensors checkpoint.
struct TokenizerFile {
  std::string name;
  std::string contents;
};

// The special tokens of a tokenizer; -1 where it has none.
struct SpecialTokens {
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  /// Encode(text, /*add_special=*/true) starts with BOS / ends with EOS.
  bool add_bos = false;
  bool add_eos = false;
};

// A vocabulary as GGUF's tokenizer.ggml.* metadata holds it (what llama.cpp reads).
struct GgufVocabulary {
  std::string model;  // "llama" (SentencePiece) or "gpt2" (BPE)
  std::string pre;    // gpt2: the pre-tokenizer's llama.cpp name
  std::vector<std::string> tokens;
  std::vector<float> scores;    // llama only
  std::vector<int32_t> types;   // TokenType per token
  std::vector<std::string> merges;  // gpt2: "a b", by rank
  int32_t unk_id = -1;
  bool add_space_prefix = false;
};

// What each tokenizer implementation provides.
class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Ids of `text`, no special tokens added; special tokens written in the text
  // are matched where the tokenizer matches them (HF added tokens).
  virtual std::vector<int32_t> Encode(std::string_view text) const = 0;
  // The bytes of `ids`. `continuation`: the ids follow earlier ones, so rules for
  // the start of a text (dropping the dummy-prefix space) do not apply.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool continuation) const = 0;
  // One past the largest token id.
  virtual int64_t size() const = 0;
  virtual const SpecialTokens& specials() const = 0;
  // "sentencepiece-bpe" or "bpe".
  virtual std::string_view kind() const = 0;
  virtual std::vector<TokenizerFile> Files() const = 0;
  // The vocabulary in GGUF form; InvalidArgument for pipelines llama.cpp has no name
  // for.
  virtual absl::StatusOr<GgufVocabulary> ToGgufVocabulary() const = 0;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_TOKENIZER_BACKEND_H_
