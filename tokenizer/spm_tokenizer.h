// The SentencePiece BPE tokenizer (llama.cpp's "SPM" vocabulary) over a
// vocabulary of pieces, scores and token types read from GGUF metadata or our
// tokenizer file. Written in the project because Debian's libsentencepiece
// cannot be loaded next to libprotobuf 3.21 (docs/design.md, "Dependencies").
#ifndef LRKV_TOKENIZER_SPM_TOKENIZER_H_
#define LRKV_TOKENIZER_SPM_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer_backend.h"

namespace lrkv {

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

struct Vocabulary {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<TokenType> types;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t unk_id = 0;
  // SentencePiece's dummy prefix: a "▁" is prepended before encoding.
  bool add_space_prefix = true;
  // Whether sequences start with BOS.
  bool add_bos = true;
};

class SpmTokenizer : public TokenizerBackend {
 public:
  // Validates the vocabulary (sizes agree, ids in range, unique pieces).
  static absl::StatusOr<std::unique_ptr<SpmTokenizer>> Create(Vocabulary vocab);
  // Reads tokenizer.ggml.* metadata of the "llama" (SPM) model.
  static absl::StatusOr<std::unique_ptr<SpmTokenizer>> FromGguf(const GgufContents& gguf);
  // Reads/writes the JSON form stored beside exported safetensors checkpoints.
  static absl::StatusOr<std::unique_ptr<SpmTokenizer>> FromJson(const std::string& text,
                                                                const std::string& source);
  std::string ToJson() const;

  // Token ids for `text` (no BOS; special-token text is treated as plain text).
  std::vector<int32_t> Encode(std::string_view text) const override;
  // Text for `ids`: control tokens vanish, byte tokens are reassembled, and the
  // dummy-prefix space of the first piece is removed (unless `continuation`), as
  // llama.cpp detokenizes.
  std::string Decode(const std::vector<int32_t>& ids, bool continuation) const override;
  int64_t size() const override { return static_cast<int64_t>(vocab_.pieces.size()); }
  const SpecialTokens& specials() const override { return specials_; }
  std::string_view kind() const override { return "sentencepiece-bpe"; }
  std::vector<TokenizerFile> Files() const override;
  absl::StatusOr<GgufVocabulary> ToGgufVocabulary() const override;

  const Vocabulary& vocab() const { return vocab_; }

 private:
  explicit SpmTokenizer(Vocabulary vocab);
  void AppendPiece(int32_t id, std::string* out) const;

  Vocabulary vocab_;
  SpecialTokens specials_;
  std::unordered_map<std::string, int32_t> piece_to_id_;
  int32_t byte_ids_[256];
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_SPM_TOKENIZER_H_
