// The SentencePiece BPE tokenizer (llama.cpp's "SPM" vocabulary) over a vocabulary of
// pieces, scores and token types read from GGUF metadata or our tokenizer file.
// Written in the project because Debian's libsentencepiece cannot be loaded next to
// libprotobuf 3.21 (DESIGN.md §5).
#ifndef LRKV_MODEL_TOKENIZER_H_
#define LRKV_MODEL_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf.h"

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

class Tokenizer {
 public:
  // Validates the vocabulary (sizes agree, ids in range, unique pieces).
  static absl::StatusOr<Tokenizer> Create(Vocabulary vocab);
  // Reads tokenizer.ggml.* metadata; only the "llama" (SPM) model is supported.
  static absl::StatusOr<Tokenizer> FromGguf(const GgufContents& gguf);
  // Reads/writes the JSON form stored beside exported safetensors checkpoints.
  static absl::StatusOr<Tokenizer> FromJson(const std::string& text,
                                            const std::string& source);
  std::string ToJson() const;

  // Token ids for `text` (no BOS; special-token text is treated as plain text).
  std::vector<int32_t> Encode(std::string_view text) const;
  // Text for `ids`: control tokens vanish, byte tokens are reassembled, and the
  // dummy-prefix space of the first piece is removed, as llama.cpp detokenizes.
  std::string Decode(const std::vector<int32_t>& ids) const;
  // The text one token contributes in the middle of a sequence.
  std::string TokenToPiece(int32_t id) const;

  const Vocabulary& vocab() const { return vocab_; }
  int64_t size() const { return static_cast<int64_t>(vocab_.pieces.size()); }

 private:
  explicit Tokenizer(Vocabulary vocab);
  void AppendPiece(int32_t id, std::string* out) const;

  Vocabulary vocab_;
  std::unordered_map<std::string, int32_t> piece_to_id_;
  int32_t byte_ids_[256];
};

}  // namespace lrkv

#endif  // LRKV_MODEL_TOKENIZER_H_
