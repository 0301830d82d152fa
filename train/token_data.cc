// Training data for healing (see token_data.h).
#include "train/token_data.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "formats/mapped_file.h"

namespace lrkv {

int64_t TokenDataset::Predicted(const PackedRow& row) {
  int64_t n = 0;
  for (size_t i = 1; i < row.segments.size(); ++i) {
    if (row.segments[i] >= 0 && row.segments[i] == row.segments[i - 1]) ++n;
  }
  return n;
}

TokenDataset TokenDataset::HoldOut(int64_t rows) {
  TokenDataset held;
  held.seq_len_ = seq_len_;
  const auto first = rows_.end() - rows;
  held.rows_.assign(std::make_move_iterator(first), std::make_move_iterator(rows_.end()));
  rows_.erase(first, rows_.end());
  for (const PackedRow& row : held.rows_) held.predicted_ += Predicted(row);
  predicted_ -= held.predicted_;
  return held;
}

absl::StatusOr<TokenDataset> TokenDataset::Pack(const std::vector<std::vector<int32_t>>& docs,
                                                int64_t seq_len) {
  if (seq_len < 2) {
    return absl::InvalidArgumentError(absl::StrCat("sequence length ", seq_len, " must be >= 2"));
  }
  TokenDataset data;
  data.seq_len_ = seq_len;
  const int64_t width = seq_len + 1;
  PackedRow row;
  int32_t segment = 0;
  auto flush = [&] {
    if (row.tokens.empty()) return;
    while (static_cast<int64_t>(row.tokens.size()) < width) {
      row.tokens.push_back(0);
      row.positions.push_back(0);
      row.segments.push_back(-1);
    }
    data.predicted_ += Predicted(row);
    data.rows_.push_back(std::move(row));
    row = PackedRow();
    segment = 0;
  };
  for (const auto& doc : docs) {
    if (doc.size() < 2) continue;  // nothing to predict
    size_t start = 0;
    while (start < doc.size()) {
      const int64_t space = width - static_cast<int64_t>(row.tokens.size());
      const int64_t left = static_cast<int64_t>(doc.size() - start);
      if (left > space && !row.tokens.empty()) {
        flush();  // keep the document whole in a fresh row when it fits there
        continue;
      }
      const int64_t take = std::min(left, width);
      for (int64_t i = 0; i < take; ++i) {
        row.tokens.push_back(doc[start + i]);
        row.positions.push_back(static_cast<int32_t>(i));
        row.segments.push_back(segment);
      }
      ++segment;
      start += take;
      if (static_cast<int64_t>(row.tokens.size()) == width) flush();
    }
  }
  flush();
  if (data.rows_.empty() || data.predicted_ == 0) {
    return absl::InvalidArgumentError("training data holds no tokens to predict");
  }
  return data;
}

absl::StatusOr<TokenDataset> TokenDataset::FromDocuments(const std::vector<std::string>& docs,
                                                         const Tokenizer& tokenizer,
                                                         int64_t seq_len) {
  std::vector<std::vector<int32_t>> ids;
  for (const auto& d : docs) {
    std::vector<int32_t> doc = {tokenizer.document_start_id()};
    for (int32_t id : tokenizer.Encode(d)) doc.push_back(id);
    ids.push_back(std::move(doc));
  }
  return Pack(ids, seq_len);
}

absl::StatusOr<TokenDataset> TokenDataset::FromTokenFile(const std::string& path,
                                                         int bytes_per_token, int32_t bos_id,
                                                         int64_t vocab_size, int64_t seq_len) {
  if (bytes_per_token != 2 && bytes_per_token != 4) {
    return absl::InvalidArgumentError("token files hold uint16 or uint32 tokens");
  }
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const auto bytes = file->bytes();
  if (bytes.size() % bytes_per_token != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", bytes.size(), " bytes is not a whole number of ", bytes_per_token,
        "-byte tokens"));
  }
  std::vector<std::vector<int32_t>> docs;
  for (size_t i = 0; i < bytes.size(); i += bytes_per_token) {
    uint32_t v = bytes[i] | (bytes[i + 1] << 8);
    if (bytes_per_token == 4) v |= (uint32_t{bytes[i + 2]} << 16) | (uint32_t{bytes[i + 3]} << 24);
    if (v >= static_cast<uint64_t>(vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": token ", v, " at index ",
                                                     i / bytes_per_token,
                                                     " is outside the vocabulary of ",
                                                     vocab_size));
    }
    if (static_cast<int32_t>(v) == bos_id || docs.empty()) docs.emplace_back();
    docs.back().push_back(static_cast<int32_t>(v));
  }
  return Pack(docs, seq_len);
}

}  // namespace lrkv
