// Training data for healing: documents tokenized with the model tokenizer and packed
// into fixed-length rows without letting documents see each other (each row carries
// per-token RoPE positions and segment ids), from text files or from pre-tokenized
// binary token files (uint16/uint32, documents separated by BOS).
#ifndef LRKV_TRAIN_TOKEN_DATA_H_
#define LRKV_TRAIN_TOKEN_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

// One packed row of seq_len + 1 tokens: inputs are [0, T), targets [1, T].
struct PackedRow {
  std::vector<int32_t> tokens;     // T + 1
  std::vector<int32_t> positions;  // T + 1, restarting at 0 for each segment
  std::vector<int32_t> segments;   // T + 1, -1 for padding
};

class TokenDataset {
 public:
  // [BOS] + encode(doc) per document; documents that fit are never split, longer ones
  // are cut into row-sized chunks (each its own segment).
  static absl::StatusOr<TokenDataset> FromDocuments(const std::vector<std::string>& docs,
                                                    const Tokenizer& tokenizer,
                                                    int64_t seq_len);
  // A little-endian uint16 or uint32 token file; a new document starts at each BOS.
  static absl::StatusOr<TokenDataset> FromTokenFile(const std::string& path, int bytes_per_token,
                                                    int32_t bos_id, int64_t vocab_size,
                                                    int64_t seq_len);

  int64_t rows() const { return static_cast<int64_t>(rows_.size()); }
  int64_t seq_len() const { return seq_len_; }
  const PackedRow& row(int64_t i) const { return rows_[i]; }
  // Target tokens predicted over the whole dataset.
  int64_t predicted_tokens() const { return predicted_; }
  // Moves the last `rows` rows (the last documents packed) into a dataset of their own,
  // for validation data that training never sees. 0 < rows < this->rows().
  TokenDataset HoldOut(int64_t rows);

 private:
  static absl::StatusOr<TokenDataset> Pack(const std::vector<std::vector<int32_t>>& docs,
                                           int64_t seq_len);
  static int64_t Predicted(const PackedRow& row);
  std::vector<PackedRow> rows_;
  int64_t seq_len_ = 0;
  int64_t predicted_ = 0;
};

}  // namespace lrkv

#endif  // LRKV_TRAIN_TOKEN_DATA_H_
