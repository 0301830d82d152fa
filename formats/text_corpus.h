// Splitting a text file into documents ("stories") the way evaluation defines them.
#ifndef LRKV_FORMATS_TEXT_CORPUS_H_
#define LRKV_FORMATS_TEXT_CORPUS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv {

inline constexpr char kDocumentSeparator[] = "<|endoftext|>";

// Splits on lines that are exactly "<|endoftext|>" (surrounding whitespace allowed),
// strips each document, and drops empty ones.
std::vector<std::string> SplitDocuments(const std::string& text);

// Reads `path` (at most `max_bytes`) and splits it; InvalidArgument when it holds no
// document, NotFound when it cannot be read.
absl::StatusOr<std::vector<std::string>> ReadDocuments(const std::string& path,
                                                       size_t max_bytes = 1ull << 30);

// A text file a job can read: a regular file (not a folder, a device or a FIFO) of at
// most `max_bytes` whose first 64 KiB hold no NUL byte (binary files, checkpoints,
// archives have them; UTF-8 text never does). `flag` names it in the message:
// NotFound for a missing file, InvalidArgument otherwise.
absl::Status CheckTextFile(const std::string& path, const char* flag,
                           size_t max_bytes = 1ull << 30);

// A slice of a document list as fractions: [begin, end) of the documents, so
// that "0:0.5" is the first half.
struct DocumentRange {
  double begin = 0;
  double end = 1;
  template <typename T>
  std::vector<T> Slice(const std::vector<T>& docs) const {
    const auto n = static_cast<double>(docs.size());
    const auto a = static_cast<size_t>(begin * n + 0.5),
               b = static_cast<size_t>(end * n + 0.5);
    return std::vector<T>(docs.begin() + a, docs.begin() + b);
  }
};
// Parses "A:B" with 0 <= A < B <= 1.
absl::StatusOr<DocumentRange> ParseDocumentRange(const std::string& text);
// "A:B" of a document range (ParseDocumentRange reads it back).
std::string DocumentRangeText(const DocumentRange& range);

}  // namespace lrkv

#endif  // LRKV_FORMATS_TEXT_CORPUS_H_
