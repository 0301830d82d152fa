#include "serve/text_stream.h"

#include <algorithm>

#include "base/utf8.h"

namespace lrkv {

size_t CompleteUtf8Prefix(const std::string& bytes) {
  // Look back at most 3 bytes for the lead byte of an unfinished character.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking
    const size_t need = (c & 0x80) == 0 ? 1 : Utf8SequenceLength(c);
    return need > back ? n - back : n;
  }
  return n;
}

TextStream::TextStream(const Tokenizer& tokenizer,
                       std::vector<std::string> stops)
    : tokenizer_(tokenizer), stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()),
               stops_.end());
}

std::string TextStream::Push(int32_t id) {
  if (stopped_) return "";
  held_ += tokenizer_.TokenToPiece(id);
  // The earliest stop sequence ends the text.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop sequence.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  const size_t ready = CompleteUtf8Prefix(held_.substr(0, held_.size() - keep));
  std::string out = held_.substr(0, ready);
  held_.erase(0, ready);
  return out;
}

std::string TextStream::Finish() {
  if (stopped_) return "";
  std::string out;
  out.swap(held_);
  return out;  // an unfinished character becomes U+FFFD when the JSON is
               // written
}

}  // namespace lrkv
