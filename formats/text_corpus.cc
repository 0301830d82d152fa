// Splitting a text file into documents ("stories") the way evaluation defines
// them.
#include "formats/text_corpus.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace lrkv {

std::vector<std::string> SplitDocuments(const std::string& text) {
  std::vector<std::string> docs;
  std::string current;
  auto flush = [&] {
    std::string doc(absl::StripAsciiWhitespace(current));
    if (!doc.empty()) docs.push_back(std::move(doc));
    current.clear();
  };
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StripAsciiWhitespace(line) == kDocumentSeparator) {
      flush();
    } else {
      current.append(line.data(), line.size());
      current.push_back('\n');
    }
  }
  flush();
  return docs;
}

namespace {

// Binary files (checkpoints, archives) hold NUL bytes early; UTF-8 text never
// does.
constexpr size_t kBinarySniffBytes = size_t{64} << 10;
bool LooksBinary(absl::string_view head) {
  return head.substr(0, kBinarySniffBytes).find('\0') !=
         absl::string_view::npos;
}

}  // namespace

absl::Status CheckTextFile(const std::string& path, const char* flag,
                           size_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    return absl::NotFoundError(absl::StrCat(flag, " ", path, ": no such file"));
  }
  if (!fs::is_regular_file(st)) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, ": not a regular file (a text file is needed)"));
  }
  const auto size = fs::file_size(path, ec);
  if (ec || size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": ", size,
                     " bytes exceeds the limit of ", max_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::string head(kBinarySniffBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (LooksBinary(head)) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, ": a binary file, not text (it holds NUL bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadDocuments(const std::string& path,
                                                       size_t max_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read: ", ec.message()));
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", size, " bytes exceeds the limit of ", max_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // A checkpoint or archive given as text would be tokenized for minutes (a
  // .gguf as `eval --text`): refused as CheckTextFile refuses it at a job's
  // submission.
  if (LooksBinary(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a binary file, not text (it holds NUL bytes)"));
  }
  auto docs = SplitDocuments(text);
  if (docs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds no text"));
  }
  return docs;
}

absl::StatusOr<DocumentRange> ParseDocumentRange(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  DocumentRange r;
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &r.begin) ||
      !absl::SimpleAtod(parts[1], &r.end) || !(r.begin >= 0) || !(r.end <= 1) ||
      !(r.begin < r.end)) {
    return absl::InvalidArgumentError(
        absl::StrCat("document range '", text,
                     "' must be A:B with 0 <= A < B <= 1 (fractions)"));
  }
  return r;
}

std::string DocumentRangeText(const DocumentRange& range) {
  return absl::StrCat(range.begin, ":", range.end);
}

}  // namespace lrkv
