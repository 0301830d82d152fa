// The BPE "model" of a tokenizer.json: a vocabulary, ranked merges, byte fallback
// and unknown-token rules, encoding one pre-tokenized piece at a time exactly as the
// Hugging Face Rust crate's merge loop does (lowest rank first, leftmost on ties).
#ifndef LRKV_TOKENIZER_BPE_MODEL_H_
#define LRKV_TOKENIZER_BPE_MODEL_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace lrkv {

class BpeModel {
 public:
  // From the "model" object (type "BPE"; merges as "a b" strings or [a, b] pairs).
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& j,
                                                            const std::string& where);

  // Appends the ids of one piece.
  void Encode(const std::string& piece, std::vector<int32_t>* out) const;

  std::optional<int32_t> IdOf(const std::string& token) const;
  // The token string of `id`; nullptr when the vocabulary has no such id.
  const std::string* TokenOf(int32_t id) const;
  // The merges as "a b", lowest rank first (GGUF's tokenizer.ggml.merges).
  std::vector<std::string> MergesInRankOrder() const;
  bool byte_level_compatible() const { return !byte_fallback_ && prefix_.empty() && suffix_.empty(); }
  // One past the largest id.
  int64_t size() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  BpeModel() = default;
  void MergeWord(std::string_view piece, std::vector<int32_t>* out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_, suffix_;
  int32_t byte_ids_[256];  // -1 where the vocabulary has no <0xXX> token

  // Pieces already encoded (pieces repeat: most words of a text are common ones).
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace lrkv

#endif  // LRKV_TOKENIZER_BPE_MODEL_H_
